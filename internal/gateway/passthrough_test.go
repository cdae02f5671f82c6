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

	call := func(hdr map[string]string, tool string) string {
		_, _, body := rpc(t, gw.URL+"/mcp", hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":{}}}`)
		return string(body)
	}
	if got := call(map[string]string{"Authorization": "Bearer alice-tok"}, "pt__whoami"); !strings.Contains(got, `"Bearer alice-tok"`) {
		t.Errorf("alice: %s", got)
	}
	if got := call(map[string]string{"Authorization": "bob-tok"}, "pt__whoami"); !strings.Contains(got, `"Bearer bob-tok"`) {
		t.Errorf("bob (bare token gets one scheme): %s", got)
	}
	if got := call(map[string]string{"Authorization": "Bearer wrong", "X-Mcp-pt-Authorization": "Bearer carol-tok"}, "pt__whoami"); !strings.Contains(got, `"Bearer carol-tok"`) {
		t.Errorf("carol (server-specific header wins): %s", got)
	}
	if got := call(map[string]string{"Authorization": "Bearer alice-tok"}, "static__whoami"); !strings.Contains(got, `"Bearer gateway-owned"`) {
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
