package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// sts is a real local RFC 8693 token endpoint: it records every request's
// form and Basic credentials and grants "x-<subject>-<n>".
type sts struct {
	srv   *httptest.Server
	n     atomic.Int64
	mu    sync.Mutex
	forms []url.Values
	basic []string
	// answer, when set, answers instead.
	answer func(w http.ResponseWriter, form url.Values) bool
}

func newSTS(t *testing.T) *sts {
	s := &sts{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id, secret, _ := r.BasicAuth()
		s.mu.Lock()
		s.forms = append(s.forms, r.PostForm)
		s.basic = append(s.basic, id+":"+secret)
		answer := s.answer
		s.mu.Unlock()
		if answer != nil && answer(w, r.PostForm) {
			return
		}
		n := s.n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"x-%s-%d","issued_token_type":%q,"token_type":"Bearer","expires_in":3600}`,
			r.PostForm.Get("subject_token"), n, config.TokenTypeAccessToken)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sts) seen() ([]url.Values, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.forms...), append([]string(nil), s.basic...)
}

// recordingFake is a streamable fake that records the Authorization of
// every POST.
func recordingFake(t *testing.T) (*streamableFake, func() []string) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	var mu sync.Mutex
	var auths []string
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		return false
	}
	return f, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), auths...)
	}
}

func asCaller(subject string) context.Context {
	return WithCallerTokens(context.Background(), func(string) string { return subject })
}

func TestTokenExchangeEgress(t *testing.T) {
	x := newSTS(t)
	f, auths := recordingFake(t)
	srv := f.server("up")
	srv.Auth = &config.Auth{Type: config.AuthTokenExchange, TokenURL: x.srv.URL + "/token", ClientID: "gw", ClientSecret: "s3cret",
		Audience: "up-api", Scopes: []string{"read", "write"}}
	log, logs := newLogger()
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"up": srv}, Logger: log})
	t.Cleanup(func() { m.Close() })

	alice, bob := asCaller("subject-alice"), asCaller("subject-bob")
	for i, ctx := range []context.Context{alice, alice, bob, alice, bob} {
		if got, err := callEcho(ctx, m, "up", fmt.Sprint(i)); err != nil || got != fmt.Sprint(i) {
			t.Fatalf("call %d: %q %v", i, got, err)
		}
	}

	forms, basic := x.seen()
	if len(forms) != 2 {
		t.Fatalf("%d exchanges, want 2 (one per person; the rest from the cache)", len(forms))
	}
	want := url.Values{
		"grant_type":           {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":        {"subject-alice"},
		"subject_token_type":   {"urn:ietf:params:oauth:token-type:access_token"},
		"requested_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"audience":             {"up-api"},
		"resource":             {srv.URL},
		"scope":                {"read write"},
	}
	if got := forms[0]; !equalForms(got, want) {
		t.Errorf("exchange form:\n got %v\nwant %v", got, want)
	}
	if forms[1].Get("subject_token") != "subject-bob" {
		t.Errorf("second exchange for %q, want bob's", forms[1].Get("subject_token"))
	}
	for _, b := range basic {
		if b != "gw:s3cret" {
			t.Errorf("client authentication %q, want Basic gw:s3cret", b)
		}
	}
	// Each person's session carried only their own exchanged token.
	for _, a := range auths() {
		if a != "Bearer x-subject-alice-1" && a != "Bearer x-subject-bob-2" {
			t.Errorf("upstream saw Authorization %q", a)
		}
	}
	if n := countMethod(f.seen(), mcpwire.MethodInitialize); n != 2 {
		t.Errorf("%d initialize requests, want 2: one session per person", n)
	}
	for _, secret := range []string{"x-subject-alice-1", "x-subject-bob-2", "subject-alice", "subject-bob", "s3cret"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log has %q:\n%s", secret, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "token exchanged") {
		t.Errorf("no exchange logged:\n%s", logs.String())
	}
}

func TestTokenExchangeNoSubject(t *testing.T) {
	x := newSTS(t)
	f, _ := recordingFake(t)
	srv := f.server("up")
	srv.Auth = &config.Auth{Type: config.AuthTokenExchange, TokenURL: x.srv.URL, ClientID: "gw", ClientSecret: "s3cret"}
	m := managerFor(t, srv)
	for _, ctx := range []context.Context{context.Background(), asCaller("")} {
		_, err := callEcho(ctx, m, "up", "x")
		if !errors.Is(err, ErrNoSubjectToken) {
			t.Fatalf("err = %v, want ErrNoSubjectToken", err)
		}
		if !strings.Contains(err.Error(), "upstream up:") {
			t.Errorf("error %q does not name the server", err)
		}
	}
	if forms, _ := x.seen(); len(forms) != 0 {
		t.Errorf("%d exchanges without a subject token", len(forms))
	}
	if n := len(f.seen()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

// The token service refusing the subject token: the error names the
// server, the endpoint and the OAuth error, never a token.
func TestTokenExchangeRefused(t *testing.T) {
	x := newSTS(t)
	const subject = "eyJhbGciOiJFUzI1NiJ9.secret-subject-token.sig"
	x.answer = func(w http.ResponseWriter, form url.Values) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"subject %s expired"}`, form.Get("subject_token"))
		return true
	}
	f, _ := recordingFake(t)
	srv := f.server("up")
	srv.Auth = &config.Auth{Type: config.AuthTokenExchange, TokenURL: x.srv.URL, ClientID: "gw", ClientSecret: "s3cret"}
	m := managerFor(t, srv)
	_, err := callEcho(asCaller(subject), m, "up", "x")
	if err == nil {
		t.Fatal("call succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "upstream up: token exchange endpoint answered HTTP 400: invalid_grant") {
		t.Errorf("error = %q", msg)
	}
	if strings.Contains(msg, "secret-subject-token") {
		t.Errorf("error echoes the subject token: %q", msg)
	}
	if k := KindOf(err); k != KindAuth {
		t.Errorf("kind %v, want auth", k)
	}
}

// The cache: a second Token is served without an exchange until the skew
// before expiry, then a new exchange; the cache stays bounded.
func TestTokenExchangeCacheExpiry(t *testing.T) {
	x := newSTS(t)
	a := &config.Auth{Type: config.AuthTokenExchange, TokenURL: x.srv.URL, ClientID: "gw", ClientSecret: "s3cret", ClientAuth: config.ClientSecretPost}
	ex := newExchanger("up", "https://up.example.com/mcp", a, nil, nil)
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	ex.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	ctx := context.Background()

	t1, err := ex.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if t2, _ := ex.Token(ctx, "alice"); t2 != t1 {
		t.Errorf("second Token %q, want the cached %q", t2, t1)
	}
	advance(3600*time.Second - tokenExpirySkew - time.Second)
	if t3, _ := ex.Token(ctx, "alice"); t3 != t1 {
		t.Errorf("Token before the skew %q, want the cached %q", t3, t1)
	}
	advance(2 * time.Second)
	t4, err := ex.Token(ctx, "alice")
	if err != nil || t4 == t1 {
		t.Errorf("Token within the skew = %q, %v; want a new exchange", t4, err)
	}
	forms, basic := x.seen()
	if len(forms) != 2 {
		t.Errorf("%d exchanges, want 2", len(forms))
	}
	// client_secret_post: the credentials in the form, no Basic.
	if f := forms[0]; f.Get("client_id") != "gw" || f.Get("client_secret") != "s3cret" || basic[0] != ":" {
		t.Errorf("client_secret_post: form %v, basic %q", f, basic[0])
	}
	if f := forms[0]; f.Get("resource") != "https://up.example.com/mcp" || f.Has("audience") || f.Has("scope") {
		t.Errorf("form %v: want the default resource, no audience or scope", f)
	}
	// A 401 with the token drops it: the next Token exchanges again.
	if !ex.Invalidate("alice", t4) {
		t.Error("Invalidate = false")
	}
	if t5, _ := ex.Token(ctx, "alice"); t5 == t4 {
		t.Error("Token after Invalidate served the stale token")
	}

	// Bounded: far more subjects than entries.
	for i := range maxExchangeEntries + 10 {
		ex.mu.Lock()
		ex.makeRoomLocked(ex.now())
		ex.entries[fmt.Sprint(i)] = &exchangeEntry{token: "t", expiry: now.Add(time.Hour), used: now.Add(time.Duration(i))}
		ex.mu.Unlock()
	}
	ex.mu.Lock()
	n := len(ex.entries)
	ex.mu.Unlock()
	if n > maxExchangeEntries {
		t.Errorf("%d cache entries, bound %d", n, maxExchangeEntries)
	}
}

func TestTokenExchangeConfiguredResourceAndType(t *testing.T) {
	x := newSTS(t)
	a := &config.Auth{Type: config.AuthTokenExchange, TokenURL: x.srv.URL, ClientID: "gw", ClientSecret: "s",
		Resource: "https://api.example.com/", SubjectTokenType: config.TokenTypeJWT}
	ex := newExchanger("up", "https://up.example.com/mcp", a, nil, nil)
	if _, err := ex.Token(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	forms, _ := x.seen()
	if f := forms[0]; f.Get("resource") != "https://api.example.com/" || f.Get("subject_token_type") != config.TokenTypeJWT {
		t.Errorf("form %v", f)
	}
}

// enterprise_managed: the ID token is exchanged at the IdP for an ID-JAG
// (audience the discovered issuer, resource the server), which the
// server's authorization server redeems with the JWT bearer grant.
func TestEnterpriseManagedEgress(t *testing.T) {
	idp := newSTS(t)
	idp.answer = func(w http.ResponseWriter, form url.Values) bool {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"jag-for-%s","issued_token_type":%q,"token_type":"N_A","expires_in":300}`,
			form.Get("subject_token"), config.TokenTypeIDJAG)
		return true
	}
	as := newSTS(t)
	as.answer = func(w http.ResponseWriter, form url.Values) bool {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"at-from-%s","token_type":"Bearer","expires_in":3600}`, form.Get("assertion"))
		return true
	}
	var asMux http.ServeMux
	asMux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": as.srv.URL, "token_endpoint": as.srv.URL + "/token"})
	})
	asMux.Handle("/token", as.srv.Config.Handler)
	as.srv.Config.Handler = &asMux

	f, auths := recordingFake(t)
	f.onGet = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/.well-known/oauth-protected-resource/mcp" {
			return false
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"resource": f.srv.URL + "/mcp", "authorization_servers": []string{as.srv.URL}})
		return true
	}
	srv := f.server("up")
	srv.Auth = &config.Auth{Type: config.AuthEnterpriseManaged, IdPTokenURL: idp.srv.URL + "/token", IdPClientID: "gw-at-idp",
		ClientID: "gw", ClientSecret: "s3cret", Scopes: []string{"mcp"}, AuthorizationServer: as.srv.URL}
	log, logs := newLogger()
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"up": srv}, Logger: log})
	t.Cleanup(func() { m.Close() })

	for i, ctx := range []context.Context{asCaller("idtok-alice"), asCaller("idtok-alice"), asCaller("idtok-bob")} {
		if got, err := callEcho(ctx, m, "up", fmt.Sprint(i)); err != nil || got != fmt.Sprint(i) {
			t.Fatalf("call %d: %q %v\n%s", i, got, err, logs)
		}
	}
	idpForms, idpBasic := idp.seen()
	asForms, asBasic := as.seen()
	if len(idpForms) != 2 || len(asForms) != 2 {
		t.Fatalf("%d IdP exchanges and %d grants, want 2 and 2", len(idpForms), len(asForms))
	}
	wantIdP := url.Values{
		"grant_type":           {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":        {"idtok-alice"},
		"subject_token_type":   {"urn:ietf:params:oauth:token-type:id_token"},
		"requested_token_type": {"urn:ietf:params:oauth:token-type:id-jag"},
		"audience":             {as.srv.URL},
		"resource":             {srv.URL},
		"scope":                {"mcp"},
		"client_id":            {"gw-at-idp"}, // no idp_client_secret: a public client
	}
	if !equalForms(idpForms[0], wantIdP) || idpBasic[0] != ":" {
		t.Errorf("IdP exchange:\n got %v (basic %q)\nwant %v", idpForms[0], idpBasic[0], wantIdP)
	}
	wantAS := url.Values{
		"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"},
		"assertion":  {"jag-for-idtok-alice"},
		"resource":   {srv.URL},
		"scope":      {"mcp"},
	}
	if !equalForms(asForms[0], wantAS) || asBasic[0] != "gw:s3cret" {
		t.Errorf("JWT bearer grant:\n got %v (basic %q)\nwant %v", asForms[0], asBasic[0], wantAS)
	}
	for _, a := range auths() {
		if a != "Bearer at-from-jag-for-idtok-alice" && a != "Bearer at-from-jag-for-idtok-bob" {
			t.Errorf("upstream saw Authorization %q", a)
		}
	}
	for _, secret := range []string{"idtok-alice", "jag-for", "at-from", "s3cret"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log has %q", secret)
		}
	}

	// The IdP refusing: the error names the step and the server.
	idp.answer = func(w http.ResponseWriter, form url.Values) bool {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"invalid_grant","error_description":"Invalid ID token"}`)
		return true
	}
	_, err := callEcho(asCaller("idtok-carol"), m, "up", "x")
	if err == nil || !strings.Contains(err.Error(), "upstream up: IdP token endpoint (ID-JAG exchange) answered HTTP 400: invalid_grant (Invalid ID token)") {
		t.Errorf("err = %v", err)
	}
}

// The fingerprint of an exchanging server differs per subject token and
// never contains it; Preview shows a placeholder.
func TestTokenExchangeFingerprintAndPreview(t *testing.T) {
	srv := &config.Server{Name: "up", Transport: config.TransportHTTP, URL: "https://up.example.com/mcp",
		Auth: &config.Auth{Type: config.AuthTokenExchange, TokenURL: "https://sts.example.com/token", ClientID: "gw", ClientSecret: "s"}}
	a, b := Fingerprint(srv, "alice-token"), Fingerprint(srv, "bob-token")
	if a == b || a != Fingerprint(srv, "alice-token") {
		t.Errorf("fingerprints %s %s", a, b)
	}
	p := Preview(srv)
	if got := p.Headers.Get("Authorization"); got != "Bearer <the caller's token exchanged at https://sts.example.com/token>" {
		t.Errorf("preview Authorization %q", got)
	}
}

func equalForms(got, want url.Values) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g := got[k]; len(g) != len(v) || (len(v) > 0 && g[0] != v[0]) {
			return false
		}
	}
	return true
}
