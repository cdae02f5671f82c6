package client_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
)

func TestDiscoverOrderAndScopes(t *testing.T) {
	f := newFake(t)
	f.standard(asMetadata)
	cfg := client.Config{ServerURL: f.url + "/mcp/", RedirectURI: callback, Scopes: []string{"offline_access", "a"}}
	p, err := client.Discover(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Resource != f.url+"/mcp" || !slices.Equal(p.Scopes, []string{"a", "b", "offline_access"}) {
		t.Errorf("resource %q scopes %q", p.Resource, p.Scopes)
	}
	want := []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server"}
	if got := f.paths(); !slices.Equal(got, want) {
		t.Errorf("asked for %q, want %q", got, want)
	}

	// The challenge's scope wins over scopes_supported.
	p, err = client.Discover(t.Context(), cfg, challenge(`Bearer error="invalid_token", scope="x  y", resource_metadata="`+f.url+`/.well-known/oauth-protected-resource/mcp"`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Scopes, []string{"x", "y", "offline_access", "a"}) {
		t.Errorf("scopes %q", p.Scopes)
	}
}

// TestDiscoverWellKnownOrder: the root PRM after the path-inserted one;
// an issuer with a path tried at the RFC 8414 and OIDC inserted URIs,
// then OIDC appended.
func TestDiscoverWellKnownOrder(t *testing.T) {
	f := newFake(t)
	f.json("/.well-known/oauth-protected-resource", func() any {
		return oauth.ProtectedResourceMetadata{Resource: f.url, AuthorizationServers: []string{f.url + "/tenant1"}}
	})
	f.json("/tenant1/.well-known/openid-configuration", func() any { return asMetadata(f.url + "/tenant1") })
	p, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource",
		"/.well-known/oauth-authorization-server/tenant1", "/.well-known/openid-configuration/tenant1", "/tenant1/.well-known/openid-configuration"}
	if got := f.paths(); !slices.Equal(got, want) {
		t.Errorf("asked for\n %q\nwant\n %q", got, want)
	}
	// The root PRM's resource covers the server: it is the resource.
	if p.Resource != f.url || p.AuthServer.Issuer != f.url+"/tenant1" || len(p.Scopes) != 0 {
		t.Errorf("resource %q issuer %q scopes %q", p.Resource, p.AuthServer.Issuer, p.Scopes)
	}
}

func TestDiscoverLegacy(t *testing.T) {
	f := newFake(t)
	p, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/v1/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Legacy || !p.Synthesized || p.AuthServer.AuthorizationEndpoint != f.url+"/authorize" ||
		p.AuthServer.TokenEndpoint != f.url+"/token" || p.AuthServer.RegistrationEndpoint != f.url+"/register" || p.Resource != f.url+"/v1/mcp" {
		t.Errorf("legacy plan %+v", p)
	}
	f.json("/.well-known/oauth-authorization-server", func() any {
		md := asMetadata(f.url)
		md.AuthorizationEndpoint = f.url + "/oauth/authz"
		return md
	})
	p, err = client.Discover(t.Context(), client.Config{ServerURL: f.url + "/v1/mcp"}, nil)
	if err != nil || !p.Legacy || p.Synthesized || p.AuthServer.AuthorizationEndpoint != f.url+"/oauth/authz" {
		t.Errorf("legacy with metadata: %+v, %v", p, err)
	}

	// An authorization server under a path of the server's origin (the
	// conformance suite's auth/2025-03-26-oauth-metadata-backcompat): its
	// issuer is origin/oauth, its document at the root well-known URI.
	f.json("/.well-known/oauth-authorization-server", func() any { return asMetadata(f.url + "/oauth") })
	p, err = client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp"}, nil)
	if err != nil || !p.Legacy || p.Synthesized || p.AuthServer.Issuer != f.url+"/oauth" || p.AuthServer.TokenEndpoint != f.url+"/oauth/token" {
		t.Errorf("legacy with an issuer under a path: %+v, %v", p, err)
	}
	if _, err := p.Exchange(t.Context(), client.Client{ID: "c", AuthMethod: client.AuthNone}, "x", "y", f.url); !errors.Is(err, client.ErrIssuerMismatch) {
		t.Errorf("an iss other than origin/oauth: %v", err)
	}

	// Another origin's issuer: the server cannot speak for it.
	for _, iss := range []string{"https://other.example", strings.Replace(f.url, "127.0.0.1", "localhost", 1), f.url + "?x=1"} {
		f.json("/.well-known/oauth-authorization-server", func() any { return asMetadata(iss) })
		if _, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp"}, nil); !errors.Is(err, client.ErrIssuerMismatch) {
			t.Errorf("legacy metadata for issuer %q: %v, want ErrIssuerMismatch", iss, err)
		}
	}
}

// TestPKCERequired: metadata without S256, or without the field, is
// refused before any registration or authorization request.
func TestPKCERequired(t *testing.T) {
	for name, methods := range map[string][]string{"absent": nil, "plain only": {"plain"}} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.standard(func(iss string) oauth.AuthServerMetadata {
				md := asMetadata(iss)
				md.CodeChallengeMethodsSupported = methods
				return md
			})
			p, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp", RedirectURI: callback}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Register(t.Context()); !errors.Is(err, client.ErrNoPKCE) {
				t.Errorf("Register: %v, want ErrNoPKCE", err)
			}
			if _, _, err := p.AuthorizeURL(client.Client{ID: "c"}, "s"); !errors.Is(err, client.ErrNoPKCE) {
				t.Errorf("AuthorizeURL: %v, want ErrNoPKCE", err)
			}
			if slices.Contains(f.paths(), "/register") {
				t.Error("registered at a server without PKCE")
			}
		})
	}
}

// TestIssuer: an authorization response whose iss is not the server's,
// or lacks the iss it promised, is refused before the code is sent; a
// metadata document for another issuer is refused at discovery.
func TestIssuer(t *testing.T) {
	f := newFake(t)
	f.standard(asMetadata)
	p, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp", RedirectURI: callback}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := client.Client{ID: "c", AuthMethod: client.AuthNone}
	for _, iss := range []string{"https://evil.example", ""} {
		if _, err := p.Exchange(t.Context(), c, "the-code", "the-verifier", iss); !errors.Is(err, client.ErrIssuerMismatch) {
			t.Errorf("iss %q: %v, want ErrIssuerMismatch", iss, err)
		} else if strings.Contains(err.Error(), "the-code") || strings.Contains(err.Error(), "the-verifier") {
			t.Errorf("the error holds the code or verifier: %v", err)
		}
	}
	if slices.Contains(f.paths(), "/token") {
		t.Error("the code went to the token endpoint")
	}
	tok, err := p.Exchange(t.Context(), c, "the-code", "the-verifier", f.url)
	if err != nil {
		t.Fatal(err)
	}
	form := f.lastForm()
	for k, want := range map[string]string{"grant_type": "authorization_code", "code": "the-code", "code_verifier": "the-verifier",
		"resource": f.url + "/mcp", "redirect_uri": callback, "client_id": "c"} {
		if form.Get(k) != want {
			t.Errorf("token request %s = %q, want %q", k, form.Get(k), want)
		}
	}
	if tok.AccessToken != "at-1" || tok.TokenType != "Bearer" || tok.Scope != "a b" {
		t.Errorf("token %v", tok)
	}

	// Not advertised: an absent iss is fine, a wrong one is not.
	f2 := newFake(t)
	f2.standard(func(iss string) oauth.AuthServerMetadata {
		md := asMetadata(iss)
		md.AuthorizationResponseIssParameterSupported = false
		return md
	})
	p2, err := client.Discover(t.Context(), client.Config{ServerURL: f2.url + "/mcp", RedirectURI: callback}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Exchange(t.Context(), c, "x", "y", ""); err != nil {
		t.Errorf("no iss, not advertised: %v", err)
	}
	if _, err := p2.Exchange(t.Context(), c, "x", "y", "https://evil.example"); !errors.Is(err, client.ErrIssuerMismatch) {
		t.Errorf("wrong iss, not advertised: %v", err)
	}

	f3 := newFake(t)
	f3.standard(func(string) oauth.AuthServerMetadata { return asMetadata("https://other.example") })
	if _, err := client.Discover(t.Context(), client.Config{ServerURL: f3.url + "/mcp"}, nil); !errors.Is(err, client.ErrIssuerMismatch) {
		t.Errorf("metadata for another issuer: %v", err)
	}
}

// TestPrivateAddressRefused: a public upstream's challenge pointing at a
// loopback address is not dialled (the check is on the dialled address);
// AllowPrivate lifts the guard.
func TestPrivateAddressRefused(t *testing.T) {
	var hits atomic.Int32
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(ts.Close)
	prm := ts.URL + "/prm"
	cfg := client.Config{ServerURL: "https://mcp.example.com/mcp", HTTPClient: ts.Client()}
	_, err := client.Discover(t.Context(), cfg, challenge(`Bearer resource_metadata="`+prm+`"`))
	if !errors.Is(err, client.ErrBlockedAddress) {
		t.Errorf("PRM on loopback for a public upstream: %v, want ErrBlockedAddress", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback server was reached %d times", n)
	}

	cfg.AllowPrivate = true
	_, err = client.Discover(t.Context(), cfg, challenge(`Bearer resource_metadata="`+prm+`"`))
	if err == nil || errors.Is(err, client.ErrBlockedAddress) || hits.Load() != 1 {
		t.Errorf("with AllowPrivate: %v, %d hits (want a 404 from the server)", err, hits.Load())
	}

	// An upstream on loopback itself may keep its metadata there.
	_, err = client.Discover(t.Context(), client.Config{ServerURL: ts.URL + "/mcp", HTTPClient: ts.Client()}, challenge(`Bearer resource_metadata="`+prm+`"`))
	if errors.Is(err, client.ErrBlockedAddress) {
		t.Errorf("loopback upstream: %v", err)
	}

	// http is only for an http loopback upstream.
	_, err = client.Discover(t.Context(), client.Config{ServerURL: "https://mcp.example.com/mcp"}, challenge(`Bearer resource_metadata="http://mcp.example.com/prm"`))
	if !errors.Is(err, client.ErrInsecureURL) {
		t.Errorf("http PRM for an https upstream: %v", err)
	}
}

func TestRedirects(t *testing.T) {
	other := newFake(t)
	other.json("/.well-known/oauth-protected-resource/mcp", func() any { return oauth.ProtectedResourceMetadata{} })
	f := newFake(t)
	f.handle("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.url+r.URL.Path, http.StatusFound)
	})
	_, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp"}, nil)
	if !errors.Is(err, client.ErrCrossOrigin) {
		t.Errorf("cross-origin redirect: %v, want ErrCrossOrigin", err)
	}
	if len(other.paths()) != 0 {
		t.Errorf("the other origin was contacted: %q", other.paths())
	}

	// Within the origin, followed.
	f.standard(asMetadata)
	f.handle("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/prm.json", http.StatusMovedPermanently)
	})
	f.json("/prm.json", func() any {
		return oauth.ProtectedResourceMetadata{Resource: f.url + "/mcp", AuthorizationServers: []string{f.url}}
	})
	if _, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp"}, nil); err != nil {
		t.Errorf("same-origin redirect: %v", err)
	}

	// A token endpoint that redirects is not followed with the code.
	f.handle("/token", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.url+"/token", http.StatusTemporaryRedirect)
	})
	p, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp", RedirectURI: callback}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exchange(t.Context(), client.Client{ID: "c", AuthMethod: client.AuthNone}, "code", "verifier", f.url); err == nil {
		t.Error("a redirecting token endpoint was accepted")
	}
	if len(other.paths()) != 0 {
		t.Errorf("the code reached another origin: %q", other.paths())
	}
}

func TestOversizedMetadata(t *testing.T) {
	f := newFake(t)
	f.standard(asMetadata)
	f.handle("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"issuer":%q,"pad":"%s"}`, f.url, strings.Repeat("x", client.MaxDocument))
	})
	if _, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp"}, nil); !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("oversized AS metadata: %v, want ErrTooLarge", err)
	}
}

func TestResourceMismatch(t *testing.T) {
	f := newFake(t)
	f.standard(asMetadata)
	for _, res := range []string{"https://elsewhere.example/mcp", f.url + "/other"} {
		f.json("/.well-known/oauth-protected-resource/mcp", func() any {
			return oauth.ProtectedResourceMetadata{Resource: res, AuthorizationServers: []string{f.url}}
		})
		if _, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp"}, nil); !errors.Is(err, client.ErrResourceMismatch) {
			t.Errorf("PRM resource %q: %v", res, err)
		}
	}
}

// TestRegister: the spec's order, and refusal when nothing is possible.
func TestRegister(t *testing.T) {
	f := newFake(t)
	cimd := true
	reg := ""
	f.standard(func(iss string) oauth.AuthServerMetadata {
		md := asMetadata(iss)
		md.ClientIDMetadataDocumentSupported = cimd
		md.RegistrationEndpoint = reg
		md.TokenEndpointAuthMethodsSupported = []string{"client_secret_post", "none"}
		return md
	})
	f.handle("/register", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		writeJSON(w, oauth.ClientMetadata{ClientID: "dyn-1", ClientSecret: "dyn-secret", TokenEndpointAuthMethod: "client_secret_post"})
	})
	ctx := t.Context()
	discover := func(cfg client.Config) *client.Plan {
		t.Helper()
		cfg.ServerURL, cfg.RedirectURI = f.url+"/mcp", callback
		p, err := client.Discover(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	doc := "https://gw.example/oauth/client.json"

	c, err := discover(client.Config{ClientID: "pre", ClientSecret: "pre-secret", ClientMetadataURL: doc}).Register(ctx)
	if err != nil || c.Source != client.SourcePreregistered || c.AuthMethod != client.AuthClientSecretPost {
		t.Errorf("pre-registered: %v %v", c, err)
	}
	c, err = discover(client.Config{ClientMetadataURL: doc}).Register(ctx)
	if err != nil || c.Source != client.SourceMetadataDocument || c.ID != doc || c.AuthMethod != client.AuthNone {
		t.Errorf("metadata document: %v %v", c, err)
	}
	if _, err := discover(client.Config{}).Register(ctx); !errors.Is(err, client.ErrNoRegistration) {
		t.Errorf("nothing possible: %v", err)
	}
	cimd = false
	if _, err := discover(client.Config{ClientMetadataURL: doc}).Register(ctx); !errors.Is(err, client.ErrNoRegistration) {
		t.Errorf("CIMD not supported, no registration endpoint: %v", err)
	}
	reg = f.url + "/register"
	p := discover(client.Config{ClientMetadataURL: doc})
	c, err = p.Register(ctx)
	if err != nil || c.Source != client.SourceDynamic || c.ID != "dyn-1" || c.Secret != "dyn-secret" || c.AuthMethod != client.AuthClientSecretPost {
		t.Errorf("dynamic: %v %v", c, err)
	}
	if strings.Contains(fmt.Sprintf("%v %+v %#v %s", c, c, c, c), "dyn-secret") {
		t.Error("a Client prints its secret")
	}
	// client_secret_post: the secret in the form, with the resource.
	tok, err := p.Refresh(ctx, c, "old-rt")
	if err != nil {
		t.Fatal(err)
	}
	form := f.lastForm()
	if form.Get("client_secret") != "dyn-secret" || form.Get("client_id") != "dyn-1" || form.Get("resource") != f.url+"/mcp" ||
		form.Get("grant_type") != "refresh_token" || form.Get("refresh_token") != "old-rt" {
		t.Errorf("refresh form %v", form)
	}
	if tok.RefreshToken != "rt-1" {
		t.Errorf("rotated refresh token %q", tok.RefreshToken)
	}
	// A server that does not rotate: the old one is kept.
	f.json("/token", func() any { return map[string]any{"access_token": "at-2", "token_type": "Bearer"} })
	if tok, err := p.Refresh(ctx, c, "old-rt"); err != nil || tok.RefreshToken != "old-rt" || !tok.Expiry.IsZero() {
		t.Errorf("no rotation: %v %v", tok, err)
	}
}

func TestStepUp(t *testing.T) {
	resp := func(status int, h string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Www-Authenticate": {h}}}
	}
	for _, tt := range []struct {
		status  int
		h       string
		granted []string
		want    []string
	}{
		{403, `Bearer error="insufficient_scope", scope="files:read files:write", resource_metadata="https://x/prm"`, []string{"files:read", "user"}, []string{"files:read", "user", "files:write"}},
		{403, `Basic realm="x", Bearer error="insufficient_scope", scope="b"`, []string{"a"}, []string{"a", "b"}},
		{403, `Bearer error="insufficient_scope", scope="a"`, []string{"a"}, nil}, // nothing new: no use asking
		{403, `Bearer error="invalid_token", scope="b"`, []string{"a"}, nil},
		{401, `Bearer error="insufficient_scope", scope="b"`, []string{"a"}, nil},
		{403, `Bearer error="insufficient_scope"`, []string{"a"}, nil},
	} {
		next, ok := client.StepUp(tt.granted, resp(tt.status, tt.h))
		if ok != (tt.want != nil) || !slices.Equal(next, tt.want) {
			t.Errorf("StepUp(%q, %d %s) = %q, %t; want %q", tt.granted, tt.status, tt.h, next, ok, tt.want)
		}
	}
	if _, ok := client.StepUp(nil, nil); ok {
		t.Error("StepUp(nil response)")
	}
}

func TestAuthorizeURL(t *testing.T) {
	f := newFake(t)
	f.standard(func(iss string) oauth.AuthServerMetadata {
		md := asMetadata(iss)
		md.AuthorizationEndpoint = iss + "/authorize?tenant=t1"
		return md
	})
	p, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp", RedirectURI: callback}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := client.Client{ID: "c"}
	if _, _, err := p.AuthorizeURL(c, ""); err == nil {
		t.Error("no state accepted")
	}
	u1, v1, err := p.WithScopes([]string{"a", "b", "c"}).AuthorizeURL(c, "s")
	if err != nil {
		t.Fatal(err)
	}
	_, v2, _ := p.AuthorizeURL(c, "s")
	if v1 == v2 || len(v1) != 43 {
		t.Errorf("verifiers %q %q", v1, v2)
	}
	q := mustParse(t, u1).Query()
	if q.Get("tenant") != "t1" || q.Get("scope") != "a b c" || q.Get("code_challenge") == "" || q.Get("code_challenge") == v1 {
		t.Errorf("authorization request %v", q)
	}
}

// TestNoCredentialsPrinted: no way of printing or logging a plan, a
// client or a token shows a secret or a token.
func TestNoCredentialsPrinted(t *testing.T) {
	f := newFake(t)
	f.standard(asMetadata)
	p, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp", RedirectURI: callback, ClientID: "c", ClientSecret: "cfg-secret"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := client.Client{ID: "c", Secret: "client-secret", AuthMethod: client.AuthClientSecretBasic}
	tok := &client.Token{AccessToken: "access-tok", RefreshToken: "refresh-tok", TokenType: "Bearer"}
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("x", "plan", p, "client", c, "token", tok, "tokv", *tok)
	log.Info("y", "plan", *p)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		fmt.Fprintf(&buf, verb+" "+verb+" "+verb+" "+verb+" "+verb+"\n", p, *p, c, tok, *tok)
	}
	for _, secret := range []string{"cfg-secret", "client-secret", "access-tok", "refresh-tok"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("%s printed:\n%s", secret, buf.String())
		}
	}
}

// TestOfflineAccess: the refresh token guidance of the MCP spec (draft,
// SEP-2207, the conformance suite's auth/offline-access-scope and
// auth/offline-access-not-supported): offline_access is requested when
// the authorization server lists it, never when it lists scopes without
// it; configured scopes stay.
func TestOfflineAccess(t *testing.T) {
	for _, tc := range []struct {
		name              string
		asScopes, prm     []string
		challenge         string
		configured, want  []string
		wantScopeParamSet bool
	}{
		{name: "listed: added", asScopes: []string{"a", "offline_access"}, prm: []string{"a", "b"}, want: []string{"a", "b", "offline_access"}},
		{name: "listed: added to the challenge's", asScopes: []string{"x", "offline_access"}, prm: []string{"a"}, challenge: "x", want: []string{"x", "offline_access"}},
		{name: "listed, nothing selected: scope omitted", asScopes: []string{"offline_access"}, want: nil},
		{name: "not listed: dropped", asScopes: []string{"a", "b"}, prm: []string{"a", "offline_access", "b"}, want: []string{"a", "b"}},
		{name: "no scopes_supported: as selected", prm: []string{"a", "offline_access"}, want: []string{"a", "offline_access"}},
		{name: "configured: kept", asScopes: []string{"a"}, prm: []string{"a"}, configured: []string{"offline_access"}, want: []string{"a", "offline_access"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.json("/.well-known/oauth-protected-resource/mcp", func() any {
				return oauth.ProtectedResourceMetadata{Resource: f.url + "/mcp", AuthorizationServers: []string{f.url}, ScopesSupported: tc.prm}
			})
			f.json("/.well-known/oauth-authorization-server", func() any {
				md := asMetadata(f.url)
				md.ScopesSupported = tc.asScopes
				return md
			})
			var ch *http.Response
			if tc.challenge != "" {
				ch = challenge(`Bearer scope="` + tc.challenge + `"`)
			}
			p, err := client.Discover(t.Context(), client.Config{ServerURL: f.url + "/mcp", RedirectURI: callback, Scopes: tc.configured}, ch)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Scopes, tc.want) {
				t.Errorf("scopes %q, want %q", p.Scopes, tc.want)
			}
			authURL, _, err := p.AuthorizeURL(client.Client{ID: "c", AuthMethod: client.AuthNone}, "st")
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(authURL)
			if got, ok := u.Query()["scope"]; len(tc.want) == 0 && ok || len(tc.want) > 0 && (len(got) != 1 || got[0] != strings.Join(tc.want, " ")) {
				t.Errorf("scope parameter %q, want %q", got, strings.Join(tc.want, " "))
			}
		})
	}
}
