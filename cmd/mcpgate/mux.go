package main

import (
	"encoding/json"
	"net/http"

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
