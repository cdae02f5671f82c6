//go:build interop

package identity_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpgate/mcpgate/test/interop/idp"
)

// browser is a test browser: a cookie jar, redirects followed by hand up
// to the OAuth client's redirect URI, and forms submitted as a person
// would (the first form, or the one whose button is chosen).
type browser struct {
	c      *http.Client
	stop   string            // stop at a redirect to this prefix
	fields map[string]string // values for named inputs
	choose []string          // name=value of buttons to press when offered
	pages  []string          // URLs visited, for messages
}

func newBrowser(stop string, fields map[string]string, choose ...string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{stop: stop, fields: fields, choose: choose, c: &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var (
	formRE   = regexp.MustCompile(`(?is)<form([^>]*)>(.*?)</form>`)
	attrRE   = regexp.MustCompile(`(?i)([a-z-]+)="([^"]*)"`)
	inputRE  = regexp.MustCompile(`(?i)<input([^>]*)>`)
	buttonRE = regexp.MustCompile(`(?i)<button([^>]*)>`)
)

func attrs(s string) map[string]string {
	m := map[string]string{}
	for _, a := range attrRE.FindAllStringSubmatch(s, -1) {
		m[strings.ToLower(a[1])] = html.UnescapeString(a[2])
	}
	return m
}

// run opens u and goes on until the redirect to b.stop, which it returns.
func (b *browser) run(ctx context.Context, u string) (*url.URL, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	for step := 0; step < 25; step++ {
		b.pages = append(b.pages, req.Method+" "+req.URL.String())
		resp, err := b.c.Do(req)
		if err != nil {
			return nil, err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
			next, err := req.URL.Parse(loc)
			if err != nil {
				return nil, err
			}
			if strings.HasPrefix(next.String(), b.stop) {
				return next, nil
			}
			req, _ = http.NewRequestWithContext(ctx, http.MethodGet, next.String(), nil)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %d %s", req.URL, resp.StatusCode, body)
		}
		forms := formRE.FindAllStringSubmatch(string(body), -1)
		if len(forms) == 0 {
			return nil, fmt.Errorf("%s: a page without a form: %s", req.URL, body)
		}
		form, press := forms[0], ""
	pick:
		for _, f := range forms {
			for _, bt := range buttonRE.FindAllStringSubmatch(f[2], -1) {
				a := attrs(bt[1])
				for _, c := range b.choose {
					if a["name"]+"="+a["value"] == c {
						form, press = f, c
						break pick
					}
				}
			}
		}
		vals := url.Values{}
		for _, in := range inputRE.FindAllStringSubmatch(form[2], -1) {
			a := attrs(in[1])
			if a["name"] == "" {
				continue
			}
			v := a["value"]
			if fv, ok := b.fields[a["name"]]; ok {
				v = fv
			}
			vals.Set(a["name"], v)
		}
		if name, value, ok := strings.Cut(press, "="); ok {
			vals.Set(name, value)
		}
		fa := attrs(form[1])
		action, err := req.URL.Parse(fa["action"])
		if err != nil {
			return nil, err
		}
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, action.String(), strings.NewReader(vals.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return nil, fmt.Errorf("no redirect to %s after %v", b.stop, b.pages)
}

// countingTransport counts the requests to each path.
type countingTransport struct {
	mu sync.Mutex
	n  map[string]int
	rt http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	key := r.URL.Path
	if key == "/oauth/token" && r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		v, _ := url.ParseQuery(string(b))
		key += " " + v.Get("grant_type")
	}
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

func (c *countingTransport) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// loginGateway starts the IdP and mcpgate with its authorization server
// federating to it (on a port chosen first, as the IdP must know the
// redirect URI), granting team platform everything.
func loginGateway(t *testing.T, extraEnv ...string) (*idp.IdP, *gatewayProc) {
	t.Helper()
	addr := freeAddr(t)
	base := "http://" + addr
	cfg := idp.DefaultConfig()
	cfg.Clients[0].RedirectURIs = []string{base + "/oauth/callback"}
	p := idp.Start(t, cfg)
	gw := startGatewayOn(t, addr, "public_url: "+base+"\nauth:\n  login:\n    issuer: "+p.Issuer+
		"\n    client_id: "+idp.RPClientID+"\n    client_secret: "+idp.RPClientSecret+
		"\n    claims: {user: preferred_username, teams: groups, roles: realm_access.roles}\n    access_token_ttl: 2s\n    allow_private_metadata: true\n"+
		"  grants:\n    - team: platform\n", extraEnv...)
	return p, gw
}

// The go-sdk client's own OAuth support (its auth package) signs in to
// mcpgate with no key: 401 -> protected resource metadata -> mcpgate's
// authorization server metadata -> dynamic registration -> the IdP's login
// page and consent -> mcpgate's consent page -> code -> token; tools/list
// and tools/call work, and after the 2 s access token expires the client
// refreshes it without another login.
func TestGoSDKClientSignsInThroughTheIdP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, gw := loginGateway(t)
	const redirect = "http://127.0.0.1:1/callback" // never dialled: the browser stops there
	var logins atomic.Int32
	ct := &countingTransport{rt: http.DefaultTransport}
	fetch := func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		logins.Add(1)
		b := newBrowser(redirect, map[string]string{"login": "alice", "password": "pw"}, "decision=approve", "login=idp")
		u, err := b.run(ctx, args.URL)
		if err != nil {
			return nil, err
		}
		q := u.Query()
		if q.Get("error") != "" {
			return nil, fmt.Errorf("authorization error %s: %s", q.Get("error"), q.Get("error_description"))
		}
		return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
	}
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none", GrantTypes: []string{"authorization_code", "refresh_token"},
			ClientName: "go-sdk identity test"}},
		RedirectURL:              redirect,
		AuthorizationCodeFetcher: fetch,
		RequestRefreshToken:      true,
		Client:                   &http.Client{Transport: ct, Timeout: 20 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-oauth", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.base + "/mcp", OAuthHandler: h, HTTPClient: &http.Client{Transport: ct}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list after the login: %v %v", err, tools)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__add_note", Arguments: map[string]any{"title": "t", "body": "b"}}); err != nil || res.IsError {
		t.Fatalf("tools/call: %v %+v", err, res)
	}
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server", "/oauth/register", "/oauth/token authorization_code"} {
		if ct.count(path) == 0 {
			t.Errorf("the client never asked %s", path)
		}
	}
	time.Sleep(2500 * time.Millisecond) // the access token expires
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("tools/list after the access token expired: %v", err)
	}
	// golang.org/x/oauth2 refreshes a token 10 s before it expires, so with
	// 2 s tokens every request refreshes: each refresh rotated the refresh
	// token, and every one was accepted.
	if ct.count("/oauth/token refresh_token") == 0 || ct.count("/oauth/token authorization_code") != 1 {
		t.Errorf("token requests: %v", ct.n)
	}
	if n := logins.Load(); n != 1 {
		t.Errorf("%d browser logins, want 1", n)
	}
}

// A client ID metadata document (an https URL as client_id) registers a
// client without dynamic registration: mcpgate fetches it (here from a
// loopback https server, which allow_private_metadata permits).
func TestGoSDKClientWithClientMetadataDocument(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const redirect = "http://127.0.0.1:1/callback"
	var docURL string
	var fetched atomic.Int32
	cimd := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"client_id": docURL, "client_name": "go-sdk CIMD test", "redirect_uris": []string{redirect},
			"grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"}, "token_endpoint_auth_method": "none"})
	}))
	defer cimd.Close()
	docURL = cimd.URL + "/client.json"
	// The gateway trusts the test server's certificate through SSL_CERT_FILE.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cimd.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	_, gw := loginGateway(t, "SSL_CERT_FILE="+ca)
	fetch := func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		if u, _ := url.Parse(args.URL); u.Query().Get("client_id") != docURL {
			return nil, fmt.Errorf("client_id %q, want the document URL", u.Query().Get("client_id"))
		}
		b := newBrowser(redirect, map[string]string{"login": "alice", "password": "pw"}, "decision=approve", "login=idp")
		u, err := b.run(ctx, args.URL)
		if err != nil {
			return nil, err
		}
		q := u.Query()
		return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
	}
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		ClientIDMetadataDocumentConfig: &auth.ClientIDMetadataDocumentConfig{URL: docURL},
		RedirectURL:                    redirect,
		AuthorizationCodeFetcher:       fetch,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-cimd", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.base + "/mcp", OAuthHandler: h}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, gw.logs())
	}
	defer cs.Close()
	if tools, err := cs.ListTools(ctx, nil); err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list: %v %v", err, tools)
	}
	if fetched.Load() == 0 {
		t.Error("mcpgate never fetched the client metadata document")
	}
}

// Without an IdP (auth.login.keys only), a person pastes a mcpgate key on
// the login page once: the client gets tokens that act as that key (its
// servers only), and they stop working when the key is revoked.
func TestKeyLogin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const master = "mk-identity-test-0123456789"
	addr := freeAddr(t)
	base := "http://" + addr
	startGatewayOn(t, addr, "public_url: "+base+"\nauth:\n  master_key: "+master+"\n  login:\n    keys: true\n")
	admin := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("X-Mcpgate-Api-Key", master)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, body := admin(http.MethodPost, "/admin/v1/keys", `{"alias":"person","servers":["notes"]}`)
	var created struct{ Key string }
	if json.Unmarshal(body, &created); code != http.StatusCreated || created.Key == "" {
		t.Fatalf("create key: %d %s", code, body)
	}
	const redirect = "http://127.0.0.1:1/callback"
	fetch := func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		b := newBrowser(redirect, map[string]string{"key": created.Key}, "decision=approve", "login=key")
		u, err := b.run(ctx, args.URL)
		if err != nil {
			return nil, err
		}
		q := u.Query()
		return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
	}
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none", ClientName: "key login test"}},
		RedirectURL:              redirect,
		AuthorizationCodeFetcher: fetch,
	})
	if err != nil {
		t.Fatal(err)
	}
	ct := &countingTransport{rt: http.DefaultTransport}
	c := mcp.NewClient(&mcp.Implementation{Name: "key-login", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", OAuthHandler: h, HTTPClient: &http.Client{Transport: ct}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list: %v %v", err, tools)
	}
	// Revoke the key: the login's token stops working at once.
	if code, body := admin(http.MethodDelete, "/admin/v1/keys/person", ""); code/100 != 2 {
		t.Fatalf("revoke: %d %s", code, body)
	}
	ts, _ := h.TokenSource(ctx)
	tok, _ := ts.Token()
	if status, hdr := post(t, base+"/mcp", tok.AccessToken); status != http.StatusUnauthorized || !strings.Contains(hdr.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Errorf("the login's token after the key was revoked: %d %q", status, hdr.Get("WWW-Authenticate"))
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__add_note", Arguments: map[string]any{"title": "t", "body": "b"}})
	if err == nil && !res.IsError {
		t.Errorf("tools/call still works after the key behind the login was revoked (requests: %v)", ct.n)
	}
}
