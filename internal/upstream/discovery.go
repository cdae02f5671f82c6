package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	oauthclient "github.com/mcpgate/mcpgate/internal/oauth/client"
)

// Token endpoint discovery for oauth2 client credentials without a
// token_url: the server's protected resource metadata (RFC 9728) names its
// authorization servers; the first one's metadata (RFC 8414, or OpenID
// Connect discovery) names its token endpoint. The canonical resource URI,
// the well-known locations and the HTTP client are internal/oauth/client's,
// which the authorization code flow for upstreams shares: a public
// upstream cannot make the gateway fetch a loopback or private address
// (checked on the address dialled), a loopback or private one may; no
// redirect leaves the origin; every fetch is bounded in time and size.
// The token request to the discovered endpoint has the same address guard
// and follows no redirect (tokenSource.post); a configured token_url is
// trusted as configured.

const (
	// maxDiscoveryDocument bounds each metadata document.
	maxDiscoveryDocument = 1 << 20
	// discoveryFetchTimeout bounds each metadata fetch.
	discoveryFetchTimeout = 10 * time.Second
)

// guardable is hc with the net/http transport behind the package's h1
// transport (same TLS settings), which the address guard can wrap; hc
// itself otherwise.
func guardable(hc *http.Client) *http.Client {
	if t, ok := hc.Transport.(*h1Transport); ok {
		c := *hc
		c.Transport = t.fallback
		return &c
	}
	return hc
}

// canonicalResource is the server url's canonical URI (RFC 8707 2).
func canonicalResource(raw string) (string, error) { return oauthclient.CanonicalResource(raw) }

// endpoint is the token endpoint and the audience of a client assertion
// for it: the configured token_url and that URL, or the endpoint discovered
// once and its authorization server's issuer identifier (a failed discovery
// is tried again by the next mint).
func (s *tokenSource) endpoint(ctx context.Context) (ep, aud string, err error) {
	if s.tokenURL != "" {
		return s.tokenURL, s.tokenURL, nil
	}
	s.mu.Lock()
	ep, aud = s.discovered, s.issuer
	s.mu.Unlock()
	if ep != "" {
		return ep, aud, nil
	}
	ep, aud, err = s.discover(ctx)
	if err != nil {
		return "", "", err
	}
	s.log.Debug("oauth2 token endpoint discovered", "server", s.server, "token_endpoint", redactURL(ep))
	s.mu.Lock()
	s.discovered, s.issuer = ep, aud
	s.mu.Unlock()
	return ep, aud, nil
}

// discover finds the token endpoint of the server's first authorization
// server and that server's issuer identifier. Only https is fetched, unless the server url itself is http on
// a loopback host (tests, local rigs): then http on loopback is too.
func (s *tokenSource) discover(ctx context.Context) (endpoint, issuer string, err error) {
	res, err := url.Parse(s.resource)
	if err != nil {
		return "", "", s.fail(KindInternal, 0, "oauth2 discovery: %v", err)
	}
	if s.discoverHC == nil {
		return "", "", s.fail(KindInternal, 0, "oauth2 discovery: %v", s.discoverErr)
	}
	allowHTTP := res.Scheme == "http" && loopbackHost(res.Hostname())
	prmURLs := oauthclient.ResourceMetadataURLs(res)

	var prm struct {
		AuthorizationServers []string `json:"authorization_servers"`
	}
	from, err := s.fetchFirst(ctx, prmURLs, allowHTTP, &prm)
	if err != nil {
		return "", "", err
	}
	if len(prm.AuthorizationServers) == 0 {
		return "", "", s.fail(KindAuth, 0, "oauth2 discovery: %s names no authorization_servers (%s)", from, s.discoveryHint())
	}
	issuer = prm.AuthorizationServers[0]
	iu, ok := fetchable(issuer, allowHTTP)
	if !ok || iu.RawQuery != "" {
		return "", "", s.fail(KindAuth, 0, "oauth2 discovery: %s: the authorization server is not an https URL without query or fragment", from)
	}

	var md struct {
		Issuer        string `json:"issuer"`
		TokenEndpoint string `json:"token_endpoint"`
	}
	from, err = s.fetchFirst(ctx, oauthclient.AuthServerMetadataURLs(iu), allowHTTP, &md)
	if err != nil {
		return "", "", err
	}
	// RFC 8414 3.3: a document for another issuer is not this one's.
	if md.Issuer != issuer {
		return "", "", s.fail(KindAuth, 0, "oauth2 discovery: %s names issuer %q, not %q", from, clipASCII(sanitizeOAuthText(md.Issuer), 200), redactURL(issuer))
	}
	if _, ok := fetchable(md.TokenEndpoint, allowHTTP); !ok {
		return "", "", s.fail(KindAuth, 0, "oauth2 discovery: %s: token_endpoint missing, or not an https URL", from)
	}
	return md.TokenEndpoint, issuer, nil
}

// fetchFirst fetches the candidates in order into v, moving on only when
// one answers a 4xx status (not there); any other failure (network, 5xx,
// a redirect to another origin, an oversized or malformed document) ends
// the search. It returns the URL v came from.
func (s *tokenSource) fetchFirst(ctx context.Context, candidates []string, allowHTTP bool, v any) (string, error) {
	var missing []string
	for _, u := range candidates {
		found, err := s.fetchJSON(ctx, u, allowHTTP, v)
		if err != nil {
			return "", err
		}
		if found {
			return u, nil
		}
		missing = append(missing, u)
	}
	return "", s.fail(KindAuth, 0, "oauth2 discovery: no metadata at %s (%s)", strings.Join(missing, ", "), s.discoveryHint())
}

// fetchJSON GETs u into v, within discoveryFetchTimeout and
// maxDiscoveryDocument; found is false for a 4xx answer.
func (s *tokenSource) fetchJSON(ctx context.Context, u string, allowHTTP bool, v any) (found bool, err error) {
	if _, ok := fetchable(u, allowHTTP); !ok {
		return false, s.fail(KindAuth, 0, "oauth2 discovery: %s is not https", redactURL(u))
	}
	ctx, cancel := context.WithTimeout(ctx, discoveryFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, s.fail(KindInternal, 0, "oauth2 discovery: invalid URL %s", redactURL(u))
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.discoverHC.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.Is(err, oauthclient.ErrCrossOrigin) && errors.As(err, &ue) {
			to := "elsewhere"
			if t, perr := url.Parse(ue.URL); perr == nil {
				to = originOf(t)
			}
			return false, s.fail(KindAuth, 0, "oauth2 discovery: %s redirects to another origin (%s); not followed", redactURL(u), to)
		}
		if errors.Is(err, oauthclient.ErrBlockedAddress) {
			return false, s.fail(KindAuth, 0, "oauth2 discovery: %s: %v (a public server's metadata must be on public addresses)", redactURL(u), oauthclient.ErrBlockedAddress)
		}
		return false, &Error{Server: s.server, Kind: KindUnreachable,
			Err: fmt.Errorf("oauth2 discovery: %s: %w", redactURL(u), scrubURLError(err))}
	}
	defer resp.Body.Close()
	switch st := resp.StatusCode; {
	case st >= 400 && st < 500:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return false, nil
	case st != http.StatusOK:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		kind := KindInvalidResponse
		if st >= 500 {
			kind = KindUnreachable
		}
		return false, s.fail(kind, st, "oauth2 discovery: %s answered HTTP %d", redactURL(u), st)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscoveryDocument+1))
	if err != nil {
		return false, &Error{Server: s.server, Kind: KindUnreachable,
			Err: fmt.Errorf("oauth2 discovery: %s: read: %w", redactURL(u), err)}
	}
	if len(data) > maxDiscoveryDocument {
		return false, s.fail(KindInvalidResponse, resp.StatusCode, "oauth2 discovery: %s exceeds %d bytes", redactURL(u), maxDiscoveryDocument)
	}
	// A field of an unexpected type is skipped: only a few fields matter.
	var te *json.UnmarshalTypeError
	if err := json.Unmarshal(data, v); err != nil && !errors.As(err, &te) {
		return false, s.fail(KindInvalidResponse, resp.StatusCode, "oauth2 discovery: %s is not a JSON object", redactURL(u))
	}
	return true, nil
}

// discoveryHint is what a failed discovery's message suggests: token_url
// where the auth type has one; enterprise_managed has none (the ID-JAG's
// audience is the issuer that discovery finds), so the server must
// publish its metadata.
func (s *tokenSource) discoveryHint() string {
	if s.auth.Type == config.AuthEnterpriseManaged {
		return "enterprise_managed needs the server's protected resource metadata and its authorization server's metadata; it has no token_url"
	}
	return "set token_url"
}

// fetchable parses u and reports whether discovery may use it: https, or
// http on a loopback host when allowHTTP; no userinfo or fragment.
func fetchable(u string, allowHTTP bool) (*url.URL, bool) {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || p.User != nil || p.Fragment != "" {
		return nil, false
	}
	switch p.Scheme {
	case "https":
		return p, true
	case "http":
		return p, allowHTTP && loopbackHost(p.Hostname())
	}
	return nil, false
}

func loopbackHost(h string) bool { return netaddr.IsLoopbackHost(h) }
