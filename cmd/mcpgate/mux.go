package main

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/mcpgate/mcpgate/internal/admin"
	"github.com/mcpgate/mcpgate/internal/console"
	"github.com/mcpgate/mcpgate/internal/gateway"
)

// mounts are what the binary serves beside the gateway's own routes.
type mounts struct {
	admin   http.Handler // the admin API
	console http.Handler // the web console; nil: none
	// authServer is mcpgate's OAuth authorization server; nil: its paths
	// answer 404.
	authServer http.Handler
	// publicURL is the config's public_url: without one the authorization
	// server is named after the gateway's own base URL (needs a restart).
	publicURL string
}

// newMux is the binary's one router: one http.ServeMux with the
// gateway's routes (probes, protected resource metadata, client metadata,
// connect pages, the MCP routes at "/"), the admin API and its /me
// aliases, the console and the authorization server, inside the gateway's
// Middleware (panic recovery, the fleet's peer hops, metrics, access log,
// spans). Every route but the probes is behind the gateway's Origin and
// Host guard.
func newMux(g *gateway.Gateway, m mounts) http.Handler {
	return g.Middleware(gateway.NewMux(routes(g, m)))
}

// routes are newMux's patterns and handlers, the gateway's first (the
// first of two equal patterns wins).
func routes(g *gateway.Gateway, m mounts) []gateway.Route {
	rs := g.Routes()
	rs = append(rs, admin.Routes(m.admin, g)...)
	if m.console != nil {
		for i, rt := range rs {
			if rt.Pattern == "/" {
				rs[i].Handler = browserToConsole(rt.Handler)
			}
		}
		ui := g.Guard(m.console)
		rs = append(rs, gateway.Route{Pattern: console.Prefix, Handler: ui}, gateway.Route{Pattern: console.Prefix + "/", Handler: ui})
	}
	as := g.Guard(authServerHandler(g, m))
	for _, p := range []string{
		"/oauth/",
		// The connect pages' prefix itself is the authorization
		// server's, as everything under /oauth/ but the pages.
		"/oauth/connect", "/oauth/connect/{$}",
		// RFC 8414 and OIDC discovery, with a path suffix for an issuer
		// with a path prefix.
		"/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server/",
		"/.well-known/openid-configuration", "/.well-known/openid-configuration/",
	} {
		rs = append(rs, gateway.Route{Pattern: p, Handler: as})
	}
	return rs
}

// browserToConsole sends a person's browser that opened the gateway's
// root to the console, and hands every other request on "/" to next
// unchanged. A browser's navigation is a GET of "/" that accepts HTML and
// carries none of MCP's headers; an MCP client's GET asks for an event
// stream (or carries a session or protocol version) and its POSTs are
// never redirected, so the MCP route at "/" answers exactly as before.
func browserToConsole(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isBrowserNavigation(r) {
			// Relative, so that a proxy serving the gateway under a path
			// keeps it (/x/ -> /x/ui/).
			w.Header().Set("Location", strings.TrimPrefix(console.Prefix, "/")+"/")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusFound)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isBrowserNavigation(r *http.Request) bool {
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) || r.URL.Path != "/" {
		return false
	}
	for _, h := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	accept := strings.Join(r.Header.Values("Accept"), ",")
	return strings.Contains(accept, "text/html") && !strings.Contains(accept, "text/event-stream")
}

// authServerHandler is m's authorization server. Without public_url it
// names its issuer after the gateway's own base URL (its Options.Issuer),
// so a request the gateway has none for is refused here.
func authServerHandler(g *gateway.Gateway, m mounts) http.Handler {
	if m.authServer == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			answerJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found"})
		})
	}
	if m.publicURL != "" {
		return m.authServer
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.BaseURL(r) == "" {
			answerJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found", "details": "public_url is not set"})
			return
		}
		m.authServer.ServeHTTP(w, r)
	})
}

// answerJSON answers v as JSON, as the gateway does.
func answerJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
