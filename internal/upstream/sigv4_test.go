package upstream

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// The test credentials, as the default chain finds them in the
// environment (setAWSEnv).
const (
	testAccessKey    = "AKIDEXAMPLE"
	testSecretKey    = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	testSessionToken = "FwoGZXIvYXdzEXAMPLE-session-token"
	testRegion       = "eu-west-1"
	testService      = "execute-api"
)

// sigClock is the fixed signing clock of these tests.
var sigClock = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// isolateAWS points the default chain at empty files and no metadata
// service, so that only the variables a test sets are found (never the
// developer's own configuration), and clears every variable it reads.
func isolateAWS(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"config", "credentials"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(k, "")
	}
}

// setAWSEnv gives the default chain the test credentials.
func setAWSEnv(t *testing.T) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", testAccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecretKey)
	t.Setenv("AWS_SESSION_TOKEN", testSessionToken)
}

// sigVerifier is an upstream's SigV4 check, built on the SDK's own
// signer: it signs the request it received again, with the credentials it
// knows, the request's own date and the hash of the body it actually got,
// and compares the signatures. A request that fails is answered 403 and
// never reaches next.
type sigVerifier struct {
	t       testing.TB
	now     time.Time                  // the expected X-Amz-Date
	secrets map[string]aws.Credentials // by access key id
	next    http.Handler

	mu   sync.Mutex
	seen []verdict
}

type verdict struct {
	method, path, accessKey, signature string
	signed                             []string
	err                                error
}

func newSigVerifier(t testing.TB, next http.Handler) *sigVerifier {
	return &sigVerifier{t: t, now: sigClock, next: next, secrets: map[string]aws.Credentials{
		testAccessKey: {AccessKeyID: testAccessKey, SecretAccessKey: testSecretKey, SessionToken: testSessionToken},
	}}
}

func (v *sigVerifier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	vd, err := v.verify(r, body)
	vd.method, vd.path, vd.err = r.Method, r.URL.Path, err
	v.mu.Lock()
	v.seen = append(v.seen, vd)
	v.mu.Unlock()
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"message":"The request signature we calculated does not match the signature you provided."}`)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	v.next.ServeHTTP(w, r)
}

// verdicts returns what was checked so far.
func (v *sigVerifier) verdicts() []verdict {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.seen)
}

// unsignedOK are the headers SigV4 leaves out (and that Go's client may
// add after the signature); every other header must be signed.
var unsignedOK = map[string]bool{"user-agent": true, "accept-encoding": true, "content-length": true, "authorization": true}

func (v *sigVerifier) verify(r *http.Request, body []byte) (verdict, error) {
	var vd verdict
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return vd, fmt.Errorf("no SigV4 Authorization header (%q)", auth)
	}
	var cred, signedHeaders string
	for _, part := range strings.Split(rest, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			cred = val
		case "SignedHeaders":
			signedHeaders = val
		case "Signature":
			vd.signature = val
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return vd, fmt.Errorf("bad credential scope %q", cred)
	}
	vd.accessKey = scope[0]
	creds, ok := v.secrets[scope[0]]
	if !ok {
		return vd, fmt.Errorf("unknown access key %q", scope[0])
	}
	if scope[2] != testRegion || scope[3] != testService {
		return vd, fmt.Errorf("scope %s/%s, want %s/%s", scope[2], scope[3], testRegion, testService)
	}
	date := r.Header.Get("X-Amz-Date")
	if want := v.now.Format("20060102T150405Z"); date != want || scope[1] != want[:8] {
		return vd, fmt.Errorf("X-Amz-Date %q, scope date %q, want %s (the fixed clock)", date, scope[1], want)
	}
	if got := r.Header.Get("X-Amz-Security-Token"); got != creds.SessionToken {
		return vd, fmt.Errorf("X-Amz-Security-Token %q", got)
	}
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	if got := r.Header.Get("X-Amz-Content-Sha256"); got != payloadHash {
		return vd, fmt.Errorf("X-Amz-Content-Sha256 %q is not the hash of the body received", got)
	}
	vd.signed = strings.Split(signedHeaders, ";")
	// Signed last: every header that arrived is in the signature.
	for k := range r.Header {
		if lk := strings.ToLower(k); !unsignedOK[lk] && !slices.Contains(vd.signed, lk) {
			return vd, fmt.Errorf("header %s is not signed (SignedHeaders=%s)", k, signedHeaders)
		}
	}
	// Sign again what was received: the same method, URI, signed headers
	// and the body as received.
	again, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return vd, err
	}
	again.ContentLength = r.ContentLength
	for _, h := range vd.signed {
		if h == "host" || h == "content-length" {
			continue
		}
		vals := r.Header.Values(h)
		if len(vals) == 0 {
			return vd, fmt.Errorf("signed header %s missing", h)
		}
		again.Header[http.CanonicalHeaderKey(h)] = vals
	}
	at, err := time.Parse("20060102T150405Z", date)
	if err != nil {
		return vd, err
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, payloadHash, testService, testRegion, at); err != nil {
		return vd, err
	}
	want := again.Header.Get("Authorization")
	if !hmac.Equal([]byte(want), []byte(auth)) {
		return vd, fmt.Errorf("signature mismatch:\n got %s\nwant %s", auth, want)
	}
	return vd, nil
}

// sigServer is an aws_sigv4 server configuration for url.
func sigServer(name string, base *config.Server) *config.Server {
	base.Name = name
	base.Auth = &config.Auth{Type: config.AuthAWSSigV4, Region: testRegion, Service: testService}
	return base
}

// fixClock sets the signing clock of the Manager's signer for server.
func fixClock(t *testing.T, m *Manager, server string) *sigV4 {
	t.Helper()
	sv := m.serverMap()[server]
	if sv == nil || sv.sigv4 == nil {
		t.Fatalf("server %s has no signer", server)
	}
	sv.sigv4.now = func() time.Time { return sigClock }
	return sv.sigv4
}

// Through a Manager: initialize, tools/list and tools/call, the GET stream
// and the closing DELETE are each signed over their own body with the
// credentials of the default chain (here the environment), and the
// upstream's own check accepts every one.
func TestSigV4StreamableThroughManager(t *testing.T) {
	isolateAWS(t)
	setAWSEnv(t)
	var v *sigVerifier
	f := newStreamableFake(t, func(s *httptest.Server) {
		v = newSigVerifier(t, s.Config.Handler)
		s.Config.Handler = v
	})
	f.allowGet = true
	srv := sigServer("aws", f.server("aws"))
	srv.Headers = map[string]string{"X-Trace": "t-1"}
	srv.ProtocolVersion = mcpwire.Rev20250618
	m := managerFor(t, srv)
	fixClock(t, m, "aws")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := m.Call(ctx, "aws", mcpwire.MethodToolsList, nil)
	if err != nil || !strings.Contains(string(res), `"echo"`) {
		t.Fatalf("tools/list: %s %v", res, err)
	}
	if got, err := callEcho(ctx, m, "aws", "signed hello"); err != nil || got != "signed hello" {
		t.Fatalf("tools/call: %q %v", got, err)
	}
	// The GET stream is opened after the handshake; wait for it.
	eventually(func() bool { return hasMethod(v.verdicts(), http.MethodGet) })
	m.Close()

	vs := v.verdicts()
	methods := map[string]int{}
	sigs := map[string]bool{}
	for _, vd := range vs {
		if vd.err != nil {
			t.Errorf("%s %s refused by the upstream: %v", vd.method, vd.path, vd.err)
			continue
		}
		methods[vd.method]++
		sigs[vd.signature] = true
		if vd.accessKey != testAccessKey {
			t.Errorf("%s signed with access key %q", vd.method, vd.accessKey)
		}
		for _, h := range []string{"host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "x-trace"} {
			if !slices.Contains(vd.signed, h) {
				t.Errorf("%s: %s not signed (%v)", vd.method, h, vd.signed)
			}
		}
		if vd.method == http.MethodPost && (!slices.Contains(vd.signed, "content-type") || !slices.Contains(vd.signed, "accept")) {
			t.Errorf("POST: content-type or accept not signed (%v)", vd.signed)
		}
	}
	// initialize, notifications/initialized, tools/list, tools/call.
	if methods[http.MethodPost] < 4 || methods[http.MethodGet] < 1 || methods[http.MethodDelete] != 1 {
		t.Errorf("signed requests by method: %v, want >= 4 POST, >= 1 GET, 1 DELETE", methods)
	}
	if len(sigs) < 4 {
		t.Errorf("%d distinct signatures over %d requests with different bodies", len(sigs), len(vs))
	}
	// The session id, set after the handshake, is covered by the
	// signatures of the requests that carry it.
	withSession := 0
	for _, vd := range vs {
		if slices.Contains(vd.signed, "mcp-session-id") {
			withSession++
		}
	}
	if withSession < 3 {
		t.Errorf("%d signed requests cover Mcp-Session-Id", withSession)
	}
}

func hasMethod(vs []verdict, method string) bool {
	return slices.ContainsFunc(vs, func(vd verdict) bool { return vd.method == method })
}

// The legacy SSE transport signs its stream GET and its POSTs alike.
func TestSigV4LegacySSE(t *testing.T) {
	isolateAWS(t)
	setAWSEnv(t)
	s := &sseFake{fake: newFake(), raw: make(chan io.Reader)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", s.serveStream)
	mux.HandleFunc("POST /messages", s.servePost)
	v := newSigVerifier(t, mux)
	s.srv = httptest.NewServer(v)
	t.Cleanup(s.srv.Close)

	m := managerFor(t, sigServer("aws", s.server("aws")))
	fixClock(t, m, "aws")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.Call(ctx, "aws", mcpwire.MethodToolsList, nil); err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	if got, err := callEcho(ctx, m, "aws", "over sse"); err != nil || got != "over sse" {
		t.Fatalf("tools/call: %q %v", got, err)
	}
	var get, post int
	for _, vd := range v.verdicts() {
		if vd.err != nil {
			t.Errorf("%s %s refused: %v", vd.method, vd.path, vd.err)
		}
		switch vd.method {
		case http.MethodGet:
			get++
		case http.MethodPost:
			post++
		}
	}
	if get != 1 || post < 4 {
		t.Errorf("%d GET and %d POST verified, want 1 and >= 4", get, post)
	}
}

// tamperTransport changes the body of a tools/call after it was signed
// (same length, so only the signature can tell).
type tamperTransport struct{ next http.RoundTripper }

func (tt tamperTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return tt.next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	body = bytes.ReplaceAll(body, []byte("rm -rf /tmp"), []byte("rm -rf /etc"))
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	return tt.next.RoundTrip(req)
}

// The upstream's check can fail: a body changed after signing is refused,
// and the caller sees an auth fault. The same client without the tamper
// passes (TestSigV4StreamableThroughManager).
func TestSigV4TamperedBodyRefused(t *testing.T) {
	isolateAWS(t)
	setAWSEnv(t)
	var v *sigVerifier
	f := newStreamableFake(t, func(s *httptest.Server) {
		v = newSigVerifier(t, s.Config.Handler)
		s.Config.Handler = v
	})
	f.jsonReplies = true
	srv := sigServer("aws", f.server("aws"))
	srv.ProtocolVersion = mcpwire.Rev20250618
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"aws": srv},
		HTTPClient: &http.Client{Transport: tamperTransport{next: http.DefaultTransport}}})
	t.Cleanup(func() { m.Close() })
	fixClock(t, m, "aws")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := callEcho(ctx, m, "aws", "harmless"); err != nil || got != "harmless" {
		t.Fatalf("an untampered call: %q %v", got, err)
	}
	_, err := callEcho(ctx, m, "aws", "rm -rf /tmp")
	var ue *Error
	if !errors.As(err, &ue) || ue.Kind != KindAuth || ue.Status != http.StatusForbidden {
		t.Fatalf("tampered call: err = %v, want an auth error with status 403", err)
	}
	vs := v.verdicts()
	last := vs[len(vs)-1]
	if last.err == nil || !strings.Contains(last.err.Error(), "not the hash of the body") {
		t.Errorf("the upstream refused for %v, want the body hash", last.err)
	}

	// And with the hash header kept consistent, the signature itself
	// fails: the body is in the canonical request.
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	sig := fixClock(t, m, "aws")
	if err := sig.sign(req); err != nil {
		t.Fatal(err)
	}
	forged := []byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	sum := sha256.Sum256(forged)
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(forged)), int64(len(forged))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	vs = v.verdicts()
	if resp.StatusCode != http.StatusForbidden || vs[len(vs)-1].err == nil || !strings.Contains(vs[len(vs)-1].err.Error(), "signature mismatch") {
		t.Errorf("forged body with a matching hash header: HTTP %d, verdict %v", resp.StatusCode, vs[len(vs)-1].err)
	}
}

// The signature covers the body: the same request, headers and clock
// with another body is signed differently; with the same body, the same.
func TestSigV4SignatureCoversBody(t *testing.T) {
	isolateAWS(t)
	setAWSEnv(t)
	s := newSigV4(sigServer("aws", &config.Server{Transport: config.TransportHTTP, URL: "https://abc.execute-api.eu-west-1.amazonaws.com/mcp"}))
	s.now = func() time.Time { return sigClock }
	sign := func(body string) http.Header {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "https://abc.execute-api.eu-west-1.amazonaws.com/mcp", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Session-Id", "s-1")
		if err := s.sign(req); err != nil {
			t.Fatal(err)
		}
		return req.Header
	}
	a, a2 := sign(`{"a":1}`), sign(`{"a":1}`)
	b := sign(`{"a":2}`)
	if a.Get("Authorization") != a2.Get("Authorization") {
		t.Fatalf("the same request signed twice differs:\n%s\n%s", a.Get("Authorization"), a2.Get("Authorization"))
	}
	if a.Get("Authorization") == b.Get("Authorization") {
		t.Errorf("another body, the same signature: %s", a.Get("Authorization"))
	}
	if a.Get("X-Amz-Content-Sha256") == b.Get("X-Amz-Content-Sha256") {
		t.Errorf("payload hash header unchanged by the body")
	}
	wantPrefix := "AWS4-HMAC-SHA256 Credential=" + testAccessKey + "/20260314/eu-west-1/execute-api/aws4_request, SignedHeaders=content-length;content-type;host;mcp-session-id;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature="
	if !strings.HasPrefix(a.Get("Authorization"), wantPrefix) {
		t.Errorf("Authorization = %s\nwant prefix %s", a.Get("Authorization"), wantPrefix)
	}
	if a.Get("X-Amz-Date") != "20260314T150926Z" || a.Get("X-Amz-Security-Token") != testSessionToken {
		t.Errorf("date %q, token %q", a.Get("X-Amz-Date"), a.Get("X-Amz-Security-Token"))
	}
}

// With no credentials anywhere the gateway still starts; the first call
// fails with an auth fault naming the credential chain, and nothing
// reaches the upstream. Credentials provided afterwards are found on the
// next call: a failed chain is resolved again.
func TestSigV4MissingCredentials(t *testing.T) {
	isolateAWS(t)
	var v *sigVerifier
	f := newStreamableFake(t, func(s *httptest.Server) {
		v = newSigVerifier(t, s.Config.Handler)
		s.Config.Handler = v
	})
	f.jsonReplies = true
	srv := sigServer("aws", f.server("aws"))
	srv.ProtocolVersion = mcpwire.Rev20250618
	m := managerFor(t, srv)
	sig := fixClock(t, m, "aws")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := callEcho(ctx, m, "aws", "x")
	var ue *Error
	if !errors.As(err, &ue) || ue.Kind != KindAuth {
		t.Fatalf("err = %v, want an auth error", err)
	}
	t.Logf("error without credentials: %v", err)
	for _, want := range []string{"aws_sigv4", "no AWS credentials", "default credential chain", "AWS_ACCESS_KEY_ID"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n := len(v.verdicts()); n != 0 {
		t.Errorf("%d requests reached the upstream without credentials", n)
	}

	// The server's signer loads the chain again once credentials exist
	// (the Manager's own reconnect is only a matter of its backoff).
	setAWSEnv(t)
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	if err := sig.sign(req); err != nil {
		t.Fatalf("sign after the credentials appeared: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if vs := v.verdicts(); len(vs) != 1 || vs[0].err != nil {
		t.Errorf("verdicts %+v", vs)
	}
}

// Credentials are retrieved for every request from the SDK's cache:
// temporary credentials that expire are replaced within one session, and
// each request is signed with the ones current when it goes out.
func TestSigV4CredentialRotation(t *testing.T) {
	isolateAWS(t)
	var v *sigVerifier
	f := newStreamableFake(t, func(s *httptest.Server) {
		v = newSigVerifier(t, s.Config.Handler)
		s.Config.Handler = v
	})
	f.jsonReplies = true
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("ASIAROTATED%d", i)
		v.secrets[id] = aws.Credentials{AccessKeyID: id, SecretAccessKey: fmt.Sprintf("secret-%d", i), SessionToken: fmt.Sprintf("token-%d", i)}
	}
	srv := sigServer("aws", f.server("aws"))
	srv.ProtocolVersion = mcpwire.Rev20250618
	m := managerFor(t, srv)
	sig := fixClock(t, m, "aws")
	var mu sync.Mutex
	n := 0
	// Already expired when handed out: the cache asks again next time.
	sig.creds = aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		mu.Lock()
		defer mu.Unlock()
		n = min(n+1, 3)
		c := v.secrets[fmt.Sprintf("ASIAROTATED%d", n)]
		c.CanExpire, c.Expires = true, time.Now().Add(-time.Second)
		return c, nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, text := range []string{"one", "two", "three"} {
		if got, err := callEcho(ctx, m, "aws", text); err != nil || got != text {
			t.Fatalf("call %s: %q %v", text, got, err)
		}
	}
	keys := map[string]bool{}
	for _, vd := range v.verdicts() {
		if vd.err != nil {
			t.Errorf("%s refused: %v", vd.method, vd.err)
		}
		keys[vd.accessKey] = true
	}
	if len(keys) != 3 {
		t.Errorf("signed with %v, want the three rotated keys", keys)
	}
	if c := countMethod(f.seen(), mcpwire.MethodInitialize); c != 1 {
		t.Errorf("%d sessions: rotation must not need a new one", c)
	}
}

// A same-origin redirect is signed again for its own URL (the upstream's
// check passes on the new path); a redirect to another origin is refused
// by the package's client, and an owner's client that follows it sends
// no signature header there.
func TestSigV4Redirects(t *testing.T) {
	isolateAWS(t)
	setAWSEnv(t)
	var v *sigVerifier
	f := newStreamableFake(t, func(s *httptest.Server) {
		v = newSigVerifier(t, s.Config.Handler)
		mux := http.NewServeMux()
		mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/mcp", http.StatusPermanentRedirect)
		})
		mux.Handle("/", v)
		s.Config.Handler = mux
	})
	f.jsonReplies = true
	srv := sigServer("aws", f.server("aws"))
	srv.URL = f.srv.URL + "/old"
	srv.ProtocolVersion = mcpwire.Rev20250618
	m := managerFor(t, srv)
	fixClock(t, m, "aws")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := callEcho(ctx, m, "aws", "moved"); err != nil || got != "moved" {
		t.Fatalf("call through a same-origin redirect: %q %v", got, err)
	}
	for _, vd := range v.verdicts() {
		if vd.err != nil || vd.path != "/mcp" {
			t.Errorf("%s %s: %v", vd.method, vd.path, vd.err)
		}
	}

	// Another origin.
	var mu sync.Mutex
	var leaked []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		for k := range r.Header {
			if lk := strings.ToLower(k); lk == "authorization" || strings.HasPrefix(lk, "x-amz-") {
				leaked = append(leaked, k)
			}
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
	}))
	defer other.Close()
	away := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	defer away.Close()
	srv2 := sigServer("away", &config.Server{Transport: config.TransportHTTP, URL: away.URL + "/mcp", Timeout: 5 * time.Second, ProtocolVersion: mcpwire.Rev20250618})
	m2 := managerFor(t, srv2)
	fixClock(t, m2, "away")
	_, err := m2.Call(ctx, "away", mcpwire.MethodToolsList, nil)
	var re *redirectError
	if !errors.As(err, &re) {
		t.Errorf("cross-origin redirect with the package's client: err = %v, want it refused", err)
	}
	m3 := NewManager(ManagerOptions{Servers: map[string]*config.Server{"away": srv2},
		HTTPClient: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}})
	defer m3.Close()
	fixClock(t, m3, "away")
	if _, err := m3.Call(ctx, "away", mcpwire.MethodToolsList, nil); err == nil {
		t.Errorf("call answered 404 by the other origin succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(leaked) != 0 {
		t.Errorf("signature headers followed the redirect to another origin: %v", leaked)
	}
}

// Preview shows the signature's shape with the signature masked and
// without any credential, and reads no AWS configuration.
func TestSigV4Preview(t *testing.T) {
	isolateAWS(t)
	setAWSEnv(t)
	srv := sigServer("aws", &config.Server{Transport: config.TransportHTTP, URL: "https://abc.execute-api.eu-west-1.amazonaws.com/prod/mcp?x=secret",
		Headers: map[string]string{"X-Trace": "t"}})
	p := Preview(srv)
	auth := p.Headers.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=<access key id>/") ||
		!strings.Contains(auth, "/eu-west-1/execute-api/aws4_request, SignedHeaders=accept;content-type;host;x-amz-content-sha256;x-amz-date;x-trace, Signature=****") ||
		!strings.HasSuffix(auth, "Signature=****") {
		t.Errorf("Authorization = %q", auth)
	}
	if p.Headers.Get("X-Amz-Date") == "" || p.Headers.Get("X-Amz-Content-Sha256") != "<sha256 of the body>" || p.Headers.Get("X-Trace") != "****" {
		t.Errorf("headers %v", p.Headers)
	}
	for k, vals := range p.Headers {
		for _, val := range vals {
			if strings.Contains(val, testAccessKey) || strings.Contains(val, testSessionToken) || strings.Contains(val, "secret") {
				t.Errorf("%s: %q leaks a credential", k, val)
			}
		}
	}
	if p.Method != http.MethodPost || strings.Contains(p.URL, "secret") {
		t.Errorf("%s %s", p.Method, p.URL)
	}
}

// The fingerprint follows the signing scope, not the rotating credentials.
func TestSigV4Fingerprint(t *testing.T) {
	a := sigServer("aws", &config.Server{Transport: config.TransportHTTP, URL: "https://x/mcp"})
	b := sigServer("aws", &config.Server{Transport: config.TransportHTTP, URL: "https://x/mcp"})
	b.Auth.Region = "us-east-1"
	if Fingerprint(a, "") == Fingerprint(b, "") {
		t.Errorf("another region, the same fingerprint")
	}
	if Fingerprint(a, "") != Fingerprint(sigServer("aws", &config.Server{Transport: config.TransportHTTP, URL: "https://x/mcp"}), "") {
		t.Errorf("fingerprint not stable")
	}
}
