package gateway

import (
	"context"
	"net/http"
	"path"
	"strings"

	"github.com/mcpgate/mcpgate/internal/connect"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// The gateway's HTTP surface as handlers for one http.ServeMux. The
// binary builds that mux (cmd/mcpgate newMux): the gateway's Routes beside
// the admin API, the console and the authorization server, all inside the
// gateway's Middleware. The gateway serves no path of theirs.
//
//	Middleware: panic recovery -> the fleet's peer hops -> one status
//	            recorder (request metric, access log, HTTP span)
//	  mux:      /healthz /readyz /enabled [/metrics]    no gate
//	            everything else                         Guard (Origin, Host)
//	            "/" the MCP routes: CORS preflight -> caller -> version
//	            header -> route -> caller tokens -> debug -> policy,
//	            passthrough, exchange -> transport

// Route is one pattern of the mux (Go 1.22 ServeMux syntax, no method:
// each handler answers its own 405) and its handler, gates included.
type Route struct {
	Pattern string
	Handler http.Handler
}

// Routes are the gateway's own patterns: the probes, ungated; then, behind
// the Origin and Host guard, the protected resource metadata, the client
// metadata document, the connect pages and, at "/", the MCP routes.
// Patterns are matched most specific first, so their order does not
// matter, except that the first of two equal patterns wins (NewMux).
func (g *Gateway) Routes() []Route {
	rs := []Route{
		{"/healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		})},
		{"/readyz", http.HandlerFunc(g.serveReady)},
		{"/enabled", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]bool{"enabled": true})
		})},
	}
	if g.metrics != nil && g.metricsOnMain {
		// Else /metrics is an MCP path like any other (a 404).
		rs = append(rs, Route{"/metrics", g.MetricsHandler()})
	}
	prm := g.Guard(errorHandler{g, g.serveProtectedResource})
	rs = append(rs, Route{wellKnownPRM, prm}, Route{wellKnownPRM + "/", prm})
	// public_url and client_metadata_url need a restart: the path is
	// fixed for the gateway's life.
	if _, p, ok := g.conf().ClientMetadataDocument(); ok && isPlainPattern(p) {
		rs = append(rs, Route{p, g.Guard(g.connect)})
	}
	rs = append(rs, Route{connect.PagePrefix, g.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !connect.IsPagePath(r.URL.Path) {
			// The prefix itself is no connect page (the binary mounts
			// the authorization server there).
			g.writeError(w, r, notFound(""))
			return
		}
		g.connect.ServeHTTP(w, r)
	}))})
	return append(rs, Route{"/", g.MCPHandler()})
}

// isPlainPattern reports whether a configured path can be a ServeMux
// pattern as it is: no wildcard braces and no space (which would read as
// a method).
func isPlainPattern(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.ContainsAny(p, "{} \t")
}

// NewMux mounts routes on one ServeMux; the first of two equal patterns
// wins. A subtree pattern ("/x/") would make the mux redirect its root
// ("/x") there; a root no route names is served by the "/" route instead,
// as a path outside every subtree always was. So is a path that is not
// clean ("//mcp", "/a/../b"), which a ServeMux would redirect to its clean
// form: the gateway never answered with a redirect, and a path is matched
// as the client sent it (the "/" route answers it 404 after its gates).
func NewMux(routes []Route) http.Handler { return newMux(routes, true) }

// newMux is NewMux; fast false leaves every clean path to the mux (what
// TestMuxFastPathAsServeMux compares the fast path with).
func newMux(routes []Route, fast bool) http.Handler {
	mux := http.NewServeMux()
	seen := map[string]bool{}
	var root http.Handler
	for _, rt := range routes {
		if seen[rt.Pattern] {
			continue
		}
		seen[rt.Pattern] = true
		mux.Handle(rt.Pattern, rt.Handler)
		if rt.Pattern == "/" {
			root = rt.Handler
		}
	}
	if root == nil {
		return mux
	}
	for _, rt := range routes {
		if p := strings.TrimSuffix(rt.Pattern, "/"); p != rt.Pattern && p != "" && !seen[p] {
			seen[p] = true
			mux.Handle(p, root)
		}
	}
	var firsts map[string]bool
	if fast {
		firsts = firstSegments(routes)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		if p == "" || p[0] != '/' || !isCleanPath(p) {
			root.ServeHTTP(w, r)
			return
		}
		if firsts != nil && r.Method != http.MethodConnect && r.RequestURI != "*" && rootOnly(firsts, p) {
			// What the mux would do, without its two walks of the tree
			// (and their three allocations) on every MCP request.
			r.Pattern = "/"
			root.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// firstSegments are the first path segments of routes' patterns but "/":
// a clean path whose first segment is none of them, and has no escape
// (the mux matches segments unescaped), can match no pattern but "/",
// nor be redirected to one with a trailing slash. nil when a pattern
// makes that false or hard to see: a host, a wildcard first segment, or
// "/" with a method.
func firstSegments(routes []Route) map[string]bool {
	firsts := map[string]bool{}
	for _, rt := range routes {
		p := rt.Pattern
		if p == "/" {
			continue
		}
		if i := strings.IndexAny(p, " \t"); i >= 0 {
			p = strings.TrimLeft(p[i:], " \t") // after a method
		}
		if !strings.HasPrefix(p, "/") || p == "/" {
			return nil
		}
		first, _, _ := strings.Cut(p[1:], "/")
		if first == "" || strings.ContainsAny(first, "{}%") {
			return nil
		}
		firsts[first] = true
	}
	return firsts
}

// rootOnly reports whether the clean escaped path p can match only the
// pattern "/" (firstSegments).
func rootOnly(firsts map[string]bool, p string) bool {
	first, _, _ := strings.Cut(p[1:], "/")
	return first != "" && !strings.Contains(p, "%") && !firsts[first]
}

// isCleanPath reports whether the escaped path p is its own path.Clean
// form, a trailing slash allowed: the paths a ServeMux matches without
// redirecting (it cleans the escaped path, so an escaped slash inside a
// segment, as in a person id, is no "//").
func isCleanPath(p string) bool {
	c := path.Clean(p)
	return c == p || (strings.HasSuffix(p, "/") && c+"/" == p)
}

// ServeHTTP serves the gateway alone: its Routes on one mux, inside its
// Middleware, without the admin API, the console or an authorization
// server (tests and embedders serve it so). The binary serves the same
// Routes beside those.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.alone.once.Do(func() { g.alone.h = g.Middleware(NewMux(g.Routes())) })
	g.alone.h.ServeHTTP(w, r)
}

// Middleware wraps the whole mux: what every request passes whatever its
// path, in this order. A panic is answered 500 (the server keeps
// running); a request another replica forwarded is served as the request
// it carries, counted once (peers.go); one status recorder feeds the
// request metric, the access log and the HTTP span.
func (g *Gateway) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				g.log.Error("panic in handler", "panic", p, "path", r.URL.Path)
				writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "MCP request failed", "details": "internal error"})
			}
		}()
		if g.isPeerRequest(r) {
			// Before the metrics: a forwarded request is counted once, as
			// the request it carries.
			g.servePeer(w, r)
			return
		}
		// One status recorder serves the metrics and the access log.
		logged := g.access != nil && logsAccess(r.URL.Path)
		// A GET over HTTP/1.1, or a subscriptions/listen POST, may be a
		// stream held off net/http (held.go): the request ends when the
		// stream does.
		holdable := r.ProtoMajor == 1 && r.ProtoMinor == 1 && (r.Method == http.MethodGet ||
			r.Method == http.MethodPost && r.Header.Get(mcpwire.HeaderMethod) == mcpwire.MethodSubscriptionsListen)
		if g.metrics != nil || logged || g.tracer != nil || holdable {
			// The access line holds the status recorder: one
			// allocation for both.
			var a *accessLine
			var sw *statusWriter
			if logged {
				a = g.newAccessLine(w, holdable)
				sw = &a.statusWriter
			} else {
				sw = &statusWriter{ResponseWriter: w, holdable: holdable}
			}
			w = sw
			var span func()
			if g.tracer != nil && logsAccess(r.URL.Path) { // probes and scrapes: no trace
				r, span = g.startHTTPSpan(sw, r)
			}
			if logged {
				a.begin(r)
				w, r = a, a.r
			}
			defer func() {
				if h := sw.held; h != nil {
					h.afterEnd(&requestEnd{g: g, sw: sw, a: a, method: r.Method, path: r.URL.Path, span: span})
					return
				}
				g.endRequest(sw, a, r.Method, r.URL.Path, span)
			}()
		}
		next.ServeHTTP(w, r)
	})
}

// endRequest is the Middleware's end of a request: the access log line,
// the request metric, the HTTP span (a and span may be nil).
func (g *Gateway) endRequest(sw *statusWriter, a *accessLine, method, path string, span func()) {
	if a != nil || g.metrics != nil {
		route := g.routeKind(path) // once, for both
		if a != nil {
			a.finish(route)
		}
		if g.metrics != nil {
			g.metrics.ObserveRequest(route, method, sw.status)
		}
	}
	if span != nil {
		span()
	}
}

// requestEnd is endRequest deferred to the end of a held stream. It
// keeps the request's method and path, not the request.
type requestEnd struct {
	g            *Gateway
	sw           *statusWriter
	a            *accessLine
	method, path string
	span         func()
}

func (e *requestEnd) run() { e.g.endRequest(e.sw, e.a, e.method, e.path, e.span) }

// Guard runs S2.1 before next: the Origin allow-list and, on loopback,
// the Host allow-list against DNS rebinding. Every route but the probes
// is behind it, the admin API's and the console's too.
func (g *Gateway) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.checkOriginHost(r); err != nil {
			g.writeError(w, r, rpcRefusal(http.StatusForbidden, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// BaseURL is the gateway's own external base URL for r (ownBase): what
// the binary's other resources on this origin (the admin API) and its
// authorization server's issuer are named after. "" when it has none.
func (g *Gateway) BaseURL(r *http.Request) string { return g.ownBase(r) }

// MCPHandler serves the MCP routes (/mcp, /mcp/<servers>, /<server>/mcp,
// /toolset/<name>/mcp, the legacy /sse and /messages) behind the guard.
func (g *Gateway) MCPHandler() http.Handler {
	return g.Guard(http.HandlerFunc(g.serveMCP))
}

// serveMCP runs the MCP routes' gates in order, then the transport. Each
// gate returns its refusal, which writeError answers.
func (g *Gateway) serveMCP(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); origin != "" && r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		// A CORS preflight of an allowed origin (the guard passed):
		// browsers send it without credentials and it does nothing, so it
		// is answered before authentication, else no browser client of a
		// gateway with keys could ever send its real request.
		setCORS(w.Header(), origin, r.Header.Values("Access-Control-Request-Headers"))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	r, err := g.authenticate(r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		// An allowed browser origin (the Inspector, a web client) gets CORS
		// headers, so the browser lets it read replies and session ids.
		setCORS(w.Header(), origin, r.Header.Values("Access-Control-Request-Headers"))
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	// A POST's body may be a 2026-07-28 request, whose unsupported
	// version is answered -32022 with the supported list (servePost
	// decides); other requests are checked here.
	if r.Method != http.MethodPost {
		if err := versionHeaderKnown(r); err != nil {
			g.writeError(w, r, err)
			return
		}
	}
	rt, err := g.routeOf(r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	if st := g.current(); st.passthrough || st.userKeys || st.exchange {
		// The route the path names decides where a caller's Authorization
		// may go (S9.2): to the server of a single-server route only.
		ts := g.callerTokens(r, singleServer(&rt))
		r = r.WithContext(context.WithValue(upstream.WithCallerTokens(r.Context(), ts.get), callerTokenSetKey{}, ts))
	}
	if g.wantsDebug(r) {
		var done func()
		w, r, done = g.startDebug(w, r, rt)
		defer done()
	}
	_, kind := splitEndpoint(r.URL.Path)
	if kind != epSSEMessages {
		// A session's requests are narrowed with the session's route, once
		// the session is known; everything else here.
		if rt, err = g.narrowFor(r, rt); err != nil {
			g.writeError(w, r, err)
			return
		}
		// Pass-through servers: challenge, probe, or leave out (S9.2, S10).
		if rt, err = g.passthroughGate(r, rt); err != nil {
			g.writeError(w, r, err)
			return
		}
		if err := g.exchangeGate(r, rt); err != nil {
			g.writeError(w, r, err)
			return
		}
	}
	switch kind {
	case epSSE:
		g.serveLegacySSE(w, r, rt)
	case epSSEMessages:
		g.serveLegacyMessage(w, r)
	default:
		g.serveStreamable(w, r, rt)
	}
}

// routeOf resolves the route r's path (and X-Mcp-Servers header) names.
func (g *Gateway) routeOf(r *http.Request) (route, error) {
	rt, unknown, ok := g.routeFor(r.URL.Path, r.Header.Get("X-Mcp-Servers"))
	switch {
	case ok:
		return rt, nil
	case len(unknown) > 0:
		return rt, rpcRefusal(http.StatusNotFound, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Unknown MCP server %q", unknown[0]))
	}
	return rt, &httpError{status: http.StatusNotFound, text: "404 page not found"} // http.NotFound's
}

// serveStreamable is the streamable HTTP transport's method switch.
func (g *Gateway) serveStreamable(w http.ResponseWriter, r *http.Request, rt route) {
	switch r.Method {
	case http.MethodPost:
		g.servePost(w, r, rt)
	case http.MethodGet, http.MethodDelete:
		if r.Header.Get(mcpwire.HeaderSessionID) == "" && mcpwire.IsStatelessRevision(r.Header.Get(mcpwire.HeaderProtocolVersion)) {
			// The stateless era has no GET stream and no session to
			// end (transports: a server of only that era answers 405).
			g.writeError(w, r, rpcRefusal(http.StatusMethodNotAllowed, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
				"Method not allowed: MCP %s has no %s; use POST (subscriptions/listen for notifications)", r.Header.Get(mcpwire.HeaderProtocolVersion), r.Method)).
				withHeader("Allow", "POST"))
			return
		}
		if r.Method == http.MethodGet {
			g.serveGet(w, r)
		} else {
			g.serveDelete(w, r)
		}
	case http.MethodOptions:
		w.Header().Set("Allow", "GET, POST, DELETE, OPTIONS")
		w.WriteHeader(http.StatusNoContent)
	default:
		g.writeError(w, r, methodNotAllowed("GET, POST, DELETE"))
	}
}
