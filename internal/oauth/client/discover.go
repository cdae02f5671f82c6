package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// Config is one upstream's OAuth client configuration.
type Config struct {
	// ServerURL is the upstream MCP endpoint.
	ServerURL string
	// ClientID and ClientSecret are a pre-registered client, optional;
	// the secret only for a confidential one.
	ClientID, ClientSecret string
	// AuthorizationServer, when set, is the issuer identifier of the only
	// authorization server to use, whatever the upstream's metadata
	// names: a pre-registered client (and its secret) belongs to one
	// authorization server, which the operator names, not the upstream.
	// Its metadata's issuer must be exactly this.
	AuthorizationServer string
	// ClientMetadataURL is mcpgate's own client ID metadata document URL
	// (https, with a path), optional.
	ClientMetadataURL string
	// ClientName is what a dynamic registration calls the client; ""
	// means "mcpgate".
	ClientName string
	// RedirectURI is <public_url>/oauth/callback.
	RedirectURI string
	// Scopes are configured scopes, optional: added to those the
	// discovery selects.
	Scopes []string
	// HTTPClient is cloned for every request this package makes (nil: a
	// transport of its own). Its *http.Transport gets the guarded
	// dialer; its redirects are replaced (same origin for metadata, none
	// for requests carrying credentials); its Timeout is capped at
	// FetchTimeout.
	HTTPClient *http.Client
	// AllowPrivate lets the metadata, registration and token requests of
	// an upstream with a DNS name reach loopback and private addresses:
	// the operator's statement that the name is internal. An upstream
	// whose URL is localhost or a non-public IP literal has that class
	// already; a public one is confined to public addresses without it.
	AllowPrivate bool
}

// Plan is the outcome of discovery: what an authorization for one
// upstream needs. Its methods are safe for concurrent use.
type Plan struct {
	// Resource is the RFC 8707 resource: the protected resource metadata's
	// resource when it covers the server URL, else the server URL's
	// canonical URI.
	Resource string
	// ResourceMetadata is the upstream's RFC 9728 document; nil for the
	// 2025-03-26 fallback (Legacy).
	ResourceMetadata *oauth.ProtectedResourceMetadata
	// AuthServer is the chosen authorization server's metadata.
	AuthServer oauth.AuthServerMetadata
	// Scopes are the scopes to request: the 401 challenge's scope, else
	// the resource metadata's scopes_supported, else none; offline_access
	// added to a selection when the authorization server lists it (and
	// dropped when it lists scopes without it); with the configured ones
	// added.
	Scopes []string
	// Legacy: the upstream has no protected resource metadata and its
	// origin is the authorization server (the 2025-03-26 spec);
	// Synthesized: nor any authorization server metadata, so the default
	// endpoints /authorize, /token and /register are used.
	Legacy, Synthesized bool

	cfg Config
	f   *fetcher
}

// String summarises the plan; the config (and its client secret) stays
// out, as it does of GoString and LogValue.
func (p Plan) String() string {
	return fmt.Sprintf("plan for %s: authorization server %s, scopes %q, legacy %t", p.Resource, redactURL(p.AuthServer.Issuer), p.Scopes, p.Legacy)
}

// GoString keeps %#v from printing the config.
func (p Plan) GoString() string { return p.String() }

// LogValue keeps slog from printing the config.
func (p Plan) LogValue() slog.Value {
	return slog.GroupValue(slog.String("resource", p.Resource), slog.String("issuer", redactURL(p.AuthServer.Issuer)),
		slog.String("scope", strings.Join(p.Scopes, " ")), slog.Bool("legacy", p.Legacy))
}

// Discovery errors.
var (
	// ErrIssuerMismatch: metadata for another issuer, or an RFC 9207
	// authorization response iss that is not the authorization server's.
	ErrIssuerMismatch = errors.New("issuer mismatch")
	// ErrNoAuthServer: no usable authorization server.
	ErrNoAuthServer = errors.New("no usable authorization server")
	// ErrResourceMismatch: the protected resource metadata is for
	// another resource.
	ErrResourceMismatch = errors.New("protected resource metadata names another resource")
)

// Discover follows the MCP spec from an upstream's 401 (challenge may be
// nil, to discover without one): the resource metadata URL from the
// WWW-Authenticate Bearer challenge, else the well-known URIs (path
// inserted, then root); then the first authorization server whose
// metadata is found (RFC 8414 path inserted, OpenID Connect path
// inserted, OpenID Connect appended). Without any resource metadata, the
// 2025-03-26 rules: the server's origin is the authorization server, its
// RFC 8414 metadata if it has some, else the default endpoints. With
// Config.AuthorizationServer, that authorization server is the one used,
// whatever the resource metadata names (or without any).
func Discover(ctx context.Context, cfg Config, challenge *http.Response) (*Plan, error) {
	su, err := url.Parse(cfg.ServerURL)
	if err != nil || su.Host == "" || (su.Scheme != "https" && su.Scheme != "http") {
		return nil, errors.New("oauth discovery: the server url is not an absolute http or https URL")
	}
	serverResource, err := CanonicalResource(cfg.ServerURL)
	if err != nil {
		return nil, fmt.Errorf("oauth discovery: %w", err)
	}
	f, err := newFetcher(su, cfg.HTTPClient, cfg.AllowPrivate)
	if err != nil {
		return nil, err
	}
	if _, err := f.checkURL(serverResource); err != nil {
		return nil, fmt.Errorf("oauth discovery: the server url: %w", err)
	}
	p := &Plan{cfg: cfg, f: f}
	var bc BearerChallenge
	if challenge != nil {
		bc = ParseBearerChallenge(challenge.Header.Values("WWW-Authenticate"))
	}

	prm, from, err := p.fetchResourceMetadata(ctx, su, bc.ResourceMetadata)
	if err != nil {
		return nil, err
	}
	if pin := cfg.AuthorizationServer; pin != "" {
		// The upstream's metadata still says what the resource and its
		// scopes are; it does not choose the authorization server.
		p.Resource = serverResource
		if prm != nil {
			p.ResourceMetadata = prm
			if p.Resource, err = resourceFor(prm.Resource, serverResource); err != nil {
				return nil, fmt.Errorf("oauth discovery: %s: %w", from, err)
			}
		}
		if err := p.chooseAuthServer(ctx, "the configured authorization_server", []string{pin}); err != nil {
			return nil, err
		}
	} else if prm == nil {
		if err := p.legacy(ctx, su, serverResource); err != nil {
			return nil, err
		}
	} else {
		p.ResourceMetadata = prm
		if p.Resource, err = resourceFor(prm.Resource, serverResource); err != nil {
			return nil, fmt.Errorf("oauth discovery: %s: %w", from, err)
		}
		if err := p.chooseAuthServer(ctx, from, prm.AuthorizationServers); err != nil {
			return nil, err
		}
	}

	switch {
	case bc.Scope != "":
		p.Scopes = strings.Fields(bc.Scope)
	case prm != nil:
		p.Scopes = slices.Clone(prm.ScopesSupported)
	}
	p.Scopes = unionScopes(offlineAccess(p.Scopes, p.AuthServer.ScopesSupported), cfg.Scopes)
	return p, nil
}

// ScopeOfflineAccess is the OpenID Connect scope that asks for a refresh
// token.
const ScopeOfflineAccess = "offline_access"

// offlineAccess applies the MCP spec's refresh token guidance (draft,
// SEP-2207) to the discovered scopes: mcpgate wants refresh tokens (it
// refreshes each person's token), so offline_access is added when the
// authorization server lists it in scopes_supported, and dropped when the
// server lists scopes_supported without it (a protected resource should
// not ask for it, and a client must not request what the authorization
// server does not offer). Added only to a non-empty selection: alone, it
// would replace the authorization server's default scope. Configured
// scopes are the operator's and are not touched.
func offlineAccess(scopes, asSupported []string) []string {
	if len(asSupported) == 0 {
		return scopes
	}
	if !slices.Contains(asSupported, ScopeOfflineAccess) {
		return slices.DeleteFunc(scopes, func(s string) bool { return s == ScopeOfflineAccess })
	}
	if len(scopes) == 0 || slices.Contains(scopes, ScopeOfflineAccess) {
		return scopes
	}
	return append(scopes, ScopeOfflineAccess)
}

// fetchResourceMetadata fetches the PRM from the challenge's URL, else
// from the well-known URIs. A nil document without error: none exists.
func (p *Plan) fetchResourceMetadata(ctx context.Context, su *url.URL, fromChallenge string) (*oauth.ProtectedResourceMetadata, string, error) {
	candidates := ResourceMetadataURLs(su)
	if fromChallenge != "" {
		candidates = []string{fromChallenge}
	}
	for _, u := range candidates {
		var prm oauth.ProtectedResourceMetadata
		found, err := p.f.getJSON(ctx, u, &prm)
		if err != nil {
			return nil, "", fmt.Errorf("oauth discovery: protected resource metadata: %w", err)
		}
		if found {
			if err := checkResourceMetadata(&prm); err != nil {
				return nil, "", fmt.Errorf("oauth discovery: %s: %w", redactURL(u), err)
			}
			return &prm, redactURL(u), nil
		}
	}
	if fromChallenge != "" {
		// The server pointed at it: its absence is an error, not the
		// legacy case.
		return nil, "", fmt.Errorf("oauth discovery: no protected resource metadata at %s", redactURL(fromChallenge))
	}
	return nil, "", nil
}

// checkResourceMetadata checks what discovery relies on in a PRM.
func checkResourceMetadata(prm *oauth.ProtectedResourceMetadata) error {
	if len(prm.AuthorizationServers) == 0 {
		return errors.New("names no authorization_servers")
	}
	return nil
}

// resourceFor is the resource to request: the PRM's resource, when it is
// the server's canonical URI or covers it (same origin, the server's path
// at or under its path), else an error; the server's canonical URI when
// the PRM has none.
func resourceFor(prmResource, serverResource string) (string, error) {
	if prmResource == "" {
		return serverResource, nil
	}
	r, err := CanonicalResource(prmResource)
	if err != nil {
		return "", ErrResourceMismatch
	}
	ru, _ := url.Parse(r)
	su, _ := url.Parse(serverResource)
	if ru.RawQuery != "" || !sameOrigin(ru, su) {
		return "", ErrResourceMismatch
	}
	rp, sp := strings.TrimSuffix(ru.EscapedPath(), "/"), su.EscapedPath()
	if rp != "" && sp != rp && !strings.HasPrefix(sp, rp+"/") {
		return "", ErrResourceMismatch
	}
	return r, nil
}

// chooseAuthServer takes the first authorization server, in the PRM's
// order, whose metadata is found and valid (RFC 9728 7.6 leaves the
// choice to the client).
func (p *Plan) chooseAuthServer(ctx context.Context, from string, servers []string) error {
	var errs []error
	for _, issuer := range servers {
		iu, err := p.f.checkURL(issuer)
		if err != nil || iu.RawQuery != "" {
			errs = append(errs, fmt.Errorf("authorization server %s: %w", redactURL(issuer), ErrInsecureURL))
			continue
		}
		md, found, err := p.fetchAuthServer(ctx, issuer, AuthServerMetadataURLs(iu))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !found {
			errs = append(errs, fmt.Errorf("authorization server %s: no metadata", redactURL(issuer)))
			continue
		}
		p.AuthServer = *md
		return nil
	}
	return fmt.Errorf("oauth discovery: %s: %w: %w", from, ErrNoAuthServer, errors.Join(errs...))
}

// fetchAuthServer fetches and checks the first metadata document found at
// candidates, for issuer.
func (p *Plan) fetchAuthServer(ctx context.Context, issuer string, candidates []string) (*oauth.AuthServerMetadata, bool, error) {
	for _, u := range candidates {
		var md oauth.AuthServerMetadata
		found, err := p.f.getJSON(ctx, u, &md)
		if err != nil {
			return nil, false, fmt.Errorf("authorization server metadata: %w", err)
		}
		if !found {
			continue
		}
		if err := p.checkAuthServer(&md, issuer); err != nil {
			return nil, false, fmt.Errorf("authorization server metadata %s: %w", redactURL(u), err)
		}
		return &md, true, nil
	}
	return nil, false, nil
}

// checkAuthServer checks an AS metadata document for issuer: RFC 8414 3.3
// (the issuer is the one asked for), and endpoints this upstream's
// fetches may use.
func (p *Plan) checkAuthServer(md *oauth.AuthServerMetadata, issuer string) error {
	if md.Issuer != issuer {
		return fmt.Errorf("%w: names issuer %q, not %q", ErrIssuerMismatch, sanitize(md.Issuer, 200), redactURL(issuer))
	}
	return checkEndpoints(p.f, md)
}

func checkEndpoints(f *fetcher, md *oauth.AuthServerMetadata) error {
	for _, e := range []struct{ name, u string }{
		{"authorization_endpoint", md.AuthorizationEndpoint},
		{"token_endpoint", md.TokenEndpoint},
		{"registration_endpoint", md.RegistrationEndpoint},
	} {
		if e.u == "" && e.name == "registration_endpoint" {
			continue
		}
		if e.u == "" {
			return fmt.Errorf("%s missing", e.name)
		}
		if _, err := f.checkURL(e.u); err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
	}
	return nil
}

// legacy applies the 2025-03-26 discovery: the authorization base URL is
// the server URL without its path; its RFC 8414 metadata (for an issuer
// on that origin), else the default endpoints.
func (p *Plan) legacy(ctx context.Context, su *url.URL, serverResource string) error {
	origin := strings.ToLower(su.Scheme) + "://" + strings.ToLower(su.Host)
	p.Legacy = true
	p.Resource = serverResource
	for _, u := range []string{origin + WellKnownAuthServer} {
		var md oauth.AuthServerMetadata
		found, err := p.f.getJSON(ctx, u, &md)
		if err != nil {
			return fmt.Errorf("oauth discovery: authorization server metadata: %w", err)
		}
		if !found {
			continue
		}
		// The 2025-03-26 spec makes the server's origin the
		// authorization base URL and names no issuer: the document may
		// name one with a path on that origin (an authorization server
		// mounted under /oauth, say), but not another origin, which the
		// server cannot speak for.
		if iu, err := url.Parse(md.Issuer); err != nil || iu.RawQuery != "" || iu.Fragment != "" || iu.User != nil || !sameOrigin(iu, su) {
			return fmt.Errorf("oauth discovery: %s: %w: names issuer %q, not one on %q", redactURL(u), ErrIssuerMismatch, sanitize(md.Issuer, 200), origin)
		}
		if err := checkEndpoints(p.f, &md); err != nil {
			return fmt.Errorf("oauth discovery: %s: %w", redactURL(u), err)
		}
		p.AuthServer = md
		return nil
	}
	// 2025-03-26 "Fallbacks for Servers without Metadata Discovery",
	// where PKCE is required of every server.
	p.Synthesized = true
	p.AuthServer = oauth.AuthServerMetadata{
		Issuer:                        origin,
		AuthorizationEndpoint:         origin + "/authorize",
		TokenEndpoint:                 origin + "/token",
		RegistrationEndpoint:          origin + "/register",
		CodeChallengeMethodsSupported: []string{"S256"},
		ResponseTypesSupported:        []string{"code"},
	}
	return nil
}

// BearerChallenge is what the flow reads of a WWW-Authenticate Bearer
// challenge (RFC 6750 3, RFC 9728 5.1).
type BearerChallenge struct {
	ResourceMetadata string
	Scope            string
	Error            string
}

// ParseBearerChallenge reads the first Bearer challenge of the
// WWW-Authenticate header values (a response may carry several headers,
// each with several challenges). Values with control characters are
// dropped, scope is normalised to single spaces.
func ParseBearerChallenge(values []string) BearerChallenge {
	for _, v := range values {
		for _, c := range oauth.ParseChallenges(v) {
			if !strings.EqualFold(c.Scheme, "Bearer") {
				continue
			}
			return BearerChallenge{
				ResourceMetadata: printable(c.Params["resource_metadata"]),
				Scope:            strings.Join(strings.Fields(printable(c.Params["scope"])), " "),
				Error:            printable(c.Params["error"]),
			}
		}
	}
	return BearerChallenge{}
}

// printable is v, or "" when v holds anything but printable ASCII.
func printable(v string) string {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return ""
		}
	}
	return v
}

// unionScopes is a followed by the scopes of b it lacks, each once.
func unionScopes(a, b []string) []string {
	var out []string
	for _, s := range slices.Concat(a, b) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// FetchResourceMetadata fetches the RFC 9728 protected resource metadata
// of the MCP server at serverURL from its well-known URIs (path inserted,
// then root), with the bounds of every fetch of this package (MaxDocument,
// FetchTimeout, same-origin redirects only, the address guard unless
// allowPrivate). A nil document without error: the server has none.
func FetchResourceMetadata(ctx context.Context, serverURL string, hc *http.Client, allowPrivate bool) (*oauth.ProtectedResourceMetadata, error) {
	su, err := url.Parse(serverURL)
	if err != nil || su.Host == "" || (su.Scheme != "https" && su.Scheme != "http") {
		return nil, errors.New("oauth discovery: the server url is not an absolute http or https URL")
	}
	f, err := newFetcher(su, hc, allowPrivate)
	if err != nil {
		return nil, err
	}
	p := &Plan{f: f}
	prm, _, err := p.fetchResourceMetadata(ctx, su, "")
	return prm, err
}
