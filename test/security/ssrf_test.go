package security

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// What was tried that held: SSRF on the URLs the gateway fetches on
// someone else's behalf. A client ID metadata document URL (any web page
// can start an authorization with one), an OpenAPI document URL given to
// the admin API, and an upstream's OAuth metadata that redirects: none
// reaches a loopback, private, link-local or metadata address, and none
// follows a redirect to another origin. Every target here is a recorder
// of the suite's own (or an address that must never be dialled); the
// cloud metadata service itself is never contacted.

// tlsRecorder is recorder over https (a client ID metadata document URL
// must be https).
func tlsRecorder(t *testing.T) (*httptest.Server, func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"client_id":"x","redirect_uris":["http://127.0.0.1:1/cb"]}`))
	}))
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// blockedClient checks the refusal of a client_id the gateway must not
// fetch: a 4xx that says the client is invalid, and no request reached
// the target.
func blockedClient(t *testing.T, who string, st int, body string, reached int) {
	t.Helper()
	if st < 400 || st > 499 || !strings.Contains(body, "invalid_client") && !strings.Contains(strings.ToLower(body), "client") {
		t.Errorf("%s: HTTP %d %.300s, want a 4xx invalid_client", who, st, body)
	}
	if reached != 0 {
		t.Errorf("%s: the target received %d requests", who, reached)
	}
}

// TestClientMetadataSSRFHeld: the built-in authorization server (auth.
// login) fetches a client ID metadata document only from a public
// address.
func TestClientMetadataSSRFHeld(t *testing.T) {
	up := newUpstream(t, "alpha")
	g := startGateway(t, fmt.Sprintf(`auth:
  master_key: %q
  login: {keys: true}
  keys:
    - {alias: alice, key: %q, user: alice}
servers:
`, masterKey, aliceKey)+up.server())
	target, reached := tlsRecorder(t)
	port := hostOf(t, target.URL)[strings.LastIndexByte(hostOf(t, target.URL), ':')+1:]
	ids := []string{
		target.URL + "/cimd.json",                        // loopback, by address
		"https://localhost:" + port + "/cimd.json",       // loopback, by name
		"https://[::ffff:127.0.0.1]:" + port + "/c.json", // loopback, mapped
		"https://169.254.169.254/latest/meta-data/c.json",
		"https://metadata.google.internal/computeMetadata/v1/c.json",
		"https://10.0.0.1/c.json",
		"http://127.0.0.1:" + port + "/cimd.json", // http at all
	}
	for _, id := range ids {
		q := url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {"http://127.0.0.1:1/cb"},
			"code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}, "code_challenge_method": {"S256"},
			"state": {"s"}, "resource": {g.base + "/mcp"}}
		st, _, body := g.request(t, http.MethodGet, "/oauth/authorize?"+q.Encode(), nil, "")
		blockedClient(t, "authorize with client_id "+id, st, body, reached())

		form := url.Values{"grant_type": {"authorization_code"}, "code": {"x"}, "client_id": {id},
			"redirect_uri": {"http://127.0.0.1:1/cb"}, "code_verifier": {strings.Repeat("v", 43)}}
		h := http.Header{}
		h.Set("Content-Type", "application/x-www-form-urlencoded")
		st, _, body = g.request(t, http.MethodPost, "/oauth/token", h, form.Encode())
		if st < 400 || st > 499 || reached() != 0 {
			t.Errorf("token with client_id %s: HTTP %d %.300s, the target reached %d times; want a 4xx and no fetch", id, st, body, reached())
		}
	}
}

// TestOpenAPISpecSSRFHeld: a runtime OpenAPI server's document URL is
// fetched from a public address only (or loopback when the URL names a
// loopback address), and never through a redirect to another origin.
func TestOpenAPISpecSSRFHeld(t *testing.T) {
	g := startGateway(t, fmt.Sprintf("auth: {master_key: %q}\n", masterKey))
	b := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(openapiDoc("/")))
	})
	a := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Redirect(w, r, b.srv.URL+"/openapi.json", http.StatusFound)
	})
	for i, spec := range []string{
		a.srv.URL + "/openapi.json", // redirects to another origin
		"http://169.254.0.1/openapi.json",
		"http://10.0.0.1/openapi.json",
		"http://metadata.google.internal/openapi.json",
	} {
		name := fmt.Sprintf("s%d", i)
		st, body := g.admin(t, http.MethodPost, "/servers", fmt.Sprintf(`{"name":%q,"transport":"openapi","spec":%q,"auth":{"type":"api_key","value":%q}}`, name, spec, openapiKey))
		if st == http.StatusCreated {
			// Accepted, then fetched at connect: the server offers nothing.
			c := g.client(t, "/mcp/"+name, masterKey)
			st, _, body := c.post(initJSON)
			if st == http.StatusOK && !strings.Contains(body, `"error"`) {
				c.initialize("")
				res := c.callTool("c", "listPets", `{}`)
				if !isToolError(res) {
					t.Errorf("spec %s: listPets answered %s", spec, describe(res))
				}
			}
		} else if st < 400 || st > 499 {
			t.Errorf("spec %s: POST /admin/v1/servers: HTTP %d %s", spec, st, body)
		}
	}
	if hits := b.all(); len(hits) != 0 {
		t.Errorf("the redirect's target (another origin) received %d requests: %s %s", len(hits), hits[0].Method, hits[0].Path)
	}
}

// TestDiscoveryRedirectHeld: the gateway's client credentials go only to
// an authorization server the config names, never to one an upstream's
// metadata names (a config that would discover it is refused at start);
// and the named server's metadata that redirects to another origin leads
// nowhere: the redirect is not followed and no secret leaves.
func TestDiscoveryRedirectHeld(t *testing.T) {
	b := newRecorder(t, nil)
	as := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Redirect(w, r, b.srv.URL+r.URL.Path, http.StatusFound)
	})
	a := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if strings.HasPrefix(r.URL.Path, "/.well-known/") {
			// The upstream names another authorization server: b.
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"resource":%q,"authorization_servers":[%q]}`, a0(r), b.srv.URL)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://`+r.Host+`/.well-known/oauth-protected-resource/mcp"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	unpinned := fmt.Sprintf(`auth: {master_key: %q}
servers:
  guarded:
    transport: http
    url: %q
    auth: {type: oauth2, client_id: gw, client_secret: "client-secret-0123456789"}
`, masterKey, a.srv.URL+"/mcp")
	if _, err := tryStartGateway(t, unpinned); err == nil || !strings.Contains(err.Error(), "authorization_server") {
		t.Errorf("oauth2 client credentials without token_url or authorization_server: %v, want refused at start naming authorization_server", err)
	}
	g := startGateway(t, strings.Replace(unpinned, `client_secret: "client-secret-0123456789"}`,
		fmt.Sprintf(`client_secret: "client-secret-0123456789", authorization_server: %q}`, as.srv.URL), 1))
	c := g.client(t, "/mcp/guarded", masterKey)
	c.initialize("")
	res := c.start("l", "tools/list", `{}`).result(t, 15*time.Second)
	if res.Error == nil || !strings.Contains(string(res.Error.Data), `"fault":"auth"`) || strings.Contains(res.Error.Message, "127.0.0.1") {
		t.Errorf("tools/list of a server whose token could not be minted: %s, want an auth fault naming no address", describe(res))
	}
	if hits := b.all(); len(hits) != 0 {
		t.Errorf("another origin received the gateway's requests: %d, first %s %s", len(hits), hits[0].Method, hits[0].Path)
	}
	for _, rec := range []*recorder{a, as} {
		for _, h := range rec.all() {
			if strings.Contains(h.Body, "client-secret-0123456789") || strings.Contains(fmt.Sprint(h.Header), "Basic ") {
				t.Errorf("the client secret left the gateway: %s %s", h.Method, h.Path)
			}
		}
	}
}

// a0 is the resource a request's server answers for.
func a0(r *http.Request) string { return "http://" + r.Host + "/mcp" }
