package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// progressRoute remembers where progress for a minted token goes.
type progressRoute struct {
	out   sender
	token json.RawMessage    // the downstream's own token
	span  *tracing.MsgHandle // the call's span; nil: not traced
}

// mintProgress registers a gateway-unique progress token for a call of
// server and returns its JSON text, and what forgets it. Downstream
// tokens are only unique per client, and upstream sessions are shared.
// The token is random and owned by server: another upstream (one that
// sees tokens of its own calls) can neither guess it nor use it to
// put words on another call's stream.
func (g *Gateway) mintProgress(sc *scope, server string, downstream json.RawMessage, span *tracing.MsgHandle) (tok string, forget func()) {
	tok = string(jsonrpc.String("mcpg-p-" + randomID()))
	forget = g.progress.put(tok, server, &progressRoute{out: sc.out, token: append(json.RawMessage(nil), downstream...), span: span})
	return tok, forget
}

// Bound upstream sessions (DESIGN decision 4, SPEC S24). A server may keep
// what a client answered per upstream session (server-everything asks
// roots/list once and answers every later call from that cache), so a
// pooled session would show one client another's roots. A client that
// declared roots therefore makes its calls on upstream sessions bound to
// it: a stateful downstream session for its lifetime (unbound when it
// ends), a 2026-07-28 request for its exchange (unbound when the call is
// over; the upstream's roots/list becomes an input_required round of this
// request; a session the upstream asked nothing is kept for the next such
// call). Lists stay on the pooled sessions: the catalog is shared.

// sessionBinding is the upstream binding key of a downstream session.
func sessionBinding(s *session) string { return "s/" + s.ID() }

// upstreamBinding is the binding of s's own upstream sessions: made once,
// by its first call that needs it, then carried by every such call.
func (s *session) upstreamBinding() upstream.Binding {
	if b := s.binding.Load(); b != nil {
		return *b
	}
	b := &upstream.Binding{Key: sessionBinding(s), Origin: s, Started: s.boundStarted}
	if !s.binding.CompareAndSwap(nil, b) {
		b = s.binding.Load()
	}
	return *b
}

// boundStarted is the Binding.Started of a session's own upstream
// sessions: what the session told the ones before, told the new one.
func (s *session) boundStarted(ctx context.Context, server string, us upstream.Session) {
	// The level this session asked for, on its new upstream session: some
	// servers (go-sdk) log only once asked.
	idx := s.LogLevel()
	if idx >= 0 && us.Info().Caps.Logging {
		s.g.setUpstreamLevel(ctx, server, us, idx)
	}
	// A restarted upstream session (a new process) knows nothing of the
	// subscriptions made on the one before.
	for _, uri := range s.SubsOn(server) {
		params := uriParams(uri)
		if _, err := us.Call(ctx, mcpwire.MethodResourcesSubscribe, params); err != nil {
			s.g.log.Debug("resubscribe on a new bound upstream session failed", "server", server, "error", err)
		}
	}
}

// exchangeBinding is that of one 2026-07-28 call.
func exchangeBinding(ex *exchange) string { return "x/" + ex.id }

// binds reports whether sc's calls run on upstream sessions bound to its
// client (see above).
func (sc *scope) binds() bool {
	return sc.caps.Roots && (sc.sess != nil || sc.stateless && sc.exchange != nil)
}

// boundFor reports whether the calls of s to server run on s's own
// upstream session (a 2026-07-28 server has no session to bind).
func (g *Gateway) boundFor(s *session, server string) bool {
	return s.Caps().Roots && !g.up.Stateless(server)
}

// bind returns ctx for a call of sc that must reach an upstream session
// asking this client (see above), or ctx as it is.
func (g *Gateway) bind(ctx context.Context, sc *scope) context.Context {
	if !sc.binds() {
		return ctx
	}
	switch {
	case sc.sess != nil:
		return upstream.WithBinding(ctx, sc.sess.upstreamBinding())
	case sc.stateless && sc.exchange != nil:
		// Reusable: a session the upstream asked nothing of holds nothing
		// of this client, and serves the next such call instead of a new
		// dial (a process, on stdio) per call.
		return upstream.WithBinding(ctx, upstream.Binding{Key: exchangeBinding(sc.exchange), Origin: sc, Reusable: true})
	}
	return ctx
}

// relay is the gateway seen as the upstream package's Handler.
type relay Gateway

var _ upstream.Handler = (*relay)(nil)

func (r *relay) HandleNotification(ctx context.Context, server string, origin any, msg *jsonrpc.Message) {
	g := (*Gateway)(r)
	defer g.recoverRelay(server, msg.Method)
	sc := g.scopeOf(origin)
	if isListChanged(msg.Method) && sc != nil && sc.binds() && !g.up.Stateless(server) {
		// From a session bound to one client: its lists are that
		// session's (server-everything registers tools per session as it
		// starts); the merged catalog follows the pooled sessions, which
		// hear a server-wide change themselves.
		g.log.Debug("list change of a bound upstream session not broadcast", "server", server, "method", msg.Method)
		return
	}

	switch msg.Method {
	case mcpwire.NotifyProgress:
		tok, ok := jsonrpc.Get(msg.Params, "progressToken")
		if !ok {
			return
		}
		pr, ok, foreign := g.progress.get(string(tok), server)
		if !ok {
			if foreign {
				g.log.Warn("dropped a progress notification for another server's call", "server", server)
			}
			return
		}
		params, err := jsonrpc.Set(msg.Params, "progressToken", pr.token)
		if err != nil {
			return
		}
		pr.span.Progress() // before the client can see it, and so answer
		_ = pr.out.send(jsonrpc.NewNotification(msg.Method, params))
	case mcpwire.NotifyMessage:
		if origin == upstream.Ambiguous {
			// It belongs to one of several callers; any pick could be
			// wrong, and a broadcast would show it to all of them.
			g.log.Debug("dropped an upstream log message that cannot be tied to one caller", "server", server)
			return
		}
		level, _ := jsonrpc.GetString(msg.Params, "level")
		idx := levelIndex(level)
		if sc != nil {
			switch {
			case sc.stateless:
				// Only requests that asked (io.modelcontextprotocol/logLevel).
				if sc.logLevel >= 0 && idx >= sc.logLevel {
					_ = sc.out.send(msg)
				}
			case sc.sess == nil || sc.sess.WantsLog(idx):
				_ = sc.out.send(msg)
			}
			return
		}
		g.forEachSession(server, func(s *session) {
			// A session with upstream sessions of its own hears those;
			// a pooled session's messages are about the others' calls.
			if s.WantsLog(idx) && !g.boundFor(s, server) {
				g.notifyOrForward(s, msg)
			}
		})
	case mcpwire.NotifyToolsListChanged:
		g.cat.Invalidate(server, catalog.Tools)
		if g.shareListChanged(server, msg.Method) {
			g.broadcastListChanged(server, catalog.Tools)
		}
	case mcpwire.NotifyPromptsListChanged:
		g.cat.Invalidate(server, catalog.Prompts)
		if g.shareListChanged(server, msg.Method) {
			g.broadcastListChanged(server, catalog.Prompts)
		}
	case mcpwire.NotifyResourcesListChanged:
		g.cat.Invalidate(server, catalog.Resources)
		g.cat.Invalidate(server, catalog.Templates)
		if g.shareListChanged(server, msg.Method) {
			g.broadcastListChanged(server, catalog.Resources)
		}
	case mcpwire.NotifyResourceUpdated:
		// From a stateless upstream it came on the gateway's own listen
		// stream, whose id means nothing downstream.
		msg = jsonrpc.NewNotification(msg.Method, mcpwire.WithoutSubscriptionID(msg.Params))
		uri, _ := jsonrpc.GetString(msg.Params, "uri")
		subscribed := func(s *session) bool { return s.SubServer(uri) == server }
		if sc != nil && sc.binds() {
			// From a session bound to one client, which subscribed on it:
			// that client's alone.
			if sc.sess != nil && subscribed(sc.sess) {
				g.notifyOrForward(sc.sess, msg)
			}
			return
		}
		g.notifyListeners(server, msg.Method, msg.Params)
		g.forEachSession(server, func(s *session) {
			// A bound session hears its updates on its own upstream session.
			if subscribed(s) && !g.boundFor(s, server) {
				g.notifyOrForward(s, msg)
			}
		})
	case mcpwire.NotifyCancelled:
		// Cancels a request the upstream sent us; the upstream package
		// ends that handler's context, which cancels it downstream.
	default:
		if sc != nil {
			_ = sc.out.send(msg)
		}
	}
}

func isListChanged(method string) bool {
	switch method {
	case mcpwire.NotifyToolsListChanged, mcpwire.NotifyPromptsListChanged, mcpwire.NotifyResourcesListChanged:
		return true
	}
	return false
}

// scopeOf is the downstream an upstream message belongs to: the scope of
// the call it came during, or, from a session bound to one downstream
// session while none of its calls runs, that session (its standalone
// stream). nil: no one's (a pooled session's message outside any call).
func (g *Gateway) scopeOf(origin any) *scope {
	switch o := origin.(type) {
	case *scope:
		return o
	case *session:
		if o.Closed() {
			return nil
		}
		return &scope{g: g, sess: o, rt: &o.route, out: sessionOut{o}, caps: o.Caps()}
	}
	return nil
}

// recoverRelay, deferred directly, keeps a bug in relaying one upstream
// notification from taking the process down.
func (g *Gateway) recoverRelay(server, method string) {
	if p := recover(); p != nil {
		g.log.Error("panic while relaying an upstream message", "server", server, "method", method, "panic", p, "stack", string(debug.Stack()))
	}
}

// forEachSession calls fn for each live session whose route includes server.
func (g *Gateway) forEachSession(server string, fn func(*session)) {
	for _, s := range g.sessions.All() {
		if s.route.has(server) {
			fn(s)
		}
	}
}

func (g *Gateway) broadcastListChanged(server string, k catalog.Kind) {
	method := mcpwire.NotifyToolsListChanged
	switch k {
	case catalog.Prompts:
		method = mcpwire.NotifyPromptsListChanged
	case catalog.Resources, catalog.Templates:
		method = mcpwire.NotifyResourcesListChanged
	}
	n := jsonrpc.NewNotification(method, nil)
	g.forEachSession(server, func(s *session) { s.Notify(n) })
	g.notifyListeners(server, method, nil)
}

// HandleRequest relays a server-initiated request to the downstream whose
// call caused it, and carries the answer back.
func (r *relay) HandleRequest(ctx context.Context, server string, origin any, msg *jsonrpc.Message) (res json.RawMessage, rpcErr *jsonrpc.Error) {
	g := (*Gateway)(r)
	defer func() {
		if p := recover(); p != nil {
			g.log.Error("panic while relaying an upstream request", "server", server, "method", msg.Method, "panic", p, "stack", string(debug.Stack()))
			res, rpcErr = nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "internal error")
		}
	}()
	// Outside any call, only a session bound to one client (origin: that
	// client's session) knows whom to ask; a pooled session's request is
	// refused, never answered with some other client's roots.
	sc := g.scopeOf(origin)
	if origin == upstream.Ambiguous {
		g.log.Warn("refused a server-initiated request that cannot be tied to one client", "server", server, "method", msg.Method)
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError,
			"%s refused: several clients are calling this server and the request does not say which one it is for", msg.Method)
	}
	if sc == nil {
		g.log.Debug("refused a server-initiated request outside any client request", "server", server, "method", msg.Method)
		return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound,
			"%s is only available during a client request", msg.Method)
	}
	if sc.stateless {
		// A stateless client takes no server-initiated requests: the call
		// answers input_required with this one (S18.1), or, for a task's
		// call, the task does (tasks/get shows it, tasks/update answers).
		if sc.task != nil {
			if !sc.caps.Allows(msg.Method) {
				return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Client does not support %s", msg.Method)
			}
			return sc.task.ask(ctx, msg)
		}
		if sc.exchange == nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Client does not support %s", msg.Method)
		}
		if !sc.caps.Allows(msg.Method) {
			// Not declared in this request: the client's call fails with
			// -32021 naming the capability; the upstream's request fails.
			if capability := mcpwire.CapabilityFor(msg.Method); capability != "" {
				sc.exchange.needs(capability)
			}
			return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Client does not support %s", msg.Method)
		}
		return sc.exchange.ask(ctx, msg)
	}
	if !sc.caps.Allows(msg.Method) {
		// A downstream that did not declare the capability never sees it.
		return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound,
			"Client does not support %s", msg.Method)
	}
	return g.askDownstream(ctx, sc, msg)
}

// askDownstream sends msg to sc's client as a server-initiated request and
// waits for its answer: from sc's party alone (SPEC S24); an answer from
// anyone else is refused (answer) and this one goes on waiting.
func (g *Gateway) askDownstream(ctx context.Context, sc *scope, msg *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	id := g.askID()
	ch := make(chan *jsonrpc.Message, 1)
	forget := g.pending.put(id.Raw(), sc.party(), ch)
	defer forget()
	if sc.asking != nil {
		sc.asking(msg.Method, true)
		defer sc.asking(msg.Method, false)
	}
	if err := sc.out.send(jsonrpc.NewRequest(id, msg.Method, msg.Params)); err != nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Could not reach the client: %v", err)
	}
	t := time.NewTimer(DefaultDownstreamTimeout)
	defer t.Stop()
	select {
	case resp := <-ch:
		if resp.Error != nil {
			return nil, resp.Error
		}
		return resp.Result, nil
	case <-ctx.Done():
		params := append(append([]byte(`{"requestId":`), id.Raw()...), `,"reason":"cancelled by the server"}`...)
		_ = sc.out.send(jsonrpc.NewNotification(mcpwire.NotifyCancelled, params))
		return nil, jsonrpc.NewError(-32800, "Request cancelled")
	case <-sc.doneChan():
		params := append(append([]byte(`{"requestId":`), id.Raw()...), `,"reason":"the request that caused it has ended"}`...)
		_ = sc.out.send(jsonrpc.NewNotification(mcpwire.NotifyCancelled, params))
		return nil, jsonrpc.NewError(-32800, "Request cancelled: the client request that caused it has ended")
	case <-t.C:
		return nil, jsonrpc.NewError(mcpwire.CodeRequestTimeout, "Client did not answer %s within %s", msg.Method, DefaultDownstreamTimeout)
	}
}

// deliverLocal hands the answer m, from party by, to the relayed request
// of this replica that waits for it, if it was sent to by. false: no
// request with m's id waits here for by (none at all, one answered, timed
// out or cancelled, or one sent to someone else: the sender is not told
// which).
func (g *Gateway) deliverLocal(by party, m *jsonrpc.Message) bool {
	ch, ok, foreign := g.pending.take(m.ID.Raw(), by)
	if ok {
		ch <- m
		return true
	}
	if foreign {
		g.metrics.SecurityRefusal(metrics.RefusedForeignAnswer)
		g.log.Warn("refused an answer to a server-initiated request from a caller it was not sent to", "id", m.ID.String())
	} else {
		g.log.Debug("answer to a request nothing waits for refused", "id", m.ID.String())
	}
	return false
}

// errNotPending is the refusal of an answer that no request pending for
// its sender takes: the same whether the id was never issued, is spent,
// or names another caller's request (SPEC S24).
func errNotPending(id jsonrpc.ID, by party) *jsonrpc.Error {
	whom := "this session"
	if by.session == "" {
		whom = "this caller on this route"
	}
	return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Invalid Request: no request with id %s is pending for %s", id.String(), whom)
}

type subKey struct{ server, uri string }

func (g *Gateway) subscribe(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	uri, server, e := g.serverForURI(ctx, sc.rt, m.Params)
	if e != nil {
		return nil, e
	}
	if sc.sess == nil {
		// Without a session there is nowhere to deliver updates.
		return g.forward(ctx, sc, server, m.Method, m.Params)
	}
	sub := m.Method == mcpwire.MethodResourcesSubscribe
	if g.boundFor(sc.sess, server) {
		// On the session's own upstream session, where its calls change
		// things (on stdio: its own process); not shared, so not counted.
		if _, e := g.forward(ctx, sc, server, m.Method, m.Params); e != nil {
			return nil, e
		}
		sc.sess.SetSub(uri, server, sub)
		g.shareSubscription(ctx, sc.sess, uri, server, sub)
		return json.RawMessage("{}"), nil
	}
	prev, had := sc.sess.SetSub(uri, server, sub)
	switch {
	case sub && !had:
		if e := g.subscribeUpstream(ctx, sc, server, uri, m.Params); e != nil {
			sc.sess.RemoveSub(uri)
			return nil, e
		}
	case !sub && had:
		g.unsubscribeUpstream(prev, uri)
	}
	g.shareSubscription(ctx, sc.sess, uri, server, sub)
	return json.RawMessage("{}"), nil
}

func (g *Gateway) subscribeUpstream(ctx context.Context, sc *scope, server, uri string, params json.RawMessage) *jsonrpc.Error {
	k := subKey{server, uri}
	g.subMu.Lock()
	g.subs[k]++
	first := g.subs[k] == 1
	g.subMu.Unlock()
	if !first {
		return nil
	}
	if _, e := g.forward(ctx, sc, server, mcpwire.MethodResourcesSubscribe, params); e != nil {
		g.subMu.Lock()
		if g.subs[k]--; g.subs[k] <= 0 {
			delete(g.subs, k)
		}
		g.subMu.Unlock()
		return e
	}
	return nil
}

// releaseSubscription undoes a subscription of s that ends with s: a
// shared one is released, a bound one ends with s's upstream sessions.
func (g *Gateway) releaseSubscription(s *session, server, uri string) {
	if !g.boundFor(s, server) {
		g.unsubscribeUpstream(server, uri)
	}
}

func (g *Gateway) unsubscribeUpstream(server, uri string) {
	k := subKey{server, uri}
	g.subMu.Lock()
	g.subs[k]--
	last := g.subs[k] <= 0
	if last {
		delete(g.subs, k)
	}
	g.subMu.Unlock()
	if !last {
		return
	}
	// Under bgCtx: on shutdown the upstream sessions end, and their
	// subscriptions with them.
	g.tasks.start(func() {
		ctx, cancel := context.WithTimeout(g.bgCtx, 5*time.Second)
		defer cancel()
		if s, err := g.up.Session(ctx, server); err == nil {
			params := uriParams(uri)
			_, _ = s.Call(ctx, mcpwire.MethodResourcesUnsubscribe, params)
		}
	})
}

// resubscribe renews upstream subscriptions on a new upstream session.
func (g *Gateway) resubscribe(server string) {
	g.subMu.Lock()
	var uris []string
	for k := range g.subs {
		if k.server == server {
			uris = append(uris, k.uri)
		}
	}
	g.subMu.Unlock()
	if len(uris) == 0 {
		return
	}
	g.tasks.start(func() {
		ctx, cancel := context.WithTimeout(g.bgCtx, 10*time.Second)
		defer cancel()
		s, err := g.up.Session(ctx, server)
		if err != nil {
			return
		}
		for _, uri := range uris {
			params := uriParams(uri)
			_, _ = s.Call(ctx, mcpwire.MethodResourcesSubscribe, params)
		}
	})
}

// faultError maps an egress failure to the JSON-RPC error the downstream
// sees: the server and the cause in words (upstream.Reason: never secrets,
// internal addresses or paths), the fault class (C6.6) and the server in
// data.
func (g *Gateway) faultError(server string, err error) *jsonrpc.Error {
	f := upstream.Classify(err)
	switch {
	case errors.Is(err, upstream.ErrNoSubjectToken):
		return noSubjectError(server, f)
	case errors.Is(err, upstream.ErrNoCredential):
		// Nothing was sent: the caller has to bring their own (S19).
		data, _ := json.Marshal(struct {
			Fault  string `json:"fault"`
			Status int    `json:"status"`
			Server string `json:"server"`
		}{f.Class, f.Status, server})
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("store your credential for %s: PUT %s", server, CredentialsPath(server)), Data: data}
	case f.Class == upstream.FaultCancelled:
		return jsonrpc.NewError(-32800, "Request cancelled")
	case f.RPC != nil:
		// The upstream's own error (an expired session's included) is
		// relayed as it is (C6.2, C6.4).
		return f.RPC
	}
	code := int64(jsonrpc.CodeInternalError)
	if f.Class == upstream.FaultTimeout {
		code = mcpwire.CodeRequestTimeout
	}
	// The cause in words, never its addresses: a dial or lookup error
	// names internal hosts, ports and the resolver (the log keeps them).
	msg := fmt.Sprintf("upstream %s: %s", server, upstream.Reason(err))
	if f.Class == upstream.FaultAuth && g.isPassthrough(server) {
		msg = refusedByUpstream(server, f.Status)
	}
	data, _ := json.Marshal(struct {
		Fault  string `json:"fault"`
		Status int    `json:"status"`
		Server string `json:"server"`
	}{f.Class, f.Status, server})
	return &jsonrpc.Error{Code: code, Message: msg, Data: data}
}

// sessionOut sends on a session's standalone stream.
type sessionOut struct{ s *session }

func (o sessionOut) send(msg *jsonrpc.Message) error {
	if o.s.Notify(msg) || o.s.g.forwardToStream(o.s, msg) {
		return nil
	}
	return errors.New("the client has no open stream for server-initiated requests")
}

// uriParams is the params of resources/subscribe and unsubscribe.
func uriParams(uri string) json.RawMessage {
	return append(append([]byte(`{"uri":`), jsonrpc.String(uri)...), '}')
}
