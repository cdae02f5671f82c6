package upstream

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
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
