package admin

import (
	"net/http"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/gateway"
)

// The admin API's URL space on the gateway's origin: Prefix and, at the
// root, a person's own entries (/me/credentials, /me/connections), which
// are the API's /me paths under a shorter name. The binary mounts these
// routes on its one mux (cmd/mcpgate newMux); the gateway serves none of
// them.

// aliases are the root paths served as the API's own /me paths.
var aliases = []string{"/me/credentials", "/me/credentials/", "/me/connections", "/me/connections/"}

// Resource is the admin API's OAuth resource identifier (RFC 8707) under
// base, the gateway's own base URL: "" (no token matches) without one.
func Resource(base string) string {
	if base == "" {
		return ""
	}
	return base + Prefix
}

// Routes mount h (the API; a stand-in in tests) at Prefix and the
// personal aliases, each behind g's Origin and Host guard. A bearer token
// for the admin API names it as its resource (RFC 8707): the console's
// sign-in asks mcpgate's authorization server for exactly that audience,
// so no MCP route's token is an admin token, nor the other way round. An
// issuer's gateway-wide audience (auth.oidc[].audience) does not count
// here: only a token naming the admin API opens it (S22.4).
func Routes(h http.Handler, g *gateway.Gateway) []gateway.Route {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(callers.WithAdminResource(r.Context(), Resource(g.BaseURL(r))))
		h.ServeHTTP(w, r)
	})
	rs := []gateway.Route{{Pattern: Prefix + "/", Handler: g.Guard(api)}}
	alias := g.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		r.URL.Path = Prefix + r.URL.Path
		r.URL.RawPath = ""
		api.ServeHTTP(w, r)
	}))
	for _, p := range aliases {
		rs = append(rs, gateway.Route{Pattern: p, Handler: alias})
	}
	return rs
}
