package authserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

const redirect = "http://127.0.0.1:9/callback"

// login runs one authorization through the IdP and consent (when asked
// for) and returns the code.
func (h *harness) login(b *browser, clientID string, pk pkce, extra url.Values) string {
	h.t.Helper()
	u := h.authorizeURL(clientID, redirect, pk, extra)
	state, _ := url.Parse(u)
	p := b.Get(u)
	if p.Location == nil {
		p = h.approve(b, p)
	}
	return h.codeFrom(p, state.Query().Get("state"))
}

func (h *harness) redeem(clientID, code string, pk pkce) tokenReply {
	h.t.Helper()
	return h.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {code},
		"redirect_uri": {redirect}, "code_verifier": {pk.verifier}, "resource": {h.url + "/mcp"}})
}

func (h *harness) refresh(clientID, rt string) tokenReply {
	h.t.Helper()
	return h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {clientID}, "refresh_token": {rt}})
}

// TestIdPFlow is the whole journey of an MCP client that registers by
// DCR: authorize with PKCE, the IdP round trip, consent, the code, the
// token, and two refreshes; then a second authorization that skips
// consent.
func TestIdPFlow(t *testing.T) { testIdPFlow(t) }

// TestFleetIdPFlow: the same journey behind a round-robin balancer over
// two replicas: every step lands on the other replica than the one
// before, so pending requests, codes and refresh rotation must be the
// fleet's, not one process's.
func TestFleetIdPFlow(t *testing.T) { testIdPFlow(t, withFleet()) }

func testIdPFlow(t *testing.T, opts ...harnessOpt) {
	h := newHarness(t, opts...)
	reg := h.register(oauth.ClientMetadata{ClientName: "Test Client", RedirectURIs: []string{redirect}})
	if reg.ClientID == "" || reg.ClientIDIssuedAt == 0 || reg.TokenEndpointAuthMethod != "none" || reg.ClientSecret != "" {
		t.Fatalf("registration = %+v", reg)
	}

	b := newBrowser(t, redirect)
	pk := newPKCE()
	u := h.authorizeURL(reg.ClientID, redirect, pk, url.Values{"state": {"s-1"}})
	p := b.Get(u)
	if p.Status != http.StatusOK || !strings.Contains(p.Body, "Test Client") || !strings.Contains(p.Body, "127.0.0.1:9") {
		t.Fatalf("consent page: status %d:\n%s", p.Status, p.Body)
	}
	for k, want := range map[string]string{
		"X-Frame-Options": "DENY",
		"Cache-Control":   "no-store",
	} {
		if got := p.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	csp := p.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "form-action 'self'", "http://127.0.0.1:9"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(p.Body, "<script") {
		t.Error("the consent page has a script")
	}
	code := h.codeFrom(h.approve(b, p), "s-1")

	r := h.redeem(reg.ClientID, code, pk)
	wantTokens(t, r)
	if r.Scope != "mcp" || r.ExpiresIn != 15*60 {
		t.Errorf("scope %q, expires_in %d", r.Scope, r.ExpiresIn)
	}
	std, all := h.verifyAccess(r.AccessToken)
	if !strings.HasSuffix(std.Subject, ":u-123") || len(std.Subject) != len("0123456789abcdef:u-123") {
		t.Errorf("sub = %q, want <issuer hash>:u-123", std.Subject)
	}
	if !slices.Equal(std.Audience, []string{h.url + "/mcp"}) {
		t.Errorf("aud = %v", std.Audience)
	}
	if std.ID == "" || std.IssuedAt == nil || std.NotBefore == nil || std.Expiry == nil {
		t.Errorf("jti/iat/nbf/exp missing: %+v", std)
	}
	for k, want := range map[string]any{
		"client_id": reg.ClientID, "scope": "mcp", "user": "ada", "email": "ada@example.com", "org": "example",
		"teams": []any{"eng", "sre"}, "roles": []any{"admin"},
	} {
		if diff := cmp.Diff(all[k], want); diff != "" {
			t.Errorf("claim %s (-got +want):\n%s", k, diff)
		}
	}
	if _, ok := all["mcpgate_key"]; ok {
		t.Error("an IdP login's token has mcpgate_key")
	}

	r2 := h.refresh(reg.ClientID, r.RefreshToken)
	wantTokens(t, r2)
	if r2.RefreshToken == r.RefreshToken {
		t.Error("the refresh token was not rotated")
	}
	if _, all2 := h.verifyAccess(r2.AccessToken); all2["user"] != "ada" || all2["jti"] == all["jti"] {
		t.Errorf("refreshed token claims: %v", all2)
	}
	r3 := h.refresh(reg.ClientID, r2.RefreshToken)
	wantTokens(t, r3)

	// The person approved this client: the next authorization goes
	// straight back with a code.
	pk2 := newPKCE()
	p = b.Get(h.authorizeURL(reg.ClientID, redirect, pk2, url.Values{"state": {"s-2"}}))
	wantTokens(t, h.redeem(reg.ClientID, h.codeFrom(p, "s-2"), pk2))
}

// TestIdPConfidential: mcpgate authenticates at the IdP's token endpoint
// with client_secret_basic when it has a secret.
func TestIdPConfidential(t *testing.T) {
	h := newHarness(t, withIdPSecret("s3cret/with+chars"))
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	pk := newPKCE()
	wantTokens(t, h.redeem(reg.ClientID, h.login(newBrowser(t, redirect), reg.ClientID, pk, nil), pk))
}

// TestMetadataDocumentFlow uses a client ID metadata document served by
// the client instead of a registration.
func TestMetadataDocumentFlow(t *testing.T) {
	h := newHarness(t, withPrivateMetadata())
	var docURL string
	doc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/json" {
			t.Errorf("Accept = %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=60")
		json.NewEncoder(w).Encode(oauth.ClientMetadata{ClientID: docURL, ClientName: "Document Client",
			RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none"})
	}))
	t.Cleanup(doc.Close)
	docURL = doc.URL + "/client.json"

	b := newBrowser(t, redirect)
	pk := newPKCE()
	p := b.Get(h.authorizeURL(docURL, redirect, pk, url.Values{"state": {"d-1"}}))
	if !strings.Contains(p.Body, "Document Client") || !strings.Contains(p.Body, docURL) {
		t.Fatalf("consent page does not name the document's client:\n%s", p.Body)
	}
	code := h.codeFrom(h.approve(b, p), "d-1")
	r := h.redeem(docURL, code, pk)
	wantTokens(t, r)
	if _, all := h.verifyAccess(r.AccessToken); all["client_id"] != docURL {
		t.Errorf("client_id claim = %v", all["client_id"])
	}
	wantTokens(t, h.refresh(docURL, r.RefreshToken))
}

// TestKeyLogin logs in with a pasted virtual key, after a wrong one.
func TestKeyLogin(t *testing.T) { testKeyLogin(t) }

// TestFleetKeyLogin: a key login across two replicas.
func TestFleetKeyLogin(t *testing.T) { testKeyLogin(t, withFleet()) }

func testKeyLogin(t *testing.T, opts ...harnessOpt) {
	h := newHarness(t, append([]harnessOpt{withoutIdP(), withStoreKeys()}, opts...)...)
	secret := addKey(t, h.store, "ada-laptop", "ada", "eng")
	reg := h.register(oauth.ClientMetadata{ClientName: "Key Client", RedirectURIs: []string{redirect}})

	b := newBrowser(t, redirect)
	pk := newPKCE()
	p := b.Get(h.authorizeURL(reg.ClientID, redirect, pk, url.Values{"state": {"k-1"}}))
	if p.Status != http.StatusOK || !strings.Contains(p.Body, `name="key"`) || strings.Contains(p.Body, `value="idp"`) {
		t.Fatalf("login page: status %d:\n%s", p.Status, p.Body)
	}
	if csp := p.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self'") {
		t.Errorf("CSP = %q", csp)
	}
	p = b.Submit(h.url, p, `name="key"`, url.Values{"key": {"mcpgate_wrong"}})
	if p.Status != http.StatusUnauthorized || !strings.Contains(p.Body, "not accepted") || !strings.Contains(p.Body, `name="key"`) {
		t.Fatalf("wrong key: status %d:\n%s", p.Status, p.Body)
	}
	p = b.Submit(h.url, p, `name="key"`, url.Values{"key": {secret}})
	code := h.codeFrom(h.approve(b, p), "k-1")
	r := h.redeem(reg.ClientID, code, pk)
	wantTokens(t, r)
	std, all := h.verifyAccess(r.AccessToken)
	if std.Subject != "key:ada-laptop" {
		t.Errorf("sub = %q", std.Subject)
	}
	for k, want := range map[string]any{"mcpgate_key": "ada-laptop", "user": "ada", "teams": []any{"eng"}} {
		if diff := cmp.Diff(all[k], want); diff != "" {
			t.Errorf("claim %s (-got +want):\n%s", k, diff)
		}
	}

	// Deleting the key ends the login at its next refresh.
	r2 := h.refresh(reg.ClientID, r.RefreshToken)
	wantTokens(t, r2)
	if err := h.store.DeleteKey(t.Context(), "ada-laptop"); err != nil {
		t.Fatal(err)
	}
	wantError(t, h.refresh(reg.ClientID, r2.RefreshToken), http.StatusBadRequest, "invalid_grant")
}

// TestKeyLoginRateLimit: every attempt from one address counts, and the
// eleventh in a minute is refused before the key is looked at.
func TestKeyLoginRateLimit(t *testing.T) {
	h := newHarness(t, withoutIdP(), withStoreKeys())
	secret := addKey(t, h.store, "k", "", "")
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	b := newBrowser(t, redirect)
	p := b.Get(h.authorizeURL(reg.ClientID, redirect, newPKCE(), nil))
	for i := range 10 {
		if p = b.Submit(h.url, p, `name="key"`, url.Values{"key": {"wrong"}}); p.Status != http.StatusUnauthorized {
			t.Fatalf("attempt %d: status %d", i+1, p.Status)
		}
	}
	if p = b.Submit(h.url, p, `name="key"`, url.Values{"key": {secret}}); p.Status != http.StatusTooManyRequests {
		t.Fatalf("attempt 11: status %d, want 429", p.Status)
	}
	h.clock.Advance(61 * time.Second)
	p = b.Submit(h.url, p, `name="key"`, url.Values{"key": {secret}})
	if p.Status != http.StatusOK || !strings.Contains(p.Body, `name="decision"`) {
		t.Fatalf("after a minute: status %d", p.Status)
	}
}

// TestKeyOrIdP offers both logins on one page; the person picks the IdP.
func TestKeyOrIdP(t *testing.T) {
	h := newHarness(t, withStoreKeys())
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	b := newBrowser(t, redirect)
	pk := newPKCE()
	p := b.Get(h.authorizeURL(reg.ClientID, redirect, pk, url.Values{"state": {"b-1"}}))
	if !strings.Contains(p.Body, `name="key"`) || !strings.Contains(p.Body, `value="idp"`) {
		t.Fatalf("login page lacks a choice:\n%s", p.Body)
	}
	if csp := p.Header.Get("Content-Security-Policy"); !strings.Contains(csp, h.idp.issuer()) {
		t.Errorf("CSP %q does not let the form lead to the IdP", csp)
	}
	p = b.Submit(h.url, p, `value="idp"`, url.Values{"login": {"idp"}})
	code := h.codeFrom(h.approve(b, p), "b-1")
	r := h.redeem(reg.ClientID, code, pk)
	wantTokens(t, r)
	if _, all := h.verifyAccess(r.AccessToken); all["user"] != "ada" {
		t.Errorf("user = %v", all["user"])
	}
}

// TestConfidentialClient registers with client_secret_basic and
// authenticates at the token endpoint with it.
func TestConfidentialClient(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "client_secret_basic"})
	if reg.ClientSecret == "" {
		t.Fatal("no client_secret issued")
	}
	status, raw := h.postJSON("/oauth/register", oauth.ClientMetadata{RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "client_secret_post"})
	if status != http.StatusCreated || !strings.Contains(string(raw), `"client_secret_expires_at":0`) {
		t.Errorf("registration with a secret lacks client_secret_expires_at: %s", raw)
	}
	if o, err := h.store.GetObject(t.Context(), "oauth_client", reg.ClientID); err != nil || strings.Contains(string(o.Doc), reg.ClientSecret) {
		t.Fatalf("stored client holds the secret (or %v)", err)
	}
	b := newBrowser(t, redirect)
	pk := newPKCE()
	code := h.login(b, reg.ClientID, pk, nil)
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}, "code_verifier": {pk.verifier}}
	r := h.token(form, reg.ClientID+":"+reg.ClientSecret)
	wantTokens(t, r)
	wantTokens(t, h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.RefreshToken}}, reg.ClientID+":"+reg.ClientSecret))
}

// TestConcurrentRefresh: of many refreshes racing with one token, exactly
// one wins.
func TestConcurrentRefresh(t *testing.T) { testConcurrentRefresh(t) }

// TestFleetConcurrentRefresh: of refreshes racing on two replicas, one wins.
func TestFleetConcurrentRefresh(t *testing.T) { testConcurrentRefresh(t, withFleet()) }

func testConcurrentRefresh(t *testing.T, opts ...harnessOpt) {
	h := newHarness(t, opts...)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	pk := newPKCE()
	r := h.redeem(reg.ClientID, h.login(newBrowser(t, redirect), reg.ClientID, pk, nil), pk)
	wantTokens(t, r)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 8 {
		wg.Go(func() {
			if got := h.refresh(reg.ClientID, r.RefreshToken); got.status == http.StatusOK {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != 1 {
		t.Errorf("%d concurrent refreshes succeeded, want 1", ok)
	}
}

// TestRevoke: a revoked refresh token's family is over; unknown tokens
// are answered 200 too.
func TestRevoke(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	pk := newPKCE()
	r := h.redeem(reg.ClientID, h.login(newBrowser(t, redirect), reg.ClientID, pk, nil), pk)
	wantTokens(t, r)
	if got := h.postForm("/oauth/revoke", url.Values{"client_id": {reg.ClientID}, "token": {"not-a-token"}}); got.status != http.StatusOK {
		t.Errorf("revoke unknown: status %d", got.status)
	}
	if got := h.postForm("/oauth/revoke", url.Values{"client_id": {reg.ClientID}, "token": {r.RefreshToken}, "token_type_hint": {"refresh_token"}}); got.status != http.StatusOK {
		t.Errorf("revoke: status %d", got.status)
	}
	wantError(t, h.refresh(reg.ClientID, r.RefreshToken), http.StatusBadRequest, "invalid_grant")
}

// TestRefreshNarrowsScope: a refresh may ask for less than was granted;
// the next refresh may ask for all of it again.
func TestRefreshNarrowsScope(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	pk := newPKCE()
	r := h.redeem(reg.ClientID, h.login(newBrowser(t, redirect), reg.ClientID, pk, url.Values{"scope": {"mcp offline_access"}}), pk)
	if r.Scope != "mcp offline_access" {
		t.Fatalf("granted %q", r.Scope)
	}
	r2 := h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {reg.ClientID}, "refresh_token": {r.RefreshToken}, "scope": {"mcp"}})
	wantTokens(t, r2)
	if _, all := h.verifyAccess(r2.AccessToken); r2.Scope != "mcp" || all["scope"] != "mcp" {
		t.Errorf("narrowed: scope %q, claim %v", r2.Scope, all["scope"])
	}
	if r3 := h.refresh(reg.ClientID, r2.RefreshToken); r3.Scope != "mcp offline_access" {
		t.Errorf("after narrowing: scope %q", r3.Scope)
	}
}
