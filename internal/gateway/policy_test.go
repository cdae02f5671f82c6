package gateway

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Tool overrides (S6.3): the display name and description are what the
// client sees; a call by display name reaches the upstream tool; the old
// name is gone. Config allow/deny lists hide tools from list and call.
func TestToolOverridesAndServerLists(t *testing.T) {
	up := faultyUpstream(t)
	srv := httpServer(up.URL + "/mcp")
	srv.Tools = &config.ToolPolicy{
		Deny:      []string{"broken"},
		Overrides: map[string]config.ToolOverride{"ok": {Name: "fine", Description: "Always fine"}},
	}
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{"f": srv}}})
	for _, route := range []string{"/mcp", "/mcp/f"} {
		prefix := "f__"
		if route == "/mcp/f" {
			prefix = ""
		}
		_, _, body := rpc(t, gw.URL+route, nil, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		if !strings.Contains(string(body), `"name":"`+prefix+`fine","inputSchema":{"type":"object"},"description":"Always fine"`) &&
			!strings.Contains(string(body), `"name":"`+prefix+`fine"`) {
			t.Errorf("%s: override not listed: %s", route, body)
		}
		if !strings.Contains(string(body), `"Always fine"`) || strings.Contains(string(body), `"`+prefix+`ok"`) || strings.Contains(string(body), "broken") {
			t.Errorf("%s: list %s", route, body)
		}
		_, _, body = rpc(t, gw.URL+route, nil, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"`+prefix+`fine","arguments":{}}}`)
		if !strings.Contains(string(body), `"text":"fine"`) {
			t.Errorf("%s: call by display name: %s", route, body)
		}
		for _, hidden := range []string{prefix + "ok", prefix + "broken"} {
			_, _, body = rpc(t, gw.URL+route, nil, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"`+hidden+`","arguments":{}}}`)
			if !strings.Contains(string(body), "Unknown tool: "+hidden) {
				t.Errorf("%s: call to hidden %s: %s", route, hidden, body)
			}
		}
	}
}

// A toolset or allow list naming a tool the server does not have is
// warned about, not silently granting nothing.
func TestMissingToolsAreWarned(t *testing.T) {
	up := faultyUpstream(t)
	srv := httpServer(up.URL + "/mcp")
	srv.Tools = &config.ToolPolicy{Allow: []string{"ok", "okk"}}
	var logs syncBuffer
	cfg := &config.Config{
		Servers:  map[string]*config.Server{"f": srv},
		Toolsets: map[string]*config.Toolset{"ts": {Servers: map[string][]string{"f": {"ok", "nap", "napp"}}}},
	}
	startGatewayWith(t, Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && strings.Count(logs.String(), "config names a tool the server does not have") < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	l := logs.String()
	for _, want := range []string{"tool=napp where=toolsets.ts", "tool=okk where=servers.f.tools.allow"} {
		if !strings.Contains(l, want) {
			t.Errorf("no warning for %s:\n%s", want, l)
		}
	}
	if strings.Contains(l, "tool=nap ") || strings.Contains(l, "tool=ok ") {
		t.Errorf("warned about tools that exist:\n%s", l)
	}
}

// The client-application allowlist (S2.3) refuses other clients with 403;
// client-supplied internal headers are dropped (S2.4).
func TestClientAllowlist(t *testing.T) {
	up := faultyUpstream(t)
	cfg := &config.Config{
		Servers: map[string]*config.Server{"f": httpServer(up.URL + "/mcp")},
		Auth:    &config.CallerAuth{AllowedClients: &config.ClientAllowlist{Header: "X-Client-Name", Values: []string{"claude-code"}}},
	}
	_, gw := startGatewayWith(t, Options{Config: cfg})
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	for hdr, want := range map[string]int{"": 403, "cursor": 403, "claude-code": 200, "Claude-Code": 200} {
		h := map[string]string{}
		if hdr != "" {
			h["X-Client-Name"] = hdr
		}
		if code, _, body := rpc(t, gw.URL+"/mcp", h, list); code != want {
			t.Errorf("client %q: %d %s", hdr, code, body)
		}
	}
}
