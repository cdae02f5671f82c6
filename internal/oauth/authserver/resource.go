package authserver

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// Every token this server issues is bound to exactly one resource (SPEC
// S22.4): an MCP route of the gateway, or its admin API, never the
// issuer. The resource is decided once, at the authorization request, in
// its canonical spelling (oauth.CanonicalResource), and the code, the
// refresh token family and every access token carry that one string. The
// consent a person gives is for a person, a client and that resource; the
// admin API's is asked for every time.

// AdminPath is the admin API's path below the gateway's base URL (the
// binary serves it at admin.Prefix, the same path): its resource is the
// issuer followed by AdminPath.
const AdminPath = "/admin/v1"

// DefaultResourcePath is the route an authorization request that names
// no resource is bound to: the gateway's /mcp, never the issuer, and
// never the admin API (which a client must ask for by name).
const DefaultResourcePath = "/mcp"

// RouteNamer names the gateway's MCP routes for the consent page. It is
// given the path of a resource below the gateway's base URL ("/mcp",
// "/mcp/alpha", "/toolset/x/mcp"; never the admin API's) and answers what
// the route serves, in words a person reads ("the MCP server alpha"), or
// false when the gateway has no MCP route there. It is called from
// request goroutines concurrently.
type RouteNamer interface {
	NameRoute(path string) (string, bool)
}

// AdminChecker says whether a signed-in person has admin rights at the
// gateway (an admin key's login, or a grant with admin: true), so that
// the consent page for the admin API can say plainly that approving gives
// the client administrator rights. It is called from request goroutines
// concurrently.
type AdminChecker interface {
	IsAdmin(ctx context.Context, person oauth.Identity) (bool, error)
}

// target is the resource of an authorization.
type target struct {
	url  string // canonical (oauth.CanonicalResource)
	base string // the issuer, canonical: url is below it
	path string // url below base: "/mcp/alpha", AdminPath
}

func (t target) admin() bool { return t.path == AdminPath }

func errTarget(desc string) *oauthError {
	return &oauthError{Status: http.StatusBadRequest, Code: "invalid_target", Description: desc}
}

// parseTarget decides the resource of an authorization request for
// issuer: raw in canonical form, on the issuer's origin and below its
// path, neither the issuer itself nor one of the authorization server's
// or admin API's own endpoints (the admin API is AdminPath exactly). An
// empty raw is the issuer's DefaultResourcePath. It does no I/O
// (FuzzAuthorize); whether an MCP route is there is the RouteNamer's to
// say.
func parseTarget(raw, issuer string) (target, *oauthError) {
	if raw == "" {
		raw = strings.TrimSuffix(issuer, "/") + DefaultResourcePath
	}
	base, err := oauth.CanonicalResource(issuer)
	if err != nil {
		return target{}, errTarget("this gateway's address cannot name a resource")
	}
	u, err := oauth.CanonicalResource(raw)
	if err != nil {
		return target{}, errTarget("resource must be the URL of one of this gateway's MCP routes or its admin API, " +
			"without a query, fragment, dot segments or encoded slashes")
	}
	path, ok := strings.CutPrefix(u, base)
	if !ok || path != "" && path[0] != '/' {
		return target{}, errTarget("resource must be a URL of this gateway")
	}
	t := target{url: u, base: base, path: path}
	switch {
	case path == "":
		return target{}, errTarget("resource must name one MCP route (such as " + base + DefaultResourcePath + ") or the admin API, not the whole gateway")
	case t.admin():
	case underPath(path, "/admin"), underPath(path, "/oauth"), underPath(path, "/.well-known"):
		return target{}, errTarget("resource must be one of this gateway's MCP routes or its admin API (" + base + AdminPath + ")")
	}
	return t, nil
}

// underPath reports whether path is prefix or below it.
func underPath(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// describe says in words what t is, for the consent page: "the admin API
// of mcpgate at <base>", or an MCP route as the RouteNamer calls it, at
// its URL. false: the gateway has no MCP route at t.
func (s *Server) describe(t target) (string, bool) {
	if t.admin() {
		return "the admin API of mcpgate at " + t.base, true
	}
	if s.namer == nil {
		return "the MCP server at " + t.url, true
	}
	name, ok := s.namer.NameRoute(t.path)
	if !ok {
		return "", false
	}
	return name + " at " + t.url, true
}

// resolveTarget is parseTarget followed by the RouteNamer's word that an
// MCP route is there.
func (s *Server) resolveTarget(raw, issuer string) (target, string, *oauthError) {
	t, oe := parseTarget(raw, issuer)
	if oe != nil {
		return t, "", oe
	}
	words, ok := s.describe(t)
	if !ok {
		return t, "", errTarget("this gateway has no MCP route at " + t.url)
	}
	return t, words, nil
}

// sameTarget checks the resource parameter of a token request against
// the one resource of the grant: absent, or the same resource in any
// spelling.
func sameTarget(raw, bound string) *oauthError {
	if raw == "" {
		return nil
	}
	if u, err := oauth.CanonicalResource(raw); err != nil || u != bound {
		return errTarget("resource differs from the one this grant is for (" + bound + "); a token is for one resource: authorize again for another")
	}
	return nil
}

// personIsAdmin asks the AdminChecker; nil when there is none or it could
// not tell (the page then says what approving means if the person is).
func (s *Server) personIsAdmin(ctx context.Context, person oauth.Identity) *bool {
	if s.admins == nil {
		return nil
	}
	ok, err := s.admins.IsAdmin(ctx, person)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			s.logger.Error("oauth admin check", attrErr, err)
		}
		return nil
	}
	return &ok
}
