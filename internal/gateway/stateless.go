package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// The stateless era (2026-07-28, SPEC S17) on the same endpoints: a request
// whose params._meta names the revision carries everything a session used
// to hold (client capabilities, log level), so it is served with no
// session at all. The caller's key is checked on every request like any
// other (the gates in ServeHTTP run first). See docs/design/2026-07-28.md.
//
// Served: server/discover, the lists, tools/call, prompts/get,
// resources/read, completion/complete (each result with resultType and,
// for lists and reads, cache hints) and subscriptions/listen (listen.go).
// Server-initiated requests of handshake-era upstreams reach these clients as
// input_required results (mrtr.go).

// statelessScopeKeys are the per-request _meta keys of the stateless era: an
// handshake-era upstream must not see them (a dual-era server would take the
// request for a stateless one).
var statelessScopeKeys = []string{mcpwire.MetaKeyProtocolVersion, mcpwire.MetaKeyClientCapabilities, mcpwire.MetaKeyClientInfo, mcpwire.MetaKeyLogLevel}

// serveStateless answers one stateless request over HTTP. rev is the
// revision its _meta names (possibly one the gateway does not speak; ""
// when only the MCP-Protocol-Version header said it is one).
func (g *Gateway) serveStateless(w http.ResponseWriter, r *http.Request, rt route, m *jsonrpc.Message, rev string) {
	fail := func(status int, e *jsonrpc.Error) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(jsonrpc.Encode(jsonrpc.NewErrorResponse(m.ID, e)))
	}
	// The order of the 400s: a _meta that cannot be read (-32602), then a
	// header that disagrees with it (-32020), then a revision the gateway
	// does not speak (-32022): a client that sent matching values learns
	// which versions to use.
	info, e := requestInfo(m)
	if e != nil {
		fail(http.StatusBadRequest, e)
		return
	}
	if e := mcpwire.CheckProtocolVersionHeader(m.Params, r.Header.Get(mcpwire.HeaderProtocolVersion)); e != nil {
		fail(http.StatusBadRequest, e)
		return
	}
	if e := mcpwire.CheckStatelessVersion(rev); e != nil {
		fail(http.StatusBadRequest, e)
		return
	}
	if e := mcpwire.CheckHeaders(m.Method, m.Params, r.Header.Get("Mcp-Method"), r.Header.Get("Mcp-Name")); e != nil {
		fail(http.StatusBadRequest, e)
		return
	}
	if e := g.checkParamHeaders(r, &rt, m); e != nil {
		fail(http.StatusBadRequest, e)
		return
	}
	if !mcpwire.IsStatelessClientMethod(m.Method) {
		fail(http.StatusNotFound, methodNotFound(m))
		return
	}
	if m.Method == mcpwire.MethodSubscriptionsListen {
		g.serveListen(w, r, rt, m)
		return
	}
	if g.forwardRetry(w, r, m) {
		// A retry of a call another replica runs (peers.go).
		return
	}
	ps := &postSender{w: w, canSSE: acceptsSSE(r), jsonOK: acceptsJSON(r), eventTimeout: g.limits().SSEWriteTimeout}
	reply, invalid := g.statelessReply(r.Context(), &rt, m, info, ps, identityOf(r).Owner)
	if invalid {
		// Refused before any work (a bad requestState): a 400, like the
		// stateless era's other request errors.
		ps.badRequest = true
	}
	ps.finish(reply)
}

// requestInfo reads the per-request _meta of a stateless request; a
// missing or malformed member is INVALID_PARAMS.
func requestInfo(m *jsonrpc.Message) (mcpwire.RequestInfo, *jsonrpc.Error) {
	info, err := mcpwire.RequestMeta(m.Params)
	if err != nil {
		e, _ := err.(*jsonrpc.Error)
		if e == nil {
			e = errInvalidParams("Invalid params")
		}
		return info, e
	}
	return info, nil
}

func methodNotFound(m *jsonrpc.Message) *jsonrpc.Error {
	return jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Method not found: %s", m.Method)
}

// statelessReply answers a stateless request that passed its transport's
// checks, on any transport: out carries what goes to the client before
// the reply (progress, log messages), owner is the caller an exchange's
// requestState is bound to. nil: the client went away first. invalid: the
// request was refused before any work was done.
func (g *Gateway) statelessReply(ctx context.Context, rt *route, m *jsonrpc.Message, info mcpwire.RequestInfo, out sender, owner string) (reply *jsonrpc.Message, invalid bool) {
	logLevel := -1
	if info.LogLevel != "" {
		logLevel = levelIndex(info.LogLevel)
	}
	sc := &scope{g: g, rt: rt, out: out, caps: info.Capabilities, stateless: true, logLevel: logLevel, owner: owner}
	switch {
	case m.Method == mcpwire.MethodServerDiscover:
		reply = g.discover(ctx, sc, m)
	case mcpwire.AllowsInputRequired(m.Method):
		// A call that may need the client's input from an handshake-era
		// upstream (S18.1): it runs as an exchange that can outlive this
		// request; a retry with the gateway's requestState resumes it.
		if state, _ := jsonrpc.GetString(m.Params, mcpwire.FieldRequestState); isGatewayState(state) {
			ex, unanswered, e := g.resumeExchange(m.Method, m.Params, sc.party(), out)
			if e != nil {
				return jsonrpc.NewErrorResponse(m.ID, e), true
			}
			if len(unanswered) > 0 {
				reply = jsonrpc.NewResult(m.ID, g.inputRequired(ex, unanswered))
				break
			}
			reply = g.awaitExchange(ctx, ex, m.ID)
			break
		}
		reply = g.awaitExchange(ctx, g.startExchange(ctx, sc, m), m.ID)
	default:
		reply = g.serve(ctx, sc, m)
	}
	if reply == nil {
		return nil, false
	}
	if reply.Error != nil {
		if reply.Error.Code == mcpwire.CodeResourceNotFound {
			// -32002 is not sent in this era: a missing resource is
			// INVALID_PARAMS (server/resources.md).
			e := *reply.Error
			e.Code = jsonrpc.CodeInvalidParams
			reply.Error = &e
		}
		return reply, false
	}
	res := reply.Result
	if _, has := jsonrpc.Get(res, mcpwire.FieldResultType); !has {
		// A stateless upstream's own resultType (input_required, for a
		// retry the client makes) passes as it is.
		res = mcpwire.WithResultType(res, mcpwire.ResultComplete)
	}
	if mcpwire.CacheableMethod(m.Method) && mcpwire.ResultTypeOf(res) == mcpwire.ResultComplete {
		res = mcpwire.WithCacheHints(res, g.freshness(sc, m.Method), mcpwire.CacheScopePrivate)
	}
	if m.Method != mcpwire.MethodServerDiscover {
		// Results SHOULD say who answered (basic/index.md); discover says
		// it already.
		if out, err := jsonrpc.SetPath(res, g.serverInfoJSON(sc), mcpwire.FieldMeta, mcpwire.MetaKeyServerInfo); err == nil {
			res = out
		}
	}
	reply.Result = res
	return reply, false
}

// serverInfoJSON is json.Marshal(g.serverInfo(sc)), byte for byte,
// written directly when the strings need no escaping (json.Marshal would
// escape <, > and &, which appendString does not): no map, no reflection.
func (g *Gateway) serverInfoJSON(sc *scope) []byte {
	name := "mcpgate"
	if !sc.rt.prefixed {
		name = sc.rt.single
	}
	if !plainJSON(name) || !plainJSON(g.version) {
		b, _ := json.Marshal(g.serverInfo(sc))
		return b
	}
	b := make([]byte, 0, len(`{"name":"","version":""}`)+len(name)+len(g.version))
	b = append(append(append(b, `{"name":"`...), name...), `","version":"`...)
	b = append(append(b, g.version...), `"}`...)
	return b
}

// plainJSON: s is its own JSON string body for json.Marshal (printable
// ASCII, nothing it escapes).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// checkParamHeaders checks the Mcp-Param-* headers of a tools/call against
// its arguments, for the annotations of the tool the caller may see
// (streamable-http.md "Server Validation"). A name that resolves to no
// visible tool is left to the call, which fails it like any unknown tool.
func (g *Gateway) checkParamHeaders(r *http.Request, rt *route, m *jsonrpc.Message) *jsonrpc.Error {
	if m.Method != mcpwire.MethodToolsCall {
		return nil
	}
	name, _ := jsonrpc.GetString(m.Params, "name")
	var candBuf [2]toolRef
	it, found, _, err := g.resolve(g.candidates(candBuf[:0], rt, catalog.Tools, name), catalog.Tools, name, g.lookupIn(r.Context(), catalog.Tools))
	if err != nil || !found || len(it.ParamHeaders) == 0 {
		return nil
	}
	args, _ := jsonrpc.Get(m.Params, "arguments")
	return mcpwire.CheckParamHeaders(r.Header, it.ParamHeaders, args)
}

// discover answers server/discover: the revisions the gateway speaks, the
// route's merged capabilities and instructions, and who it is (S17).
func (g *Gateway) discover(ctx context.Context, sc *scope, m *jsonrpc.Message) *jsonrpc.Message {
	if len(sc.rt.servers) == 0 {
		return jsonrpc.NewErrorResponse(m.ID, noServers(ctx))
	}
	capsObj, instr := g.describe(ctx, sc, true)
	res := map[string]any{
		"supportedVersions": mcpwire.Revisions,
		"capabilities":      capsObj,
		"_meta":             map[string]any{mcpwire.MetaKeyServerInfo: g.serverInfo(sc)},
	}
	if instr != "" {
		res["instructions"] = instr
	}
	b, _ := json.Marshal(res)
	return jsonrpc.NewResult(m.ID, b)
}

// freshness is how long a list or read result may be reused (ttlMs): what
// is left of the catalog's own trust in the lists behind it, never more.
// The view is the caller's, so the scope is always private.
func (g *Gateway) freshness(sc *scope, method string) time.Duration {
	var k catalog.Kind
	switch method {
	case mcpwire.MethodToolsList:
		k = catalog.Tools
	case mcpwire.MethodPromptsList:
		k = catalog.Prompts
	case mcpwire.MethodResourcesList:
		k = catalog.Resources
	case mcpwire.MethodResourceTemplates:
		k = catalog.Templates
	default:
		return 0 // resources/read, server/discover: not cached by the gateway
	}
	ttl := time.Duration(-1)
	for _, s := range sc.rt.servers {
		left := g.cat.Remaining(s, k)
		if ttl < 0 || left < ttl {
			ttl = left
		}
	}
	return max(ttl, 0)
}

// stripStatelessMeta removes the stateless era's per-request _meta keys from
// params bound for an upstream of the handshake era.
func stripStatelessMeta(params json.RawMessage) json.RawMessage {
	meta, ok := jsonrpc.Get(params, mcpwire.FieldMeta)
	if !ok || len(meta) == 0 || meta[0] != '{' {
		return params
	}
	m := []byte(meta)
	for _, k := range statelessScopeKeys {
		if next, err := jsonrpc.Delete(m, k); err == nil {
			m = next
		}
	}
	if out, err := jsonrpc.Set(params, mcpwire.FieldMeta, m); err == nil {
		return out
	}
	return params
}
