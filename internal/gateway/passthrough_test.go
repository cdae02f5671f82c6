package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// A passthrough server receives each caller's own token, never another
// caller's, from X-Mcp-<server>-Authorization or Authorization; a server
// with static credentials never receives the caller's.
func TestPassthroughForwardsTheCallersToken(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{} // upstream name -> Authorization values
	upstreamFor := func(name string) *httptest.Server {
		return mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
			mu.Lock()
			seen[name] = append(seen[name], r.Header.Get("Authorization"))
			mu.Unlock()
			switch m.Method {
			case "initialize":
				return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"` + name + `","version":"0"}}`
			case "tools/list":
				return `{"tools":[{"name":"whoami","inputSchema":{"type":"object"}}]}`
			}
			return `{"content":[{"type":"text","text":"` + strings.ReplaceAll(r.Header.Get("Authorization"), `"`, "") + `"}]}`
		})
	}
	pt := httpServer(upstreamFor("pt").URL + "/mcp")
	pt.Auth = &config.Auth{Type: config.AuthPassthrough}
	static := httpServer(upstreamFor("static").URL + "/mcp")
	static.Auth = &config.Auth{Type: config.AuthBearer, Value: "gateway-owned"}
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{"pt": pt, "static": static}}})

	call := func(path string, hdr map[string]string, tool string) string {
		_, _, body := rpc(t, gw.URL+path, hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":{}}}`)
		return string(body)
	}
	// Authorization reaches a passthrough server on its own route only.
	if got := call("/mcp/pt", map[string]string{"Authorization": "Bearer alice-tok"}, "whoami"); !strings.Contains(got, `"Bearer alice-tok"`) {
		t.Errorf("alice: %s", got)
	}
	if got := call("/mcp/pt", map[string]string{"Authorization": "bob-tok"}, "whoami"); !strings.Contains(got, `"Bearer bob-tok"`) {
		t.Errorf("bob (bare token gets one scheme): %s", got)
	}
	if got := call("/mcp", map[string]string{"Authorization": "Bearer wrong", "X-Mcp-pt-Authorization": "Bearer carol-tok"}, "pt__whoami"); !strings.Contains(got, `"Bearer carol-tok"`) {
		t.Errorf("carol (server-specific header wins): %s", got)
	}
	if got := call("/mcp", map[string]string{"Authorization": "Bearer alice-tok"}, "static__whoami"); !strings.Contains(got, `"Bearer gateway-owned"`) {
		t.Errorf("static server: %s", got)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range seen["static"] {
		if v != "Bearer gateway-owned" {
			t.Errorf("the static server received %q", v)
		}
	}
}

// Hole 12: on a route of several servers (/mcp, /mcp/a,b, a toolset) a
// caller's Authorization reaches no passthrough server: each receives
// only its own X-Mcp-<server>-Authorization, and a server the caller
// named no token for is left out of its view. On a single-server route
// Authorization is that server's.
func TestPassthroughMergedRouteSendsOnlyPerServerTokens(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{} // upstream -> Authorization of every request it got
	upstreamFor := func(name string) *config.Server {
		up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
			mu.Lock()
			seen[name] = append(seen[name], r.Header.Get("Authorization"))
			mu.Unlock()
			switch m.Method {
			case "initialize":
				return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"` + name + `","version":"0"}}`
			case "tools/list":
				return `{"tools":[{"name":"whoami","inputSchema":{"type":"object"}}]}`
			}
			return `{"content":[{"type":"text","text":"` + strings.ReplaceAll(r.Header.Get("Authorization"), `"`, "") + `"}]}`
		})
		srv := httpServer(up.URL + "/mcp")
		srv.Auth = &config.Auth{Type: config.AuthPassthrough}
		return srv
	}
	cfg := &config.Config{
		Servers:  map[string]*config.Server{"a": upstreamFor("a"), "b": upstreamFor("b")},
		Toolsets: map[string]*config.Toolset{"both": {Servers: map[string][]string{"a": {"whoami"}, "b": {"whoami"}}}},
	}
	_, gw := startGatewayWith(t, Options{Config: cfg})
	const generic = "Bearer caller-generic-token"
	call := func(path string, hdr map[string]string, tool string) (int, string) {
		code, _, body := rpc(t, gw.URL+path, hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":{}}}`)
		return code, string(body)
	}
	both := map[string]string{"Authorization": generic, "X-Mcp-a-Authorization": "Bearer a-token", "X-Mcp-b-Authorization": "Bearer b-token"}
	for _, path := range []string{"/mcp", "/mcp/a,b", "/toolset/both/mcp"} {
		for _, s := range []string{"a", "b"} {
			if code, body := call(path, both, s+"__whoami"); code != 200 || !strings.Contains(body, `"text":"Bearer `+s+`-token"`) {
				t.Errorf("%s %s__whoami: %d %s; want its own X-Mcp-%s-Authorization", path, s, code, body, s)
			}
		}
		// Authorization alone names no server: both are left out.
		if code, body := call(path, map[string]string{"Authorization": generic}, "a__whoami"); code != 200 || !strings.Contains(body, `"error":{"code":-32602,"message":"Unknown tool: a__whoami"}`) {
			t.Errorf("%s with only Authorization: %d %s; want the unknown-tool error", path, code, body)
		}
		_, _, list := rpc(t, gw.URL+path, map[string]string{"Authorization": generic}, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		if strings.Contains(string(list), "whoami") {
			t.Errorf("%s with only Authorization lists a passthrough tool: %s", path, list)
		}
	}
	mu.Lock()
	for name, got := range seen {
		for _, v := range got {
			if v == generic {
				t.Errorf("merged routes: upstream %s received the caller's Authorization", name)
			}
			if v != "" && v != "Bearer "+name+"-token" {
				t.Errorf("merged routes: upstream %s received %q, not its own token", name, v)
			}
		}
	}
	mu.Unlock()
	// The single-server route is the server's own: Authorization is its.
	if code, body := call("/mcp/a", map[string]string{"Authorization": generic}, "whoami"); code != 200 || !strings.Contains(body, `"text":"`+generic+`"`) {
		t.Errorf("/mcp/a with Authorization: %d %s", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range seen["b"] {
		if v == generic {
			t.Error("a call on /mcp/a sent the caller's Authorization to b")
		}
	}
}
