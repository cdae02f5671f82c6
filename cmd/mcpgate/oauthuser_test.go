package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/authserver"
	"github.com/mcpgate/mcpgate/internal/oauth/authserver/astest"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
	"github.com/mcpgate/mcpgate/internal/vault"
)

const (
	upstreamAccountKey  = "mcpgate_upstream_ada-account-key"
	upstreamAccountKey2 = "mcpgate_upstream_bea-account-key"
)

// upstreamKeys accepts two pasted keys at the upstream's authorization
// server, one per upstream account (ada, bea).
type upstreamKeys struct{}

func (upstreamKeys) AuthenticateKey(_ context.Context, secret string) (string, string, string, error) {
	switch secret {
	case upstreamAccountKey:
		return "ada-upstream", "ada", "eng", nil
	case upstreamAccountKey2:
		return "bea-upstream", "bea", "eng", nil
	}
	return "", "", "", authserver.ErrKeyRejected
}

// oauthUpstream is an MCP server protected by its own authorization
// server (an authserver instance on the same origin): it serves its
// protected resource metadata, answers 401 with a challenge naming it to
// a request without a valid bearer token, and records every token it
// accepted. Its tool whoami answers the token's subject.
type oauthUpstream struct {
	*httptest.Server
	as   *authserver.Server
	base string
	mcp  string
	mu   sync.Mutex
	seen []string // every request's bearer token ("" when none)
	// secrets is every secret that crossed the authorization server
	// (codes, PKCE verifiers, client secrets, access and refresh tokens),
	// with what it is.
	secrets map[string]string
}

func newOAuthUpstream(t *testing.T, ttl time.Duration) *oauthUpstream {
	t.Helper()
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u := &oauthUpstream{Server: httptest.NewUnstartedServer(nil)}
	u.base = "http://" + u.Listener.Addr().String()
	u.mcp = u.base + "/mcp"
	u.as, err = authserver.New(t.Context(), authserver.Options{Login: &config.Login{Keys: true, AccessTokenTTL: ttl, RefreshTokenTTL: time.Hour},
		PublicURL: u.base, Store: st, Keys: upstreamKeys{}, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.as.Close() })
	mux := http.NewServeMux()
	mux.Handle("/", u.recordSecrets(u.as.Handler()))
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(oauth.ProtectedResourceMetadata{Resource: u.mcp, AuthorizationServers: []string{u.base}, ScopesSupported: []string{"mcp"}})
	})
	mux.HandleFunc("/mcp", u.serveMCP)
	u.Config.Handler = mux
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// recordSecrets notes the secrets of every request to h and answer from it.
func (u *oauthUpstream) recordSecrets(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The handler reads the body itself: a copy is parsed here.
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		form, _ := url.ParseQuery(string(raw))
		found := map[string]string{}
		for _, k := range []string{"code", "code_verifier", "refresh_token", "client_secret"} {
			for _, v := range form[k] {
				found[v] = k
			}
		}
		if _, pw, ok := r.BasicAuth(); ok {
			found[pw] = "client_secret"
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if loc, err := url.Parse(rec.Header().Get("Location")); err == nil {
			for _, v := range loc.Query()["code"] {
				found[v] = "code"
			}
		}
		var body map[string]any
		if json.Unmarshal(rec.Body.Bytes(), &body) == nil {
			for _, k := range []string{"access_token", "refresh_token", "client_secret"} {
				if v, ok := body[k].(string); ok {
					found[v] = k
				}
			}
		}
		u.mu.Lock()
		if u.secrets == nil {
			u.secrets = map[string]string{}
		}
		for v, k := range found {
			if v != "" {
				u.secrets[v] = k
			}
		}
		u.mu.Unlock()
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// secretsSeen is every secret recorded so far, with what it is.
func (u *oauthUpstream) secretsSeen() map[string]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.secrets)
}

func (u *oauthUpstream) subject(tok string) (string, bool) {
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil || len(parsed.Headers) != 1 {
		return "", false
	}
	set := u.as.PublicKeys()
	ks := set.Key(parsed.Headers[0].KeyID)
	if len(ks) != 1 {
		return "", false
	}
	var c jwt.Claims
	if parsed.Claims(ks[0].Key, &c) != nil || c.ValidateWithLeeway(jwt.Expected{Issuer: u.base, AnyAudience: jwt.Audience{u.mcp}, Time: time.Now()}, 0) != nil {
		return "", false
	}
	return c.Subject, true
}

// scopes are the scope claim of a token subject accepted.
func (u *oauthUpstream) scopes(tok string) []string {
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil || len(parsed.Headers) != 1 {
		return nil
	}
	set := u.as.PublicKeys()
	ks := set.Key(parsed.Headers[0].KeyID)
	if len(ks) != 1 {
		return nil
	}
	var c struct {
		Scope string `json:"scope"`
	}
	if parsed.Claims(ks[0].Key, &c) != nil {
		return nil
	}
	return strings.Fields(c.Scope)
}

func (u *oauthUpstream) serveMCP(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	u.mu.Lock()
	u.seen = append(u.seen, tok)
	u.mu.Unlock()
	sub, ok := u.subject(tok)
	if !ok {
		w.Header().Set("WWW-Authenticate", oauth.Challenge{ResourceMetadata: u.base + "/.well-known/oauth-protected-resource/mcp", Scope: "mcp"}.String())
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &m)
	if m.ID == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	var result any
	switch m.Method {
	case "initialize":
		result = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}},
			"serverInfo": map[string]any{"name": "oauthup", "version": "1"}}
	case "tools/list":
		result = map[string]any{"tools": []any{map[string]any{"name": "whoami", "inputSchema": map[string]any{"type": "object"}},
			map[string]any{"name": "admin_op", "inputSchema": map[string]any{"type": "object"}}}}
	case "tools/call":
		var p struct {
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		json.Unmarshal(b, &p)
		if p.Params.Name == "admin_op" && !slices.Contains(u.scopes(tok), "admin") {
			// The MCP spec's step-up: this tool needs a scope the token lacks.
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="mcp admin", resource_metadata="`+u.base+`/.well-known/oauth-protected-resource/mcp"`)
			w.WriteHeader(http.StatusForbidden)
			return
		}
		result = map[string]any{"content": []any{map[string]any{"type": "text", "text": "subject=" + sub + " tool=" + p.Params.Name}}}
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "Method not found"}})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
}

func (u *oauthUpstream) tokens() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

// testBrowser is astest's browser, stopping at stop (the gateway's
// connect callback), with a get that can carry the person's key.
type testBrowser struct{ *astest.Browser }

type browserPage = astest.Page

func newTestBrowser(t *testing.T, stop string) *testBrowser {
	return &testBrowser{astest.NewBrowser(t, stop)}
}

// get fetches u; key, when set, goes in X-Mcpgate-Api-Key and the first
// redirect is not followed (the key must not travel to another origin).
func (b *testBrowser) get(u, key string) *browserPage {
	b.T.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if key == "" {
		return b.Do(req)
	}
	req.Header.Set("X-Mcpgate-Api-Key", key)
	c := *b.C
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return b.DoWith(&c, req)
}

// authorize runs the upstream authorization server's pages (key login,
// consent) from the gateway's connect redirect, up to the callback URL.
func (b *testBrowser) authorize(up *oauthUpstream, start *browserPage) *url.URL {
	b.T.Helper()
	return b.authorizeAs(up, start, upstreamAccountKey)
}

// authorizeAs is authorize, logging in to the upstream account of key.
func (b *testBrowser) authorizeAs(up *oauthUpstream, start *browserPage, key string) *url.URL {
	b.T.Helper()
	if start.Status != http.StatusFound || start.Location == nil || !strings.HasPrefix(start.Location.String(), up.base+"/") {
		b.T.Fatalf("connect did not redirect to the upstream's authorization server: %d %v %s", start.Status, start.Location, start.Body)
	}
	p := b.get(start.Location.String(), "")
	p = b.Submit(up.base, p, `name="key"`, url.Values{"key": {key}})
	if p.Location == nil { // consent given before is not asked again
		p = b.Submit(up.base, p, `name="decision"`, url.Values{"decision": {"approve"}})
	}
	if p.Location == nil {
		b.T.Fatalf("not sent back to the gateway's callback: %d\n%s", p.Status, p.Body)
	}
	return p.Location
}

// A person connects their own upstream account once (oauth2_user); their
// calls then carry their token, refreshed when it is about to expire; a
// person without a connection gets the connect link and the upstream
// sees nothing; a reused, unknown or foreign state is refused; the
// database holds no token in clear.
func TestOAuth2UserEndToEnd(t *testing.T) {
	clearAdminEnv(t)
	// 61 s: fresh tokens are outside the 60 s refresh margin, and inside
	// it a second later.
	up := newOAuthUpstream(t, 61*time.Second)
	const (
		aliceKey = "alice-gateway-key-0123456789"
		bobKey   = "bob-gateway-key-0123456789"
	)
	dir := t.TempDir()
	vkeys := []config.VaultKey{{ID: "k1", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))}}
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: dir, ToolNameSeparator: "__",
		Auth:  &config.CallerAuth{Keys: []config.KeyConfig{{Alias: "alice", Key: aliceKey}, {Alias: "bob", Key: bobKey}}},
		Vault: &config.Vault{Keys: vkeys},
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
	defer stk.close(context.Background())
	hs := httptest.NewServer(stk.handler)
	defer hs.Close()
	callback := hs.URL + "/oauth/connect/callback"
	call := func(key string) (int, string) {
		return rest(t, "POST", hs.URL+"/mcp", key, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__whoami","arguments":{}}}`)
	}

	// bob has not connected: the link, and the upstream sees nothing.
	before := len(up.tokens())
	if _, body := call(bobKey); !strings.Contains(body, "connect your account for up at "+hs.URL+"/oauth/connect/up") {
		t.Errorf("bob before connecting: %s", body)
	}
	if n := len(up.tokens()) - before; n != 0 {
		t.Errorf("the upstream saw %d requests for a person without a connection", n)
	}

	// Connecting needs a person: no key, 401; an unknown server, 404.
	anon := newTestBrowser(t, callback)
	if p := anon.get(hs.URL+"/oauth/connect/up", ""); p.Status != http.StatusUnauthorized {
		t.Errorf("connect without a key: %d", p.Status)
	}
	if p := anon.get(hs.URL+"/oauth/connect/nope", aliceKey); p.Status != http.StatusNotFound {
		t.Errorf("connect to an unknown server: %d", p.Status)
	}

	alice := newTestBrowser(t, callback)
	start := alice.get(hs.URL+"/oauth/connect/up", aliceKey)
	cbA := alice.authorize(up, start)
	if !strings.HasPrefix(cbA.String(), callback+"?") || cbA.Query().Get("code") == "" {
		t.Fatalf("callback %v", cbA)
	}

	// bob, in his own browser, cannot use alice's answer; it stays hers.
	bob := newTestBrowser(t, callback)
	bob.authorize(up, bob.get(hs.URL+"/oauth/connect/up", bobKey)) // bob's browser has a connect cookie of its own
	if p := bob.get(cbA.String(), ""); p.Status != http.StatusForbidden {
		t.Errorf("alice's callback in bob's browser: %d %s", p.Status, p.Body)
	}
	if p := newTestBrowser(t, callback).get(cbA.String(), ""); p.Status != http.StatusForbidden {
		t.Errorf("alice's callback without the cookie: %d %s", p.Status, p.Body)
	}
	if p := alice.get(cbA.String(), ""); p.Status != http.StatusOK || !strings.Contains(p.Body, "connected") {
		t.Fatalf("alice's callback: %d %s", p.Status, p.Body)
	}
	if p := alice.get(cbA.String(), ""); p.Status != http.StatusBadRequest {
		t.Errorf("a reused state: %d %s", p.Status, p.Body)
	}
	if p := alice.get(callback+"?code=x&state=made-up", ""); p.Status != http.StatusBadRequest {
		t.Errorf("an unknown state: %d %s", p.Status, p.Body)
	}

	// alice's calls carry her token; bob's still do not reach the upstream.
	before = len(up.tokens())
	code, body := call(aliceKey)
	if code != 200 || !strings.Contains(body, "subject=") {
		t.Fatalf("alice's call: %d %s", code, body)
	}
	toks := up.tokens()[before:]
	if len(toks) == 0 || slices.Contains(toks, "") {
		t.Fatalf("the upstream saw tokens %q", toks)
	}
	first := toks[len(toks)-1]
	if _, ok := up.subject(first); !ok {
		t.Error("the upstream got an invalid token")
	}
	before = len(up.tokens())
	if _, body := call(bobKey); !strings.Contains(body, "connect your account for up") {
		t.Errorf("bob after alice connected: %s", body)
	}
	if n := len(up.tokens()) - before; n != 0 {
		t.Errorf("the upstream saw %d requests for bob", n)
	}

	// The vault entry, through the gateway's own vault (a second instance
	// would see the gateway's writes only after its read cache expires).
	vlt := stk.vault
	e, err := vlt.Get(t.Context(), "key:alice", "up")
	if err != nil || e.Kind != vault.KindOAuth || e.AccessToken != first || e.RefreshToken == "" || e.Issuer != up.base {
		t.Fatalf("alice's entry: %v %v", e, err)
	}

	// No token in clear in the database.
	if found := dbHolds(t, dir, first, e.RefreshToken); len(found) > 0 {
		t.Errorf("a token in clear in %v", found)
	}

	// A second later the token is within the refresh margin: the next
	// call refreshes it (rotating the refresh token) and sends the new one.
	time.Sleep(1100 * time.Millisecond)
	before = len(up.tokens())
	if code, body := call(aliceKey); code != 200 || !strings.Contains(body, "subject=") {
		t.Fatalf("alice's call after the refresh: %d %s", code, body)
	}
	toks = up.tokens()[before:]
	if len(toks) == 0 || toks[len(toks)-1] == first {
		t.Fatalf("the upstream did not get a refreshed token")
	}
	e2, err := vlt.Get(t.Context(), "key:alice", "up")
	if err != nil || e2.AccessToken != toks[len(toks)-1] || e2.RefreshToken == e.RefreshToken || !e2.Expiry.After(e.Expiry) {
		t.Errorf("after the refresh: %v %v", e2, err)
	}

	// A refresh token the authorization server refuses (invalid_grant):
	// the entry is removed, and the call gets the connect link.
	e2.RefreshToken, e2.Expiry = "not-a-refresh-token", time.Now().Add(-time.Minute)
	if err := vlt.Put(t.Context(), e2); err != nil {
		t.Fatal(err)
	}
	before = len(up.tokens())
	if _, body := call(aliceKey); !strings.Contains(body, "connect your account for up") {
		t.Errorf("alice with a refused refresh token: %s", body)
	}
	if n := len(up.tokens()) - before; n != 0 {
		t.Errorf("the upstream saw %d requests with an expired token", n)
	}
	if _, err := vlt.Get(t.Context(), "key:alice", "up"); !errors.Is(err, vault.ErrNotFound) {
		t.Errorf("the refused entry is still there: %v", err)
	}
}
