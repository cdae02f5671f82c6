package upstream

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/openapi"
)

// TestOpenAPIApiKeyScheme: an api_key credential goes where the
// document's security scheme puts it, with exactly one ApiKey scheme
// (SPEC C12, C3.2), and a header_name overrides the document.
func TestOpenAPIApiKeyScheme(t *testing.T) {
	var mu sync.Mutex
	var got http.Header
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer api.Close()
	tricky := filepath.Join("..", "openapi", "testdata", "tricky.yaml")
	tests := []struct {
		name, value, headerName string
		wantHeader, want        string
	}{
		{"bare key", "k-123456", "", "Authorization", "ApiKey k-123456"},
		{"key with its scheme", "apikey  k-123456", "", "Authorization", "ApiKey k-123456"},
		{"header_name wins", "k-123456", "X-Key", "X-Key", "k-123456"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &config.Server{Name: "t", Transport: config.TransportOpenAPI, Spec: tricky, BaseURL: api.URL, Timeout: 5 * time.Second,
				Auth: &config.Auth{Type: config.AuthAPIKey, Value: tt.value, HeaderName: tt.headerName}}
			ctx := context.Background()
			s, err := Connect(ctx, Options{Server: srv})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if !s.Info().Caps.Tools || s.Info().ProtocolVersion != mcpwire.LatestHandshake {
				t.Errorf("info = %+v", s.Info())
			}
			res, err := s.Call(ctx, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"get_trees_id","arguments":{"id":"1"}}`))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(res), `"isError":true`) {
				t.Fatalf("result %s", res)
			}
			mu.Lock()
			defer mu.Unlock()
			if got.Get(tt.wantHeader) != tt.want {
				t.Errorf("%s = %q, want %q (headers %v)", tt.wantHeader, got.Get(tt.wantHeader), tt.want, got)
			}
		})
	}
}

// TestOpenAPISessionMethods: tools/list from the document, ping answered,
// other methods not found, a closed session refuses calls.
func TestOpenAPISessionMethods(t *testing.T) {
	srv := &config.Server{Name: "t", Transport: config.TransportOpenAPI, Spec: filepath.Join("..", "openapi", "testdata", "petstore3.yaml"), Timeout: time.Second}
	ctx := context.Background()
	s, err := Connect(ctx, Options{Server: srv})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Call(ctx, mcpwire.MethodToolsList, nil)
	if err != nil || !strings.Contains(string(res), `"name":"getPetById"`) {
		t.Errorf("tools/list = %.200s, %v", res, err)
	}
	if _, err := s.Call(ctx, mcpwire.MethodPing, nil); err != nil {
		t.Errorf("ping: %v", err)
	}
	if _, err := s.Call(ctx, "prompts/list", nil); err == nil {
		t.Error("prompts/list answered")
	}
	s.Close()
	<-s.Done()
	if _, err := s.Call(ctx, mcpwire.MethodToolsList, nil); KindOf(err) != KindClosed {
		t.Errorf("after Close: %v", err)
	}
	// A missing document fails the connect, naming no secret.
	srv.Spec = filepath.Join(t.TempDir(), "absent.yaml")
	if _, err := Connect(ctx, Options{Server: srv}); err == nil {
		t.Error("connected without a document")
	}
}

// TestOpenAPIOAuth2: an oauth2 (client credentials) openapi server sends
// the minted token, asks for it with the API's base_url as resource, and
// on a 401 mints a fresh one and sends the request once more (C3.6).
func TestOpenAPIOAuth2(t *testing.T) {
	ep := newTokenEndpoint(t, nil)
	var mu sync.Mutex
	var authz []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		authz = append(authz, r.Header.Get("Authorization"))
		first := len(authz) == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":1,"name":"doggie","photoUrls":[]}`))
	}))
	defer api.Close()
	srv := &config.Server{Name: "t", Transport: config.TransportOpenAPI, Spec: filepath.Join("..", "openapi", "testdata", "petstore3.yaml"),
		BaseURL: api.URL + "/api/v3", Timeout: 5 * time.Second, Auth: testOAuthConfig(ep.URL)}
	ctx := context.Background()
	s, err := Connect(ctx, Options{Server: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Call(ctx, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"getPetById","arguments":{"petId":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res), `"structuredContent":{"id":1`) {
		t.Errorf("result %s", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(authz) != 2 || authz[0] != "Bearer tok-1" || authz[1] != "Bearer tok-2" {
		t.Errorf("Authorization sent: %q, want tok-1 then (after the 401) tok-2", authz)
	}
	if reqs := ep.requests(); len(reqs) == 0 || reqs[0].Form.Get("resource") != api.URL+"/api/v3" {
		t.Errorf("token requests %+v, want resource = base_url", reqs)
	}
}

// TestOpenAPISameOriginRedirect: a same-origin redirect is followed once,
// with the credential (C4.1); the first request is not sent twice.
func TestOpenAPISameOriginRedirect(t *testing.T) {
	var mu sync.Mutex
	var paths, keys []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		keys = append(keys, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path == "/trees/1" {
			http.Redirect(w, r, "/trees/2", http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"name":"two"}`))
	}))
	defer api.Close()
	srv := &config.Server{Name: "t", Transport: config.TransportOpenAPI, Spec: filepath.Join("..", "openapi", "testdata", "tricky.yaml"),
		BaseURL: api.URL, Timeout: 5 * time.Second, Auth: &config.Auth{Type: config.AuthAPIKey, Value: "k-123456"}}
	ctx := context.Background()
	s, err := Connect(ctx, Options{Server: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Call(ctx, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"get_trees_id","arguments":{"id":"1"}}`))
	if err != nil || !strings.Contains(string(res), `"structuredContent":{"name":"two"}`) {
		t.Fatalf("result %s, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(paths, " ") != "/trees/1 /trees/2" || keys[1] != "ApiKey k-123456" {
		t.Errorf("requests %v with %q", paths, keys)
	}
}

// The sessions of a server share the parsed document until its file
// changes.
func TestOpenAPISpecCache(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "openapi", "testdata", "petstore31.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(spec, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := loadSpec(ctx, spec, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := loadSpec(ctx, spec, time.Second)
	if a != b {
		t.Error("an unchanged file was parsed again")
	}
	changed := strings.Replace(string(data), "operationId: getPetById", "operationId: fetchPet", 1)
	if err := os.WriteFile(spec, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadSpec(ctx, spec, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tool("fetchPet") == nil || c.Tool("getPetById") != nil {
		t.Errorf("a changed file was not read again: %v", c.Tool("fetchPet"))
	}
}

// docAPI is an HTTP API that records the requests it receives, and
// serves an OpenAPI document (GET /openapi.json) whose servers URL the
// test sets.
type docAPI struct {
	ts      *httptest.Server
	mu      sync.Mutex
	servers string
	hits    []string // "METHOD path X-Key"
}

func startDocAPI(t *testing.T) *docAPI {
	t.Helper()
	a := &docAPI{servers: "/api"}
	a.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if r.URL.Path == "/openapi.json" {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"openapi":"3.0.3","info":{"title":"things","version":"1"},"servers":[{"url":"` + a.servers + `"}],` +
				`"paths":{"/things/{id}":{"get":{"operationId":"getThing","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],` +
				`"responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"type":"object"}}}}}}}}}`))
			return
		}
		a.hits = append(a.hits, r.Method+" "+r.URL.Path+" "+r.Header.Get("X-Key"))
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(a.ts.Close)
	return a
}

func (a *docAPI) setServers(s string) { a.mu.Lock(); a.servers = s; a.mu.Unlock() }

func (a *docAPI) received() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.hits...)
}

// TestOpenAPIDocumentChoosesOnlyItsOrigin (issue 22 §6): without
// base_url, a document fetched from origin A may send calls, and the
// credential, only to A: a servers URL on origin B fails the connect with
// a clear error and B receives nothing, also when a re-fetch of the
// document changes its servers URL after calls went to A.
func TestOpenAPIDocumentChoosesOnlyItsOrigin(t *testing.T) {
	a, b := startDocAPI(t), startDocAPI(t)
	spec := a.ts.URL + "/openapi.json"
	srv := &config.Server{Name: "things", Transport: config.TransportOpenAPI, Spec: spec, Timeout: 5 * time.Second,
		Auth: &config.Auth{Type: config.AuthAPIKey, Value: "k-secret-123", HeaderName: "X-Key"}}
	ctx := context.Background()
	wantRefused := func(t *testing.T) {
		t.Helper()
		s, err := Connect(ctx, Options{Server: srv})
		if err == nil {
			s.Call(ctx, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"getThing","arguments":{"id":"1"}}`))
			s.Close()
			t.Fatalf("connected to a document whose servers URL is on another origin; B received %q", b.received())
		}
		want := "openapi: the document's servers URL is not on the document's own origin: " + openapiOrigin(b.ts.URL) + " is not " + openapiOrigin(a.ts.URL) + "; set base_url to send calls there"
		if KindOf(err) != KindInternal || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v (kind %v), want %q", err, KindOf(err), want)
		}
	}

	a.setServers(b.ts.URL + "/api")
	wantRefused(t)

	// Its own origin, relative: calls go there with the key.
	a.setServers("/api")
	specCache.mu.Lock()
	delete(specCache.m, spec)
	specCache.mu.Unlock()
	s, err := Connect(ctx, Options{Server: srv})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Call(ctx, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"getThing","arguments":{"id":"1"}}`))
	s.Close()
	if err != nil || !strings.Contains(string(res), `"structuredContent":{"ok":true}`) {
		t.Fatalf("call on the document's origin: %s, %v", res, err)
	}
	if got := a.received(); len(got) != 1 || got[0] != "GET /api/things/1 k-secret-123" {
		t.Errorf("A received %q", got)
	}

	// The document changes while cached; once it is fetched again, it
	// still cannot send calls to B.
	a.setServers(b.ts.URL + "/api")
	specCache.mu.Lock()
	e := specCache.m[spec]
	e.fetched = time.Now().Add(-2 * specTTL)
	specCache.m[spec] = e
	specCache.mu.Unlock()
	wantRefused(t)
	if got := b.received(); len(got) != 0 {
		t.Errorf("B received %q", got)
	}
}

// openapiOrigin is an httptest URL's origin as errors name it.
func openapiOrigin(raw string) string {
	u, _ := url.Parse(raw)
	return u.Scheme + "://" + u.Host
}

// TestOpenAPIFileBasePinned: a document read from a file may name any
// absolute URL, pinned to the origin it named when first read: a changed
// file cannot move the calls to another origin while the gateway runs.
func TestOpenAPIFileBasePinned(t *testing.T) {
	a, b := startDocAPI(t), startDocAPI(t)
	spec := filepath.Join(t.TempDir(), "things.json")
	write := func(base string) {
		a.setServers(base)
		resp, err := http.Get(a.ts.URL + "/openapi.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if err := os.WriteFile(spec, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// A different size or time: the cache reads it again.
		os.Chtimes(spec, time.Now(), time.Now().Add(time.Duration(len(base))*time.Second))
	}
	srv := &config.Server{Name: "things", Transport: config.TransportOpenAPI, Spec: spec, Timeout: 5 * time.Second,
		Auth: &config.Auth{Type: config.AuthAPIKey, Value: "k-secret-123", HeaderName: "X-Key"}}
	ctx := context.Background()
	write(a.ts.URL + "/api")
	s, err := Connect(ctx, Options{Server: srv})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	write(b.ts.URL + "/api/v2")
	if _, err := Connect(ctx, Options{Server: srv}); err == nil || !strings.Contains(err.Error(), "openapi: the document's servers URL moved from "+openapiOrigin(a.ts.URL)+" to "+openapiOrigin(b.ts.URL)+" since it was first read; set base_url to send calls there") {
		t.Errorf("moved document: %v", err)
	}
	if got := b.received(); len(got) != 0 {
		t.Errorf("B received %q", got)
	}
}

// TestOpenAPIDocumentBaseDialled: the calls a fetched document sends to
// its own origin are dialled as its fetch was: a public name that
// resolves (or is rebound) to a private address is refused, and the API
// there receives nothing.
func TestOpenAPIDocumentBaseDialled(t *testing.T) {
	api := startDocAPI(t)
	_, port, _ := net.SplitHostPort(api.ts.Listener.Addr().String())
	spec := "http://api.example:" + port + "/openapi.json"
	loc, _ := url.Parse(spec)
	doc, err := openapi.Parse([]byte(`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"servers":[{"url":"/api"}],"paths":{"/things/{id}":{"get":{"operationId":"getThing","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}}}}`), loc)
	if err != nil {
		t.Fatal(err)
	}
	// As if fetched a moment ago, from a public address.
	specCache.mu.Lock()
	specCache.m[spec] = specEntry{doc: doc, fetched: time.Now()}
	specCache.mu.Unlock()
	t.Cleanup(oauth.SetTestResolver(func(string) string { return api.ts.Listener.Addr().String() }))
	srv := &config.Server{Name: "things", Transport: config.TransportOpenAPI, Spec: spec, Timeout: 5 * time.Second,
		Auth: &config.Auth{Type: config.AuthAPIKey, Value: "k-secret-123", HeaderName: "X-Key"}}
	ctx := context.Background()
	s, err := Connect(ctx, Options{Server: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Call(ctx, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"getThing","arguments":{"id":"1"}}`))
	if err == nil || !strings.Contains(err.Error(), openapi.ErrBlockedAddress.Error()) {
		t.Errorf("call to a rebound address: %v, want %v", err, openapi.ErrBlockedAddress)
	}
	if got := api.received(); len(got) != 0 {
		t.Errorf("the API at a private address received %q", got)
	}
}
