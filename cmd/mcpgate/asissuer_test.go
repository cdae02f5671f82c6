package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

// recordingAS is an authorization server that records every request and
// would mint a token for anyone: metadata at the RFC 8414 location, a
// token endpoint at /token.
type recordingAS struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []string // "METHOD /path Authorization"
}

func newRecordingAS(t *testing.T, token string) *recordingAS {
	t.Helper()
	as := &recordingAS{}
	as.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		as.mu.Lock()
		as.reqs = append(as.reqs, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		as.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			_ = json.NewEncoder(w).Encode(map[string]any{"issuer": as.URL, "token_endpoint": as.URL + "/token"})
		case "/token":
			_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "token_type": "Bearer", "expires_in": 3600})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(as.Close)
	return as
}

func (as *recordingAS) requests() []string {
	as.mu.Lock()
	defer as.mu.Unlock()
	return append([]string(nil), as.reqs...)
}

// newProtectedUpstream is a stateless MCP server that wants Bearer want
// and whose protected resource metadata (and 401 challenge) name
// authServer as its authorization server.
func newProtectedUpstream(t *testing.T, want, authServer string) *httptest.Server {
	t.Helper()
	var up *httptest.Server
	up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/.well-known/oauth-protected-resource") {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"resource": up.URL + "/mcp", "authorization_servers": []string{authServer}})
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+want {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+up.URL+`/.well-known/oauth-protected-resource/mcp"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &m)
		if m.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		answer := map[string]any{"jsonrpc": "2.0", "id": m.ID}
		switch m.Method {
		case "initialize":
			answer["result"] = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "protected", "version": "1"}}
		case "tools/list":
			answer["result"] = map[string]any{"tools": []any{map[string]any{"name": "ping", "inputSchema": map[string]any{"type": "object"}}}}
		case "tools/call":
			answer["result"] = map[string]any{"content": []any{map[string]any{"type": "text", "text": "pong"}}}
		default:
			answer["error"] = map[string]any{"code": -32601, "message": "Method not found"}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(up.Close)
	return up
}

// An upstream cannot choose who receives the gateway's client secret: its
// protected resource metadata names an authorization server of its own,
// which gets nothing; the token comes from the one the config pins. When
// the pinned one fails (its metadata redirects to another origin), the
// call fails with an auth fault whose message names no address, and
// neither the upstream's authorization server nor the redirect's target
// gets anything.
func TestGatewayClientSecretGoesToPinnedAuthorizationServer(t *testing.T) {
	clearAdminEnv(t)
	const secret = "gw-client-Secr3t-zq8"
	hostileAS := newRecordingAS(t, "tok-from-hostile")
	honestAS := newRecordingAS(t, "tok-from-honest")
	good := newProtectedUpstream(t, "tok-from-honest", hostileAS.URL)

	target := newRecordingAS(t, "tok-from-target")
	redirecting := httptest.NewServer(http.RedirectHandler(target.URL+"/.well-known/oauth-authorization-server", http.StatusFound))
	t.Cleanup(redirecting.Close)
	bad := newProtectedUpstream(t, "tok-from-honest", hostileAS.URL)

	auth := func(as string) *config.Auth {
		return &config.Auth{Type: config.AuthOAuth2, ClientID: "gw", ClientSecret: secret, AuthorizationServer: as}
	}
	const master = "master-key-0123456789"
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Auth: &config.CallerAuth{MasterKey: master},
		Servers: map[string]*config.Server{
			"good": {Name: "good", Transport: config.TransportHTTP, URL: good.URL + "/mcp", Timeout: 5 * time.Second, Auth: auth(honestAS.URL)},
			"bad":  {Name: "bad", Transport: config.TransportHTTP, URL: bad.URL + "/mcp", Timeout: 5 * time.Second, Auth: auth(redirecting.URL)},
		}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, hs := gatewayAt(t, cfg, nil, "")
	defer stk.close(context.Background())
	defer hs.Close()

	call := func(route, tool string) string {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": map[string]any{}}})
		st, _, out := post(t, hs.URL+route, master, string(body))
		if st != http.StatusOK {
			t.Fatalf("%s %s: HTTP %d %s", route, tool, st, out)
		}
		return out
	}
	if out := call("/mcp/good", "ping"); !strings.Contains(out, "pong") {
		t.Fatalf("good: %s", out)
	}
	if got := honestAS.requests(); len(got) != 2 || !strings.HasPrefix(got[1], "POST /token Basic ") {
		t.Errorf("the pinned authorization server got %q", got)
	}

	out := call("/mcp/bad", "ping")
	var res struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Fault  string `json:"fault"`
				Server string `json:"server"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Error == nil {
		t.Fatalf("bad: want a JSON-RPC error, got %s", out)
	}
	if e := res.Error; e.Data.Fault != "auth" || e.Data.Server != "bad" ||
		!strings.Contains(e.Message, "authorization server metadata: redirect to another origin, not followed") ||
		strings.Contains(e.Message, "127.0.0.1") || strings.Contains(e.Message, "localhost") {
		t.Errorf("bad: error %+v", e)
	}
	if got := target.requests(); len(got) != 0 {
		t.Errorf("the redirect's target got %q", got)
	}
	if got := hostileAS.requests(); len(got) != 0 {
		t.Errorf("the upstream's authorization server got %q", got)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the error shows the secret: %s", out)
	}
}

// The connect page of an oauth2_user server whose pinned authorization
// server cannot be used says what failed, never an address; the
// authorization server the upstream's metadata names gets nothing.
func TestConnectPageNamesNoAddress(t *testing.T) {
	hostileAS := newRecordingAS(t, "tok-from-hostile")
	target := newRecordingAS(t, "tok-from-target")
	redirecting := httptest.NewServer(http.RedirectHandler(target.URL+"/.well-known/oauth-authorization-server", http.StatusFound))
	t.Cleanup(redirecting.Close)
	up := newProtectedUpstream(t, "never", hostileAS.URL)
	cfg := oauthUserConfig(t, t.TempDir(), up.URL+"/mcp")
	cfg.Servers["up"].Auth = &config.Auth{Type: config.AuthOAuth2User, ClientID: "gw", ClientSecret: "pre-registered-Secr3t", AuthorizationServer: redirecting.URL}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, hs := gatewayAt(t, cfg, nil, "")
	defer stk.close(context.Background())
	defer hs.Close()
	b := newTestBrowser(t, hs.URL+"/oauth/connect/callback")
	p := b.get(hs.URL+"/oauth/connect/up", aliceGatewayKey)
	if p.Status != http.StatusBadGateway || !strings.Contains(p.Body, "a redirect to another origin was refused") ||
		strings.Contains(p.Body, "127.0.0.1") || strings.Contains(p.Body, "localhost") || strings.Contains(p.Body, "pre-registered-Secr3t") {
		t.Errorf("connect page: %d\n%s", p.Status, p.Body)
	}
	if got := append(hostileAS.requests(), target.requests()...); len(got) != 0 {
		t.Errorf("the upstream's authorization server or the redirect's target got %q", got)
	}
}
