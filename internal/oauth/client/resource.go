package client

import (
	"errors"
	"net/url"
	"strings"
)

// Well-known metadata paths.
const (
	WellKnownProtectedResource = "/.well-known/oauth-protected-resource"   // RFC 9728 3
	WellKnownAuthServer        = "/.well-known/oauth-authorization-server" // RFC 8414 3
	WellKnownOpenID            = "/.well-known/openid-configuration"       // OpenID Connect Discovery 4
)

// CanonicalResource is the canonical URI of an MCP server (the MCP
// authorization spec, RFC 8707 2): the url with scheme and host in lower
// case, without userinfo, query or fragment, and without a trailing slash
// unless the slash is the whole path. The query goes too: RFC 8707 says a
// resource SHOULD NOT have one, and a server url's query may hold a
// credential that must not reach the authorization server.
func CanonicalResource(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https") {
		// The url may carry credentials: never echoed.
		return "", errors.New("the server url is not an absolute http or https URL")
	}
	path := u.EscapedPath()
	if trimmed := strings.TrimRight(path, "/"); trimmed != "" {
		path = trimmed
	} else if path != "" {
		path = "/"
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + path, nil
}

// ResourceMetadataURLs are where the protected resource metadata of the
// server at u may be, in the MCP spec's order: the well-known path
// inserted before the server's path, then at the root.
func ResourceMetadataURLs(u *url.URL) []string {
	origin := u.Scheme + "://" + u.Host
	var out []string
	if p := strings.TrimSuffix(u.EscapedPath(), "/"); p != "" {
		out = append(out, origin+WellKnownProtectedResource+p)
	}
	return append(out, origin+WellKnownProtectedResource)
}

// AuthServerMetadataURLs are where an issuer's metadata may be: RFC 8414
// and OpenID Connect with the well-known path inserted before the
// issuer's path, then OpenID Connect appended to it (the MCP spec's
// order), then RFC 8414 appended, which some servers use.
func AuthServerMetadataURLs(issuer *url.URL) []string {
	origin := issuer.Scheme + "://" + issuer.Host
	p := strings.TrimSuffix(issuer.EscapedPath(), "/")
	if p == "" {
		return []string{origin + WellKnownAuthServer, origin + WellKnownOpenID}
	}
	return []string{origin + WellKnownAuthServer + p, origin + WellKnownOpenID + p, origin + p + WellKnownOpenID, origin + p + WellKnownAuthServer}
}
