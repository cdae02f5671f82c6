package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/cancelctx"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	sessions "github.com/mcpgate/mcpgate/internal/session"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// doneChan is what ends with sc's request (done, or end's Done, made
// now); nil: nothing does.
func (sc *scope) doneChan() <-chan struct{} {
	if sc.done == nil && sc.end != nil {
		return sc.end.Done()
	}
	return sc.done
}

// served reports whether serve has given sc its request's end.
func (sc *scope) served() bool { return sc.done != nil || sc.end != nil }

// scope is what one downstream request carries through dispatch; it is the
// origin attached to upstream calls, so that traffic the upstream sends
// during the call comes back to this downstream.
type scope struct {
	g    *Gateway
	sess *session // nil for a sessionless request
	rt   *route
	out  sender // where messages related to this request go
	caps mcpwire.ClientCaps
	// done ends with the request: server-initiated requests it caused are
	// moot after that and are cancelled downstream (doneChan). nil: never,
	// unless end is set: serve keeps the request's own context there and
	// its Done channel is made only when something waits on it (issue 25:
	// most requests never do).
	done <-chan struct{}
	end  *cancelctx.Context
	// single: the scope carries one request alone (a POST that is not a
	// batch), so serve sets done in it rather than in a copy, and keeps
	// that request's in-flight entry and reply in own (allocated with
	// the POST's scope; nil: serve allocates them).
	single bool
	// stateless: a stateless (2026-07-28) request (beside single, so that
	// the two bools share one word: a postCall, which holds a scope,
	// stays within its size class); logLevel is the minimum level of log
	// messages it asked for (-1: none).
	stateless bool
	own       *ownRequest
	logLevel  int
	// exchange carries a 2026-07-28 call across input_required rounds.
	exchange *exchange
	// owner is the caller's owner fingerprint (S4.1) of a stateless
	// request: with rt, who may answer what the request is asked. "":
	// no one (an operator's call has no client).
	owner string
	// asking, for a gateway task's call, is told when a question to the
	// client starts (true) and ends (false): the task is input_required
	// meanwhile (tasks.go). nil: no one.
	asking func(method string, waiting bool)
	// task, for the call of a 2026-07-28 task, takes the questions the
	// upstream asks: they wait on the task for tasks/update (tasks.go).
	task *taskQuestions
}

// ownRequest is what serve keeps of a single scope's one request.
type ownRequest struct {
	inflight sessions.InFlight
	reply    jsonrpc.Message
	ctx      cancelctx.Context
}

// OriginKey makes calls of one downstream session one party for the
// upstream's attribution of unsolicited messages; a stateless request is
// a party of its own.
func (sc *scope) OriginKey() any {
	if sc.sess != nil {
		return sc.sess
	}
	return sc
}

var _ upstream.OriginKeyer = (*scope)(nil)

// party is who may answer what sc's request is asked (owned.go).
func (sc *scope) party() party { return partyOf(sc.sess, sc.owner, sc.rt) }

// logLevelName is the least severe log level the gateway relays to this
// request's client, what a 2026-07-28 upstream is asked for
// (io.modelcontextprotocol/logLevel): a 2026-07-28 client's own, "" when
// it asked for none (it gets none); else its session's
// (logging/setLevel), and "debug" when it set none, since an handshake-era
// client that set no level is sent every message (a stateless upstream
// sends none to a request that names no level).
func (sc *scope) logLevelName() string {
	idx := 0
	switch {
	case sc.stateless:
		idx = sc.logLevel
	case sc.sess != nil && sc.sess.LogLevel() >= 0:
		idx = sc.sess.LogLevel()
	}
	if idx < 0 || idx >= len(logLevels) {
		return ""
	}
	return logLevels[idx]
}

func errInvalidParams(format string, args ...any) *jsonrpc.Error {
	return jsonrpc.NewError(jsonrpc.CodeInvalidParams, format, args...)
}

// proxyMethods are what /mcp/proxy serves: tools only.
var proxyMethods = map[string]bool{
	mcpwire.MethodInitialize: true, mcpwire.MethodPing: true, mcpwire.MethodToolsList: true,
	mcpwire.MethodToolsCall: true, mcpwire.MethodLoggingSetLevel: true,
}

// dispatch answers one request.
func (g *Gateway) dispatch(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	if sc.rt.proxy && !proxyMethods[m.Method] {
		return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Operation unavailable on /mcp/proxy")
	}
	switch m.Method {
	case mcpwire.MethodInitialize:
		return g.initialize(ctx, sc, m.Params)
	case mcpwire.MethodPing:
		return json.RawMessage("{}"), nil
	case mcpwire.MethodToolsList:
		return g.list(ctx, sc, catalog.Tools, m.Params)
	case mcpwire.MethodPromptsList:
		return g.list(ctx, sc, catalog.Prompts, m.Params)
	case mcpwire.MethodResourcesList:
		return g.list(ctx, sc, catalog.Resources, m.Params)
	case mcpwire.MethodResourceTemplates:
		return g.list(ctx, sc, catalog.Templates, m.Params)
	case mcpwire.MethodToolsCall:
		if res, e, ok := g.virtualCall(ctx, sc, m); ok {
			return res, e
		}
		if res, e, ok := g.taskCall(ctx, sc, m); ok {
			return res, e
		}
		return g.callRealTool(ctx, sc, m)
	case mcpwire.MethodTasksGet, mcpwire.MethodTasksResult, mcpwire.MethodTasksList, mcpwire.MethodTasksCancel, mcpwire.MethodTasksUpdate:
		return g.taskMethod(ctx, sc, m)
	case mcpwire.MethodPromptsGet:
		return g.callNamed(ctx, sc, m, catalog.Prompts)
	case mcpwire.MethodResourcesRead:
		return g.readResource(ctx, sc, m)
	case mcpwire.MethodResourcesSubscribe, mcpwire.MethodResourcesUnsubscribe:
		return g.subscribe(ctx, sc, m)
	case mcpwire.MethodCompletionComplete:
		return g.complete(ctx, sc, m)
	case mcpwire.MethodLoggingSetLevel:
		return g.setLevel(ctx, sc, m.Params)
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Method not found: %s", m.Method)
}

func (g *Gateway) handleNotification(ctx context.Context, sess *session, rt *route, m *jsonrpc.Message) {
	if g.tracer != nil {
		var sp trace.Span
		ctx, sp = g.startMessageSpan(ctx, &scope{sess: sess, rt: rt}, m)
		defer tracing.EndMessage(ctx, sp, nil)
	}
	switch m.Method {
	case mcpwire.NotifyInitialized:
		if sess != nil {
			sess.SetInitialized()
		}
	case mcpwire.NotifyCancelled:
		if sess == nil {
			return
		}
		if id, ok := jsonrpc.Get(m.Params, "requestId"); ok {
			if rid, err := jsonrpc.RawID(id); err == nil && rid.IsValid() {
				sess.CancelCall(rid.Raw())
			}
		}
	case mcpwire.NotifyRootsListChanged:
		// Only this session's own upstream sessions heard its roots; a
		// server that never had one asks when the session next calls it.
		if sess == nil {
			return
		}
		for server, s := range g.up.Bound(sessionBinding(sess)) {
			if err := s.Notify(ctx, m.Method, m.Params); err != nil {
				g.log.Debug("roots/list_changed not delivered upstream", "server", server, "error", err)
			}
		}
	default:
		g.log.Debug("ignored downstream notification", "method", m.Method)
	}
}

// upstreamSessions returns live upstream sessions of rt, acquired
// concurrently, and the function that releases them all; failures are
// logged and left out (S6.5, S6.6).
func (g *Gateway) upstreamSessions(ctx context.Context, rt *route) (map[string]upstream.Session, func()) {
	out := make(map[string]upstream.Session, len(rt.servers))
	var releases []func()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range rt.servers {
		wg.Go(func() {
			s, release, err := g.up.Acquire(ctx, name)
			if err != nil {
				// Lenient: the failure is swallowed, so it is logged at error (C7.2).
				g.log.Error("upstream unavailable; left out", "server", name, "fault", upstream.Classify(err).Class, "error", err)
				return
			}
			mu.Lock()
			out[name] = s
			releases = append(releases, release)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, func() {
		for _, r := range releases {
			r()
		}
	}
}

func (g *Gateway) initialize(ctx context.Context, sc *scope, params json.RawMessage) (json.RawMessage, *jsonrpc.Error) {
	var p mcpwire.InitializeParams
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, errInvalidParams("Invalid params: %v", err)
		}
	}
	if len(sc.rt.servers) == 0 {
		return nil, noServers(ctx)
	}
	rev := mcpwire.Negotiate(p.ProtocolVersion)
	tracing.NoteProtocol(ctx, rev)
	caps := mcpwire.ParseClientCaps(p.Capabilities)
	if sc.sess != nil {
		sc.sess.Initialize(rev, caps, p.ClientInfo.Name, p.ClientInfo.Version)
		sc.caps = caps
	}

	capsObj, instr := g.describe(ctx, sc, true)
	res := map[string]any{
		"protocolVersion": rev,
		"capabilities":    capsObj,
		"serverInfo":      g.serverInfo(sc),
	}
	if instr != "" {
		res["instructions"] = instr
	}
	b, _ := json.Marshal(res)
	return b, nil
}

// serverInfo is what the gateway says it is on sc's route: mcpgate, or on
// a single-server route that server's name (S6.5).
func (g *Gateway) serverInfo(sc *scope) map[string]any {
	name := "mcpgate"
	if !sc.rt.prefixed {
		name = sc.rt.single
	}
	return map[string]any{"name": name, "version": g.version}
}

// describe merges the capabilities and instructions of the route's
// upstreams (fetched concurrently; an unreachable one is left out).
// listChanged says whether change notifications are advertised (the
// stateless era has them only through subscriptions/listen).
func (g *Gateway) describe(ctx context.Context, sc *scope, listChanged bool) (map[string]any, string) {
	sessions, release := g.upstreamSessions(ctx, sc.rt)
	defer release()
	var merged mcpwire.ServerCaps
	var instr []string
	for _, name := range sc.rt.servers {
		s, ok := sessions[name]
		if !ok {
			continue
		}
		info := s.Info()
		merged = merged.Merge(info.Caps)
		if info.HasInstructions && info.Instructions != "" {
			if sc.rt.prefixed {
				instr = append(instr, fmt.Sprintf("## %s (tools and prompts prefixed %q)\n%s", name, name+g.sep, info.Instructions))
			} else {
				instr = append(instr, info.Instructions)
			}
		}
	}
	if len(sessions) == 0 {
		// Nothing reachable yet: tools are the least a client may list;
		// list_changed tells it when upstreams arrive.
		merged.Tools = true
	}
	if sc.rt.proxy {
		merged = mcpwire.ServerCaps{Tools: true, Logging: merged.Logging}
	}
	if mode, _ := g.toolsMode(sc.rt); mode != config.ToolsAll {
		// S20: the gateway's own tools are there whatever the upstreams.
		merged.Tools = true
		instr = append([]string{searchInstructions}, instr...)
	}
	capsObj := map[string]any{}
	lc := func() map[string]any {
		if listChanged {
			return map[string]any{"listChanged": true}
		}
		return map[string]any{}
	}
	if merged.Tools {
		capsObj["tools"] = lc()
	}
	if merged.Prompts {
		capsObj["prompts"] = lc()
	}
	if merged.Resources {
		r := lc()
		if listChanged {
			r["subscribe"] = merged.ResourcesSubscribe
		}
		capsObj["resources"] = r
	}
	// Logging on every route, whatever the upstreams declare: the gateway
	// relays log messages itself and can always honour logging/setLevel
	// (it filters per session). Servers that log without declaring it
	// (the Python SDK's) would otherwise never be asked by a client that
	// follows the capabilities.
	capsObj["logging"] = map[string]any{}
	if merged.Completions {
		capsObj["completions"] = map[string]any{}
	}
	// Extensions are one object: tasks (2026-07-28) and MCP Apps each add
	// their member to it, so neither hides the other.
	exts := map[string]any{}
	if g.tasksOffered(sc) {
		if sc.stateless {
			exts[mcpwire.ExtensionTasks] = map[string]any{}
		} else {
			capsObj["tasks"] = tasksCapability()
		}
	}
	if merged.UI {
		// MCP Apps (apps.go): when a server of the route serves views,
		// whatever the client declared (the extension is the server's to
		// advertise; a client that runs no views ignores it).
		exts[mcpwire.ExtUI] = map[string]any{}
	}
	if len(exts) > 0 {
		capsObj["extensions"] = exts
	}
	return capsObj, strings.Join(instr, "\n\n")
}

// pageCursor is the gateway's opaque cursor over a merged list.
func encodeCursor(k catalog.Kind, offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(k.String() + ":" + strconv.Itoa(offset)))
}

func decodeCursor(k catalog.Kind, c string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	kind, off, ok := strings.Cut(string(b), ":")
	if !ok || kind != k.String() {
		return 0, false
	}
	n, err := strconv.Atoi(off)
	return n, err == nil && n >= 0
}

// mergedList returns the route's items of kind k, server by server in
// name order, each server's items by key. On a route of several servers
// the listing is lenient: a server that fails to list is left out and
// logged at error (S6.6, C7.2). A single-server route is strict: the
// server's failure is the caller's error, as it is with a direct
// connection (C8.2).
func (g *Gateway) mergedList(ctx context.Context, rt *route, k catalog.Kind) ([]catalog.Item, error) {
	lists := make([][]catalog.Item, len(rt.servers))
	strict := !rt.prefixed && len(rt.servers) == 1
	var strictErr error
	var wg sync.WaitGroup
	for i, name := range rt.servers {
		wg.Go(func() {
			if gone, e := g.verifyServer(ctx, name); e != nil {
				// Removed on another replica while this one could not hear
				// it, or not known to still be there (unheard.go).
				if strict && !gone {
					strictErr = &clientError{rpc: e}
				}
				return
			}
			items, err := g.cat.List(ctx, name, k)
			if err != nil {
				// Counted either way: a server left out of a merged list
				// is an outage too (issue 24).
				fault := upstream.Classify(err).Class
				g.metrics.ListFailure(name, k.String(), fault)
				if strict {
					g.log.Debug("upstream list failed", "server", name, "kind", k.String(), "fault", fault, "error", err)
					strictErr = err
					return
				}
				g.log.Error("upstream list failed; left out", "server", name, "kind", k.String(), "fault", fault, "error", err)
				return
			}
			if rt.view != nil {
				// The same decision gates calls (S6.2): what is not listed
				// cannot be called.
				kept := make([]catalog.Item, 0, len(items))
				for _, it := range items {
					if rt.allows(k, it.Server, it.Key) {
						kept = append(kept, it)
					}
				}
				items = kept
			}
			lists[i] = items
		})
	}
	wg.Wait()
	if strictErr != nil {
		return nil, strictErr
	}
	var out []catalog.Item
	for _, l := range lists {
		out = append(out, l...)
	}
	// A name (or URI) two items would share names neither (names.go).
	return g.distinct(rt, k, out), nil
}

func (g *Gateway) list(ctx context.Context, sc *scope, k catalog.Kind, params json.RawMessage) (json.RawMessage, *jsonrpc.Error) {
	offset := 0
	if c, ok := jsonrpc.GetString(params, "cursor"); ok && c != "" {
		n, valid := decodeCursor(k, c)
		if !valid {
			return nil, errInvalidParams("Invalid cursor")
		}
		offset = n
	}
	var items []catalog.Item
	op := func() (err error) {
		items, err = g.mergedList(ctx, sc.rt, k)
		return err
	}
	if k == catalog.Tools {
		if mode, rc := g.toolsMode(sc.rt); mode != config.ToolsAll {
			// S20: the gateway's own tools (and, hybrid, the most used).
			op = func() (err error) {
				items, err = g.virtualList(ctx, sc, mode, rc)
				return err
			}
		}
	}
	var err error
	if len(sc.rt.servers) == 1 {
		// A single server's list may need the person's account first.
		err = g.connecting(ctx, sc, sc.rt.servers[0], op)
	} else {
		err = op()
	}
	if err != nil {
		var ce *clientError
		if errors.As(err, &ce) {
			return nil, ce.rpc
		}
		return nil, g.upstreamFault(ctx, sc, sc.rt.servers[0], err)
	}
	switch k {
	case catalog.Tools:
		// Before paging, so that pages stay whole (apps.go).
		items = g.modelTools(sc, items)
	case catalog.Templates:
		items = g.viewTemplates(sc.rt, items)
	}
	if offset > len(items) {
		offset = len(items)
	}
	end := min(offset+g.pageSize, len(items))
	buf := make([]byte, 0, 256*(end-offset)+64)
	buf = append(buf, `{"`...)
	buf = append(buf, k.Field()...)
	buf = append(buf, `":[`...)
	rename := sc.rt.prefixed && (k == catalog.Tools || k == catalog.Prompts)
	offerTasks := k == catalog.Tools && !sc.stateless && g.tasksOffered(sc)
	for i, it := range items[offset:end] {
		if i > 0 {
			buf = append(buf, ',')
		}
		raw := []byte(it.Raw)
		o, overridden := g.current().overrides[it.Server][it.Key]
		// it.Server "": the gateway's own tool (S20), listed as it is.
		if it.Server != "" && (rename || (overridden && k == catalog.Tools)) {
			name := g.exposed(sc.rt, k, it.Server, it.Key)
			if k == catalog.Tools {
				g.checkToolName(it.Server, name)
			}
			if r, err := jsonrpc.Set(raw, "name", jsonrpc.String(name)); err == nil {
				raw = r
			}
		}
		if offerTasks && it.Server != "" {
			raw = g.rewriteTaskSupport(it.Server, raw)
		}
		if overridden && k == catalog.Tools && o.Description != "" {
			if r, err := jsonrpc.Set(raw, "description", jsonrpc.String(o.Description)); err == nil {
				raw = r
			}
		}
		if sc.rt.prefixed && it.Server != "" {
			// MCP Apps views live in their server's namespace (apps.go).
			switch {
			case k == catalog.Tools:
				raw = g.toolUI(it.Server, raw).listed
			case k == catalog.Resources && strings.HasPrefix(it.Key, mcpwire.SchemeUI):
				if r, err := jsonrpc.Set(raw, "uri", jsonrpc.String(g.uiNamespaced(it.Server, it.Key))); err == nil {
					raw = r
				}
			case k == catalog.Templates:
				raw = g.listedTemplate(it.Server, it.Key, raw)
			}
		}
		buf = append(buf, raw...)
	}
	buf = append(buf, ']')
	if end < len(items) {
		buf = append(buf, `,"nextCursor":`...)
		buf = append(buf, jsonrpc.String(encodeCursor(k, end))...)
	}
	buf = append(buf, '}')
	return buf, nil
}

// checkToolName warns, once per name, about an exposed tool name outside
// the 2025-11-25 rule (1-128 chars of [A-Za-z0-9_.-]): many clients refuse
// such tools. The name is still forwarded as it is; renaming it would
// need a mapping the upstream's own clients could not follow.
func (g *Gateway) checkToolName(server, name string) {
	if mcpwire.ValidToolName(name) {
		return
	}
	if g.badNames.first(name) {
		g.log.Warn("exposed tool name breaks the MCP name rule (1-128 chars of A-Z a-z 0-9 _ . -); clients may refuse it",
			"server", server, "name", name, "length", len(name))
	}
}

// callNamed forwards prompts/get to the server that owns the name, with
// the name and progress token rewritten (tools/call has its own stages:
// pipeline.go).
func (g *Gateway) callNamed(ctx context.Context, sc *scope, m *jsonrpc.Message, k catalog.Kind) (json.RawMessage, *jsonrpc.Error) {
	ctx, ref, params, _, e := g.resolveName(ctx, sc, m.Params, k)
	if e != nil {
		return nil, e
	}
	return g.forward(ctx, sc, ref.server, m.Method, params)
}

// nameFailure says why resolveName refused a name, for the call's audit
// record: its fault class (store.Fault*), and the server whose list
// could not be read when that was why.
type nameFailure struct{ class, server string }

// resolveName finds the item the params of a tools/call or prompts/get
// name among those the caller may call on the route: the context the
// call goes upstream with, the item, and the params with its upstream
// name; or why it could not.
func (g *Gateway) resolveName(ctx context.Context, sc *scope, params json.RawMessage, k catalog.Kind) (context.Context, toolRef, json.RawMessage, nameFailure, *jsonrpc.Error) {
	denied := nameFailure{class: store.FaultDenied}
	what := "tool"
	if k == catalog.Prompts {
		what = "prompt"
	}
	name, ok := jsonrpc.GetString(params, "name")
	if !ok || name == "" {
		return ctx, toolRef{}, nil, denied, errInvalidParams("Invalid params: missing %s name", what)
	}
	var candBuf [2]toolRef
	cands := g.candidates(candBuf[:0], sc.rt, k, name)
	if len(cands) == 0 && k == catalog.Tools {
		// A view's call by its own server's name (apps.go), resolved
		// before anything looks at the tool, so every later stage sees
		// the real one.
		exposed, ok, e := g.appToolName(ctx, sc, name)
		if e != nil {
			tracing.NoteOutcome(ctx, tracing.OutcomeRefused, "name_conflict")
			return ctx, toolRef{}, nil, denied, e
		}
		if ok {
			cands = g.candidates(candBuf[:0], sc.rt, k, exposed)
		}
	}
	if len(cands) == 0 {
		// A tool the caller may not see fails exactly like an unknown one
		// (S6.2): no hint that it exists, except to the operator's trace.
		tracing.NoteOutcome(ctx, tracing.OutcomeRefused, "policy")
		return ctx, toolRef{}, nil, denied, errInvalidParams("Unknown %s: %s", what, name)
	}
	// The name as exposed is looked up exactly (names.go); each
	// candidate's list may need the person's account first. Only when no
	// candidate is found are the lists fetched again (a tool added a
	// moment ago): a renamed tool's other candidate, its display name as
	// an upstream name, is normally missing.
	//
	// While the bus is not heard each candidate's server is re-read once,
	// whichever pass asks (unheard.go); with it heard, or without a bus,
	// none of that bookkeeping is done.
	var gone map[string]bool
	if !g.heard.Trusted() {
		gone = map[string]bool{}
	}
	var failed string
	refresh := false
	lookup := func(c toolRef) (it catalog.Item, found bool, err error) {
		lctx := ctx
		if gone != nil {
			if _, seen := gone[c.server]; !seen {
				removed, e := g.verifyServer(ctx, c.server)
				if e != nil && !removed {
					return catalog.Item{}, false, &clientError{rpc: e}
				}
				gone[c.server] = removed
			}
			if gone[c.server] {
				// Removed on another replica while this one could not
				// hear it: as unknown as if it had heard.
				return catalog.Item{}, false, nil
			}
			lctx = withVerified(ctx, c.server)
		}
		err = g.connecting(lctx, sc, c.server, func() (err error) {
			if refresh {
				it, found, err = g.cat.LookupOrRefresh(lctx, c.server, k, c.name)
			} else {
				it, found, err = g.cat.Lookup(lctx, c.server, k, c.name)
			}
			return err
		})
		if err != nil {
			failed = c.server
		}
		return it, found, err
	}
	it, found, conflict, err := g.resolve(cands, k, name, lookup)
	if err == nil && !found && !conflict {
		refresh = true
		it, found, conflict, err = g.resolve(cands, k, name, lookup)
	}
	if err != nil {
		// Only here is errors.As's target declared: it escapes, and the
		// call path would pay for it on every call.
		var ce *clientError
		if errors.As(err, &ce) {
			// The store that says whether the server is still configured
			// did not answer (verifyServer).
			return ctx, toolRef{}, nil, nameFailure{store.FaultInternal, failed}, ce.rpc
		}
		// The server's list could not be read: the call fails as the
		// upstream did (unreachable, timeout...).
		return ctx, toolRef{}, nil, nameFailure{upstream.Classify(err).Class, failed}, g.upstreamFault(ctx, sc, failed, err)
	}
	switch {
	case conflict:
		tracing.NoteOutcome(ctx, tracing.OutcomeRefused, "name_conflict")
		return ctx, toolRef{}, nil, denied, errAmbiguous(what, name)
	case !found:
		// A definition tool integrity holds says so (integrity.go).
		if e := g.heldRefusal(ctx, cands, k, what, name); e != nil {
			return ctx, toolRef{}, nil, denied, e
		}
		// The same answer whether the server exists or not (no leak).
		return ctx, toolRef{}, nil, denied, errInvalidParams("Unknown %s: %s", what, name)
	}
	server, upName := it.Server, it.Key
	if gone != nil {
		ctx = withVerified(ctx, server)
	}
	// A stateless HTTP upstream gets Mcp-Param-* headers made from its own
	// schema of the tool.
	ctx = upstream.WithParamHeaders(ctx, it.ParamHeaders)
	if k == catalog.Tools {
		// A tool the upstream runs only as a task is bridged (tasks.go).
		ctx = withTaskSupport(ctx, it.Raw)
	}
	// Always rewritten, even when unchanged: Set leaves exactly one "name"
	// member, so an upstream cannot read a different copy of a repeated key
	// than the one this gateway checked. Params that already read so are
	// kept as they are, not copied (nothing writes to params in place).
	params, err = jsonrpc.SetShared(params, "name", jsonrpc.String(upName))
	if err != nil {
		return ctx, toolRef{}, nil, denied, errInvalidParams("Invalid params")
	}
	return ctx, toolRef{server, upName}, params, nameFailure{}, nil
}

// ownResult takes out of a 2026-07-28 upstream's result what speaks for
// that upstream rather than for the gateway: its serverInfo (the gateway
// adds its own for clients of that era), and for an handshake-era client the
// resultType its revision does not have. Only a stateless upstream's
// results come here, so handshake-era results are not even scanned.
func (g *Gateway) ownResult(sc *scope, res json.RawMessage) json.RawMessage {
	if bytes.Contains(res, []byte(mcpwire.MetaKeyServerInfo)) {
		res = mcpwire.WithoutMetaKey(res, mcpwire.MetaKeyServerInfo)
	}
	if !sc.stateless && bytes.Contains(res, []byte(`"resultType"`)) && mcpwire.ResultTypeOf(res) == mcpwire.ResultComplete {
		if out, err := jsonrpc.Delete(res, mcpwire.FieldResultType); err == nil {
			res = out
		}
	}
	return res
}

// logLine writes one debug line per forwarded call: the method, server
// and tool or prompt name, never arguments.
func (c *call) logLine(outcome string) {
	if !c.g.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	name, _ := jsonrpc.GetString(c.params, "name")
	c.g.log.Debug("forwarded", "server", c.server, "method", c.method, "name", name, "outcome", outcome, "elapsed", time.Since(c.start))
}

// routeURI finds the server for a resource URI (claimURI); ok is false
// when no server, or more than one, claims it.
func (g *Gateway) routeURI(ctx context.Context, rt *route, uri string) (string, bool) {
	server, ok, _ := g.claimURI(ctx, rt, uri)
	return server, ok
}

// claimURI finds the one server of the route that claims a resource URI
// the caller may read: it lists the URI, or one of its templates matches
// it; when none does, the only resource-capable server of the route. A
// URI that more than one server claims is served by none (conflict, and
// reported once): upstreams choose their URIs and templates, and one
// must not capture the reads meant for another (names.go). A URI in a
// view namespace of a merged route is claimed by none (apps.go).
func (g *Gateway) claimURI(ctx context.Context, rt *route, uri string) (server string, ok, conflict bool) {
	if g.inViewNamespace(rt, uri) {
		// The gateway's name for a view (apps.go): read through
		// uiOriginal, claimed by no server's list or template.
		return "", false, false
	}
	var claims []string
	for _, name := range rt.servers {
		if !rt.allows(catalog.Resources, name, uri) {
			continue
		}
		if _, found, err := g.cat.Lookup(ctx, name, catalog.Resources, uri); err == nil && found {
			claims = append(claims, name)
		} else if ok, err := g.cat.MatchTemplate(ctx, name, uri); err == nil && ok {
			claims = append(claims, name)
		}
	}
	switch len(claims) {
	case 1:
		return claims[0], true, false
	case 0:
	default:
		g.nameConflict(catalog.Resources, uri, claims)
		return "", false, true
	}
	var only string
	n := 0
	for _, name := range rt.servers {
		if s, release, err := g.up.Acquire(ctx, name); err == nil {
			if s.Info().Caps.Resources {
				only = name
				n++
			}
			release()
		}
	}
	return only, n == 1, false
}

func resourceNotFound(uri string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]string{"uri": uri})
	return &jsonrpc.Error{Code: mcpwire.CodeResourceNotFound, Message: "Resource not found", Data: data}
}

// serverForURI reads params.uri and finds the server that serves it.
func (g *Gateway) serverForURI(ctx context.Context, rt *route, params json.RawMessage) (uri, server string, e *jsonrpc.Error) {
	uri, ok := jsonrpc.GetString(params, "uri")
	if !ok || uri == "" {
		return "", "", errInvalidParams("Invalid params: missing uri")
	}
	if g.inViewNamespace(rt, uri) {
		// A view of a merged route is read (readResource), not watched:
		// its updates would need the namespace written into them.
		return "", "", errViewSubscription(uri)
	}
	server, ok, conflict := g.claimURI(ctx, rt, uri)
	if conflict {
		return "", "", errAmbiguousURI(uri)
	}
	if !ok || !rt.allows(catalog.Resources, server, uri) {
		return "", "", resourceNotFound(uri)
	}
	return uri, server, nil
}

func (g *Gateway) resourceCall(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	_, server, e := g.serverForURI(ctx, sc.rt, m.Params)
	if e != nil {
		return nil, e
	}
	return g.forward(ctx, sc, server, m.Method, m.Params)
}

func (g *Gateway) complete(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	ref, ok := jsonrpc.Get(m.Params, "ref")
	if !ok {
		return nil, errInvalidParams("Invalid params: missing ref")
	}
	typ, _ := jsonrpc.GetString(ref, "type")
	var server string
	params := m.Params
	switch typ {
	case "ref/prompt":
		name, _ := jsonrpc.GetString(ref, "name")
		var failed string
		it, found, conflict, err := g.resolve(g.candidates(nil, sc.rt, catalog.Prompts, name), catalog.Prompts, name, func(c toolRef) (catalog.Item, bool, error) {
			failed = c.server
			return g.cat.Lookup(ctx, c.server, catalog.Prompts, c.name)
		})
		switch {
		case err != nil:
			return nil, g.upstreamFault(ctx, sc, failed, err)
		case conflict:
			return nil, errAmbiguous("prompt", name)
		case !found:
			return nil, errInvalidParams("Unknown prompt: %s", name)
		}
		server = it.Server
		p, err := jsonrpc.SetPath(params, jsonrpc.String(it.Key), "ref", "name")
		if err != nil {
			return nil, errInvalidParams("Invalid params")
		}
		params = p
	case "ref/resource":
		uri, _ := jsonrpc.GetString(ref, "uri")
		if s, orig, ok, ambiguous := g.uiOriginal(sc.rt, uri); ok || ambiguous {
			// A view template of a merged route (apps.go): completed by
			// its server, under the template that server wrote.
			if ambiguous {
				return nil, errAmbiguousURI(uri)
			}
			if !sc.rt.allows(catalog.Resources, s, orig) {
				return nil, resourceNotFound(uri)
			}
			p, err := jsonrpc.SetPath(params, jsonrpc.String(orig), "ref", "uri")
			if err != nil {
				return nil, errInvalidParams("Invalid params")
			}
			server, params = s, p
			break
		}
		s, ok, conflict := g.claimURI(ctx, sc.rt, uri)
		if conflict {
			return nil, errAmbiguousURI(uri)
		}
		if !ok || !sc.rt.allows(catalog.Resources, s, uri) {
			return nil, resourceNotFound(uri)
		}
		server = s
	default:
		return nil, errInvalidParams("Invalid params: unknown ref type %q", typ)
	}
	if s, release, err := g.up.Acquire(ctx, server); err == nil {
		completions := s.Info().Caps.Completions
		release()
		if !completions {
			return json.RawMessage(`{"completion":{"values":[],"hasMore":false}}`), nil
		}
	}
	return g.forward(ctx, sc, server, m.Method, params)
}

var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

func levelIndex(l string) int {
	for i, v := range logLevels {
		if v == l {
			return i
		}
	}
	return -1
}

func (g *Gateway) setLevel(ctx context.Context, sc *scope, params json.RawMessage) (json.RawMessage, *jsonrpc.Error) {
	level, _ := jsonrpc.GetString(params, "level")
	idx := levelIndex(level)
	if idx < 0 {
		return nil, errInvalidParams("Invalid params: unknown log level %q", level)
	}
	if sc.sess != nil {
		sc.sess.SetLogLevel(idx)
		g.saveSessionFields(ctx, sc.sess, map[string]string{fieldLevel: logLevels[idx]})
	}
	g.applyLevel(ctx, sc, idx)
	return json.RawMessage("{}"), nil
}

// applyLevel tells the upstreams of sc's route the log level idx its
// session asked for (logging/setLevel here, or on another replica).
func (g *Gateway) applyLevel(ctx context.Context, sc *scope, idx int) {
	// Upstream sessions are shared, so each upstream gets the most verbose
	// level any session asked for; the gateway filters per session.
	sessions, release := g.upstreamSessions(ctx, sc.rt)
	defer release()
	for name, s := range sessions {
		if s.Info().Caps.Logging {
			g.setUpstreamLevel(ctx, name, s, g.minLogLevel(name, idx))
		}
	}
	if sc.sess != nil {
		// The session's own upstream sessions (relay.go) serve it alone:
		// exactly its level.
		for name, s := range g.up.Bound(sessionBinding(sc.sess)) {
			if s.Info().Caps.Logging {
				g.setUpstreamLevel(ctx, name, s, idx)
			}
		}
	}
}

func (g *Gateway) setUpstreamLevel(ctx context.Context, server string, s upstream.Session, idx int) {
	if _, err := s.Call(ctx, mcpwire.MethodLoggingSetLevel, json.RawMessage(`{"level":"`+logLevels[idx]+`"}`)); err != nil {
		g.log.Debug("upstream logging/setLevel failed", "server", server, "error", err)
	}
}

func (g *Gateway) minLogLevel(server string, floor int) int {
	lvl := floor
	for _, s := range g.sessions.All() {
		if !s.route.has(server) {
			continue
		}
		if l := s.LogLevel(); l >= 0 && l < lvl {
			lvl = l
		}
	}
	return lvl
}

// noServers is the refusal of a route the caller may use no server of
// (S6.5): when a key or the grants of a signed-in person are the reason,
// the caller is told so.
func noServers(ctx context.Context) *jsonrpc.Error {
	c := callers.FromContext(ctx)
	switch {
	case c != nil && c.Alias != "":
		return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "API key %q grants no MCP servers on this route", c.Alias)
	case c != nil && c.Issuer != "":
		return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "No grant gives user %q (teams %v, roles %v) any MCP server on this route; ask an administrator for one (auth.grants)", c.User, c.Teams, c.Roles)
	}
	return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "No MCP servers are available on this route")
}
