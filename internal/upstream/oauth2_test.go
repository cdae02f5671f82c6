package upstream

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

const testClientSecret = "s3cr3t-Value-9f8e7d"

// testServerURL is the MCP server the test token sources mint for, and
// testResource its canonical URI, the resource parameter of every token
// request.
const (
	testServerURL = "HTTPS://Up.Example.COM/mcp/#section"
	testResource  = "https://up.example.com/mcp"
)

// newTestTokenSource points a token source with a fake clock at ep.
func newTestTokenSource(t *testing.T, ep *tokenEndpoint, mutate func(*config.Auth)) (*tokenSource, *fakeClock) {
	t.Helper()
	a := testOAuthConfig(ep.URL + "/token")
	if mutate != nil {
		mutate(a)
	}
	s := newTokenSource("srv", testServerURL, a, nil, nil)
	clk := newFakeClock()
	s.now = clk.Now
	return s, clk
}

func wantToken(t *testing.T, s *tokenSource, ep *tokenEndpoint, tok string, hits int64) {
	t.Helper()
	if got := mustToken(t, s); got != tok {
		t.Errorf("Token = %q, want %q", got, tok)
	}
	if got := ep.hits.Load(); got != hits {
		t.Errorf("token requests = %d, want %d", got, hits)
	}
}

func TestOAuth2TokenRequestFormat(t *testing.T) {
	t.Run("scopes, audience, escaped credentials", func(t *testing.T) {
		ep := newTokenEndpoint(t, nil)
		s, _ := newTestTokenSource(t, ep, func(a *config.Auth) {
			a.ClientID, a.ClientSecret = "a:b", "p@ss word"
			a.Scopes = []string{"read", "write:all"}
			a.Audience = "https://api.example/"
		})
		wantToken(t, s, ep, "tok-1", 1)
		r := ep.requests()[0]
		if r.Method != http.MethodPost || r.Path != "/token" || r.RawQuery != "" {
			t.Errorf("request = %s %s?%s, want POST /token", r.Method, r.Path, r.RawQuery)
		}
		if r.ContentType != "application/x-www-form-urlencoded" {
			t.Errorf("Content-Type = %q", r.ContentType)
		}
		if r.Accept != "application/json" {
			t.Errorf("Accept = %q", r.Accept)
		}
		want := url.Values{
			"grant_type": {"client_credentials"},
			"scope":      {"read write:all"},
			"audience":   {"https://api.example/"},
			"resource":   {testResource},
		}
		if fmt.Sprint(r.Form) != fmt.Sprint(want) {
			t.Errorf("form = %v, want %v", r.Form, want)
		}
		enc, ok := strings.CutPrefix(r.Authz, "Basic ")
		if !ok {
			t.Fatalf("Authorization = %q, want Basic", r.Authz)
		}
		dec, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			t.Fatal(err)
		}
		if string(dec) != "a%3Ab:p%40ss+word" {
			t.Errorf("basic credentials = %q, want %q", dec, "a%3Ab:p%40ss+word")
		}
		id, secret, _ := strings.Cut(string(dec), ":")
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		if id != "a:b" || secret != "p@ss word" {
			t.Errorf("round trip = %q, %q", id, secret)
		}
	})
	t.Run("minimal", func(t *testing.T) {
		ep := newTokenEndpoint(t, nil)
		s, _ := newTestTokenSource(t, ep, nil)
		wantToken(t, s, ep, "tok-1", 1)
		r := ep.requests()[0]
		if want := "grant_type=client_credentials&resource=" + url.QueryEscape(testResource); r.Body != want {
			t.Errorf("body = %q, want only grant_type and resource (%q)", r.Body, want)
		}
		u, p, _ := (&http.Request{Header: http.Header{"Authorization": {r.Authz}}}).BasicAuth()
		if u != "client-1" || p != testClientSecret {
			t.Errorf("basic auth = %q, %q", u, p)
		}
	})
}

func TestOAuth2TokenCached(t *testing.T) {
	ep := newTokenEndpoint(t, nil)
	s, _ := newTestTokenSource(t, ep, nil)
	for range 100 {
		if tok := mustToken(t, s); tok != "tok-1" {
			t.Fatalf("Token = %q", tok)
		}
	}
	if n := ep.hits.Load(); n != 1 {
		t.Errorf("token requests = %d, want 1", n)
	}
}

// A token is cached while now < issued + lifetime - min(30s, lifetime/2).
func TestOAuth2TokenExpiry(t *testing.T) {
	for _, tc := range []struct {
		name        string
		expiresIn   any // JSON value; nil omits the field
		cachedUntil time.Duration
	}{
		{"120s number", 120, 90 * time.Second},
		{"60s numeric string", "60", 30 * time.Second},
		{"absent means 5 minutes", nil, 270 * time.Second},
		{"zero means 5 minutes", 0, 270 * time.Second},
		{"short-lived refreshes at half", 20, 10 * time.Second},
		{"fractional", 90.5, 60500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := newTokenEndpoint(t, func(w http.ResponseWriter, n int64) {
				issueToken(w, fmt.Sprintf("tok-%d", n), tc.expiresIn)
			})
			s, clk := newTestTokenSource(t, ep, nil)
			wantToken(t, s, ep, "tok-1", 1)
			if tc.cachedUntil > 31*time.Second {
				clk.Advance(31 * time.Second)
				wantToken(t, s, ep, "tok-1", 1)
				clk.Advance(-31 * time.Second)
			}
			clk.Advance(tc.cachedUntil - time.Millisecond)
			wantToken(t, s, ep, "tok-1", 1)
			clk.Advance(time.Millisecond)
			wantToken(t, s, ep, "tok-2", 2)
			wantToken(t, s, ep, "tok-2", 2)
		})
	}
}

func TestOAuth2TokenConcurrentMint(t *testing.T) {
	ep := newTokenEndpoint(t, func(w http.ResponseWriter, n int64) {
		time.Sleep(100 * time.Millisecond) // so the callers overlap
		issueToken(w, fmt.Sprintf("tok-%d", n), 3600)
	})
	s, _ := newTestTokenSource(t, ep, nil)
	const callers = 50
	start := make(chan struct{})
	toks := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			toks[i], errs[i] = s.Token(context.Background())
		})
	}
	close(start)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || toks[i] != "tok-1" {
			t.Errorf("caller %d: %q, %v", i, toks[i], errs[i])
		}
	}
	if n := ep.hits.Load(); n != 1 {
		t.Errorf("token requests = %d, want 1", n)
	}
}

func TestOAuth2TokenInvalidate(t *testing.T) {
	ep := newTokenEndpoint(t, func(w http.ResponseWriter, n int64) {
		time.Sleep(20 * time.Millisecond)
		issueToken(w, fmt.Sprintf("tok-%d", n), 3600)
	})
	s, _ := newTestTokenSource(t, ep, nil)
	wantToken(t, s, ep, "tok-1", 1)
	if !s.Invalidate("tok-1") {
		t.Error("Invalidate(current) = false")
	}
	wantToken(t, s, ep, "tok-2", 2)

	// Someone else already refreshed: no new mint, but a retry makes sense.
	if !s.Invalidate("tok-1") {
		t.Error("Invalidate(old) = false")
	}
	wantToken(t, s, ep, "tok-2", 2)
	if s.Invalidate("") {
		t.Error(`Invalidate("") = true`)
	}

	// 20 callers rejected with the same token: one extra mint.
	const callers = 20
	start := make(chan struct{})
	toks := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			if !s.Invalidate("tok-2") {
				errs[i] = errors.New("Invalidate = false")
				return
			}
			toks[i], errs[i] = s.Token(context.Background())
		})
	}
	close(start)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || toks[i] != "tok-3" {
			t.Errorf("caller %d: %q, %v", i, toks[i], errs[i])
		}
	}
	if n := ep.hits.Load(); n != 3 {
		t.Errorf("token requests = %d, want 3", n)
	}
}

func TestOAuth2TokenErrors(t *testing.T) {
	raw := func(status int, body string) func(http.ResponseWriter, int64) {
		return func(w http.ResponseWriter, _ int64) {
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	long := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name    string
		respond func(http.ResponseWriter, int64)
		kind    Kind
		status  int
		want    []string
		not     []string
	}{
		{"401 invalid_client",
			raw(401, `{"error":"invalid_client","error_description":"Client authentication failed"}`),
			KindAuth, 401, []string{"oauth2 token endpoint answered HTTP 401: invalid_client", "Client authentication failed"}, nil},
		{"401 description echoing the secret",
			raw(401, `{"error":"invalid_client","error_description":"bad secret `+testClientSecret+`"}`),
			KindAuth, 401, []string{"invalid_client"}, []string{"bad secret"}},
		{"400 long description is cut",
			raw(400, `{"error":"invalid_scope","error_description":"`+long+`"}`),
			KindAuth, 400, []string{"invalid_scope", strings.Repeat("x", maxOAuthErrorDescription)},
			[]string{strings.Repeat("x", maxOAuthErrorDescription+1)}},
		{"403 no body", raw(403, ""), KindAuth, 403, []string{"HTTP 403"}, nil},
		{"401 html body", raw(401, "<html>login page body-text</html>"), KindAuth, 401, nil, []string{"body-text", "html"}},
		{"401 unsafe error code", raw(401, `{"error":"bad\"code\n"}`), KindAuth, 401, nil, []string{"bad"}},
		{"404", raw(404, "nope"), KindAuth, 404, []string{"HTTP 404"}, []string{"nope"}},
		{"500", raw(500, "internal body-text"), KindUnreachable, 500, []string{"HTTP 500"}, []string{"body-text"}},
		{"503", raw(503, ""), KindUnreachable, 503, nil, nil},
		{"429", raw(429, `{"error":"slow_down"}`), KindRateLimited, 429, []string{"HTTP 429"}, nil},
		{"token_type mac", raw(200, `{"token_type":"mac","access_token":"x-token-value"}`),
			KindInvalidResponse, 200, []string{"token_type", "mac"}, []string{"x-token-value"}},
		{"token_type not a string", raw(200, `{"token_type":1,"access_token":"x-token-value"}`),
			KindInvalidResponse, 200, nil, []string{"x-token-value"}},
		{"no access_token", raw(200, `{"token_type":"bearer"}`), KindInvalidResponse, 200, []string{"access_token"}, nil},
		{"empty access_token", raw(200, `{"access_token":""}`), KindInvalidResponse, 200, nil, nil},
		{"access_token not a string", raw(200, `{"access_token":12345}`), KindInvalidResponse, 200, nil, []string{"12345"}},
		{"access_token with CRLF", raw(200, `{"access_token":"abc\r\nX-Evil: 1"}`), KindInvalidResponse, 200, nil, []string{"X-Evil", "abc"}},
		{"not JSON", raw(200, "this is not json body-text-123"), KindInvalidResponse, 200, nil, []string{"body-text", "this is"}},
		{"JSON array", raw(200, `["tok-x"]`), KindInvalidResponse, 200, nil, nil},
		{"expires_in not a number", raw(200, `{"access_token":"abc","expires_in":"soon"}`), KindInvalidResponse, 200, []string{"expires_in"}, []string{"soon", "abc"}},
		{"body over 1 MiB", raw(200, `{"access_token":"abc","pad":"`+strings.Repeat("p", maxTokenResponse)+`"}`),
			KindInvalidResponse, 200, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := newTokenEndpoint(t, tc.respond)
			s, _ := newTestTokenSource(t, ep, nil)
			tok, err := s.Token(context.Background())
			if err == nil {
				t.Fatalf("Token = %q, want an error", tok)
			}
			checkTokenError(t, err, tc.kind, tc.status, tc.want, tc.not)
		})
	}
}

func TestOAuth2TokenTypeAccepted(t *testing.T) {
	for _, body := range []string{
		`{"access_token":"abc","token_type":"BEARER"}`,
		`{"access_token":"abc","token_type":"bearer","expires_in":"3600"}`,
		`{"access_token":"abc"}`,
		`{"access_token":"abc","token_type":null,"expires_in":null}`,
	} {
		ep := newTokenEndpoint(t, func(w http.ResponseWriter, _ int64) { _, _ = io.WriteString(w, body) })
		s, _ := newTestTokenSource(t, ep, nil)
		if tok, err := s.Token(context.Background()); err != nil || tok != "abc" {
			t.Errorf("%s: Token = %q, %v", body, tok, err)
		}
	}
}

func TestOAuth2TokenUnreachable(t *testing.T) {
	ep := newTokenEndpoint(t, nil)
	u, _ := url.Parse(ep.URL)
	ep.Close() // connection refused from now on
	a := testOAuthConfig("http://user:pw-in-url@" + u.Host + "/token?q=query-secret")
	s := newTokenSource("srv", testServerURL, a, nil, nil)
	_, err := s.Token(context.Background())
	// The cause in words; the address is the log's (a caller sees this).
	checkTokenError(t, err, KindUnreachable, 0,
		[]string{"oauth2 token endpoint: connection refused"}, []string{"pw-in-url", "query-secret", u.Host})
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Errorf("error %v does not keep the network cause", err)
	}
}

func TestOAuth2TokenRedirectNotFollowed(t *testing.T) {
	for _, tc := range []struct {
		name string
		hc   *http.Client
	}{
		{"default client", nil},
		{"client that follows redirects", &http.Client{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := newTokenEndpoint(t, nil)
			ep := newTokenEndpoint(t, func(w http.ResponseWriter, _ int64) {
				w.Header().Set("Location", other.URL+"/token")
				w.WriteHeader(http.StatusFound)
			})
			s := newTokenSource("srv", testServerURL, testOAuthConfig(ep.URL+"/token"), tc.hc, nil)
			_, err := s.Token(context.Background())
			checkTokenError(t, err, KindInvalidResponse, http.StatusFound, []string{"HTTP 302"}, nil)
			if n := other.hits.Load(); n != 0 {
				t.Errorf("redirect target got %d requests", n)
			}
		})
	}
}

func TestOAuth2TokenNegativeCache(t *testing.T) {
	var healthy atomic.Bool
	ep := newTokenEndpoint(t, func(w http.ResponseWriter, n int64) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		issueToken(w, fmt.Sprintf("tok-%d", n), 3600)
	})
	s, clk := newTestTokenSource(t, ep, nil)
	fail := func(hits int64) {
		t.Helper()
		_, err := s.Token(context.Background())
		checkTokenError(t, err, KindUnreachable, http.StatusBadGateway, nil, nil)
		if n := ep.hits.Load(); n != hits {
			t.Errorf("token requests = %d, want %d", n, hits)
		}
	}
	fail(1)
	clk.Advance(999 * time.Millisecond)
	fail(1) // served from the negative cache
	clk.Advance(time.Millisecond)
	fail(2)
	healthy.Store(true)
	fail(2)
	clk.Advance(time.Second)
	wantToken(t, s, ep, "tok-3", 3)
	wantToken(t, s, ep, "tok-3", 3)
}

// A failed refresh inside the skew window keeps serving the old token
// until it really expires.
func TestOAuth2TokenRefreshFailureKeepsValidToken(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	ep := newTokenEndpoint(t, func(w http.ResponseWriter, n int64) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		issueToken(w, fmt.Sprintf("tok-%d", n), 120)
	})
	s, clk := newTestTokenSource(t, ep, nil)
	wantToken(t, s, ep, "tok-1", 1)
	healthy.Store(false)
	clk.Advance(95 * time.Second)
	wantToken(t, s, ep, "tok-1", 2)
	clk.Advance(500 * time.Millisecond)
	wantToken(t, s, ep, "tok-1", 2)
	clk.Advance(25 * time.Second) // past the real expiry
	_, err := s.Token(context.Background())
	checkTokenError(t, err, KindUnreachable, http.StatusServiceUnavailable, nil, nil)
	if n := ep.hits.Load(); n != 3 {
		t.Errorf("token requests = %d, want 3", n)
	}
}

func TestOAuth2TokenCancelledCaller(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	ep := newTokenEndpoint(t, func(w http.ResponseWriter, n int64) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		issueToken(w, fmt.Sprintf("tok-%d", n), 3600)
	})
	s, _ := newTestTokenSource(t, ep, nil)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// Nothing in flight: no mint is started for a caller that cannot wait.
	if _, err := s.Token(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Token(cancelled) = %v, want context.Canceled", err)
	}
	if n := ep.hits.Load(); n != 0 {
		t.Fatalf("token requests = %d, want 0", n)
	}

	type result struct {
		tok string
		err error
	}
	starterCtx, cancelStarter := context.WithCancel(context.Background())
	starter := make(chan result, 1)
	go func() {
		tok, err := s.Token(starterCtx)
		starter <- result{tok, err}
	}()
	<-arrived
	other := make(chan result, 1)
	go func() {
		tok, err := s.Token(context.Background())
		other <- result{tok, err}
	}()

	// The endpoint is blocked: returning at all is returning promptly.
	if _, err := s.Token(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Token(cancelled) = %v, want context.Canceled", err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if _, err := s.Token(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Token(short) = %v, want context.DeadlineExceeded", err)
	}
	// The caller that started the mint gives up; the mint goes on.
	cancelStarter()
	if r := <-starter; !errors.Is(r.err, context.Canceled) {
		t.Errorf("starter: %q, %v; want context.Canceled", r.tok, r.err)
	}

	close(release)
	if r := <-other; r.err != nil || r.tok != "tok-1" {
		t.Errorf("other caller: %q, %v", r.tok, r.err)
	}
	wantToken(t, s, ep, "tok-1", 1)
}

func TestOAuth2TokenIdentity(t *testing.T) {
	base := func() *config.Auth {
		a := testOAuthConfig("https://idp.example/token")
		a.Scopes = []string{"read", "write"}
		a.Audience = "https://api.example"
		return a
	}
	id := func(a *config.Auth) string { return newTokenSource("srv", testServerURL, a, nil, nil).identity() }
	want := id(base())
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(want) {
		t.Errorf("identity %q is not sha256 hex", want)
	}
	if strings.Contains(want, testClientSecret) {
		t.Error("identity contains the secret")
	}
	if got := newTokenSource("other-server", testServerURL, base(), nil, nil).identity(); got != want {
		t.Error("identity depends on the server name")
	}
	same := base()
	same.Scopes = []string{"write", "read"} // scope order is not significant
	if got := id(same); got != want {
		t.Error("identity differs for an equal config")
	}
	for name, change := range map[string]func(*config.Auth){
		"secret":      func(a *config.Auth) { a.ClientSecret += "x" },
		"client_id":   func(a *config.Auth) { a.ClientID += "x" },
		"token_url":   func(a *config.Auth) { a.TokenURL += "x" },
		"scopes":      func(a *config.Auth) { a.Scopes = a.Scopes[:1] },
		"audience":    func(a *config.Auth) { a.Audience = "" },
		"shifted":     func(a *config.Auth) { a.ClientID, a.Audience = "", a.ClientID+a.Audience },
		"client_auth": func(a *config.Auth) { a.ClientAuth = config.ClientSecretPost },
	} {
		a := base()
		change(a)
		if id(a) == want {
			t.Errorf("identity unchanged when %s changes", name)
		}
	}
}

func TestOAuth2TokenIdentityPrivateKey(t *testing.T) {
	base := func() *config.Auth {
		return &config.Auth{Type: config.AuthOAuth2, ClientID: "c", ClientAuth: config.PrivateKeyJWT, PrivateKey: "PEM-A"}
	}
	want := clientIdentity(base())
	if strings.Contains(want, "PEM-A") {
		t.Error("identity contains the key")
	}
	// An explicit client_secret_basic is the default's identity.
	basic := testOAuthConfig("https://idp.example/token")
	explicit := *basic
	explicit.ClientAuth = config.ClientSecretBasic
	if clientIdentity(basic) != clientIdentity(&explicit) {
		t.Error("explicit client_secret_basic changes the identity")
	}
	for name, change := range map[string]func(*config.Auth){
		"private_key":      func(a *config.Auth) { a.PrivateKey = "PEM-B" },
		"private_key_file": func(a *config.Auth) { a.PrivateKey, a.PrivateKeyFile = "", "/k.pem" },
		"signing_alg":      func(a *config.Auth) { a.SigningAlg = config.AlgES256 },
	} {
		a := base()
		change(a)
		if clientIdentity(a) == want {
			t.Errorf("identity unchanged when %s changes", name)
		}
	}
}

func TestOAuth2TokenLogs(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ep := newTokenEndpoint(t, func(w http.ResponseWriter, n int64) {
		if n == 1 {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
			return
		}
		issueToken(w, "tok-minted-value", 3600)
	})
	s := newTokenSource("srv-logged", testServerURL, testOAuthConfig(ep.URL+"/token"), nil, log)
	clk := newFakeClock()
	s.now = clk.Now
	if _, err := s.Token(context.Background()); err == nil {
		t.Fatal("first Token succeeded")
	}
	clk.Advance(2 * time.Second)
	mustToken(t, s)
	out := buf.String()
	for _, w := range []string{"oauth2 token minted", "srv-logged", "expires", "oauth2 token request failed", "invalid_client"} {
		if !strings.Contains(out, w) {
			t.Errorf("log does not contain %q:\n%s", w, out)
		}
	}
	for _, n := range []string{"tok-minted-value", testClientSecret} {
		if strings.Contains(out, n) {
			t.Errorf("log contains %q:\n%s", n, out)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the mint goroutine's logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
