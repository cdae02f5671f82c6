package gateway

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// jwtIssuer is a real OIDC issuer on loopback: discovery, a JWKS of one
// ES256 key, and tokens signed with it.
type jwtIssuer struct {
	srv *httptest.Server
	key *ecdsa.PrivateKey
}

func newJWTIssuer(t *testing.T) *jwtIssuer {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &jwtIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

// token is a JWT for subject, audience gw-client, valid for an hour.
func (is *jwtIssuer) token(t *testing.T, subject string) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: is.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: is.srv.URL, Subject: subject, Audience: jwt.Audience{"gw-client"},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// syncLog is a debug log captured for assertions.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncLog) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// End to end: real JWT callers (an OIDC issuer with a JWKS, verified by
// the gateway), a real token exchange endpoint and an upstream that
// records the token it sees. Each person's calls carry only the token
// exchanged for their own JWT; the JWT itself never goes upstream; a
// caller without one gets the route's challenge; the token service's
// refusal is a JSON-RPC error naming the server; no token reaches the log.
func TestTokenExchangeEndToEnd(t *testing.T) {
	is := newJWTIssuer(t)

	var mu sync.Mutex
	var forms []url.Values
	exchanged := map[string]string{} // exchanged token -> subject token
	refused := map[string]bool{}     // subject tokens the service refuses
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		id, secret, _ := r.BasicAuth()
		mu.Lock()
		defer mu.Unlock()
		forms = append(forms, r.PostForm)
		subject := r.PostForm.Get("subject_token")
		w.Header().Set("Content-Type", "application/json")
		if id != "gw" || secret != "sts-secret" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		if refused[subject] || r.PostForm.Get("audience") == "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"subject %s not allowed"}`, subject)
			return
		}
		tok := fmt.Sprintf("exchanged-%d", len(exchanged)+1)
		exchanged[tok] = subject
		fmt.Fprintf(w, `{"access_token":%q,"issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":600}`, tok)
	}))
	t.Cleanup(sts.Close)

	var seen []string // Authorization at the upstream
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		switch m.Method {
		case "initialize":
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"0"}}`
		case "tools/list":
			return `{"tools":[{"name":"whoami","inputSchema":{"type":"object"}}]}`
		}
		return `{"content":[{"type":"text","text":` + string(jsonrpc.String(r.Header.Get("Authorization"))) + `}]}`
	})
	srv := httpServer(up.URL + "/mcp")
	srv.Auth = &config.Auth{Type: config.AuthTokenExchange, TokenURL: sts.URL + "/token", ClientID: "gw", ClientSecret: "sts-secret", Audience: "up-api"}
	issuer := config.OIDCIssuer{Issuer: is.srv.URL, Audience: "gw-client", Claims: config.ClaimPaths{}.OrDefaults()}
	cfg := &config.Config{
		Servers: map[string]*config.Server{"up": srv},
		Auth:    &config.CallerAuth{OIDC: []config.OIDCIssuer{issuer}, Grants: []config.Grant{{User: "alice"}, {User: "bob"}, {User: "carol"}}},
	}
	logs := &syncLog{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	verifier := oauth.NewVerifier(oauth.VerifierOptions{Issuers: cfg.Auth.OIDC, Logger: log})
	const master = "mk_exchange_test_master_key_0123456789"
	auth := callers.New(callers.Options{Tokens: verifier, Grants: cfg.Auth.Grants, MasterKey: master, Logger: log})
	t.Cleanup(func() { auth.Close() })
	_, gw := startGatewayWith(t, Options{Authenticator: auth, Config: cfg, Logger: log})

	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`
	session := func(tok, route string) map[string]string {
		t.Helper()
		status, hdr, body := rpc(t, gw.URL+route, bearer(tok), oauthInit)
		if status != http.StatusOK || hdr.Get(mcpwire.HeaderSessionID) == "" {
			t.Fatalf("initialize: %d %s", status, body)
		}
		return map[string]string{"Authorization": "Bearer " + tok, mcpwire.HeaderSessionID: hdr.Get(mcpwire.HeaderSessionID), mcpwire.HeaderProtocolVersion: "2025-11-25"}
	}
	whoami := func(h map[string]string, route string) string {
		t.Helper()
		name := "whoami"
		if route == "/mcp" {
			name = "up__whoami"
		}
		status, _, body := rpc(t, gw.URL+route, h, strings.Replace(call, "whoami", name, 1))
		var msg struct {
			Result struct {
				Content []struct{ Text string } `json:"content"`
			} `json:"result"`
			Error *jsonrpc.Error `json:"error"`
		}
		if err := json.Unmarshal(body, &msg); err != nil || status != http.StatusOK {
			t.Fatalf("tools/call: %d %s", status, body)
		}
		if msg.Error != nil {
			return "error: " + msg.Error.Message
		}
		return msg.Result.Content[0].Text
	}

	aliceJWT, bobJWT := is.token(t, "alice"), is.token(t, "bob")
	alice, bob := session(aliceJWT, "/mcp/up"), session(bobJWT, "/mcp/up")
	a1, b1, a2 := whoami(alice, "/mcp/up"), whoami(bob, "/mcp/up"), whoami(alice, "/mcp/up")
	mu.Lock()
	if !strings.HasPrefix(a1, "Bearer exchanged-") || a1 != a2 || exchanged[strings.TrimPrefix(a1, "Bearer ")] != aliceJWT {
		t.Errorf("alice's calls carried %q and %q, want the token exchanged for her JWT", a1, a2)
	}
	if b1 == a1 || exchanged[strings.TrimPrefix(b1, "Bearer ")] != bobJWT {
		t.Errorf("bob's call carried %q (alice's: %q)", b1, a1)
	}
	if len(forms) != 2 {
		t.Errorf("%d exchanges, want 2 (one per person, then the cache)", len(forms))
	}
	want := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"}, "subject_token": {aliceJWT},
		"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"}, "requested_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"audience": {"up-api"}, "resource": {up.URL + "/mcp"}}
	if len(forms) > 0 && fmt.Sprint(forms[0]) != fmt.Sprint(want) {
		t.Errorf("exchange form:\n got %v\nwant %v", forms[0], want)
	}
	for _, a := range seen {
		if a == "Bearer "+aliceJWT || a == "Bearer "+bobJWT || !strings.HasPrefix(a, "Bearer exchanged-") {
			t.Errorf("the upstream saw Authorization %q", a)
		}
	}
	mu.Unlock()

	// The merged route: the same exchanged token for the same person.
	if got := whoami(session(aliceJWT, "/mcp"), "/mcp"); got != a1 {
		t.Errorf("alice on /mcp: %q, want %q", got, a1)
	}

	// No subject token (the master key): 401 with the route's challenge
	// on the single-server route, before any session.
	key := map[string]string{callers.HeaderAPIKey: master}
	status, hdr, body := rpc(t, gw.URL+"/mcp/up", key, oauthInit)
	if status != http.StatusUnauthorized || !strings.Contains(hdr.Get("WWW-Authenticate"), `resource_metadata="`+gw.URL+`/.well-known/oauth-protected-resource/mcp/up"`) ||
		!strings.Contains(string(body), "upstream up exchanges the caller's own token") {
		t.Errorf("master key on /mcp/up: %d %q %s", status, hdr.Get("WWW-Authenticate"), body)
	}
	// On the merged route, a JSON-RPC error naming the server.
	status, hdr, body = rpc(t, gw.URL+"/mcp", key, oauthInit)
	if status != http.StatusOK {
		t.Fatalf("master key initialize on /mcp: %d %s", status, body)
	}
	keySession := map[string]string{callers.HeaderAPIKey: master, mcpwire.HeaderSessionID: hdr.Get(mcpwire.HeaderSessionID), mcpwire.HeaderProtocolVersion: "2025-11-25"}
	gotKey := whoami(keySession, "/mcp")
	t.Logf("master key on /mcp: %s", gotKey)
	if got := gotKey; !strings.Contains(got, "up") || strings.Contains(got, "exchanged-") {
		t.Errorf("master key call on /mcp: %q", got)
	}

	// The token service refuses carol's token: a JSON-RPC error naming
	// the server and the OAuth error, without any token.
	carolJWT := is.token(t, "carol")
	mu.Lock()
	refused[carolJWT] = true
	mu.Unlock()
	status, hdr, body = rpc(t, gw.URL+"/mcp", bearer(carolJWT), oauthInit)
	if status != http.StatusOK {
		t.Fatalf("carol initialize: %d %s", status, body)
	}
	carol := map[string]string{"Authorization": "Bearer " + carolJWT, mcpwire.HeaderSessionID: hdr.Get(mcpwire.HeaderSessionID), mcpwire.HeaderProtocolVersion: "2025-11-25"}
	got := whoami(carol, "/mcp")
	t.Logf("carol on /mcp: %s", got)
	if !strings.Contains(got, "upstream up: token exchange endpoint answered HTTP 400: invalid_grant") || strings.Contains(got, carolJWT[:20]) {
		t.Errorf("carol's call: %q", got)
	}

	// Nothing secret in the log.
	out := logs.String()
	for _, secret := range []string{aliceJWT, bobJWT, carolJWT, "exchanged-1", "exchanged-2", "sts-secret", master} {
		if strings.Contains(out, secret) {
			t.Errorf("the log has a secret (%.12s...)", secret)
		}
	}
	if !strings.Contains(out, "token exchanged") {
		t.Error("the exchange was not logged")
	}
}
