package client_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// fake is an MCP server that is its own authorization server, every
// document adjustable, every request logged.
type fake struct {
	t   *testing.T
	ts  *httptest.Server
	url string

	mu     sync.Mutex
	hits   []string
	forms  []url.Values
	routes map[string]http.HandlerFunc
}

func newFake(t *testing.T) *fake {
	f := &fake{t: t, routes: map[string]http.HandlerFunc{}}
	f.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		f.mu.Lock()
		f.hits = append(f.hits, r.URL.Path)
		if r.Method == http.MethodPost {
			f.forms = append(f.forms, r.PostForm)
		}
		h := f.routes[r.URL.Path]
		f.mu.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	}))
	t.Cleanup(f.ts.Close)
	f.url = f.ts.URL
	return f
}

func (f *fake) handle(path string, h http.HandlerFunc) {
	f.mu.Lock()
	f.routes[path] = h
	f.mu.Unlock()
}

func (f *fake) json(path string, v func() any) {
	f.handle(path, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, v()) })
}

func (f *fake) paths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.hits)
}

func (f *fake) lastForm() url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.forms) == 0 {
		return nil
	}
	return f.forms[len(f.forms)-1]
}

// asMetadata is a good authorization server's metadata for issuer.
func asMetadata(issuer string) oauth.AuthServerMetadata {
	return oauth.AuthServerMetadata{
		Issuer:                                     issuer,
		AuthorizationEndpoint:                      issuer + "/authorize",
		TokenEndpoint:                              issuer + "/token",
		RegistrationEndpoint:                       issuer + "/register",
		CodeChallengeMethodsSupported:              []string{"S256"},
		TokenEndpointAuthMethodsSupported:          []string{"none"},
		AuthorizationResponseIssParameterSupported: true,
	}
}

// standard serves a PRM at the path-inserted well-known URI naming the
// fake as its authorization server, and md as that server's metadata.
func (f *fake) standard(md func(issuer string) oauth.AuthServerMetadata) {
	f.json("/.well-known/oauth-protected-resource/mcp", func() any {
		return oauth.ProtectedResourceMetadata{Resource: f.url + "/mcp", AuthorizationServers: []string{f.url}, ScopesSupported: []string{"a", "b"}}
	})
	f.json("/.well-known/oauth-authorization-server", func() any { return md(f.url) })
	f.json("/token", func() any {
		return map[string]any{"access_token": "at-1", "token_type": "bearer", "expires_in": 60, "refresh_token": "rt-1"}
	})
}

func challenge(h string) *http.Response {
	return &http.Response{StatusCode: http.StatusUnauthorized, Header: http.Header{"Www-Authenticate": {h}}}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
