package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/admin"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/authserver"
	"github.com/mcpgate/mcpgate/internal/oauth/authserver/astest"
)

// TestOwnTokensAreBoundToOneResource is hole 2 of issue 22 against the
// wired gateway: an administrator signs in an MCP client at mcpgate's own
// authorization server for /mcp/alpha; the same client then asks for the
// admin API and, instead of a code, gets the consent page naming the
// admin API and warning that it gives administrator rights. Every token
// works on its own resource only (alpha's not on beta, /mcp or the admin
// API; the admin API's on no MCP route), a request without resource gets
// a /mcp token, and an external issuer's gateway-wide audience opens the
// MCP routes but never the admin API. Nothing the refused tokens tried
// happened: no key was created.
func TestOwnTokensAreBoundToOneResource(t *testing.T) {
	clearAdminEnv(t)
	if authserver.AdminPath != admin.Prefix {
		t.Fatalf("the admin API's path differs: %q, %q", authserver.AdminPath, admin.Prefix)
	}
	const (
		master   = "mk-own-as-test-0123456789abcdef"
		opsKey   = "mcpg_ops-admin-key-0123456789abcdef"
		redirect = "http://127.0.0.1:9/callback"
	)
	up := httptest.NewServer(sdkHandler(""))
	t.Cleanup(up.Close)

	// An external OIDC issuer whose tokens carry a gateway-wide audience.
	idpKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var idp *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": idp.URL, "jwks_uri": idp.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &idpKey.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	idp = httptest.NewServer(mux)
	t.Cleanup(idp.Close)
	idpToken := func(aud ...string) string {
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: idpKey}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		tok, err := jwt.Signed(signer).Claims(map[string]any{"iss": idp.URL, "sub": "root", "aud": aud, "roles": []string{"admin"},
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	hs := httptest.NewUnstartedServer(nil)
	base := "http://" + hs.Listener.Addr().String()
	doc := "listen: 127.0.0.1:0\ndata_dir: " + t.TempDir() + "\npublic_url: " + base + "\n" +
		"auth:\n  master_key: " + master + "\n" +
		"  keys:\n    - {alias: ops, key: " + opsKey + ", user: olga, admin: true}\n" +
		"  login: {keys: true}\n" +
		"  oidc:\n    - {issuer: " + idp.URL + ", audience: gw, claims: {user: sub, roles: roles}}\n" +
		"  grants:\n    - {role: admin, admin: true}\n" +
		"servers:\n  alpha: {transport: http, url: " + up.URL + "}\n  beta: {transport: http, url: " + up.URL + "}\n"
	stk := buildDoc(t, doc)
	hs.Config.Handler = stk.handler
	hs.Start()
	t.Cleanup(hs.Close)

	// status sends what a client sends with tok: initialize to an MCP
	// route, a GET (or a POST creating a key) to the admin API.
	status := func(tok, path string) int {
		t.Helper()
		method, body := http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
		switch path {
		case "/admin/v1/keys":
			method, body = http.MethodGet, ""
		case "POST /admin/v1/keys":
			path, body = "/admin/v1/keys", `{"alias":"stolen","admin":true}`
		}
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	want := func(who, tok string, statuses map[string]int) {
		t.Helper()
		for path, code := range statuses {
			if got := status(tok, path); got != code {
				t.Errorf("%s on %s: %d, want %d", who, path, got, code)
			}
		}
	}

	// The MCP client registers, as MCP clients do.
	var reg oauth.ClientMetadata
	resp, err := http.Post(base+"/oauth/register", "application/json", strings.NewReader(`{"client_name":"Some MCP Client","redirect_uris":["`+redirect+`"],"token_endpoint_auth_method":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if reg.ClientID == "" {
		t.Fatal("registration failed")
	}
	b := astest.NewBrowser(t, redirect)
	// signIn runs one authorization for resource ("" = none named) up to
	// the page after the key login.
	signIn := func(resource string) (*astest.Page, string) {
		t.Helper()
		verifier := strings.Repeat("v", 30) + randomHex(t)
		sum := sha256.Sum256([]byte(verifier))
		q := url.Values{"response_type": {"code"}, "client_id": {reg.ClientID}, "redirect_uri": {redirect}, "state": {"s"},
			"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
		if resource != "" {
			q.Set("resource", resource)
		}
		p := b.Get(base + "/oauth/authorize?" + q.Encode())
		return b.Submit(base, p, `name="key"`, url.Values{"key": {opsKey}}), verifier
	}
	redeem := func(p *astest.Page, verifier string) string {
		t.Helper()
		if p.Location == nil || p.Location.Query().Get("code") == "" {
			t.Fatalf("no code (status %d, location %v):\n%s", p.Status, p.Location, p.Body)
		}
		resp, err := http.PostForm(base+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "client_id": {reg.ClientID},
			"code": {p.Location.Query().Get("code")}, "redirect_uri": {redirect}, "code_verifier": {verifier}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var tr struct {
			AccessToken string `json:"access_token"`
		}
		if json.NewDecoder(resp.Body).Decode(&tr); resp.StatusCode != http.StatusOK || tr.AccessToken == "" {
			t.Fatalf("token: status %d", resp.StatusCode)
		}
		return tr.AccessToken
	}
	consent := func(p *astest.Page, words string) *astest.Page {
		t.Helper()
		if p.Location != nil || !strings.Contains(p.Body, `name="decision"`) {
			t.Fatalf("want the consent page for %s; got status %d, sent to %v", words, p.Status, p.Location)
		}
		if !strings.Contains(p.Body, words) {
			t.Errorf("the consent page does not say %q:\n%s", words, p.Body)
		}
		return b.Submit(base, p, "decision", url.Values{"decision": {"approve"}})
	}

	// alpha, approved.
	p, v := signIn(base + "/mcp/alpha")
	alphaTok := redeem(consent(p, "the MCP server alpha at "+base+"/mcp/alpha"), v)
	// The admin API, by the same client: asked, by name, with the
	// warning; approved this once.
	p, v = signIn(base + "/admin/v1")
	if strings.Contains(p.Body, `name="decision"`) && !strings.Contains(p.Body, "You are an administrator of this gateway") {
		t.Errorf("the admin API's consent page does not warn an administrator:\n%s", p.Body)
	}
	adminTok := redeem(consent(p, "the admin API of mcpgate at "+base), v)
	// And again: asked again.
	p, _ = signIn(base + "/admin/v1/")
	if p.Location != nil {
		t.Errorf("a second authorization for the admin API was not asked for: sent to %v", p.Location)
	}
	// No resource named: /mcp.
	p, v = signIn("")
	noResTok := redeem(consent(p, "every MCP server of mcpgate at "+base+"/mcp"), v)
	// A route the gateway does not have, the issuer, a climb to admin.
	for _, res := range []string{base + "/mcp/gamma", base, base + "/mcp/alpha/%2e%2e/%2e%2e/admin/v1"} {
		q := url.Values{"response_type": {"code"}, "client_id": {reg.ClientID}, "redirect_uri": {redirect}, "state": {"s"},
			"code_challenge": {strings.Repeat("A", 43)}, "code_challenge_method": {"S256"}, "resource": {res}}
		p := b.Get(base + "/oauth/authorize?" + q.Encode())
		if p.Location == nil || p.Location.Query().Get("error") != "invalid_target" {
			t.Errorf("resource %s: status %d, sent to %v; want error=invalid_target", res, p.Status, p.Location)
		}
	}

	want("alpha's token", alphaTok, map[string]int{"/mcp/alpha": 200, "/mcp/beta": 401, "/mcp": 401, "/alpha/mcp": 401,
		"/admin/v1/keys": 401, "POST /admin/v1/keys": 401})
	want("the admin API's token", adminTok, map[string]int{"/admin/v1/keys": 200, "/mcp": 401, "/mcp/alpha": 401, "/mcp/beta": 401})
	want("the token of a request without resource", noResTok, map[string]int{"/mcp": 200, "/mcp/alpha": 401, "/admin/v1/keys": 401,
		"POST /admin/v1/keys": 401})
	want("an OIDC token with the gateway-wide audience", idpToken("gw"), map[string]int{"/mcp/alpha": 200, "/mcp": 200,
		"/admin/v1/keys": 401, "POST /admin/v1/keys": 401})
	want("an OIDC token for the gateway's base URL", idpToken(base), map[string]int{"/mcp": 401, "/admin/v1/keys": 401})
	want("an OIDC token for base/ ", idpToken(base+"/"), map[string]int{"/mcp": 401, "/admin/v1/keys": 401})
	want("an OIDC token for the admin API", idpToken(base+"/admin/v1"), map[string]int{"/admin/v1/keys": 200, "/mcp": 401})

	// No refused token created a key.
	req, _ := http.NewRequest(http.MethodGet, base+"/admin/v1/keys", nil)
	req.Header.Set("X-Mcpgate-Api-Key", master)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(raw), "stolen") {
		t.Errorf("keys after the refused requests: %d %s", resp.StatusCode, raw)
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
