package authserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/store"
)

func getJSON(t *testing.T, u string, v any) *http.Response {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return resp
}

func TestMetadata(t *testing.T) {
	h := newHarness(t, withPrefix("/p"))
	if !strings.HasSuffix(h.url, "/p") {
		t.Fatalf("issuer %q", h.url)
	}
	base := strings.TrimSuffix(h.url, "/p")
	want := oauth.AuthServerMetadata{
		Issuer:                                     h.url,
		AuthorizationEndpoint:                      h.url + "/oauth/authorize",
		TokenEndpoint:                              h.url + "/oauth/token",
		RegistrationEndpoint:                       h.url + "/oauth/register",
		RevocationEndpoint:                         h.url + "/oauth/revoke",
		JWKSURI:                                    h.url + "/oauth/jwks",
		ScopesSupported:                            []string{"mcp", "offline_access"},
		ResponseTypesSupported:                     []string{"code"},
		ResponseModesSupported:                     []string{"query"},
		GrantTypesSupported:                        []string{"authorization_code", "refresh_token"},
		TokenEndpointAuthMethodsSupported:          []string{"none", "client_secret_basic", "client_secret_post"},
		RevocationEndpointAuthMethodsSupported:     []string{"none", "client_secret_basic", "client_secret_post"},
		CodeChallengeMethodsSupported:              []string{"S256"},
		AuthorizationResponseIssParameterSupported: true,
		ClientIDMetadataDocumentSupported:          true,
	}
	for _, path := range []string{
		"/.well-known/oauth-authorization-server/p", // RFC 8414 path insertion
		"/.well-known/openid-configuration/p",
		"/p/.well-known/oauth-authorization-server", // OIDC-style suffix
		"/p/.well-known/openid-configuration",
		"/.well-known/oauth-authorization-server", // a proxy that strips /p
	} {
		var got oauth.AuthServerMetadata
		resp := getJSON(t, base+path, &got)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", path, resp.StatusCode)
			continue
		}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("%s (-got +want):\n%s", path, diff)
		}
		if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("%s: no CORS", path)
		}
	}
	// Preflight from a browser-based client.
	req, _ := http.NewRequest(http.MethodOptions, h.url+"/oauth/token", nil)
	req.Header.Set("Origin", "https://inspector.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	if !h.srv.MatchIssuer(h.url) || h.srv.MatchIssuer(base) || h.srv.MatchIssuer(h.url+"/") {
		t.Error("MatchIssuer with a public URL")
	}
}

// TestDerivedIssuer: without a public URL the issuer is the request's
// scheme and Host, and the flow works under it.
func TestDerivedIssuer(t *testing.T) {
	h := newHarness(t, withDerivedIssuer())
	var md oauth.AuthServerMetadata
	getJSON(t, h.url+"/.well-known/oauth-authorization-server", &md)
	if md.Issuer != h.url {
		t.Errorf("issuer = %q, want %q", md.Issuer, h.url)
	}
	// X-Forwarded-Proto is not believed.
	req, _ := http.NewRequest(http.MethodGet, h.url+"/.well-known/oauth-authorization-server", nil)
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&md)
	resp.Body.Close()
	if md.Issuer != h.url {
		t.Errorf("with X-Forwarded-Proto: issuer = %q", md.Issuer)
	}
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	pk := newPKCE()
	r := h.redeem(reg.ClientID, h.login(newBrowser(t, redirect), reg.ClientID, pk, nil), pk)
	wantTokens(t, r)
	h.verifyAccess(r.AccessToken)

	for iss, want := range map[string]bool{
		h.url: true, "https://mcp.example.com": true,
		"https://mcp.example.com/": false, "https://mcp.example.com/p": false, "ftp://x": false,
		"https://u@mcp.example.com": false, "https://mcp.example.com?x": false, "": false,
	} {
		if got := h.srv.MatchIssuer(iss); got != want {
			t.Errorf("MatchIssuer(%q) = %v, want %v", iss, got, want)
		}
	}
}

// TestIssuerFunc: without a public URL, Options.Issuer names the issuer
// (the gateway's own base URL), whatever Host the request sent.
func TestIssuerFunc(t *testing.T) {
	st := openStore(t)
	s, err := New(t.Context(), Options{Login: &config.Login{Keys: true}, Keys: storeKeys{st}, Store: st, DataDir: t.TempDir(),
		Issuer: func(*http.Request) string { return "http://127.0.0.1:4000" }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := httptest.NewRequest(http.MethodGet, "http://evil.example:4000/.well-known/oauth-authorization-server", nil)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	var md oauth.AuthServerMetadata
	if err := json.Unmarshal(w.Body.Bytes(), &md); err != nil || md.Issuer != "http://127.0.0.1:4000" {
		t.Errorf("issuer = %q (%v, %s), want the function's", md.Issuer, err, w.Body)
	}
}

func TestJWKS(t *testing.T) {
	h := newHarness(t)
	var set jose.JSONWebKeySet
	resp := getJSON(t, h.url+"/oauth/jwks", &set)
	if ct := resp.Header.Get("Content-Type"); ct != "application/jwk-set+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	pub := h.srv.PublicKeys()
	if len(set.Keys) != 1 || len(pub.Keys) != 1 || set.Keys[0].KeyID != pub.Keys[0].KeyID {
		t.Fatalf("JWKS %+v, PublicKeys %+v", set, pub)
	}
	k := set.Keys[0]
	if !k.IsPublic() || k.Algorithm != "ES256" || k.Use != "sig" {
		t.Errorf("key %+v", k)
	}
}

// TestSigningKeys: the key survives a restart, is sealed (the database
// alone does not hold it), and the seal file must be private.
func TestSigningKeys(t *testing.T) {
	st := openStore(t)
	dir := t.TempDir()
	login := &config.Login{Keys: true}
	keys := storeKeys{st}
	start := func(dir string, now func() time.Time) (*Server, error) {
		return New(t.Context(), Options{Login: login, Store: st, Keys: keys, DataDir: dir, Now: now})
	}
	s1, err := start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	kid := s1.PublicKeys().Keys[0].KeyID
	s1.Close()

	fi, err := os.Stat(filepath.Join(dir, SealKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("seal file mode %o, want 600", fi.Mode().Perm())
	}
	objs, err := st.ListObjects(t.Context(), store.KindOAuthKey)
	if err != nil || len(objs) != 1 || objs[0].Name != kid {
		t.Fatalf("stored keys %v, %v", objs, err)
	}
	if strings.Contains(string(objs[0].Doc), `"d"`) || strings.Contains(string(objs[0].Doc), "PRIVATE") {
		t.Errorf("stored key is not sealed: %s", objs[0].Doc)
	}

	s2, err := start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.PublicKeys().Keys[0].KeyID; got != kid {
		t.Errorf("after a restart kid = %q, want %q", got, kid)
	}
	s2.Close()

	// The same database with another data directory's seal key: refused,
	// unless that seal key is new (the old one is lost), which replaces
	// the unreadable keys.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, SealKeyFile), []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
	if _, err := start(other, nil); err == nil || !strings.Contains(err.Error(), "unseal") {
		t.Errorf("wrong seal key: err = %v", err)
	}
	s3, err := start(t.TempDir(), nil)
	if err != nil {
		t.Fatalf("lost seal key: %v", err)
	}
	if got := s3.PublicKeys().Keys; len(got) != 1 || got[0].KeyID == kid {
		t.Errorf("after a lost seal key: %v", got)
	}
	s3.Close()

	os.Chmod(filepath.Join(dir, SealKeyFile), 0o644)
	if _, err := start(dir, nil); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("seal file readable by others: err = %v", err)
	}
}

// TestKeyRotation: a new key after 30 days; the old one stays published
// until its tokens have expired.
func TestKeyRotation(t *testing.T) {
	h := newHarness(t)
	old := h.srv.PublicKeys().Keys[0].KeyID
	h.clock.Advance(DefaultKeyRotation + time.Hour)
	if err := h.srv.keys.reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	pub := h.srv.PublicKeys().Keys
	if len(pub) != 2 || pub[0].KeyID == old || pub[1].KeyID != old {
		t.Fatalf("after rotation: %v", pub)
	}
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	pk := newPKCE()
	r := h.redeem(reg.ClientID, h.login(newBrowser(t, redirect), reg.ClientID, pk, nil), pk)
	if tok, _ := jose.ParseSigned(r.AccessToken, []jose.SignatureAlgorithm{jose.ES256}); tok.Signatures[0].Header.KeyID != pub[0].KeyID {
		t.Error("the new key does not sign")
	}
	h.clock.Advance(config.Login{}.OrDefaults().AccessTokenTTL + 2*time.Minute)
	if err := h.srv.keys.reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pub := h.srv.PublicKeys().Keys; len(pub) != 1 || pub[0].KeyID == old {
		t.Errorf("old key still published: %v", pub)
	}
	if objs, _ := h.store.ListObjects(t.Context(), store.KindOAuthKey); len(objs) != 1 {
		t.Errorf("%d keys stored, want 1", len(objs))
	}
}

// TestClose: the sweeper stops, Close is idempotent.
func TestClose(t *testing.T) {
	st := openStore(t)
	s, err := New(t.Context(), Options{Login: &config.Login{Keys: true}, Store: st, Keys: storeKeys{st}, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	default:
		t.Error("the sweeper is still running")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRefuses(t *testing.T) {
	st := openStore(t)
	for name, o := range map[string]Options{
		"no login":          {Store: st, DataDir: t.TempDir()},
		"no store":          {Login: &config.Login{Keys: true}, Keys: storeKeys{st}, DataDir: t.TempDir()},
		"no data dir":       {Login: &config.Login{Keys: true}, Keys: storeKeys{st}, Store: st},
		"keys without auth": {Login: &config.Login{Keys: true}, Store: st, DataDir: t.TempDir()},
		"neither login":     {Login: &config.Login{}, Store: st, DataDir: t.TempDir()},
		"bad public URL":    {Login: &config.Login{Keys: true}, Keys: storeKeys{st}, Store: st, DataDir: t.TempDir(), PublicURL: "ftp://x"},
	} {
		if s, err := New(t.Context(), o); err == nil {
			s.Close()
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestLoginNoLongerOffered: after a restart with another IdP, refresh
// tokens of the old IdP's logins are refused.
func TestLoginNoLongerOffered(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	pk := newPKCE()
	r := h.redeem(reg.ClientID, h.login(newBrowser(t, redirect), reg.ClientID, pk, nil), pk)
	wantTokens(t, r)
	h.srv.Close()
	s2, err := New(t.Context(), Options{Login: &config.Login{Issuer: "https://other-idp.example", ClientID: "x"},
		PublicURL: h.url, Store: h.store, DataDir: h.dir, Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	h.handler.Store(new(s2.Handler()))
	wantError(t, h.refresh(reg.ClientID, r.RefreshToken), 400, "invalid_grant")
}

// TestPurge: expired refresh records and families leave the store.
func TestPurge(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	pk := newPKCE()
	r := h.redeem(reg.ClientID, h.login(newBrowser(t, redirect), reg.ClientID, pk, nil), pk)
	wantTokens(t, h.refresh(reg.ClientID, r.RefreshToken))
	count := func(kind string) int {
		objs, err := h.store.ListObjects(t.Context(), kind)
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}
	if count(store.KindOAuthRefresh) != 2 || count(store.KindOAuthFamily) != 1 {
		t.Fatalf("before: %d refresh, %d families", count(store.KindOAuthRefresh), count(store.KindOAuthFamily))
	}
	if err := h.srv.purge(t.Context(), h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if count(store.KindOAuthRefresh) != 2 {
		t.Error("purge removed live records")
	}
	if err := h.srv.purge(t.Context(), h.clock.Now().Add(config.Login{}.OrDefaults().RefreshTokenTTL+time.Hour)); err != nil {
		t.Fatal(err)
	}
	if count(store.KindOAuthRefresh) != 0 || count(store.KindOAuthFamily) != 0 {
		t.Errorf("after: %d refresh, %d families", count(store.KindOAuthRefresh), count(store.KindOAuthFamily))
	}
}

func TestPublicAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fc00::1": false, "0.0.0.0": false, "::": false,
		"224.0.0.1": false, "ff02::1": false, "100.64.1.1": false, "::ffff:127.0.0.1": false,
		"::ffff:10.0.0.1": false, "64:ff9b::a00:1": false, "240.0.0.1": false,
	} {
		if got := oauth.PublicAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("oauth.PublicAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestCacheLifetime(t *testing.T) {
	for cc, want := range map[string]time.Duration{
		"":                       metadataDefaultAge,
		"max-age=60":             time.Minute,
		"public, max-age=30":     30 * time.Second,
		"max-age=86400":          metadataMaxAge,
		"max-age=99999999999999": metadataMaxAge,
		"no-store":               0,
		"no-cache, max-age=60":   0,
		"max-age=x":              0,
	} {
		if got := cacheLifetime(cc); got != want {
			t.Errorf("cacheLifetime(%q) = %v, want %v", cc, got, want)
		}
	}
}

// TestParseTarget: the resource of an authorization is one canonical URL
// below the issuer: an MCP route or the admin API, never the issuer
// itself, whatever spelling, prefix or dot-segment trick names it.
func TestParseTarget(t *testing.T) {
	for _, tt := range []struct {
		issuer, resource string
		want             string // the canonical resource; "" refused
		admin            bool
	}{
		{"https://gw.example", "https://gw.example/mcp", "https://gw.example/mcp", false},
		{"https://gw.example", "", "https://gw.example/mcp", false},
		{"https://gw.example/p", "", "https://gw.example/p/mcp", false},
		{"https://gw.example", "https://gw.example/toolset/x/mcp", "https://gw.example/toolset/x/mcp", false},
		{"https://gw.example", "HTTPS://GW.EXAMPLE:443/mcp/alpha/", "https://gw.example/mcp/alpha", false},
		{"https://gw.example", "https://gw.example/mcp/%61lpha", "https://gw.example/mcp/alpha", false},
		{"https://gw.example/p", "https://gw.example/p/mcp", "https://gw.example/p/mcp", false},
		{"https://gw.example", "https://gw.example/admin/v1", "https://gw.example/admin/v1", true},
		{"https://gw.example", "https://gw.example/admin/v1/", "https://gw.example/admin/v1", true},
		{"https://gw.example", "https://GW.example:443/admin/v1", "https://gw.example/admin/v1", true},
		{"https://gw.example/p", "https://gw.example/p/admin/v1", "https://gw.example/p/admin/v1", true},
		{"http://127.0.0.1:4000", "http://127.0.0.1:4000/admin/v1", "http://127.0.0.1:4000/admin/v1", true},

		// The issuer is no resource (it was: an issuer audience opened
		// every route and the admin API).
		{"https://gw.example", "https://gw.example", "", false},
		{"https://gw.example", "https://gw.example/", "", false},
		{"https://gw.example/p", "https://gw.example/p", "", false},
		{"https://gw.example/p", "https://gw.example/p/", "", false},
		// Below the admin API, or the server's own endpoints.
		{"https://gw.example", "https://gw.example/admin/v1/keys", "", false},
		{"https://gw.example", "https://gw.example/admin", "", false},
		{"https://gw.example", "https://gw.example/admin/v2", "", false},
		{"https://gw.example", "https://gw.example/oauth/token", "", false},
		{"https://gw.example", "https://gw.example/.well-known/oauth-protected-resource/mcp", "", false},
		// Prefix and dot-segment tricks.
		{"https://gw.example", "https://gw.example/mcp/alpha/../../admin/v1", "", false},
		{"https://gw.example", "https://gw.example/mcp/alpha/%2e%2e/%2E%2E/admin/v1", "", false},
		{"https://gw.example", "https://gw.example/mcp/alpha%2F..%2F..%2Fadmin%2Fv1", "", false},
		{"https://gw.example", "https://gw.example//admin/v1", "", false},
		{"https://gw.example/p", "https://gw.example/p/../other", "", false},
		{"https://gw.example/p", "https://gw.example/p/%2e%2e/other", "", false},
		{"https://gw.example/p", "https://gw.example/pq/mcp", "", false},
		{"https://gw.example/p", "https://gw.example/other", "", false},
		{"https://gw.example/p", "https://gw.example/admin/v1", "", false},
		// Another origin.
		{"https://gw.example", "http://gw.example/mcp", "", false},
		{"https://gw.example", "https://gw.example:8443/mcp", "", false},
		{"https://gw.example", "https://gw.example.evil/mcp", "", false},
		{"https://gw.example", "https://evil.example/admin/v1", "", false},
		{"https://gw.example", "https://user@gw.example/mcp", "", false},
		{"https://gw.example", "https://gw.example@evil.example/mcp", "", false},
		// Query, fragment, relative.
		{"https://gw.example", "https://gw.example/mcp#f", "", false},
		{"https://gw.example", "https://gw.example/mcp?x=1", "", false},
		{"https://gw.example", "/mcp", "", false},
	} {
		got, oe := parseTarget(tt.resource, tt.issuer)
		if tt.want == "" {
			if oe == nil || oe.Code != "invalid_target" || oe.Status != http.StatusBadRequest {
				t.Errorf("parseTarget(%q, %q) = %+v, %v; want invalid_target", tt.resource, tt.issuer, got, oe)
			}
			continue
		}
		if oe != nil || got.url != tt.want || got.admin() != tt.admin {
			t.Errorf("parseTarget(%q, %q) = %+v (admin %v), %v; want %q (admin %v)", tt.resource, tt.issuer, got, got.admin(), oe, tt.want, tt.admin)
		}
	}
}

func TestCheckRedirectURI(t *testing.T) {
	for u, ok := range map[string]bool{
		"https://app.example.com/cb": true, "http://127.0.0.1:1234/cb": true, "http://[::1]:1234/cb": true,
		"http://localhost:1234/cb": true, "http://LOCALHOST/cb": true, "https://app.example.com/cb?x=1": true,
		"http://app.example.com/cb": false, "http://127.0.0.2/cb": false, "https://app.example.com/cb#f": false,
		"https://app.example.com/cb#": false, "myapp://cb": false, "https://u:p@app.example.com/cb": false,
		"/cb": false, "javascript:alert(1)": false, "http://localhost.evil.example/cb": false,
		"https://a;b.example/cb": false, "https://a,b/cb": false, "https://[fe80::1%25eth0]/cb": false,
	} {
		if got := checkRedirectURI(u) == nil; got != ok {
			t.Errorf("checkRedirectURI(%q) ok = %v, want %v", u, got, ok)
		}
	}
}

func TestCheckMetadataURL(t *testing.T) {
	for _, tt := range []struct {
		id           string
		allowPrivate bool
		ok           bool
	}{
		{"https://app.example.com/client.json", false, true},
		{"https://app.example.com/c?v=1", false, true},
		{"https://app.example.com", false, false},
		{"https://app.example.com/", false, false},
		{"http://app.example.com/client.json", false, false},
		{"http://127.0.0.1:8080/client.json", false, false},
		{"http://127.0.0.1:8080/client.json", true, true},
		{"http://app.example.com/client.json", true, false},
		{"https://app.example.com/a/../client.json", false, false},
		{"https://app.example.com/client.json#x", false, false},
		{"https://u@app.example.com/client.json", false, false},
	} {
		if got := checkMetadataURL(tt.id, tt.allowPrivate) == nil; got != tt.ok {
			t.Errorf("checkMetadataURL(%q, %v) ok = %v, want %v", tt.id, tt.allowPrivate, got, tt.ok)
		}
	}
}

func TestMapClaims(t *testing.T) {
	claims := map[string]any{
		"sub": "s", "email": "e@x", "groups": "solo", "team": "t1",
		"realm_access":            map[string]any{"roles": []any{"r1", "r2", "r1", 3}},
		"https://example.com/org": "acme",
	}
	got := oauth.PersonOf(claims, config.ClaimPaths{Team: "team", Roles: "realm_access.roles", Org: "https://example.com/org"}.OrDefaults())
	want := oauth.Identity{User: "s", Email: "e@x", Teams: []string{"t1", "solo"}, Org: "acme", Roles: []string{"r1", "r2"}}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("mapClaims (-got +want):\n%s", diff)
	}
}

func TestSecurityHeaders(t *testing.T) {
	h := http.Header{}
	securityHeaders(h, "https://idp.example", "http://127.0.0.1:9", "https://a;script-src *", "", "https://idp.example")
	want := "default-src 'none'; style-src 'self' 'unsafe-inline'; form-action 'self' https://idp.example http://127.0.0.1:9; frame-ancestors 'none'; base-uri 'none'"
	if got := h.Get("Content-Security-Policy"); got != want {
		t.Errorf("CSP\n got %s\nwant %s", got, want)
	}
}

func TestLimiter(t *testing.T) {
	l := newLimiter(2, time.Minute)
	now := time.Now()
	first, second, third := l.allow("a", now), l.allow("a", now), l.allow("a", now)
	if !first || !second || third {
		t.Error("a: want two allowed, the third refused")
	}
	if !l.allow("b", now) {
		t.Error("b is limited by a's attempts")
	}
	if !l.allow("a", now.Add(time.Minute)) {
		t.Error("a is still limited after the window")
	}
	l.sweep(now.Add(2 * time.Minute))
	if len(l.keys) != 0 {
		t.Errorf("%d keys after the sweep", len(l.keys))
	}
}

func TestPendingBounded(t *testing.T) {
	ps := newPendingStore(2)
	now := time.Now()
	for i, want := range []bool{true, true, false} {
		if got := ps.add(&pending{id: string(rune('a' + i)), expires: now.Add(time.Minute)}, now); got != want {
			t.Errorf("add %d = %v, want %v", i, got, want)
		}
	}
	// Expired requests make room.
	if !ps.add(&pending{id: "z", expires: now.Add(2 * time.Minute)}, now.Add(time.Minute)) {
		t.Error("add after expiry refused")
	}
	if _, ok := ps.get("a", now.Add(time.Minute)); ok {
		t.Error("an expired request is still returned")
	}
}

// TestSharedSealKey: replicas of a fleet with their own data directories
// and one seal key (auth.login.seal_key) share the stored signing keys; a
// replica with another seal key fails to start and leaves them alone,
// where a fresh oauth-seal.key would have replaced them.
func TestSharedSealKey(t *testing.T) {
	st := openStore(t)
	login := &config.Login{Keys: true}
	key := []byte(strings.Repeat("k", 32))
	start := func(seal []byte) (*Server, error) {
		return New(t.Context(), Options{Login: login, Store: st, Keys: storeKeys{st}, DataDir: t.TempDir(), SealKey: seal})
	}
	a, err := start(key)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := start(key)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ka, kb := a.PublicKeys().Keys, b.PublicKeys().Keys
	if len(ka) != 1 || len(kb) != 1 || ka[0].KeyID != kb[0].KeyID {
		t.Fatalf("replicas with one seal key sign with different keys: %v / %v", ka, kb)
	}
	if _, err := start([]byte(strings.Repeat("x", 32))); err == nil || !strings.Contains(err.Error(), "seal_key") {
		t.Errorf("another seal key: err = %v", err)
	}
	if objs, _ := st.ListObjects(t.Context(), store.KindOAuthKey); len(objs) != 1 || objs[0].Name != ka[0].KeyID {
		t.Errorf("the stored signing keys changed: %v", objs)
	}
}
