package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/oauth/authserver"
)

// fakeConfirmer stands in for the authorization server's IdP login: its
// Confirm sends the browser straight back with the code the test chose.
type fakeConfirmer struct {
	mu      sync.Mutex
	next    string              // the code Confirm hands out
	persons map[string][]string // code -> who logged in
	started int
}

func (f *fakeConfirmer) CanConfirm() bool { return true }

func (f *fakeConfirmer) Confirm(w http.ResponseWriter, r *http.Request, returnTo string) error {
	f.mu.Lock()
	f.started++
	code := f.next
	f.mu.Unlock()
	u, _ := url.Parse(returnTo)
	q := u.Query()
	q.Set(gateway.ConfirmParam, code)
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
	return nil
}

func (f *fakeConfirmer) ConfirmedPersons(code string) ([]string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.persons[code]
	delete(f.persons, code)
	return p, ok
}

// A person signed in with their company identity (a JWT caller, no key
// to paste) opens a connect link: the browser first signs in at the IdP
// (the authorization server's confirmation), and only the link's own
// person goes on to connect. Without an IdP to confirm with, such a
// person is not asked with a link nobody could complete.
func TestOAuth2UserConfirmOIDCPerson(t *testing.T) {
	clearAdminEnv(t)
	if authserver.ConfirmParam != gateway.ConfirmParam {
		t.Fatalf("the confirmation parameter differs: %q, %q", authserver.ConfirmParam, gateway.ConfirmParam)
	}
	up := newOAuthUpstream(t, time.Hour)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var idp *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": idp.URL, "jwks_uri": idp.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	idp = httptest.NewServer(mux)
	t.Cleanup(idp.Close)
	token := func(sub string) string {
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: idp.URL, Subject: sub, Audience: jwt.Audience{"gw"},
			IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__",
		Auth: &config.CallerAuth{OIDC: []config.OIDCIssuer{{Issuer: idp.URL, Audience: "gw", Claims: config.ClaimPaths{}.OrDefaults()}},
			Grants: []config.Grant{{User: "alice"}, {User: "bob"}}},
		Vault: &config.Vault{Keys: []config.VaultKey{{ID: "k1", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32))}}},
		Servers: map[string]*config.Server{
			"up": {Name: "up", Transport: config.TransportHTTP, URL: up.mcp, Timeout: 5 * time.Second, ProtocolVersion: "2025-06-18", Auth: &config.Auth{Type: config.AuthOAuth2User}},
		}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stk.close(context.Background()) })
	hs := httptest.NewServer(stk.handler)
	t.Cleanup(hs.Close)
	callback := hs.URL + "/oauth/connect/callback"
	alice, bob := "oidc:"+idp.URL+"|alice", "oidc:"+idp.URL+"|bob"

	client := func(tok string, asks chan<- string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "confirm-test", Version: "1"}, &mcp.ClientOptions{
			Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
			ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asks <- req.Params.URL
				return &mcp.ElicitResult{Action: "accept"}, nil
			},
		})
		cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp/up",
			HTTPClient: &http.Client{Transport: bearerRT{tok}}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}

	// No IdP to confirm with (no auth.login): alice is not sent a link she
	// could not complete. On the server's own route her initialize gets
	// the S9.1 challenge instead, although her client could be asked.
	c0 := mcp.NewClient(&mcp.Implementation{Name: "confirm-test", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			t.Error("asked without a confirmer")
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	if _, err := c0.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp/up",
		HTTPClient: &http.Client{Transport: bearerRT{token("alice")}}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("alice's initialize without a confirmer: %v", err)
	}

	fc := &fakeConfirmer{persons: map[string][]string{}}
	stk.gw.SetPersonConfirmer(fc)
	asks := make(chan string, 4)
	cs := client(token("alice"), asks)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
		done <- err
	}()
	var link string
	select {
	case link = <-asks:
	case err := <-done:
		t.Fatalf("no URL elicitation: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no URL elicitation")
	}

	// bob signs in and opens alice's link: refused.
	fc.mu.Lock()
	fc.next, fc.persons["bob-code"] = "bob-code", []string{bob}
	fc.mu.Unlock()
	b := newTestBrowser(t, callback)
	if p := b.Get(link); p.Status != http.StatusForbidden || !strings.Contains(p.Body, "somebody else") {
		t.Errorf("alice's link after bob's sign-in: %d %s", p.Status, p.Body)
	}
	// An unknown or reused code is refused.
	if p := b.Get(link + "&" + gateway.ConfirmParam + "=bob-code"); p.Status != http.StatusBadRequest {
		t.Errorf("a spent confirmation: %d", p.Status)
	}

	// alice signs in (her login stands for her under either issuer) and
	// connects; the call goes on.
	fc.mu.Lock()
	fc.next, fc.persons["alice-code"] = "alice-code", []string{"oidc:https://as.example|x:alice", alice}
	fc.mu.Unlock()
	a := newTestBrowser(t, callback)
	a.StopAt = up.base
	p := a.Get(link)
	a.StopAt = callback
	cb := a.authorize(up, p)
	if p := a.get(cb.String(), ""); p.Status != http.StatusOK {
		t.Fatalf("callback: %d %s", p.Status, p.Body)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("alice's call after connecting: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not go on")
	}
	if fc.started != 2 {
		t.Errorf("sign-ins started: %d, want 2", fc.started)
	}
	if e, err := stk.vault.Get(t.Context(), alice, "up"); err != nil || e.AccessToken == "" {
		t.Errorf("alice's connection: %v", err)
	}
	if _, err := stk.vault.Get(t.Context(), bob, "up"); err == nil {
		t.Error("bob got a connection")
	}
}

// bearerRT sends Authorization: Bearer tok.
type bearerRT struct{ tok string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}
