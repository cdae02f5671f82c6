package authserver

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/authserver/astest"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// TestMain fails the run if a Server's sweeper outlived it: every test
// closes what it builds.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leak := leakedJanitor(); leak != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutine:\n%s\n", leak)
			code = 1
		}
	}
	os.Exit(code)
}

func leakedJanitor() string {
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leak := ""
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "authserver.(*Server).janitor") {
				leak = g
			}
		}
		if leak == "" || time.Now().After(deadline) {
			return leak
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clock is a fake clock: real time plus an offset the test moves.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

// fakeIdP is an OpenID provider that logs everyone in at once: its
// /authorize redirects straight back with a code.
type fakeIdP struct {
	t      testing.TB
	srv    *httptest.Server
	key    *rsa.PrivateKey
	signer jose.Signer

	// Knobs, set before the flow.
	advertiseIss bool                 // authorization_response_iss_parameter_supported
	iss          string               // iss sent back: "" = the issuer, "-" = none
	stateSuffix  string               // appended to the state sent back
	claims       func(map[string]any) // edits the ID token's claims
	now          func() time.Time     // the IdP's clock: the harness's
	clientSecret string               // when set, /token requires Basic auth with it

	mu    sync.Mutex
	codes map[string]idpGrant
}

type idpGrant struct {
	clientID, redirectURI, nonce, challenge string
}

func newFakeIdP(t testing.TB) *fakeIdP {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "idp-1"}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeIdP{t: t, key: key, signer: signer, advertiseIss: true, now: time.Now, codes: map[string]idpGrant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", f.discovery)
	mux.HandleFunc("GET /jwks", f.jwks)
	mux.HandleFunc("GET /authorize", f.authorize)
	mux.HandleFunc("POST /token", f.token)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeIdP) issuer() string { return f.srv.URL }

func (f *fakeIdP) discovery(w http.ResponseWriter, r *http.Request) {
	json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                f.issuer(),
		"authorization_endpoint":                f.issuer() + "/authorize",
		"token_endpoint":                        f.issuer() + "/token",
		"jwks_uri":                              f.issuer() + "/jwks",
		"code_challenge_methods_supported":      []string{"S256"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"authorization_response_iss_parameter_supported": f.advertiseIss,
	})
}

func (f *fakeIdP) jwks(w http.ResponseWriter, r *http.Request) {
	json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &f.key.PublicKey, KeyID: "idp-1", Algorithm: "RS256", Use: "sig"}}})
}

func (f *fakeIdP) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	if !strings.Contains(" "+q.Get("scope")+" ", " openid ") {
		http.Error(w, "no openid scope", http.StatusBadRequest)
		return
	}
	code := randomToken(16)
	f.mu.Lock()
	f.codes[code] = idpGrant{clientID: q.Get("client_id"), redirectURI: q.Get("redirect_uri"), nonce: q.Get("nonce"), challenge: q.Get("code_challenge")}
	f.mu.Unlock()
	back, _ := url.Parse(q.Get("redirect_uri"))
	v := url.Values{"code": {code}, "state": {q.Get("state") + f.stateSuffix}}
	switch f.iss {
	case "":
		v.Set("iss", f.issuer())
	case "-":
	default:
		v.Set("iss", f.iss)
	}
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (f *fakeIdP) token(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	fail := func(code string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":%q}`, code)
	}
	clientID := r.PostForm.Get("client_id")
	if f.clientSecret != "" {
		id, secret, ok := r.BasicAuth()
		// RFC 6749 section 2.3.1: form-encoded, then base64.
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		if !ok || secret != f.clientSecret || r.PostForm.Get("client_secret") != "" {
			fail("invalid_client")
			return
		}
		clientID = id
	}
	f.mu.Lock()
	g, ok := f.codes[r.PostForm.Get("code")]
	delete(f.codes, r.PostForm.Get("code"))
	f.mu.Unlock()
	if !ok || g.clientID != clientID || g.redirectURI != r.PostForm.Get("redirect_uri") || s256(r.PostForm.Get("code_verifier")) != g.challenge {
		fail("invalid_grant")
		return
	}
	now := f.now()
	claims := map[string]any{
		"iss": f.issuer(), "sub": "u-123", "aud": clientID, "exp": now.Add(5 * time.Minute).Unix(), "iat": now.Unix(),
		"nonce": g.nonce, "email": "ada@example.com", "preferred_username": "ada",
		"groups": []any{"eng", "sre"}, "roles": "admin", "org": "example",
	}
	if f.claims != nil {
		f.claims(claims)
	}
	idt, err := jwt.Signed(f.signer).Claims(claims).Serialize()
	if err != nil {
		f.t.Error(err)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"access_token": "idp-at", "token_type": "Bearer", "id_token": idt, "expires_in": 300})
}

// harness is an authorization server on a real HTTP server over a real
// SQLite store.
type harness struct {
	t     testing.TB
	srv   *Server
	ts    *httptest.Server
	url   string // the issuer
	store *sqlite.Store
	clock *clock
	idp   *fakeIdP
	dir   string

	handler atomicHandler // what ts serves; a test may swap in another server

	// fleet: a second replica (same store, seal key and shared tables)
	// serves every other request (withFleet).
	fleet   bool
	replica *Server
}

// withFleet runs two replicas behind a balancer that alternates between
// them on every request, as a round-robin load balancer does.
func withFleet() harnessOpt {
	return func(o *Options, h *harness) {
		h.fleet = true
		o.SealKey = []byte(strings.Repeat("s", 32))
		o.Shared = state.NewMemory(state.MemoryOptions{})
	}
}

type atomicHandler = atomic.Pointer[http.Handler]

type harnessOpt func(*Options, *harness)

// withStoreKeys turns on key login against the harness's store.
func withStoreKeys() harnessOpt {
	return func(o *Options, h *harness) { o.Login.Keys, o.Keys = true, storeKeys{h.store} }
}

func withoutIdP() harnessOpt {
	return func(o *Options, h *harness) { o.Login.Issuer, o.Login.ClientID = "", "" }
}

// withIdPSecret makes mcpgate a confidential client at the IdP.
func withIdPSecret(secret string) harnessOpt {
	return func(o *Options, h *harness) { o.Login.ClientSecret, h.idp.clientSecret = secret, secret }
}

func withPrivateMetadata() harnessOpt {
	return func(o *Options, h *harness) { o.Login.AllowPrivateMetadata = true }
}

func withPrefix(p string) harnessOpt {
	return func(o *Options, h *harness) { o.PublicURL += p }
}

func withDerivedIssuer() harnessOpt {
	return func(o *Options, h *harness) { o.PublicURL = "" }
}

func newHarness(t testing.TB, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{t: t, store: openStore(t), clock: &clock{}, idp: newFakeIdP(t), dir: t.TempDir()}
	h.idp.now = h.clock.Now
	h.ts = httptest.NewUnstartedServer(nil)
	base := "http://" + h.ts.Listener.Addr().String()
	o := Options{
		Login: &config.Login{
			Issuer:   h.idp.issuer(),
			ClientID: "mcpgate-at-idp",
			Claims:   config.ClaimPaths{User: "preferred_username", Org: "org"},
		},
		PublicURL: base,
		Store:     h.store,
		DataDir:   h.dir,
		Now:       h.clock.Now,
	}
	for _, opt := range opts {
		opt(&o, h)
	}
	srv, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	h.srv = srv
	h.handler.Store(new(srv.Handler()))
	if h.fleet {
		o.DataDir = t.TempDir() // its own: only the seal key is shared
		if h.replica, err = New(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.replica.Close() })
		var n atomic.Uint64
		both := []http.Handler{srv.Handler(), h.replica.Handler()}
		h.handler.Store(new(http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			both[n.Add(1)%2].ServeHTTP(w, r)
		}))))
	}
	h.ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.handler.Load()).ServeHTTP(w, r) })
	h.ts.Start()
	t.Cleanup(h.ts.Close)
	h.url = base + strings.TrimSuffix(strings.TrimPrefix(o.PublicURL, base), "/")
	if o.PublicURL == "" {
		h.url = base
	}
	return h
}

// register registers a client by DCR and returns its registration.
func (h *harness) register(md oauth.ClientMetadata) oauth.ClientMetadata {
	h.t.Helper()
	status, body := h.postJSON("/oauth/register", md)
	if status != http.StatusCreated {
		h.t.Fatalf("register: status %d: %s", status, body)
	}
	var got oauth.ClientMetadata
	if err := json.Unmarshal(body, &got); err != nil {
		h.t.Fatal(err)
	}
	return got
}

func (h *harness) postJSON(path string, v any) (int, []byte) {
	h.t.Helper()
	b, _ := json.Marshal(v)
	resp, err := http.Post(h.url+path, "application/json", strings.NewReader(string(b)))
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// tokenReply is a token endpoint answer, success or error.
type tokenReply struct {
	status int
	header http.Header
	tokenResponse
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// token posts a form to the token endpoint; basic is "id:secret" for
// HTTP Basic client authentication.
func (h *harness) token(form url.Values, basic ...string) tokenReply {
	h.t.Helper()
	return h.postForm("/oauth/token", form, basic...)
}

func (h *harness) postForm(path string, form url.Values, basic ...string) tokenReply {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if len(basic) > 0 {
		id, secret, _ := strings.Cut(basic[0], ":")
		req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := tokenReply{status: resp.StatusCode, header: resp.Header}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &r); err != nil {
			h.t.Fatalf("%s: not JSON (status %d): %s", path, resp.StatusCode, body)
		}
	}
	return r
}

// pkce is a code verifier and its S256 challenge.
type pkce struct{ verifier, challenge string }

func newPKCE() pkce {
	v := randomToken(32)
	sum := sha256.Sum256([]byte(v))
	return pkce{verifier: v, challenge: base64.RawURLEncoding.EncodeToString(sum[:])}
}

// The test browser is astest's: a cookie jar, redirects followed up to
// the client's redirect URI, the pages' forms submitted.
type (
	browser = astest.Browser
	page    = astest.Page
)

func newBrowser(t testing.TB, redirectURI string) *browser { return astest.NewBrowser(t, redirectURI) }

// authorizeURL builds an authorization request; extra overrides (an
// empty value deletes).
func (h *harness) authorizeURL(clientID, redirectURI string, pk pkce, extra url.Values) string {
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {clientID},
		"redirect_uri":          {redirectURI},
		"code_challenge":        {pk.challenge},
		"code_challenge_method": {"S256"},
		"state":                 {"st-" + randomToken(8)},
		"scope":                 {"mcp"},
		"resource":              {h.url + "/mcp"},
	}
	for k, vs := range extra {
		if len(vs) == 1 && vs[0] == "" {
			q.Del(k)
		} else {
			q[k] = vs
		}
	}
	return h.url + "/oauth/authorize?" + q.Encode()
}

// approve runs a browser through consent, returning where it was sent.
func (h *harness) approve(b *browser, p *page) *page {
	h.t.Helper()
	if p.Status != http.StatusOK || !strings.Contains(p.Body, `name="decision"`) {
		h.t.Fatalf("expected the consent page, got status %d:\n%s", p.Status, p.Body)
	}
	return b.Submit(h.url, p, "decision", url.Values{"decision": {"approve"}})
}

// codeFrom checks an authorization response and returns its code.
func (h *harness) codeFrom(p *page, state string) string {
	h.t.Helper()
	if p.Location == nil {
		h.t.Fatalf("not redirected to the client (status %d):\n%s", p.Status, p.Body)
	}
	q := p.Location.Query()
	if q.Get("error") != "" {
		h.t.Fatalf("authorization error %s: %s", q.Get("error"), q.Get("error_description"))
	}
	if q.Get("state") != state {
		h.t.Errorf("state = %q, want %q", q.Get("state"), state)
	}
	if q.Get("iss") != h.url {
		h.t.Errorf("iss = %q, want %q", q.Get("iss"), h.url)
	}
	return q.Get("code")
}

// verifyAccess checks an access token against the server's public keys
// and returns its claims.
func (h *harness) verifyAccess(tok string) (jwt.Claims, map[string]any) {
	h.t.Helper()
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		h.t.Fatal(err)
	}
	hdr := parsed.Headers[0]
	if hdr.ExtraHeaders["typ"] != "at+jwt" {
		h.t.Errorf("typ = %v, want at+jwt", hdr.ExtraHeaders["typ"])
	}
	set := h.srv.PublicKeys()
	keys := set.Key(hdr.KeyID)
	if len(keys) != 1 {
		h.t.Fatalf("kid %q: %d public keys", hdr.KeyID, len(keys))
	}
	var std jwt.Claims
	var all map[string]any
	if err := parsed.Claims(keys[0].Key, &std, &all); err != nil {
		h.t.Fatal(err)
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: h.url, Time: h.clock.Now()}, 0); err != nil {
		h.t.Error(err)
	}
	return std, all
}

// storeKeys authenticates pasted keys against the real store, the way the
// gateway's adapter over callers does.
type storeKeys struct{ s store.Keys }

func (k storeKeys) AuthenticateKey(ctx context.Context, secret string) (string, string, string, error) {
	key, err := k.s.GetKeyByHash(ctx, store.HashKey(secret))
	if errors.Is(err, store.ErrNotFound) || err == nil && key.Disabled {
		return "", "", "", ErrKeyRejected
	}
	if err != nil {
		return "", "", "", err
	}
	return key.Alias, key.User, key.Team, nil
}

func (k storeKeys) KeyActive(ctx context.Context, alias string) (bool, error) {
	key, err := k.s.GetKeyByAlias(ctx, alias)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil && !key.Disabled, err
}

func addKey(t testing.TB, s store.Keys, alias, user, team string) string {
	t.Helper()
	secret := "mcpgate_test_" + randomToken(24)
	if _, err := s.CreateKey(t.Context(), store.Key{Alias: alias, User: user, Team: team, KeyHash: store.HashKey(secret),
		KeyPrefix: store.KeyPrefix(secret), Source: store.SourceAPI}); err != nil {
		t.Fatal(err)
	}
	return secret
}

func wantTokens(t *testing.T, r tokenReply) {
	t.Helper()
	if r.status != http.StatusOK || r.AccessToken == "" || r.RefreshToken == "" || r.TokenType != "Bearer" {
		t.Fatalf("token response: status %d, %+v", r.status, r)
	}
	if got := r.header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
}

func wantError(t *testing.T, r tokenReply, status int, code string) {
	t.Helper()
	if r.status != status || r.Error != code {
		t.Errorf("got status %d error %q (%s), want %d %q", r.status, r.Error, r.Description, status, code)
	}
}

// wantRedirectError checks an error sent back to the client's redirect
// URI, with state and iss.
func wantRedirectError(t *testing.T, h *harness, p *page, state, code string) {
	t.Helper()
	if p.Location == nil {
		t.Fatalf("not redirected to the client (status %d):\n%s", p.Status, p.Body)
	}
	if !strings.HasPrefix(p.Location.String(), redirect+"?") {
		t.Errorf("redirected to %s", p.Location)
	}
	q := p.Location.Query()
	if q.Get("error") != code || q.Get("state") != state || q.Get("iss") != h.url || q.Get("code") != "" {
		t.Errorf("redirect query %v, want error=%s state=%s iss=%s", q, code, state, h.url)
	}
}

func audience(t *testing.T, h *harness, tok string) []string {
	t.Helper()
	std, _ := h.verifyAccess(tok)
	return std.Audience
}
