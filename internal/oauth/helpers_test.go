package oauth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/mcpgate/mcpgate/internal/config"
)

// A test identity provider: an httptest.Server serving OpenID Connect
// discovery (or RFC 8414 metadata) and a JWKS, with keys generated here,
// counting the requests it gets.

// testNow is the fake clock's start; tokens are minted relative to it.
var testNow = time.Unix(1_800_000_000, 0)

const testResource = "https://gw.example/mcp"

// testKey is a private signing key and the kid and alg it signs with.
type testKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv any
}

func (k testKey) public() jose.JSONWebKey {
	jwk := jose.JSONWebKey{Key: k.priv, KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"}
	return jwk.Public()
}

// Keys are generated once per test binary: RSA generation is slow, and
// nothing depends on a key being fresh.
var (
	rsaKey = sync.OnceValue(func() *rsa.PrivateKey { return must(rsa.GenerateKey(rand.Reader, 2048)) })
	ecKey  = sync.OnceValue(func() *ecdsa.PrivateKey { return must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)) })
	edKey  = sync.OnceValue(func() ed25519.PrivateKey {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return must(k, err)
	})
	// otherECKey is a key the issuer never publishes (an attacker's).
	otherECKey = sync.OnceValue(func() *ecdsa.PrivateKey { return must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)) })
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func rsaTestKey() testKey { return testKey{"rsa-1", jose.RS256, rsaKey()} }
func ecTestKey() testKey  { return testKey{"ec-1", jose.ES256, ecKey()} }
func edTestKey() testKey  { return testKey{"ed-1", jose.EdDSA, edKey()} }

// sign makes a compact JWS of claims with k; hdr adds header parameters.
func sign(t testing.TB, k testKey, claims map[string]any, hdr map[jose.HeaderKey]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	for name, v := range hdr {
		opts.WithHeader(name, v)
	}
	var key any = jose.JSONWebKey{Key: k.priv, KeyID: k.kid}
	if k.kid == "" {
		key = k.priv
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// testIssuer is the fake IdP. Its issuer URL has a path, as Keycloak's and
// Entra's do, so the well-known URL forms differ.
type testIssuer struct {
	srv *httptest.Server
	URL string // the issuer

	mu       sync.Mutex
	jwks     []any          // what the JWKS endpoint serves (JSONWebKey or raw JSON)
	docIss   string         // the issuer the metadata names ("" = URL)
	serve    map[string]int // well-known form -> status (0 = 404)
	jwksCode int            // status of the JWKS endpoint (0 = 200)
	jwksBody []byte         // overrides the JWKS body
	delay    time.Duration  // before answering the JWKS
	hits     map[string]int // path -> requests
	onJWKS   func()         // called on each JWKS request before answering
}

const (
	formOIDC     = "oidc"     // <issuer>/.well-known/openid-configuration
	formInserted = "inserted" // <host>/.well-known/oauth-authorization-server/<path>
	formAppended = "appended" // <issuer>/.well-known/oauth-authorization-server
)

func newTestIssuer(t testing.TB, keys ...testKey) *testIssuer {
	t.Helper()
	ti := &testIssuer{serve: map[string]int{formOIDC: 200}, hits: map[string]int{}}
	for _, k := range keys {
		ti.jwks = append(ti.jwks, k.public())
	}
	ti.srv = httptest.NewServer(http.HandlerFunc(ti.handle))
	t.Cleanup(ti.srv.Close)
	ti.URL = ti.srv.URL + "/realms/test"
	return ti
}

func (ti *testIssuer) handle(w http.ResponseWriter, r *http.Request) {
	ti.mu.Lock()
	ti.hits[r.URL.Path]++
	form := map[string]string{
		"/realms/test/.well-known/openid-configuration":       formOIDC,
		"/.well-known/oauth-authorization-server/realms/test": formInserted,
		"/realms/test/.well-known/oauth-authorization-server": formAppended,
	}[r.URL.Path]
	code, iss := ti.serve[form], ti.docIss
	if iss == "" {
		iss = ti.URL
	}
	jwks := append([]any(nil), ti.jwks...)
	jwksCode, jwksBody, delay, onJWKS := ti.jwksCode, ti.jwksBody, ti.delay, ti.onJWKS
	ti.mu.Unlock()

	switch {
	case form != "":
		if code == 0 {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{
			"issuer":                 iss,
			"jwks_uri":               ti.srv.URL + "/jwks",
			"authorization_endpoint": ti.URL + "/auth",
			"scopes_supported":       "not-a-list", // odd types must not break discovery
		})
	case r.URL.Path == "/jwks":
		if onJWKS != nil {
			onJWKS()
		}
		time.Sleep(delay)
		if jwksCode != 0 {
			w.WriteHeader(jwksCode)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		if jwksBody != nil {
			w.Write(jwksBody)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"keys": jwks})
	default:
		http.NotFound(w, r)
	}
}

// setKeys replaces the published keys (rotation).
func (ti *testIssuer) setKeys(keys ...testKey) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.jwks = nil
	for _, k := range keys {
		ti.jwks = append(ti.jwks, k.public())
	}
}

func (ti *testIssuer) set(f func(ti *testIssuer)) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	f(ti)
}

func (ti *testIssuer) jwksHits() int { return ti.count("/jwks") }
func (ti *testIssuer) discoveryHits() int {
	return ti.count("/realms/test/.well-known/openid-configuration")
}

// total counts all requests.
func (ti *testIssuer) total() int {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	n := 0
	for _, c := range ti.hits {
		n += c
	}
	return n
}

func (ti *testIssuer) count(path string) int {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	return ti.hits[path]
}

// config is the issuer's configuration as config would decode it.
func (ti *testIssuer) config() config.OIDCIssuer {
	return config.OIDCIssuer{
		Issuer: ti.URL,
		Claims: config.ClaimPaths{User: "sub", Email: "email", Teams: "groups", Roles: "roles"},
	}
}

// claims are a valid token's claims for the issuer, on testResource.
func (ti *testIssuer) claims() map[string]any {
	return map[string]any{
		"iss":    ti.URL,
		"sub":    "user-1",
		"aud":    testResource,
		"exp":    testNow.Add(5 * time.Minute).Unix(),
		"iat":    testNow.Add(-10 * time.Second).Unix(),
		"nbf":    testNow.Add(-10 * time.Second).Unix(),
		"email":  "ada@example.com",
		"groups": []string{"eng", "ops"},
		"roles":  "admin",
		"scope":  "mcp:tools read",
		"azp":    "client-a",
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: testNow} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a
// logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testVerifier builds a verifier on the fake clock that logs into the
// returned buffer at debug level.
func testVerifier(t testing.TB, clock *fakeClock, issuers ...config.OIDCIssuer) (*Verifier, *syncBuffer) {
	t.Helper()
	var log syncBuffer
	v := NewVerifier(VerifierOptions{
		Issuers: issuers,
		Now:     clock.Now,
		Logger:  slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	return v, &log
}

func verify(v *Verifier, tok string) (*Identity, error) {
	return v.Verify(context.Background(), tok, testResource)
}

// countLines counts log lines containing s.
func countLines(log, s string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
