package upstream

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

func TestStripScheme(t *testing.T) {
	// The reference client's strip_auth_scheme table.
	for _, tt := range []struct{ in, scheme, want string }{
		{"Bearer abc", "Bearer", "abc"},
		{"bearer abc", "Bearer", "abc"},
		{"Bearer\tabc", "Bearer", "abc"},
		{"bearer\t\tabc", "Bearer", "abc"},
		{" Bearer abc ", "Bearer", "abc "},
		{"abc", "Bearer", "abc"},
		{"Bearerabc", "Bearer", "Bearerabc"},
		{"Basic abc", "Bearer", "Basic abc"},
		{"token abc", "token", "abc"},
		{"Basic abc", "Basic", "abc"},
		{"Bearer ", "Bearer", "Bearer "},
		{"Bearer \t", "Bearer", "Bearer \t"},
		{"", "Bearer", ""},
	} {
		if got := StripScheme(tt.in, tt.scheme); got != tt.want {
			t.Errorf("StripScheme(%q, %q) = %q, want %q", tt.in, tt.scheme, got, tt.want)
		}
	}
}

func authServer(typ, value, slot string, static map[string]string) *config.Server {
	return &config.Server{Name: "up", Transport: config.TransportHTTP, URL: "https://up.example.com/mcp",
		Headers: static, Auth: &config.Auth{Type: typ, Value: value, HeaderName: slot}}
}

func egressHeaders(t *testing.T, srv *config.Server, callerToken string) http.Header {
	t.Helper()
	h := make(http.Header)
	if _, err := newEgressAuth(srv, nil, callerToken).apply(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestOneScheme(t *testing.T) {
	tests := []struct {
		typ, value, header, want string
	}{
		// The bearer family emits exactly one scheme.
		{config.AuthBearer, "bare-token", "Authorization", "Bearer bare-token"},
		{config.AuthBearer, "Bearer bare-token", "Authorization", "Bearer bare-token"},
		{config.AuthBearer, "bearer bare-token", "Authorization", "Bearer bare-token"},
		{config.AuthBearer, " BEARER bare-token", "Authorization", "Bearer bare-token"},
		{config.AuthBearer, "bearer\t\tbare-token", "Authorization", "Bearer bare-token"},
		{config.AuthOAuth2, "bare-token", "Authorization", "Bearer bare-token"},
		{config.AuthOAuth2, "Bearer bare-token", "Authorization", "Bearer bare-token"},
		{config.AuthPassthrough, "Bearer bare-token", "Authorization", "Bearer bare-token"},
		// token scheme.
		{config.AuthToken, "bare-token", "Authorization", "token bare-token"},
		{config.AuthToken, "token bare-token", "Authorization", "token bare-token"},
		{config.AuthToken, "TOKEN bare-token", "Authorization", "token bare-token"},
		// A credential merely starting with the scheme's letters is kept whole.
		{config.AuthBearer, "Bearertoken", "Authorization", "Bearer Bearertoken"},
		{config.AuthOAuth2, "Bearer.eyJzdWIiOiJhYmMifQ.sig", "Authorization", "Bearer Bearer.eyJzdWIiOiJhYmMifQ.sig"},
		{config.AuthToken, "tokenish", "Authorization", "token tokenish"},
		// A scheme with nothing behind it is a credential.
		{config.AuthBearer, "Bearer ", "Authorization", "Bearer Bearer"},
		{config.AuthBearer, "Bearer  ", "Authorization", "Bearer Bearer"},
		// authorization: the operator owns the whole value.
		{config.AuthAuthorization, "Bearer Bearer deliberately-doubled", "Authorization", "Bearer Bearer deliberately-doubled"},
		{config.AuthAuthorization, "Custom x=1", "Authorization", "Custom x=1"},
		// api_key values are never scheme-stripped.
		{config.AuthAPIKey, "Bearer looks-schemed", "X-Api-Key", "Bearer looks-schemed"},
		{config.AuthAPIKey, "k", "X-Api-Key", "k"},
	}
	for _, tt := range tests {
		t.Run(tt.typ+"/"+tt.value, func(t *testing.T) {
			h := egressHeaders(t, authServer(tt.typ, tt.value, "", nil), tt.value)
			if got := h.Get(tt.header); got != tt.want {
				t.Errorf("%s = %q, want %q", tt.header, got, tt.want)
			}
			if n := len(h); n != 1 {
				t.Errorf("%d headers, want only the credential: %v", n, h)
			}
		})
	}
}

func TestBasic(t *testing.T) {
	enc := base64.StdEncoding.EncodeToString([]byte("user:pass"))
	for _, v := range []string{"user:pass", "Basic user:pass", "basic user:pass", "Basic " + enc, " user:pass "} {
		got := egressHeaders(t, authServer(config.AuthBasic, v, "", nil), "").Get("Authorization")
		if got != "Basic "+enc {
			t.Errorf("basic %q -> %q, want %q", v, got, "Basic "+enc)
		}
	}
	// A password containing a colon is encoded whole.
	got := egressHeaders(t, authServer(config.AuthBasic, "u:p:w", "", nil), "").Get("Authorization")
	if dec, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(got, "Basic ")); string(dec) != "u:p:w" {
		t.Errorf("u:p:w -> %q", got)
	}
	// "Basic " still produces a header.
	if got := egressHeaders(t, authServer(config.AuthBasic, "Basic ", "", nil), "").Get("Authorization"); !strings.HasPrefix(got, "Basic ") {
		t.Errorf("Basic<space> -> %q", got)
	}
}

func TestCredentialSlot(t *testing.T) {
	t.Run("default slots", func(t *testing.T) {
		for typ, slot := range map[string]string{config.AuthOAuth2: "Authorization", config.AuthBearer: "Authorization", config.AuthAPIKey: "X-API-Key"} {
			h := egressHeaders(t, authServer(typ, "tok", "", nil), "")
			if h.Get(slot) == "" {
				t.Errorf("%s: no %s in %v", typ, slot, h)
			}
		}
	})
	t.Run("configured slot", func(t *testing.T) {
		for _, typ := range []string{config.AuthOAuth2, config.AuthBearer, config.AuthAPIKey} {
			h := egressHeaders(t, authServer(typ, "tok", "esb-oauth", nil), "")
			if h.Get("esb-oauth") == "" || h.Get("Authorization") != "" || h.Get("X-API-Key") != "" {
				t.Errorf("%s: %v", typ, h)
			}
		}
	})
	t.Run("static Authorization travels beside the slot", func(t *testing.T) {
		h := egressHeaders(t, authServer(config.AuthBearer, "minted", "esb-oauth", map[string]string{"Authorization": "Bearer static-upstream-mcp-token"}), "")
		if h.Get("esb-oauth") != "Bearer minted" || h.Get("Authorization") != "Bearer static-upstream-mcp-token" {
			t.Errorf("%v", h)
		}
	})
	t.Run("a static header cannot shadow the slot, in any case", func(t *testing.T) {
		for _, name := range []string{"esb-oauth", "ESB-OAuth", "Esb-Oauth"} {
			srv := authServer(config.AuthBearer, "minted-token", "esb-oauth", map[string]string{name: "Bearer injected", "X-Trace": "keep"})
			h := egressHeaders(t, srv, "")
			var vals []string
			for k, v := range h {
				if strings.EqualFold(k, "esb-oauth") {
					vals = append(vals, v...)
				}
			}
			if len(vals) != 1 || vals[0] != "Bearer minted-token" || h.Get("X-Trace") != "keep" {
				t.Errorf("static %q: slot values %q, headers %v", name, vals, h)
			}
		}
	})
	t.Run("without a slot a static header wins", func(t *testing.T) {
		h := egressHeaders(t, authServer(config.AuthBearer, "minted-token", "", map[string]string{"Authorization": "Bearer injected"}), "")
		if got := h.Get("Authorization"); got != "Bearer injected" {
			t.Errorf("Authorization = %q", got)
		}
	})
	t.Run("static headers trimmed next to a credential", func(t *testing.T) {
		h := egressHeaders(t, authServer(config.AuthToken, "my-token", "", map[string]string{" X-Pad ": " v ", "X-Custom-Header": "custom-value"}), "")
		if h.Get("X-Pad") != "v" || h.Get("X-Custom-Header") != "custom-value" || h.Get("Authorization") != "token my-token" {
			t.Errorf("%v", h)
		}
	})
	t.Run("passthrough uses the caller's token", func(t *testing.T) {
		srv := authServer(config.AuthPassthrough, "", "", nil)
		if got := egressHeaders(t, srv, "Bearer caller-tok").Get("Authorization"); got != "Bearer caller-tok" {
			t.Errorf("Authorization = %q", got)
		}
		if got := egressHeaders(t, srv, ""); len(got) != 0 {
			t.Errorf("no caller token: %v", got)
		}
	})
	t.Run("user_api_key: bearer in Authorization, verbatim in header_name", func(t *testing.T) {
		srv := authServer(config.AuthUserAPIKey, "", "", nil)
		if got := egressHeaders(t, srv, "alice-key").Get("Authorization"); got != "Bearer alice-key" {
			t.Errorf("Authorization = %q", got)
		}
		if got := egressHeaders(t, srv, "Bearer alice-key").Get("Authorization"); got != "Bearer alice-key" {
			t.Errorf("Authorization with a scheme = %q", got)
		}
		srv = authServer(config.AuthUserAPIKey, "", "X-API-Key", map[string]string{"x-api-key": "shared"})
		h := egressHeaders(t, srv, "Bearer alice-key")
		if got := h.Values("X-Api-Key"); len(got) != 1 || got[0] != "Bearer alice-key" || h.Get("Authorization") != "" {
			t.Errorf("headers %v", h)
		}
		if p := Preview(srv); p.Headers.Get("X-Api-Key") != "<the caller's stored credential>" {
			t.Errorf("preview %v", p.Headers)
		}
	})
}

func TestFingerprint(t *testing.T) {
	const secret = "private-original-credential"
	a := Fingerprint(authServer(config.AuthAPIKey, secret, "", nil), "")
	b := Fingerprint(authServer(config.AuthAPIKey, secret, "", nil), "")
	c := Fingerprint(authServer(config.AuthAPIKey, "private-replaced-credential", "", nil), "")
	if a != b || a == c || len(a) != 64 || strings.Contains(a, secret) {
		t.Errorf("fingerprints %q %q %q", a, b, c)
	}
	p := authServer(config.AuthPassthrough, "", "", nil)
	if Fingerprint(p, "alice-token") == Fingerprint(p, "bob-token") {
		t.Error("passthrough callers with different tokens share a fingerprint")
	}
	o := &config.Server{Name: "up", Transport: config.TransportHTTP, URL: "https://x/mcp",
		Auth: &config.Auth{Type: config.AuthOAuth2, TokenURL: "https://idp/token", ClientID: "id", ClientSecret: "s1"}}
	o2 := *o
	o2.Auth = &config.Auth{Type: config.AuthOAuth2, TokenURL: "https://idp/token", ClientID: "id", ClientSecret: "s2"}
	if Fingerprint(o, "") == Fingerprint(&o2, "") {
		t.Error("oauth2 clients with different secrets share a fingerprint")
	}
	s := authServer(config.AuthNone, "", "", map[string]string{"X-Tenant": "a"})
	s2 := authServer(config.AuthNone, "", "", map[string]string{"X-Tenant": "b"})
	if Fingerprint(s, "") == Fingerprint(s2, "") {
		t.Error("static headers are not part of the fingerprint")
	}
}

func TestPreview(t *testing.T) {
	const secret = "super-secret-bearer-value-1234"
	srv := authServer(config.AuthBearer, secret, "", map[string]string{"X-Trace": "trace", "X-Api-Token": "tok-abcdefghijklmnop",
		"X-Custom-Cred": "s3cret", "X-Jwt-Assertion": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJnYXRld2F5In0.c2lnbmF0dXJl"})
	srv.URL = "https://user:pw@up.example.com/mcp?k=v"
	p := Preview(srv)
	if p.Method != "POST" || p.URL != "https://up.example.com/mcp" {
		t.Errorf("preview %s %s", p.Method, p.URL)
	}
	if got := p.Headers.Get("Authorization"); got != "Bearer ****1234" {
		t.Errorf("Authorization = %q", got)
	}
	// Every static header is masked, whatever its name says (issue 22 §9).
	for name, want := range map[string]string{"X-Trace": "****", "X-Api-Token": "****mnop", "X-Custom-Cred": "****", "X-Jwt-Assertion": "****dXJl"} {
		if got := p.Headers.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for k, v := range p.Headers {
		for _, sec := range []string{secret, "s3cret", "trace", "eyJhbGciOiJSUzI1NiJ9", "tok-abcd"} {
			if strings.Contains(strings.Join(v, ","), sec) {
				t.Errorf("%s leaks %q", k, sec)
			}
		}
	}
	// The preview shows exactly the headers egress sends, masked.
	sent := egressHeaders(t, srv, "")
	for k := range sent {
		if p.Headers.Get(k) == "" {
			t.Errorf("preview lacks %s", k)
		}
	}
	o := &config.Server{Name: "o", Transport: config.TransportSSE, URL: "https://x/sse",
		Auth: &config.Auth{Type: config.AuthOAuth2, TokenURL: "https://idp.example.com/token?x=1", ClientID: "id", ClientSecret: "s", HeaderName: "esb-oauth"}}
	p = Preview(o)
	if p.Method != "GET" || p.Headers.Get("Esb-Oauth") != "Bearer <minted from https://idp.example.com/token with client_secret_basic>" {
		t.Errorf("oauth2 preview %s %v", p.Method, p.Headers)
	}
	// private_key_jwt at a pinned authorization server: the key is never shown.
	const pem = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49-not-a-real-key\n-----END PRIVATE KEY-----"
	o.Auth = &config.Auth{Type: config.AuthOAuth2, ClientID: "id", ClientAuth: config.PrivateKeyJWT, PrivateKey: pem, AuthorizationServer: "https://as.example.com/tenant"}
	p = Preview(o)
	if got := p.Headers.Get("Authorization"); got != "Bearer <minted from the token endpoint of https://as.example.com/tenant with private_key_jwt>" {
		t.Errorf("private_key_jwt preview %v", p.Headers)
	}
	for k, v := range p.Headers {
		if j := strings.Join(v, ","); strings.Contains(j, "MIGHAgEA") || strings.Contains(j, "PRIVATE KEY") {
			t.Errorf("%s shows the private key: %s", k, j)
		}
	}
}

// fakeRT answers every request with the response of a function, recording
// what was sent: the redirect handling under test is net/http's own.
type fakeRT struct {
	seen    []*http.Request
	respond func(*http.Request) *http.Response
}

func (f *fakeRT) RoundTrip(r *http.Request) (*http.Response, error) {
	f.seen = append(f.seen, r)
	resp := f.respond(r)
	resp.Request = r
	if resp.Body == nil {
		resp.Body = io.NopCloser(strings.NewReader(""))
	}
	return resp, nil
}

func TestRedirectDropsCredentialsLikeABrowser(t *testing.T) {
	// The reference client's _REDIRECT_CASES, with the outcome a browser
	// (and httpx) gives Authorization; the custom slot must agree.
	cases := []struct {
		start, target string
		keep          bool
	}{
		{"https://upstream.example.com/mcp", "https://upstream.example.com/other", true},
		{"https://upstream.example.com/mcp", "https://upstream.example.com:443/other", true},
		{"https://upstream.example.com/mcp", "https://attacker.example.com/collect", false},
		{"https://upstream.example.com/mcp", "http://upstream.example.com/collect", false},
		{"https://upstream.example.com/mcp", "https://upstream.example.com:8443/other", false},
		{"https://upstream.example.com/mcp", "https://sub.upstream.example.com/x", false},
		{"http://upstream.example.com/mcp", "https://upstream.example.com/other", true},
		{"http://upstream.example.com/mcp", "http://upstream.example.com/other", true},
	}
	a := newEgressAuth(authServer(config.AuthOAuth2, "", "esb-oauth", nil), nil, "")
	for _, tt := range cases {
		t.Run(tt.target, func(t *testing.T) {
			rt := &fakeRT{respond: func(r *http.Request) *http.Response {
				if r.URL.String() == tt.start {
					return &http.Response{StatusCode: http.StatusFound, Header: http.Header{"Location": {tt.target}}}
				}
				return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}
			}}
			// A policy that follows everything: the guard alone decides
			// what the credentials do.
			hc := &http.Client{Transport: rt, CheckRedirect: stripCredentialsOnRedirect(a.slots(), func(*http.Request, []*http.Request) error { return nil })}
			req, _ := http.NewRequest(http.MethodGet, tt.start, nil)
			req.Header.Set("Authorization", "Bearer AUTH")
			req.Header.Set("esb-oauth", "Bearer ESB")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			last := rt.seen[len(rt.seen)-1]
			gotAuth, gotSlot := last.Header.Get("Authorization") != "", last.Header.Get("esb-oauth") != ""
			if gotAuth != tt.keep || gotSlot != tt.keep {
				t.Errorf("Authorization kept=%v, esb-oauth kept=%v; want both %v", gotAuth, gotSlot, tt.keep)
			}
			u, _ := url.Parse(tt.target)
			if last.URL.Host != u.Host {
				t.Errorf("last request went to %s", last.URL.Host)
			}
		})
	}
	via := make([]*http.Request, 10)
	for i := range via {
		via[i] = &http.Request{URL: &url.URL{Scheme: "https", Host: "h"}, Header: http.Header{}}
	}
	if err := stripCredentialsOnRedirect(nil, nil)(via[0], via); !errors.Is(err, errTooManyRedirects) {
		t.Errorf("11th redirect: %v", err)
	}
}

// Over real servers: a same-origin redirect is followed with the
// credential slot intact, for listing and calling; a redirect to another
// origin, at any point of the session, fails naming the redirect and the
// destination never sees a request (C4.1, C4.2).
func TestRedirectsWithCredentialSlot(t *testing.T) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	var destHits atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { destHits.Add(1) }))
	t.Cleanup(dest.Close)
	var slotOnFinal sync.Map
	var crossCalls atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/mcp":
			if crossCalls.Load() {
				http.Redirect(w, r, dest.URL+"/collect", http.StatusTemporaryRedirect)
				return
			}
			http.Redirect(w, r, "/final/mcp", http.StatusTemporaryRedirect)
		case "/final/mcp":
			slotOnFinal.Store(r.Header.Get("X-Upstream-Token"), true)
			f.serve(w, r)
		}
	}))
	t.Cleanup(front.Close)
	srv := &config.Server{Name: "r", Transport: config.TransportHTTP, URL: front.URL + "/mcp", Timeout: 5 * time.Second,
		Auth: &config.Auth{Type: config.AuthBearer, Value: "synthetic-token", HeaderName: "x-upstream-token"}}
	s := connect(t, Options{Server: srv})
	if _, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil); err != nil {
		t.Fatalf("list through a same-origin redirect: %v", err)
	}
	if got, err := callTool(context.Background(), s, "echo", `{"text":"5"}`); err != nil || got != "5" {
		t.Fatalf("call through a same-origin redirect: %q %v", got, err)
	}
	n := 0
	slotOnFinal.Range(func(k, _ any) bool {
		n++
		if k != "Bearer synthetic-token" {
			t.Errorf("final request carried slot %q", k)
		}
		return true
	})
	if n != 1 {
		t.Errorf("%d distinct slot values on the final target", n)
	}
	crossCalls.Store(true)
	for _, op := range []string{"list", "call"} {
		var err error
		if op == "list" {
			_, err = s.Call(context.Background(), mcpwire.MethodToolsList, nil)
		} else {
			_, err = callTool(context.Background(), s, "echo", `{"text":"x"}`)
		}
		if err == nil || !strings.Contains(err.Error(), "refused cross-origin redirect to "+dest.URL) {
			t.Errorf("%s: err = %v", op, err)
		}
	}
	if h := destHits.Load(); h != 0 {
		t.Errorf("the cross-origin destination got %d requests", h)
	}
}

// credentialValue never panics, never loses a credential entirely, and
// never adds line breaks of its own.
func FuzzCredentialValue(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer\t\tabc", "Basic dXNlcjpwYXNz", "user:pass", "Basic ", " token x ", ""} {
		f.Add(s)
	}
	types := []string{config.AuthBearer, config.AuthToken, config.AuthBasic, config.AuthAPIKey, config.AuthAuthorization, config.AuthOAuth2, config.AuthPassthrough}
	f.Fuzz(func(t *testing.T, v string) {
		for _, typ := range types {
			got := credentialValue(typ, v)
			if strings.ContainsAny(got, "\r\n") && !strings.ContainsAny(v, "\r\n") {
				t.Fatalf("%s %q -> %q adds a line break", typ, v, got)
			}
			if strings.TrimSpace(v) != "" && got == "" {
				t.Fatalf("%s %q -> empty", typ, v)
			}
			if typ == config.AuthBearer && strings.TrimSpace(v) != "" && !strings.HasPrefix(got, "Bearer") {
				t.Fatalf("bearer %q -> %q", v, got)
			}
		}
	})
}

// TestMask: a configured value is never shown; a known scheme stays, and
// of a long value its last 4 characters.
func TestMask(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "****"},
		{"s3cret", "****"},
		{"Bearer abc", "Bearer ****"},
		{"bearer\t\tabcdefghijklmnop1234", "bearer\t****1234"},
		{"Basic dXNlcjpwYXNz", "Basic ****"},
		{"some secret words here and more", "****more"},
		{"Bearerabcdefghijklmnop", "****mnop"},
		{"ApiKey k", "ApiKey ****"},
		{"ünïcödé-sécret-välüé", "****älüé"},
	} {
		if got := Mask(tc.in); got != tc.want {
			t.Errorf("Mask(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
