package upstream

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
