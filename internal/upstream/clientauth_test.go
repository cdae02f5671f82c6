package upstream

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Client authentication at the token endpoint (client_secret_basic,
// client_secret_post, private_key_jwt) and the resource parameter, against
// a real HTTP token endpoint that checks what it receives and refuses
// what it cannot verify.

// clientAuthEndpoint is a token endpoint that authenticates the client by
// the method it expects and answers 401 invalid_client when that fails.
type clientAuthEndpoint struct {
	*httptest.Server
	t        *testing.T
	method   string
	pub      crypto.PublicKey // for private_key_jwt
	alg      jose.SignatureAlgorithm
	resource string
	aud      string // the assertion's audience; "" means this endpoint's URL
	now      func() time.Time

	mu      sync.Mutex
	refused []error
	claims  []jwt.Claims // of the accepted assertions
	forms   []url.Values
}

func newClientAuthEndpoint(t *testing.T, method string, pub crypto.PublicKey, alg jose.SignatureAlgorithm, now func() time.Time) *clientAuthEndpoint {
	ep := &clientAuthEndpoint{t: t, method: method, pub: pub, alg: alg, resource: testResource, now: now}
	ep.Server = httptest.NewServer(http.HandlerFunc(ep.serve))
	t.Cleanup(ep.Close)
	return ep
}

func (ep *clientAuthEndpoint) tokenURL() string { return ep.URL + "/oauth/token" }

func (ep *clientAuthEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) { ep.serve(w, r) }

func (ep *clientAuthEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	claims, err := ep.authenticate(r)
	ep.mu.Lock()
	ep.forms = append(ep.forms, r.PostForm)
	if err != nil {
		ep.refused = append(ep.refused, err)
	} else if claims != nil {
		ep.claims = append(ep.claims, *claims)
	}
	n := len(ep.forms)
	ep.mu.Unlock()
	if err != nil {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	issueToken(w, fmt.Sprintf("tok-%d", n), 3600)
}

// authenticate checks the request like an authorization server would.
func (ep *clientAuthEndpoint) authenticate(r *http.Request) (*jwt.Claims, error) {
	f := r.PostForm
	if got := f["resource"]; len(got) != 1 || got[0] != ep.resource {
		return nil, fmt.Errorf("resource = %q, want %q", got, ep.resource)
	}
	if f.Get("grant_type") != "client_credentials" {
		return nil, fmt.Errorf("grant_type = %q", f.Get("grant_type"))
	}
	user, pass, hasBasic := r.BasicAuth()
	switch ep.method {
	case config.ClientSecretBasic:
		if !hasBasic || user != "client-1" || pass != testClientSecret {
			return nil, fmt.Errorf("basic credentials %v %q", hasBasic, user)
		}
		if f.Has("client_secret") || f.Has("client_assertion") {
			return nil, errors.New("credentials in the form as well")
		}
	case config.ClientSecretPost:
		if hasBasic || r.Header.Get("Authorization") != "" {
			return nil, errors.New("an Authorization header with client_secret_post")
		}
		if f.Get("client_id") != "client-1" || f.Get("client_secret") != testClientSecret {
			return nil, fmt.Errorf("form credentials %q", f.Get("client_id"))
		}
	case config.PrivateKeyJWT:
		if r.Header.Get("Authorization") != "" || f.Has("client_secret") {
			return nil, errors.New("a secret with private_key_jwt")
		}
		if got := f.Get("client_assertion_type"); got != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
			return nil, fmt.Errorf("client_assertion_type = %q", got)
		}
		aud := ep.aud
		if aud == "" {
			aud = "http://" + r.Host + r.URL.Path
		}
		return verifyAssertion(f.Get("client_assertion"), ep.pub, ep.alg, aud, ep.now())
	}
	return nil, nil
}

// verifyAssertion checks a client assertion: the signature with pub, iss =
// sub = client-1, aud = only aud, a jti, iat now and exp within 60 s of it.
func verifyAssertion(raw string, pub crypto.PublicKey, alg jose.SignatureAlgorithm, aud string, now time.Time) (*jwt.Claims, error) {
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{alg})
	if err != nil {
		return nil, fmt.Errorf("parse assertion: %w", err)
	}
	if typ, _ := tok.Headers[0].ExtraHeaders[jose.HeaderType].(string); typ != "JWT" {
		return nil, fmt.Errorf("typ = %q", typ)
	}
	var c jwt.Claims
	if err := tok.Claims(pub, &c); err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Issuer: "client-1", Subject: "client-1",
		AnyAudience: jwt.Audience{aud}, Time: now}, 0); err != nil {
		return nil, fmt.Errorf("%w (aud = %v, want %s)", err, c.Audience, aud)
	}
	if len(c.Audience) != 1 {
		return nil, fmt.Errorf("aud = %v, want only %s", c.Audience, aud)
	}
	switch {
	case c.ID == "":
		return nil, errors.New("no jti")
	case c.IssuedAt == nil || c.Expiry == nil:
		return nil, errors.New("no iat or exp")
	case !c.IssuedAt.Time().Equal(now):
		return nil, fmt.Errorf("iat = %v, want %v", c.IssuedAt.Time(), now)
	case c.Expiry.Time().Sub(now) <= 0 || c.Expiry.Time().Sub(now) > 60*time.Second:
		return nil, fmt.Errorf("exp is %v after now, want within 60 s", c.Expiry.Time().Sub(now))
	}
	return &c, nil
}

// testKeys writes an EC P-256 and an RSA key; the PEM texts and the
// public keys.
type testKey struct {
	pem  string
	file string
	pub  crypto.PublicKey
	alg  jose.SignatureAlgorithm
}

func newTestKeys(t *testing.T) (ec, rs testKey) {
	t.Helper()
	dir := t.TempDir()
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(ek)
	ec = testKey{pem: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), pub: &ek.PublicKey, alg: jose.ES256}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rs = testKey{pem: string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})), pub: &rk.PublicKey, alg: jose.RS256}
	for _, k := range []*testKey{&ec, &rs} {
		k.file = filepath.Join(dir, string(k.alg)+".pem")
		if err := os.WriteFile(k.file, []byte(k.pem), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ec, rs
}

func TestOAuth2ClientAuthMethods(t *testing.T) {
	ec, rs := newTestKeys(t)
	for _, tc := range []struct {
		name   string
		method string
		key    testKey
		mutate func(*config.Auth)
	}{
		{"client_secret_basic (default)", config.ClientSecretBasic, testKey{}, nil},
		{"client_secret_basic", config.ClientSecretBasic, testKey{}, func(a *config.Auth) { a.ClientAuth = config.ClientSecretBasic }},
		{"client_secret_post", config.ClientSecretPost, testKey{}, func(a *config.Auth) { a.ClientAuth = config.ClientSecretPost }},
		{"private_key_jwt ES256 inline", config.PrivateKeyJWT, ec, func(a *config.Auth) {
			a.ClientAuth, a.ClientSecret, a.PrivateKey = config.PrivateKeyJWT, "", ec.pem
		}},
		{"private_key_jwt RS256 file", config.PrivateKeyJWT, rs, func(a *config.Auth) {
			a.ClientAuth, a.ClientSecret, a.PrivateKeyFile, a.SigningAlg = config.PrivateKeyJWT, "", rs.file, config.AlgRS256
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			ep := newClientAuthEndpoint(t, tc.method, tc.key.pub, tc.key.alg, clk.Now)
			a := testOAuthConfig(ep.tokenURL())
			if tc.mutate != nil {
				tc.mutate(a)
			}
			s := newTokenSource("srv", testServerURL, a, nil, nil)
			s.now = clk.Now
			if tok := mustToken(t, s); tok != "tok-1" {
				t.Fatalf("Token = %q", tok)
			}
			// A second mint, later: a fresh assertion.
			clk.Advance(2 * time.Hour)
			if tok := mustToken(t, s); tok != "tok-2" {
				t.Fatalf("second Token = %q", tok)
			}
			ep.mu.Lock()
			defer ep.mu.Unlock()
			if len(ep.refused) > 0 {
				t.Fatalf("endpoint refused: %v", ep.refused)
			}
			for i, f := range ep.forms {
				if got := f.Get("resource"); got != testResource {
					t.Errorf("request %d: resource = %q, want %q", i, got, testResource)
				}
			}
			if tc.method != config.PrivateKeyJWT {
				return
			}
			if len(ep.claims) != 2 {
				t.Fatalf("verified assertions = %d, want 2", len(ep.claims))
			}
			if ep.claims[0].ID == ep.claims[1].ID {
				t.Errorf("jti %q used twice", ep.claims[0].ID)
			}
			for _, f := range ep.forms {
				if strings.Contains(f.Encode(), "PRIVATE") {
					t.Error("the key went out")
				}
			}
		})
	}
}

// The endpoint's checks can fail: an assertion signed with another key
// (or a bad secret) is refused, and the error says so without the
// credential.
func TestOAuth2ClientAuthRefused(t *testing.T) {
	ec, rs := newTestKeys(t)
	other, _ := newTestKeys(t)
	for _, tc := range []struct {
		name   string
		method string
		key    testKey
		mutate func(*config.Auth)
		why    string
	}{
		{"assertion signed with another key", config.PrivateKeyJWT, ec, func(a *config.Auth) {
			a.ClientAuth, a.ClientSecret, a.PrivateKey = config.PrivateKeyJWT, "", other.pem
		}, "signature"},
		{"assertion with another algorithm", config.PrivateKeyJWT, ec, func(a *config.Auth) {
			a.ClientAuth, a.ClientSecret, a.PrivateKey = config.PrivateKeyJWT, "", rs.pem
		}, "parse assertion"},
		{"wrong secret in the form", config.ClientSecretPost, testKey{}, func(a *config.Auth) {
			a.ClientAuth, a.ClientSecret = config.ClientSecretPost, "wrong-"+testClientSecret
		}, "form credentials"},
		{"basic where post is expected", config.ClientSecretPost, testKey{}, nil, "Authorization header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			ep := newClientAuthEndpoint(t, tc.method, tc.key.pub, tc.key.alg, clk.Now)
			a := testOAuthConfig(ep.tokenURL())
			if tc.mutate != nil {
				tc.mutate(a)
			}
			s := newTokenSource("srv", testServerURL, a, nil, nil)
			s.now = clk.Now
			_, err := s.Token(context.Background())
			checkTokenError(t, err, KindAuth, http.StatusUnauthorized, []string{"invalid_client"},
				[]string{testClientSecret, "PRIVATE KEY"})
			ep.mu.Lock()
			defer ep.mu.Unlock()
			if len(ep.refused) != 1 || !strings.Contains(ep.refused[0].Error(), tc.why) {
				t.Errorf("endpoint refused with %v, want %q", ep.refused, tc.why)
			}
		})
	}
	t.Run("expired assertion", func(t *testing.T) {
		// The endpoint's clock is 61 s ahead: exp has passed.
		clk := newFakeClock()
		ep := newClientAuthEndpoint(t, config.PrivateKeyJWT, ec.pub, ec.alg, func() time.Time { return clk.Now().Add(61 * time.Second) })
		a := testOAuthConfig(ep.tokenURL())
		a.ClientAuth, a.ClientSecret, a.PrivateKey = config.PrivateKeyJWT, "", ec.pem
		s := newTokenSource("srv", testServerURL, a, nil, nil)
		s.now = clk.Now
		if _, err := s.Token(context.Background()); err == nil {
			t.Fatal("an expired assertion was accepted")
		}
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if len(ep.refused) != 1 || !errors.Is(ep.refused[0], jwt.ErrExpired) {
			t.Errorf("refused with %v, want expired", ep.refused)
		}
	})
	t.Run("unreadable key at mint time", func(t *testing.T) {
		ep := newClientAuthEndpoint(t, config.PrivateKeyJWT, ec.pub, ec.alg, time.Now)
		a := testOAuthConfig(ep.tokenURL())
		a.ClientAuth, a.ClientSecret, a.PrivateKeyFile = config.PrivateKeyJWT, "", filepath.Join(t.TempDir(), "gone.pem")
		s := newTokenSource("srv", testServerURL, a, nil, nil)
		_, err := s.Token(context.Background())
		checkTokenError(t, err, KindAuth, 0, []string{"private_key_jwt: private_key_file: cannot read"}, nil)
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if len(ep.forms) != 0 {
			t.Errorf("endpoint got %d requests", len(ep.forms))
		}
	})
}
