package admin

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// fakeTokens is a TokenVerifier over a fixed table: token -> identity,
// accepted only for the resource it was issued for (as the gateway's
// tests have it).
type fakeTokens struct {
	mu   sync.Mutex
	ids  map[string]*oauth.Identity
	aud  map[string]string // token -> resource
	seen []string          // resources asked for
}

func (f *fakeTokens) Verify(_ context.Context, token, resource string) (*oauth.Identity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, resource)
	id, ok := f.ids[token]
	if !ok {
		return nil, &oauth.TokenError{Description: "signature is not valid"}
	}
	if f.aud[token] != "" && f.aud[token] != resource {
		return nil, &oauth.TokenError{Description: "the token was issued for another audience"}
	}
	cp := *id
	return &cp, nil
}

func fakeJWT(name string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"ES256"}`)) + "." + enc([]byte(`{"n":"`+name+`"}`)) + ".sig"
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

const oauthInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`

// mounted is g with h mounted as the admin API, as the binary serves
// them (cmd/mcpgate newMux).
func mounted(g *gateway.Gateway, h http.Handler) http.Handler {
	return g.Middleware(gateway.NewMux(append(g.Routes(), Routes(h, g)...)))
}

// rpc posts one JSON-RPC body with hdr and returns the status and body.
func rpc(t testing.TB, url string, hdr map[string]string, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// wideTokens is a fakeTokens whose "wide" tokens carry an issuer's
// gateway-wide audience (auth.oidc[].audience): Verify takes them on any
// MCP route, VerifyExact (the admin API) only for the resource they name.
type wideTokens struct {
	*fakeTokens
	wide  map[string]bool
	exact []string // the resources VerifyExact was asked for
}

func (f *wideTokens) Verify(ctx context.Context, token, resource string) (*oauth.Identity, error) {
	if f.wide[token] {
		cp := *f.ids[token]
		return &cp, nil
	}
	return f.fakeTokens.Verify(ctx, token, resource)
}

func (f *wideTokens) VerifyExact(ctx context.Context, token, resource string) (*oauth.Identity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exact = append(f.exact, resource)
	id, ok := f.ids[token]
	if !ok || f.wide[token] || f.aud[token] != resource {
		return nil, &oauth.TokenError{Description: "token audience does not include this resource"}
	}
	cp := *id
	return &cp, nil
}

// The admin API takes a bearer token for exactly its own resource: its
// routes ask for it with callers.WithAdminResource, so an issuer's
// gateway-wide audience, good on the MCP routes, never opens it; a token
// for the admin API opens no MCP route, and one for a route not the
// admin API.
func TestAdminResourceIsExact(t *testing.T) {
	tokens := &wideTokens{fakeTokens: &fakeTokens{ids: map[string]*oauth.Identity{}, aud: map[string]string{}}, wide: map[string]bool{}}
	root := &oauth.Identity{Issuer: "https://idp.example", Subject: "r-1", User: "root", Roles: []string{"admin"}}
	for _, name := range []string{"wide", "admin", "route"} {
		tokens.ids[fakeJWT(name)] = root
	}
	tokens.wide[fakeJWT("wide")] = true
	cfg := &config.Config{
		Listen: "127.0.0.1:0", ToolNameSeparator: config.DefaultSeparator,
		Auth: &config.CallerAuth{OIDC: []config.OIDCIssuer{{Issuer: "https://idp.example", Audience: "gw"}},
			Grants: []config.Grant{{Role: "admin", Admin: true}}},
	}
	auth := callers.New(callers.Options{Tokens: tokens, Grants: cfg.Auth.Grants})
	t.Cleanup(func() { auth.Close() })
	g := gateway.New(gateway.Options{Authenticator: auth, Config: cfg, Version: "test", AdminPath: Prefix})
	var admitted []string
	var mu sync.Mutex
	stand := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, f := auth.Authenticate(r)
		if f != nil {
			f.Write(w)
			return
		}
		mu.Lock()
		admitted = append(admitted, c.User)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	ctx, cancel := context.WithCancel(context.Background())
	g.Start(ctx)
	// As the binary mounts it (cmd/mcpgate newMux).
	gw := httptest.NewServer(mounted(g, stand))
	t.Cleanup(func() {
		gw.Close()
		g.Close(context.Background())
		cancel()
	})
	admin := gw.URL + "/admin/v1"
	tokens.aud[fakeJWT("admin")] = admin
	tokens.aud[fakeJWT("route")] = gw.URL + "/mcp"

	get := func(path, tok string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, gw.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		tok, path string
		want      int
	}{
		{"wide", "/admin/v1/keys", http.StatusUnauthorized},
		{"route", "/admin/v1/keys", http.StatusUnauthorized},
		{"admin", "/admin/v1/keys", http.StatusOK},
		{"admin", "/me/connections", http.StatusOK}, // the admin API's /me alias
	} {
		if got := get(tc.path, fakeJWT(tc.tok)); got != tc.want {
			t.Errorf("%s token on %s: %d, want %d", tc.tok, tc.path, got, tc.want)
		}
	}
	for _, tc := range []struct {
		tok, path string
		want      int
	}{
		{"admin", "/mcp", http.StatusUnauthorized},
		{"wide", "/mcp", http.StatusOK},
	} {
		if status, _, body := rpc(t, gw.URL+tc.path, bearer(fakeJWT(tc.tok)), oauthInit); status != tc.want {
			t.Errorf("%s token on %s: %d %s, want %d", tc.tok, tc.path, status, body, tc.want)
		}
	}
	tokens.mu.Lock()
	defer tokens.mu.Unlock()
	if len(tokens.exact) != 4 || slices.ContainsFunc(tokens.exact, func(r string) bool { return r != admin }) {
		t.Errorf("VerifyExact asked for %q, want %s for each admin request", tokens.exact, admin)
	}
	if slices.Contains(tokens.seen, admin) {
		t.Errorf("the admin API's resource was verified as an MCP route's: %q", tokens.seen)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(admitted, []string{"root", "root"}) {
		t.Errorf("admitted %q, want the admin token's two requests", admitted)
	}
}
