package gateway

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// The gateway as an OAuth 2.1 protected resource (the MCP authorization
// spec, RFC 9728): every route has its own resource identifier and
// metadata document, a request without a valid credential gets a 401 whose
// challenge names that document, and mcpgate's own authorization server
// (which the binary mounts) sits beside it on the same origin.

const (
	wellKnownPRM = "/.well-known/oauth-protected-resource"
	// scopeMCP is the scope mcpgate's own authorization server issues for
	// MCP access.
	scopeMCP = "mcp"
)

// oauthEnabled reports whether callers may present JWTs: an issuer is
// configured or mcpgate's own authorization server is on.
func oauthEnabled(cfg *config.Config) bool {
	return cfg.Auth != nil && (len(cfg.Auth.OIDC) > 0 || cfg.Auth.Login != nil)
}

// ownBase is the gateway's own external base URL: the one source of every
// resource identifier (the audience a token must carry), protected
// resource metadata URL and authorization server issuer the gateway
// names (SPEC S22.4). No request header chooses it:
//
//   - public_url, when set;
//   - else, on a loopback listener, the Host's name (which the
//     DNS-rebinding guard allowed: a loopback name or allowed_hosts) with
//     the port of the listener the request came in on, and for an IP
//     literal the address it came in on, so that "Host:
//     tools.other.example" or "Host: localhost:9000" cannot make another
//     service's token this gateway's; the scheme is https only for a
//     request that came over TLS here (never X-Forwarded-Proto);
//   - else "": a listener beyond loopback without public_url has no own
//     base URL, and config refuses OAuth callers there, so no token is
//     ever checked against one (an empty resource matches no token).
func (g *Gateway) ownBase(r *http.Request) string {
	cfg := g.conf()
	if cfg.PublicURL != "" {
		return strings.TrimRight(cfg.PublicURL, "/")
	}
	if !g.loopback.Load() || !netaddr.HostAllowed(r.Host, cfg.AllowedHosts) {
		return ""
	}
	host, port, _ := netaddr.SplitHostHeader(r.Host)
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(la.String()); err == nil {
			port = strconv.Itoa(int(ap.Port()))
			if _, err := netip.ParseAddr(host); err == nil {
				host = ap.Addr().Unmap().String()
			}
		}
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" && !(scheme == "http" && port == "80") && !(scheme == "https" && port == "443") {
		host += ":" + port
	}
	return scheme + "://" + host
}

// linkBase is the base of links the gateway hands back to the requester
// alone (its connect and confirm pages, a connect link in an error, the
// metadata a passthrough route mirrors): ownBase, else, beyond loopback
// without public_url, the request's own scheme and Host. It is never an
// audience: nothing the gateway verifies is compared with it.
func (g *Gateway) linkBase(r *http.Request) string {
	if b := g.ownBase(r); b != "" {
		return b
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// resourcePath is the path part of an endpoint's resource identifier:
// the request path without a legacy-SSE suffix or trailing slash, so that
// /mcp, /mcp/calc, /calc/mcp and /toolset/x/mcp are distinct resources
// and /mcp/sse shares /mcp's.
//
// Clients (the TypeScript SDK, so mcp-remote and the Inspector) refuse a
// resource that is not a prefix of the URL they were given, so every
// endpoint's resource is one (SPEC S22.4): the root legacy endpoints
// (GET /sse, POST /sse/messages and /messages) are the resource /sse, a
// resource of its own beside /mcp, since the only prefix the two share
// is the whole gateway, the issuer, which no token names. A token still
// names one resource and works on its endpoints only. The root path /
// serves /mcp's route with /mcp's resource: a client that checks the
// prefix connects with OAuth at /mcp (docs/security.md).
func resourcePath(path string) string {
	base, kind := splitEndpoint(path)
	switch {
	case base == "" && kind != epStreamable:
		return "/sse"
	case base == "":
		return "/mcp"
	}
	return base
}

// resourceOf is the resource identifier (RFC 8707) of the route r is for:
// the audience a token must carry there. "" when the gateway has no own
// base URL (ownBase), which no token matches.
func (g *Gateway) resourceOf(r *http.Request) string {
	base := g.ownBase(r)
	if base == "" {
		return ""
	}
	return base + resourcePath(r.URL.Path)
}

// NameRoute says in words, for the consent page of mcpgate's own
// authorization server, what the MCP route at path (below the base URL)
// serves: "the MCP server alpha", "the MCP servers alpha, beta", "the
// toolset ts", "every MCP server of mcpgate". false when path is not the
// resource of an MCP route this gateway has: the authorization server
// then issues no token for it. The admin API is not an MCP route.
func (g *Gateway) NameRoute(path string) (string, bool) {
	if path == "" || resourcePath(path) != path || g.isAdminPath(path+"/") {
		return "", false // a legacy SSE suffix, a trailing slash, the admin API
	}
	if name, ok := toolsetOf(path); ok {
		if _, ok := g.conf().Toolsets[name]; !ok {
			return "", false
		}
		return "the toolset " + name + " of mcpgate", true
	}
	rt, _, ok := g.resolveRoute(path, "")
	switch {
	case !ok:
		return "", false
	case path == "/sse":
		return "every MCP server of mcpgate (legacy HTTP+SSE)", true
	case rt.proxy:
		return "the tools of every MCP server of mcpgate", true
	case rt.named == nil:
		return "every MCP server of mcpgate", true
	case len(rt.servers) == 1:
		return "the MCP server " + rt.servers[0], true
	}
	return "the MCP servers " + strings.Join(rt.servers, ", "), true
}

// prmURL is the protected resource metadata URL of the route r is for:
// the well-known URI with the route's path inserted (RFC 9728 section 3.1).
// With OAuth callers it is under ownBase (config guarantees one); a
// passthrough route's challenge beyond loopback without public_url names
// the document under linkBase, which mirrors the upstream's.
func (g *Gateway) prmURL(r *http.Request) string {
	return g.linkBase(r) + wellKnownPRM + resourcePath(r.URL.Path)
}

// scopesOf are the scopes the gateway asks for: mcpgate's own when its
// authorization server is on, and every issuer's required scopes.
func scopesOf(cfg *config.Config) []string {
	var out []string
	if cfg.Auth == nil {
		return nil
	}
	if cfg.Auth.Login != nil {
		out = append(out, scopeMCP)
	}
	for _, is := range cfg.Auth.OIDC {
		for _, s := range is.RequiredScopes {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// serveProtectedResource answers the metadata of the endpoint named by the
// path after the well-known prefix (the root document is /mcp's; /sse's
// names the resource /sse), or returns its refusal.
func (g *Gateway) serveProtectedResource(w http.ResponseWriter, r *http.Request) error {
	cfg := g.conf()
	path := strings.TrimPrefix(r.URL.Path, wellKnownPRM)
	if path == "" || path == "/" {
		path = "/mcp"
	}
	mirrored := !oauthEnabled(cfg) && g.current().passthrough
	if !oauthEnabled(cfg) && !mirrored {
		return notFound("")
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return jsonRefusal(http.StatusMethodNotAllowed, map[string]string{"error": "Method Not Allowed"}).withHeader("Allow", "GET, HEAD")
	}
	if mirrored {
		// A single-server passthrough route mirrors its upstream's
		// metadata (S9.2); the gateway has none of its own for others.
		if !g.passthroughMetadata(w, r, path) {
			return notFound("")
		}
		return nil
	}
	_, _, ok := g.routeFor(path, "")
	if name, isToolset := toolsetOf(resourcePath(path)); isToolset {
		_, ok = cfg.Toolsets[name]
	}
	if !ok {
		return notFound("no MCP route at " + path)
	}
	base := g.ownBase(r)
	if base == "" {
		// Beyond loopback without public_url (a Config that skipped
		// validation): no resource to name.
		return notFound("public_url is not set")
	}
	md := oauth.ProtectedResourceMetadata{
		Resource:               base + resourcePath(path),
		ScopesSupported:        scopesOf(cfg),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "mcpgate",
	}
	if cfg.Auth.Login != nil {
		md.AuthorizationServers = append(md.AuthorizationServers, base)
	}
	for _, is := range cfg.Auth.OIDC {
		md.AuthorizationServers = append(md.AuthorizationServers, is.Issuer)
	}
	w.Header().Set("Cache-Control", "max-age=300")
	// Clients in a browser read it cross-origin (RFC 9728 section 3).
	w.Header().Set("Access-Control-Allow-Origin", "*")
	writeJSON(w, http.StatusOK, md)
	return nil
}

// challenge adds the WWW-Authenticate header of an OAuth-enabled gateway
// to an authentication failure: the route's metadata URL, the scopes it
// takes, and why a presented token was refused (RFC 6750 section 3, RFC
// 9728 section 5.1).
func (g *Gateway) challenge(f *callers.Failure, r *http.Request) {
	cfg := g.conf()
	if !oauthEnabled(cfg) || (f.Status != http.StatusUnauthorized && f.OAuth == nil) {
		return
	}
	c := oauth.Challenge{ResourceMetadata: g.prmURL(r), Scope: strings.Join(scopesOf(cfg), " ")}
	if e := f.OAuth; e != nil {
		c.Error, c.ErrorDescription = e.Code, e.Description
		if len(e.Scopes) > 0 {
			c.Scope = strings.Join(e.Scopes, " ")
		}
	}
	if f.Header == nil {
		f.Header = http.Header{}
	}
	f.Header.Set("WWW-Authenticate", c.String())
}

// tokenInQuery reports whether r carries an OAuth access token in its
// query string, which the MCP authorization spec forbids (it would end up
// in logs and browser history).
func tokenInQuery(r *http.Request) bool {
	return r.URL.RawQuery != "" && r.URL.Query().Has("access_token")
}
