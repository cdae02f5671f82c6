package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// fakeTokens is a TokenVerifier over a fixed table: token -> identity,
// accepted only for the resource it was issued for.
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
	switch token {
	case fakeJWT("scope"):
		return nil, &oauth.ScopeError{Required: []string{"mcp", "tools"}}
	}
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

func oauthGateway(t *testing.T) (*fakeTokens, *httptest.Server, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var upstreamAuth []string
	up := func(name string) *config.Server {
		ts := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
			mu.Lock()
			upstreamAuth = append(upstreamAuth, r.Header.Get("Authorization"))
			mu.Unlock()
			switch m.Method {
			case "initialize":
				return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"` + name + `","version":"0"}}`
			case "tools/list":
				return `{"tools":[{"name":"ping","inputSchema":{"type":"object"}},{"name":"drop","inputSchema":{"type":"object"}}]}`
			}
			return `{"content":[{"type":"text","text":"pong"}]}`
		})
		return httpServer(ts.URL + "/mcp")
	}
	tokens := &fakeTokens{ids: map[string]*oauth.Identity{}, aud: map[string]string{}}
	cfg := &config.Config{
		Servers:  map[string]*config.Server{"alpha": up("alpha"), "beta": up("beta")},
		Toolsets: map[string]*config.Toolset{"ts": {Servers: map[string][]string{"alpha": {"ping"}}}},
		Auth: &config.CallerAuth{
			OIDC:  []config.OIDCIssuer{{Issuer: "https://idp.example", RequiredScopes: []string{"mcp"}}},
			Login: &config.Login{Keys: true},
			Grants: []config.Grant{
				{Team: "platform", Servers: []string{"alpha"}, DenyTools: map[string][]string{"alpha": {"drop"}}},
				{Role: "ops", Servers: []string{"beta"}},
			},
		},
	}
	auth := callers.New(callers.Options{Tokens: tokens, Grants: cfg.Auth.Grants, Logger: testLogger(t)})
	t.Cleanup(func() { auth.Close() })
	_, gw := startGatewayWith(t, Options{Authenticator: auth, Config: cfg})
	return tokens, gw, &upstreamAuth
}

// fakeJWT is shaped like a JWT (oauth.LooksLikeJWT) without being one.
func fakeJWT(name string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"ES256"}`)) + "." + enc([]byte(`{"n":"`+name+`"}`)) + ".sig"
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

const oauthInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`

// Every MCP endpoint without a credential gets 401 with a challenge that
// names its own route's metadata document and the scopes it takes.
func TestOAuthChallenges(t *testing.T) {
	_, gw, _ := oauthGateway(t)
	for _, tc := range []struct{ method, path, prm string }{
		{http.MethodPost, "/mcp", "/mcp"},
		{http.MethodPost, "/mcp/alpha", "/mcp/alpha"},
		{http.MethodPost, "/alpha/mcp", "/alpha/mcp"},
		{http.MethodPost, "/toolset/ts/mcp", "/toolset/ts/mcp"},
		{http.MethodGet, "/mcp", "/mcp"},
		{http.MethodDelete, "/mcp", "/mcp"},
		{http.MethodGet, "/sse", "/sse"}, // issue 24 §2.1: a resource its URL starts with
		{http.MethodGet, "/mcp/alpha/sse", "/mcp/alpha"},
		{http.MethodPost, "/messages?sessionId=x", "/sse"},
	} {
		req, _ := http.NewRequest(tc.method, gw.URL+tc.path, strings.NewReader(oauthInit))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := `Bearer resource_metadata="` + gw.URL + `/.well-known/oauth-protected-resource` + tc.prm + `", scope="mcp"`
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
			t.Errorf("%s %s: %d %q, want 401 %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
		}
	}
}

// Each route's metadata names its own resource; the root document is
// /mcp's; an unknown route has none.
func TestProtectedResourceMetadata(t *testing.T) {
	_, gw, _ := oauthGateway(t)
	for _, tc := range []struct {
		path     string
		status   int
		resource string
	}{
		{"", 200, "/mcp"},
		{"/mcp", 200, "/mcp"},
		{"/mcp/alpha", 200, "/mcp/alpha"},
		{"/toolset/ts/mcp", 200, "/toolset/ts/mcp"},
		{"/mcp/nope", 404, ""},
		{"/toolset/nope/mcp", 404, ""},
	} {
		resp, err := http.Get(gw.URL + "/.well-known/oauth-protected-resource" + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		var md oauth.ProtectedResourceMetadata
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%q: status %d, want %d (%s)", tc.path, resp.StatusCode, tc.status, b)
			continue
		}
		if tc.status != 200 {
			continue
		}
		if err := json.Unmarshal(b, &md); err != nil {
			t.Fatal(err)
		}
		if md.Resource != gw.URL+tc.resource || len(md.AuthorizationServers) != 2 || md.AuthorizationServers[0] != gw.URL ||
			md.AuthorizationServers[1] != "https://idp.example" || strings.Join(md.BearerMethodsSupported, ",") != "header" ||
			strings.Join(md.ScopesSupported, ",") != "mcp" {
			t.Errorf("%q: %+v", tc.path, md)
		}
	}
}

// A JWT caller is verified for the route's resource, sees what its grants
// give, keeps its sessions across token refreshes (the owner is issuer +
// subject), and its token never reaches an upstream.
func TestJWTCallers(t *testing.T) {
	tokens, gw, upstreamAuth := oauthGateway(t)
	alice := &oauth.Identity{Issuer: "https://idp.example", Subject: "a-1", User: "alice", Teams: []string{"platform"}}
	tokens.ids[fakeJWT("alice1")], tokens.aud[fakeJWT("alice1")] = alice, gw.URL+"/mcp"
	tokens.ids[fakeJWT("alice2")], tokens.aud[fakeJWT("alice2")] = alice, gw.URL+"/mcp"
	tokens.ids[fakeJWT("bob")] = &oauth.Identity{Issuer: "https://idp.example", Subject: "b-1", User: "bob", Roles: []string{"ops"}}
	tokens.ids[fakeJWT("nobody")] = &oauth.Identity{Issuer: "https://idp.example", Subject: "n-1", User: "nobody"}

	status, hdr, body := rpc(t, gw.URL+"/mcp", bearer(fakeJWT("alice1")), oauthInit)
	sid := hdr.Get(mcpwire.HeaderSessionID)
	if status != 200 || sid == "" {
		t.Fatalf("alice initialize: %d %s", status, body)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	withSession := func(tok string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + tok, mcpwire.HeaderSessionID: sid, mcpwire.HeaderProtocolVersion: "2025-11-25"}
	}
	// A refreshed token of the same person keeps the session.
	status, _, body = rpc(t, gw.URL+"/mcp", withSession(fakeJWT("alice2")), list)
	if status != 200 || !strings.Contains(string(body), `"alpha__ping"`) || strings.Contains(string(body), "beta__") || strings.Contains(string(body), "alpha__drop") {
		t.Errorf("alice's tools (team platform: alpha without drop): %d %s", status, body)
	}
	// Another person may not use it.
	if status, _, body = rpc(t, gw.URL+"/mcp", withSession(fakeJWT("bob")), list); status != http.StatusForbidden {
		t.Errorf("bob on alice's session: %d %s", status, body)
	}
	// bob's role grants beta only.
	_, _, body = rpc(t, gw.URL+"/mcp", bearer(fakeJWT("bob")), list)
	if !strings.Contains(string(body), `"beta__ping"`) || strings.Contains(string(body), "alpha__") {
		t.Errorf("bob's tools (role ops: beta): %s", body)
	}
	// No grant: no server.
	if _, _, body = rpc(t, gw.URL+"/mcp", bearer(fakeJWT("nobody")), oauthInit); !strings.Contains(string(body), `No grant gives user \"nobody\"`) {
		t.Errorf("a caller without grants: %s", body)
	}
	// alice's token was issued for /mcp: not for /mcp/alpha.
	status, hdr, _ = rpc(t, gw.URL+"/mcp/alpha", bearer(fakeJWT("alice1")), oauthInit)
	if status != http.StatusUnauthorized || !strings.Contains(hdr.Get("WWW-Authenticate"), `error="invalid_token", error_description="the token was issued for another audience"`) ||
		!strings.Contains(hdr.Get("WWW-Authenticate"), `resource_metadata="`+gw.URL+`/.well-known/oauth-protected-resource/mcp/alpha"`) {
		t.Errorf("token for another route: %d %q", status, hdr.Get("WWW-Authenticate"))
	}
	tokens.mu.Lock()
	for _, r := range tokens.seen {
		if r != gw.URL+"/mcp" && r != gw.URL+"/mcp/alpha" {
			t.Errorf("verified for resource %q", r)
		}
	}
	tokens.mu.Unlock()
	// Calls reach the upstream without the caller's token.
	if _, _, body = rpc(t, gw.URL+"/mcp", withSession(fakeJWT("alice1")), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__ping","arguments":{}}}`); !strings.Contains(string(body), "pong") {
		t.Errorf("call: %s", body)
	}
	for _, a := range *upstreamAuth {
		if a != "" {
			t.Errorf("an upstream received Authorization %q", a)
		}
	}
}

// A bad token is 401 invalid_token, a token without the scope 403
// insufficient_scope naming it, a token in the query string 400
// invalid_request: each with the challenge the RFCs name.
func TestOAuthRefusals(t *testing.T) {
	_, gw, _ := oauthGateway(t)
	prm := `resource_metadata="` + gw.URL + `/.well-known/oauth-protected-resource/mcp"`
	for _, tc := range []struct {
		name, url string
		hdr       map[string]string
		status    int
		challenge string
	}{
		{"bad signature", "/mcp", bearer(fakeJWT("forged")), 401, `Bearer ` + prm + `, scope="mcp", error="invalid_token", error_description="signature is not valid"`},
		{"missing scope", "/mcp", bearer(fakeJWT("scope")), 403, `Bearer ` + prm + `, scope="mcp tools", error="insufficient_scope", error_description="the token lacks a required scope"`},
		{"token in query", "/mcp?access_token=" + fakeJWT("alice"), nil, 400, `Bearer ` + prm + `, scope="mcp", error="invalid_request"`},
	} {
		status, hdr, body := rpc(t, gw.URL+tc.url, tc.hdr, oauthInit)
		if status != tc.status || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), tc.challenge) {
			t.Errorf("%s: %d %q (%s), want %d %q", tc.name, status, hdr.Get("WWW-Authenticate"), body, tc.status, tc.challenge)
		}
		if strings.Contains(string(body), "eyJ") {
			t.Errorf("%s: the body echoes the token: %s", tc.name, body)
		}
	}
}

// S2.3 by JWT claim: with allowed_clients.client_ids, a JWT caller whose
// token was issued to another OAuth client is refused 403; a key caller is
// judged by the header only.
func TestAllowedClientIDs(t *testing.T) {
	tokens := &fakeTokens{ids: map[string]*oauth.Identity{
		fakeJWT("ide"):   {Issuer: "https://idp.example", Subject: "a", User: "a", Teams: []string{"platform"}, ClientID: "ide"},
		fakeJWT("other"): {Issuer: "https://idp.example", Subject: "a", User: "a", Teams: []string{"platform"}, ClientID: "scraper"},
	}, aud: map[string]string{}}
	cfg := &config.Config{
		Servers: map[string]*config.Server{"alpha": httpServer(startSDKUpstream(t, "alpha").http.URL)},
		Auth: &config.CallerAuth{OIDC: []config.OIDCIssuer{{Issuer: "https://idp.example"}},
			AllowedClients: &config.ClientAllowlist{ClientIDs: []string{"ide"}},
			Grants:         []config.Grant{{Team: "platform"}}},
	}
	auth := callers.New(callers.Options{Tokens: tokens, Grants: cfg.Auth.Grants})
	t.Cleanup(func() { auth.Close() })
	_, gw := startGatewayWith(t, Options{Authenticator: auth, Config: cfg})
	if status, _, body := rpc(t, gw.URL+"/mcp", bearer(fakeJWT("ide")), oauthInit); status != 200 {
		t.Errorf("the allowed client: %d %s", status, body)
	}
	if status, _, body := rpc(t, gw.URL+"/mcp", bearer(fakeJWT("other")), oauthInit); status != http.StatusForbidden || !strings.Contains(string(body), "Client application not allowed") {
		t.Errorf("another client: %d %s", status, body)
	}
}

// NameRoute tells mcpgate's authorization server which resources are MCP
// routes of this gateway, in words for its consent page: a token is
// issued for a route that exists, named as what it serves; never for a
// legacy SSE suffix or trailing-slash spelling of one, an unknown server
// or toolset, or the admin API.
func TestNameRoute(t *testing.T) {
	cfg := &config.Config{
		Servers:  map[string]*config.Server{"alpha": httpServer("http://127.0.0.1:9/mcp"), "beta": httpServer("http://127.0.0.1:9/mcp")},
		Toolsets: map[string]*config.Toolset{"ts": {Servers: map[string][]string{"alpha": {"ping"}}}},
	}
	g, _ := startGatewayWith(t, Options{Config: cfg})
	for _, tt := range []struct {
		path, want string // want "" = no route
	}{
		{"/mcp", "every MCP server of mcpgate"},
		{"/mcp/alpha", "the MCP server alpha"},
		{"/alpha/mcp", "the MCP server alpha"},
		{"/mcp/alpha,beta", "the MCP servers alpha, beta"},
		{"/mcp/proxy", "the tools of every MCP server of mcpgate"},
		{"/toolset/ts/mcp", "the toolset ts of mcpgate"},
		{"/toolset/nope/mcp", ""},
		{"/mcp/gamma", ""},
		{"/mcp/alpha,gamma", ""},
		{"/mcp/alpha/sse", ""},
		{"/mcp/alpha/", ""},
		{"/sse", "every MCP server of mcpgate (legacy HTTP+SSE)"}, // issue 24 §2.1: a resource of its own
		{"/messages", ""},
		{"/admin/v1", ""},
		{"/admin/v1/keys", ""},
		{"/oauth/token", ""},
		{"/ui", ""},
		{"", ""},
	} {
		got, ok := g.NameRoute(tt.path)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("NameRoute(%q) = %q, %v; want %q", tt.path, got, ok, tt.want)
		}
	}
}
