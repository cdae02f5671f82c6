package authserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// wantErrorPage checks that the browser was shown an error page and not
// sent anywhere.
func wantErrorPage(t *testing.T, p *page, status int, code string) {
	t.Helper()
	if p.Location != nil || p.Header.Get("Location") != "" {
		t.Errorf("redirected to %v; want an error page", p.Location)
	}
	if p.Status != status || !strings.Contains(p.Body, "<code>"+code+"</code>") {
		body := p.Body
		if i := strings.Index(body, "<main>"); i >= 0 {
			body = body[i:]
		}
		t.Errorf("status %d, want %d with error %s:\n%s", p.Status, status, code, body)
	}
	if p.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(p.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("error page lacks the security headers: %v", p.Header)
	}
}

// TestAuthorizeErrors: a bad client or redirect URI gets an error page
// (never a redirect: that would be an open redirector); everything else
// goes back to the client as error=.
func TestAuthorizeErrors(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect, "https://app.example.com/cb"}})
	pk := newPKCE()
	pages := []struct {
		name   string
		client string
		extra  url.Values
		status int
		code   string
	}{
		{"redirect_uri not registered", reg.ClientID, url.Values{"redirect_uri": {"https://evil.example/cb"}}, 400, "invalid_request"},
		{"redirect_uri differs by a slash", reg.ClientID, url.Values{"redirect_uri": {redirect + "/"}}, 400, "invalid_request"},
		{"redirect_uri missing with two registered", reg.ClientID, url.Values{"redirect_uri": {""}}, 400, "invalid_request"},
		{"unknown client", "no-such-client", nil, 400, "invalid_client"},
		{"no client", "", nil, 400, "invalid_client"},
		{"client_id twice", reg.ClientID, url.Values{"client_id": {reg.ClientID, reg.ClientID}}, 400, "invalid_request"},
	}
	for _, tt := range pages {
		t.Run(tt.name, func(t *testing.T) {
			p := newBrowser(t, redirect).Get(h.authorizeURL(tt.client, redirect, pk, tt.extra))
			wantErrorPage(t, p, tt.status, tt.code)
		})
	}
	redirects := []struct {
		name  string
		extra url.Values
		code  string
	}{
		{"code_challenge missing", url.Values{"code_challenge": {""}}, "invalid_request"},
		{"code_challenge_method missing", url.Values{"code_challenge_method": {""}}, "invalid_request"},
		{"code_challenge_method plain", url.Values{"code_challenge_method": {"plain"}, "code_challenge": {pk.verifier}}, "invalid_request"},
		{"code_challenge malformed", url.Values{"code_challenge": {"short"}}, "invalid_request"},
		{"response_type token", url.Values{"response_type": {"token"}}, "unsupported_response_type"},
		{"resource on another host", url.Values{"resource": {"https://other.example/mcp"}}, "invalid_target"},
		{"resource with a fragment", url.Values{"resource": {h.url + "/mcp#x"}}, "invalid_target"},
		{"resource is the issuer", url.Values{"resource": {h.url}}, "invalid_target"},
		{"resource is the issuer with a slash", url.Values{"resource": {h.url + "/"}}, "invalid_target"},
		{"resource below the admin API", url.Values{"resource": {h.url + "/admin/v1/keys"}}, "invalid_target"},
		{"resource climbs to the admin API", url.Values{"resource": {h.url + "/mcp/alpha/../../admin/v1"}}, "invalid_target"},
		{"resource climbs encoded", url.Values{"resource": {h.url + "/mcp/alpha/%2e%2e/%2e%2e/admin/v1"}}, "invalid_target"},
		{"resource with an encoded slash", url.Values{"resource": {h.url + "/mcp/alpha%2F..%2F..%2Fadmin%2Fv1"}}, "invalid_target"},
		{"resource with a query", url.Values{"resource": {h.url + "/mcp?x=1"}}, "invalid_target"},
		{"resource is the token endpoint", url.Values{"resource": {h.url + "/oauth/token"}}, "invalid_target"},
		{"scope malformed", url.Values{"scope": {"a  b"}}, "invalid_scope"},
		{"state twice", url.Values{"scope": {"mcp", "mcp"}}, "invalid_request"},
	}
	for _, tt := range redirects {
		t.Run(tt.name, func(t *testing.T) {
			tt.extra.Set("state", "st")
			p := newBrowser(t, redirect).Get(h.authorizeURL(reg.ClientID, redirect, pk, tt.extra))
			wantRedirectError(t, h, p, "st", tt.code)
		})
	}
}

// TestTokenErrors covers the code and refresh grants' refusals.
func TestTokenErrors(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	other := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	secret := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "client_secret_basic"})
	post := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "client_secret_post"})
	b := newBrowser(t, redirect)
	newCode := func(clientID string) (string, pkce) {
		t.Helper()
		pk := newPKCE()
		return h.login(b, clientID, pk, nil), pk
	}

	t.Run("PKCE verifier mismatch", func(t *testing.T) {
		code, _ := newCode(reg.ClientID)
		wantError(t, h.redeem(reg.ClientID, code, newPKCE()), 400, "invalid_grant")
	})
	t.Run("verifier missing", func(t *testing.T) {
		code, _ := newCode(reg.ClientID)
		wantError(t, h.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {reg.ClientID}, "code": {code}, "redirect_uri": {redirect}}), 400, "invalid_request")
	})
	t.Run("code reused revokes what it gave", func(t *testing.T) {
		code, pk := newCode(reg.ClientID)
		first := h.redeem(reg.ClientID, code, pk)
		wantTokens(t, first)
		wantError(t, h.redeem(reg.ClientID, code, pk), 400, "invalid_grant")
		wantError(t, h.refresh(reg.ClientID, first.RefreshToken), 400, "invalid_grant")
	})
	t.Run("another client's code", func(t *testing.T) {
		code, pk := newCode(reg.ClientID)
		wantError(t, h.redeem(other.ClientID, code, pk), 400, "invalid_grant")
		// The rightful client can still use it.
		wantTokens(t, h.redeem(reg.ClientID, code, pk))
	})
	t.Run("redirect_uri differs", func(t *testing.T) {
		code, pk := newCode(reg.ClientID)
		wantError(t, h.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {reg.ClientID}, "code": {code},
			"redirect_uri": {"http://127.0.0.1:10/callback"}, "code_verifier": {pk.verifier}}), 400, "invalid_grant")
	})
	t.Run("resource differs", func(t *testing.T) {
		code, pk := newCode(reg.ClientID)
		wantError(t, h.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {reg.ClientID}, "code": {code},
			"redirect_uri": {redirect}, "code_verifier": {pk.verifier}, "resource": {h.url + "/other"}}), 400, "invalid_target")
	})
	t.Run("code expired", func(t *testing.T) {
		code, pk := newCode(reg.ClientID)
		h.clock.Advance(61 * time.Second)
		wantError(t, h.redeem(reg.ClientID, code, pk), 400, "invalid_grant")
	})
	t.Run("refresh replayed after rotation", func(t *testing.T) {
		code, pk := newCode(reg.ClientID)
		r1 := h.redeem(reg.ClientID, code, pk)
		r2 := h.refresh(reg.ClientID, r1.RefreshToken)
		wantTokens(t, r2)
		wantError(t, h.refresh(reg.ClientID, r1.RefreshToken), 400, "invalid_grant")
		// The replay revoked the family: the rotated successor is dead too.
		wantError(t, h.refresh(reg.ClientID, r2.RefreshToken), 400, "invalid_grant")
	})
	t.Run("refresh by another client", func(t *testing.T) {
		code, pk := newCode(reg.ClientID)
		r1 := h.redeem(reg.ClientID, code, pk)
		wantError(t, h.refresh(other.ClientID, r1.RefreshToken), 400, "invalid_grant")
		wantTokens(t, h.refresh(reg.ClientID, r1.RefreshToken))
	})
	t.Run("refresh widening the scope", func(t *testing.T) {
		code, pk := newCode(reg.ClientID)
		r1 := h.redeem(reg.ClientID, code, pk)
		wantError(t, h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {reg.ClientID}, "refresh_token": {r1.RefreshToken}, "scope": {"mcp admin"}}), 400, "invalid_scope")
	})
	t.Run("refresh family expired", func(t *testing.T) {
		code, pk := newCode(reg.ClientID)
		r1 := h.redeem(reg.ClientID, code, pk)
		h.clock.Advance(31 * 24 * time.Hour)
		defer h.clock.Advance(-31 * 24 * time.Hour)
		wantError(t, h.refresh(reg.ClientID, r1.RefreshToken), 400, "invalid_grant")
	})
	t.Run("wrong client_secret basic", func(t *testing.T) {
		r := h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}}, secret.ClientID+":wrong")
		wantError(t, r, 401, "invalid_client")
		if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Basic") {
			t.Errorf("WWW-Authenticate = %q, want Basic", got)
		}
	})
	t.Run("wrong client_secret post", func(t *testing.T) {
		r := h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {post.ClientID}, "client_secret": {"wrong"}})
		wantError(t, r, 401, "invalid_client")
		if got := r.header.Get("WWW-Authenticate"); got != "" {
			t.Errorf("WWW-Authenticate = %q without Basic auth", got)
		}
	})
	t.Run("confidential client without its secret", func(t *testing.T) {
		wantError(t, h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {secret.ClientID}}), 401, "invalid_client")
	})
	t.Run("basic client using post", func(t *testing.T) {
		wantError(t, h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {secret.ClientID}, "client_secret": {secret.ClientSecret}}), 401, "invalid_client")
	})
	t.Run("public client with a secret", func(t *testing.T) {
		wantError(t, h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}}, reg.ClientID+":made-up"), 401, "invalid_client")
	})
	t.Run("unknown client", func(t *testing.T) {
		wantError(t, h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {"nobody"}}), 401, "invalid_client")
	})
	t.Run("unsupported grant", func(t *testing.T) {
		wantError(t, h.token(url.Values{"grant_type": {"password"}, "client_id": {reg.ClientID}}), 400, "unsupported_grant_type")
	})
	t.Run("repeated parameter", func(t *testing.T) {
		wantError(t, h.token(url.Values{"grant_type": {"refresh_token", "refresh_token"}, "client_id": {reg.ClientID}}), 400, "invalid_request")
	})
	t.Run("not a form", func(t *testing.T) {
		resp, err := http.Post(h.url+"/oauth/token", "application/json", strings.NewReader(`{"grant_type":"refresh_token"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
}

// TestCallbackErrors: the IdP's redirect back is checked for its state,
// its RFC 9207 iss and the browser it arrives in.
func TestCallbackErrors(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	run := func(t *testing.T, b *browser) *page {
		return b.Get(h.authorizeURL(reg.ClientID, redirect, newPKCE(), url.Values{"state": {"cb"}}))
	}
	t.Run("state mismatch", func(t *testing.T) {
		h.idp.stateSuffix = "x"
		defer func() { h.idp.stateSuffix = "" }()
		wantErrorPage(t, run(t, newBrowser(t, redirect)), 400, "invalid_request")
	})
	t.Run("wrong iss", func(t *testing.T) {
		h.idp.iss = "https://evil.example"
		defer func() { h.idp.iss = "" }()
		wantErrorPage(t, run(t, newBrowser(t, redirect)), 400, "invalid_request")
	})
	t.Run("iss missing though advertised", func(t *testing.T) {
		h.idp.iss = "-"
		defer func() { h.idp.iss = "" }()
		wantErrorPage(t, run(t, newBrowser(t, redirect)), 400, "invalid_request")
	})
	t.Run("ID token for another audience", func(t *testing.T) {
		h.idp.claims = func(c map[string]any) { c["aud"] = "someone-else" }
		defer func() { h.idp.claims = nil }()
		wantRedirectError(t, h, run(t, newBrowser(t, redirect)), "cb", "server_error")
	})
	t.Run("ID token with another nonce", func(t *testing.T) {
		h.idp.claims = func(c map[string]any) { c["nonce"] = "replayed" }
		defer func() { h.idp.claims = nil }()
		wantRedirectError(t, h, run(t, newBrowser(t, redirect)), "cb", "server_error")
	})
	t.Run("callback in another browser", func(t *testing.T) {
		// Browser A starts; its callback URL is opened in browser B.
		a := newBrowser(t, h.url+"/oauth/callback")
		p := run(t, a)
		if p.Location == nil {
			t.Fatalf("no callback redirect: %d", p.Status)
		}
		wantErrorPage(t, newBrowser(t, redirect).Get(p.Location.String()), 400, "invalid_request")
		// The right browser can still finish, once.
		a.StopAt = redirect
		if got := a.Get(p.Location.String()); got.Status != 200 || !strings.Contains(got.Body, `name="decision"`) {
			t.Fatalf("the starting browser's callback: status %d", got.Status)
		}
		wantErrorPage(t, a.Get(p.Location.String()), 400, "invalid_request")
	})
	t.Run("no iss when not advertised", func(t *testing.T) {
		// RFC 9207 section 2.4: without the metadata flag a missing iss is
		// accepted. (A fresh server: the IdP metadata is cached.)
		h2 := newHarness(t)
		h2.idp.advertiseIss, h2.idp.iss = false, "-"
		reg2 := h2.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
		pk := newPKCE()
		wantTokens(t, h2.redeem(reg2.ClientID, h2.login(newBrowser(t, redirect), reg2.ClientID, pk, nil), pk))
	})
}

// TestConsentErrors: deny, a stale CSRF token, another browser.
func TestConsentErrors(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	start := func(b *browser) *page {
		p := b.Get(h.authorizeURL(reg.ClientID, redirect, newPKCE(), url.Values{"state": {"c"}}))
		if !strings.Contains(p.Body, `name="decision"`) {
			t.Fatalf("no consent page: %d", p.Status)
		}
		return p
	}
	t.Run("deny", func(t *testing.T) {
		b := newBrowser(t, redirect)
		wantRedirectError(t, h, b.Submit(h.url, start(b), "decision", url.Values{"decision": {"deny"}}), "c", "access_denied")
	})
	t.Run("wrong csrf", func(t *testing.T) {
		b := newBrowser(t, redirect)
		p := b.Submit(h.url, start(b), "decision", url.Values{"decision": {"approve"}, "csrf": {"forged"}})
		wantErrorPage(t, p, 403, "invalid_request")
	})
	t.Run("another browser", func(t *testing.T) {
		p := start(newBrowser(t, redirect))
		wantErrorPage(t, newBrowser(t, redirect).Submit(h.url, p, "decision", url.Values{"decision": {"approve"}}), 400, "invalid_request")
	})
	t.Run("decision twice", func(t *testing.T) {
		b := newBrowser(t, redirect)
		p := start(b)
		h.codeFrom(b.Submit(h.url, p, "decision", url.Values{"decision": {"approve"}}), "c")
		wantErrorPage(t, b.Submit(h.url, p, "decision", url.Values{"decision": {"approve"}}), 400, "invalid_request")
	})
}

// TestMetadataDocumentErrors: documents that must be refused.
func TestMetadataDocumentErrors(t *testing.T) {
	serve := func(t *testing.T, tls bool, doc func(self string) any) string {
		var self string
		hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(doc(self))
		})
		var srv *httptest.Server
		if tls {
			srv = httptest.NewTLSServer(hf)
		} else {
			srv = httptest.NewServer(hf)
		}
		t.Cleanup(srv.Close)
		self = srv.URL + "/client.json"
		return self
	}
	good := func(self string) any {
		return oauth.ClientMetadata{ClientID: self, ClientName: "C", RedirectURIs: []string{redirect}}
	}

	t.Run("private address refused", func(t *testing.T) {
		// https, so only the address guard can refuse it: 127.0.0.1 is
		// loopback, checked on the dialled address.
		// (The refusal must come from the guard, before any TLS handshake
		// with the test server's untrusted certificate.)
		h := newHarness(t)
		id := serve(t, true, good)
		p := newBrowser(t, redirect).Get(h.authorizeURL(id, redirect, newPKCE(), nil))
		wantErrorPage(t, p, 400, "invalid_client")
		if !strings.Contains(p.Body, "address that is not allowed") {
			t.Errorf("refused for another reason:\n%s", p.Body)
		}
		// A name is judged by the address it resolves to when dialled.
		byName := strings.Replace(id, "127.0.0.1", "localhost", 1)
		p = newBrowser(t, redirect).Get(h.authorizeURL(byName, redirect, newPKCE(), nil))
		wantErrorPage(t, p, 400, "invalid_client")
		if !strings.Contains(p.Body, "address that is not allowed") {
			t.Errorf("localhost refused for another reason:\n%s", p.Body)
		}
		if got := h.srv.meta.cache; len(got) != 0 {
			t.Errorf("refused documents cached: %v", got)
		}
	})
	t.Run("http refused", func(t *testing.T) {
		h := newHarness(t)
		id := serve(t, false, good)
		wantErrorPage(t, newBrowser(t, redirect).Get(h.authorizeURL(id, redirect, newPKCE(), nil)), 400, "invalid_client")
	})
	cases := []struct {
		name string
		doc  func(self string) any
		code string
	}{
		{"client_id differs", func(self string) any {
			return oauth.ClientMetadata{ClientID: self + "?x", RedirectURIs: []string{redirect}}
		}, "invalid_client"},
		{"no redirect_uris", func(self string) any { return oauth.ClientMetadata{ClientID: self} }, "invalid_client"},
		{"shared secret", func(self string) any {
			return oauth.ClientMetadata{ClientID: self, RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "client_secret_basic"}
		}, "invalid_client"},
		{"private_key_jwt", func(self string) any {
			return oauth.ClientMetadata{ClientID: self, RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "private_key_jwt"}
		}, "invalid_client"},
		{"not JSON", func(self string) any { return "just a string" }, "invalid_client"},
	}
	h := newHarness(t, withPrivateMetadata())
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			id := serve(t, false, tt.doc)
			wantErrorPage(t, newBrowser(t, redirect).Get(h.authorizeURL(id, redirect, newPKCE(), nil)), 400, tt.code)
		})
	}
	t.Run("redirect_uri not in the document", func(t *testing.T) {
		id := serve(t, false, good)
		p := newBrowser(t, redirect).Get(h.authorizeURL(id, "http://127.0.0.1:10/other", newPKCE(), nil))
		wantErrorPage(t, p, 400, "invalid_request")
	})
	t.Run("no redirects followed", func(t *testing.T) {
		target := serve(t, false, good)
		mover := httptest.NewServer(http.RedirectHandler(target, http.StatusFound))
		t.Cleanup(mover.Close)
		p := newBrowser(t, redirect).Get(h.authorizeURL(mover.URL+"/client.json", redirect, newPKCE(), nil))
		wantErrorPage(t, p, 400, "invalid_client")
	})
	t.Run("too large", func(t *testing.T) {
		id := serve(t, false, func(self string) any {
			return oauth.ClientMetadata{ClientID: self, RedirectURIs: []string{redirect}, ClientName: strings.Repeat("x", 70<<10)}
		})
		wantErrorPage(t, newBrowser(t, redirect).Get(h.authorizeURL(id, redirect, newPKCE(), nil)), 400, "invalid_client")
	})
}

// TestRegisterErrors: RFC 7591 section 3.2.2 errors.
func TestRegisterErrors(t *testing.T) {
	h := newHarness(t)
	for _, tt := range []struct {
		name string
		body any
		code string
	}{
		{"http on a public host", oauth.ClientMetadata{RedirectURIs: []string{"http://app.example.com/cb"}}, "invalid_redirect_uri"},
		{"fragment", oauth.ClientMetadata{RedirectURIs: []string{"https://app.example.com/cb#x"}}, "invalid_redirect_uri"},
		{"custom scheme", oauth.ClientMetadata{RedirectURIs: []string{"myapp://cb"}}, "invalid_redirect_uri"},
		{"no redirect_uris", oauth.ClientMetadata{ClientName: "x"}, "invalid_redirect_uri"},
		{"unknown auth method", oauth.ClientMetadata{RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "private_key_jwt"}, "invalid_client_metadata"},
		{"implicit grant", oauth.ClientMetadata{RedirectURIs: []string{redirect}, GrantTypes: []string{"implicit"}}, "invalid_client_metadata"},
		{"token response type", oauth.ClientMetadata{RedirectURIs: []string{redirect}, ResponseTypes: []string{"token"}}, "invalid_client_metadata"},
		{"not an object", []string{"x"}, "invalid_client_metadata"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := h.postJSON("/oauth/register", tt.body)
			var e struct{ Error string }
			json.Unmarshal(body, &e)
			if status != 400 || e.Error != tt.code {
				t.Errorf("status %d, %s; want 400 %s", status, body, tt.code)
			}
		})
	}
	t.Run("larger than 64 KiB", func(t *testing.T) {
		resp, err := http.Post(h.url+"/oauth/register", "application/json", strings.NewReader(`{"client_name":"`+strings.Repeat("x", 65<<10)+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
}
