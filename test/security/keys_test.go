package security

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// What was tried that held: key games (a revoked key, an expired key, a
// key used on a route of a server it may not use, an admin-only key on
// every route, toolset scoping) and session theft (another caller using
// alice's session id, on every method and transport). Each asserts the
// refusal and that alice's work was untouched.

const (
	expiredKey = "mcpg_sec-expired-0123456789"
	noMCPKey   = "mcpg_sec-nomcp-0123456789"
	toolsetKey = "mcpg_sec-toolset-0123456789"
)

// keyFixture: alice may use alpha, bob beta; expired's time is up; nomcp
// is an admin key that may use no server; tsk may use the toolset
// "echoes" only (alpha's echo).
func newKeyFixture(t *testing.T) (*gateway, *upstream, *upstream) {
	t.Helper()
	alpha, beta := newUpstream(t, "alpha"), newUpstream(t, "beta")
	g := startGateway(t, fmt.Sprintf(`auth:
  master_key: %q
  keys:
    - {alias: alice, key: %q, user: alice, servers: [alpha]}
    - {alias: bob, key: %q, user: bob, servers: [beta]}
    - {alias: expired, key: %q, user: eve, expires: 2020-01-01T00:00:00Z}
    - {alias: nomcp, key: %q, user: ops, admin: true, no_mcp: true}
    - {alias: tsk, key: %q, user: tess, servers: [], toolsets: [echoes]}
toolsets:
  echoes: {servers: {alpha: [echo]}}
servers:
`, masterKey, aliceKey, bobKey, expiredKey, noMCPKey, toolsetKey)+alpha.server()+beta.server())
	return g, alpha, beta
}

// unauthorized checks a 401 with JSON-RPC -32001.
func unauthorized(t *testing.T, who string, st int, body string) {
	t.Helper()
	var m rpcMsg
	_ = json.Unmarshal([]byte(body), &m)
	if st != http.StatusUnauthorized || m.Error == nil || m.Error.Code != -32001 {
		t.Errorf("%s: HTTP %d %.300s, want 401 with JSON-RPC -32001", who, st, body)
	}
}

// refusedWith checks an answer against the exact refusal: HTTP status,
// JSON-RPC code -32600 and message.
func refusedWith(t *testing.T, who string, st int, body string, wantStatus int, wantMsg string) {
	t.Helper()
	var m rpcMsg
	_ = json.Unmarshal([]byte(body), &m)
	if st != wantStatus || m.Error == nil || m.Error.Code != -32600 || m.Error.Message != wantMsg {
		t.Errorf("%s: HTTP %d %.300s, want %d with JSON-RPC -32600 %q", who, st, body, wantStatus, wantMsg)
	}
}

// unknownServer checks the refusal of a route of a server the key may
// not use: exactly what a server that does not exist gets (no oracle).
func unknownServer(t *testing.T, who string, st int, body, server string) {
	t.Helper()
	refusedWith(t, who, st, body, http.StatusNotFound, fmt.Sprintf("Unknown MCP server %q", server))
}

const initJSON = `{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"security-suite","version":"1"}}}`

// TestKeyGamesHeld is what was tried that held against keys.
func TestKeyGamesHeld(t *testing.T) {
	g, alpha, beta := newKeyFixture(t)
	alice := g.client(t, "/mcp/alpha", aliceKey)
	alice.initialize("")
	aliceWorks := func(t *testing.T, text string) {
		t.Helper()
		if res := alice.callTool("w-"+text, "echo", fmt.Sprintf(`{"text":%q}`, text)); isToolError(res) || toolText(t, res) != "alpha/echo: "+text {
			t.Errorf("alice's own call after the attempt: %s", describe(res))
		}
	}

	t.Run("revoked key", func(t *testing.T) {
		// Its open session, a new session and the legacy transport.
		key := revokeInUse(t, g, g, "temp", alpha)
		st, _, body := g.request(t, http.MethodGet, "/mcp/alpha/sse", keyHeader(key), "")
		unauthorized(t, "the revoked key on /sse", st, body)
		aliceWorks(t, "after-revoke")
	})

	t.Run("expired key", func(t *testing.T) {
		for _, path := range []string{"/mcp", "/mcp/alpha", "/toolset/echoes/mcp"} {
			st, _, body := g.client(t, path, expiredKey).post(initJSON)
			unauthorized(t, "the expired key on "+path, st, body)
		}
		st, body := g.adminAs(t, expiredKey, http.MethodGet, "/keys", "")
		unauthorized(t, "the expired key on the admin API", st, body)
	})

	t.Run("a key for alpha on beta's routes", func(t *testing.T) {
		for _, path := range []string{"/mcp/beta", "/beta/mcp", "/mcp/alpha,beta"} {
			st, _, body := g.client(t, path, aliceKey).post(initJSON)
			unknownServer(t, "alice on "+path, st, body, "beta")
		}
		st, _, body := g.client(t, "/mcp/nosuch", aliceKey).post(initJSON)
		unknownServer(t, "alice on a server that does not exist", st, body, "nosuch")
		st, _, body = g.request(t, http.MethodGet, "/mcp/beta/sse", keyHeader(aliceKey), "")
		unknownServer(t, "alice on /mcp/beta/sse", st, body, "beta")
		// On the merged route she sees alpha only, and beta's tools are
		// unknown to her; x-mcp-servers cannot widen the view.
		c := g.client(t, "/mcp", aliceKey)
		c.hdr.Set("X-Mcp-Servers", "alpha,beta")
		c.initialize("")
		for _, name := range c.toolNames() {
			if !strings.HasPrefix(name, "alpha__") {
				t.Errorf("alice's view of /mcp lists %q", name)
			}
		}
		res := c.callTool("b1", "beta__echo", `{"text":"from-alice"}`)
		if res.Error == nil || res.Error.Code != -32602 || res.Error.Message != "Unknown tool: beta__echo" {
			t.Errorf("alice's beta__echo on /mcp: %s, want -32602 \"Unknown tool: beta__echo\"", describe(res))
		}
		if got := beta.received(); len(got) != 0 {
			t.Errorf("beta ran %q for alice", got)
		}
		st, body = g.adminAs(t, aliceKey, http.MethodGet, "/keys", "")
		if st != http.StatusForbidden {
			t.Errorf("alice (not an admin) on GET /admin/v1/keys: HTTP %d %.200s, want 403", st, body)
		}
	})

	t.Run("no_mcp key on every route", func(t *testing.T) {
		for _, path := range []string{"/mcp", "/"} {
			st, _, body := g.client(t, path, noMCPKey).post(initJSON)
			refusedWith(t, "the no_mcp key's initialize on "+path, st, body, http.StatusOK, `API key "nomcp" grants no MCP servers on this route`)
		}
		for _, path := range []string{"/mcp/alpha", "/alpha/mcp", "/mcp/alpha,beta"} {
			st, _, body := g.client(t, path, noMCPKey).post(initJSON)
			unknownServer(t, "the no_mcp key on "+path, st, body, "alpha")
		}
		st, _, body := g.client(t, "/toolset/echoes/mcp", noMCPKey).post(initJSON)
		refusedWith(t, "the no_mcp key on /toolset/echoes/mcp", st, body, http.StatusForbidden, "API key is scoped to no MCP servers; toolset access is denied.")
		st, _, body = g.request(t, http.MethodGet, "/mcp/alpha/sse", keyHeader(noMCPKey), "")
		unknownServer(t, "the no_mcp key on /mcp/alpha/sse", st, body, "alpha")
		// Stateless, no initialize at all.
		st, _, body = g.client(t, "/mcp", noMCPKey).post(`{"jsonrpc":"2.0","id":"n1","method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"nomcp"}}}`)
		if !strings.Contains(body, `"error"`) {
			t.Errorf("the no_mcp key's stateless alpha__echo: HTTP %d %.300s, want an error", st, body)
		}
		if slices.Contains(alpha.received(), "echo nomcp") {
			t.Errorf("the upstream ran the no_mcp key's call")
		}
		// It is still an admin key.
		if st, body := g.adminAs(t, noMCPKey, http.MethodGet, "/keys", ""); st != http.StatusOK {
			t.Errorf("the no_mcp admin key on GET /admin/v1/keys: HTTP %d %.200s", st, body)
		}
	})

	t.Run("toolset scoping", func(t *testing.T) {
		c := g.client(t, "/toolset/echoes/mcp", toolsetKey)
		c.initialize("")
		if names := c.toolNames(); !slices.Equal(names, []string{"alpha__echo"}) && !slices.Equal(names, []string{"echo"}) {
			t.Errorf("the toolset key's view of its toolset: %q, want alpha's echo only", names)
		}
		for _, name := range []string{"alpha__ask", "ask", "beta__echo"} {
			res := c.callTool("ts-"+name, name, `{"message":"x","text":"x"}`)
			if res.Error == nil || res.Error.Code != -32602 {
				t.Errorf("the toolset key's %s: %s, want -32602 Unknown tool", name, describe(res))
			}
		}
		st, _, body := g.client(t, "/mcp", toolsetKey).post(initJSON)
		refusedWith(t, "the toolset key on /mcp", st, body, http.StatusOK, `API key "tsk" grants no MCP servers on this route`)
		for _, server := range []string{"alpha", "beta"} {
			st, _, body := g.client(t, "/mcp/"+server, toolsetKey).post(initJSON)
			unknownServer(t, "the toolset key on /mcp/"+server, st, body, server)
		}
		// alice may not use a toolset she was not given.
		st, _, body = g.client(t, "/toolset/echoes/mcp", aliceKey).post(initJSON)
		refusedWith(t, "alice on /toolset/echoes/mcp", st, body, http.StatusForbidden, "API key does not have access to toolset 'echoes'.")
		aliceWorks(t, "after-toolset")
	})
}

// foreignSession checks the refusal of another caller's session id: 403
// "mcp-session-id is bound to a different caller." (S4.2).
func foreignSession(t *testing.T, who string, st int, body string) {
	t.Helper()
	if st != http.StatusForbidden || !strings.Contains(body, "mcp-session-id is bound to a different caller.") {
		t.Errorf("%s: HTTP %d %.300s, want 403 \"mcp-session-id is bound to a different caller.\"", who, st, body)
	}
}

// TestSessionTheftHeld: bob holds alice's session id (it leaked); every
// use of it is refused and alice's session goes on.
func TestSessionTheftHeld(t *testing.T) {
	alpha := newUpstream(t, "alpha")
	g := startGateway(t, fmt.Sprintf(`auth:
  master_key: %q
  keys:
    - {alias: alice, key: %q, user: alice}
    - {alias: bob, key: %q, user: bob}
servers:
`, masterKey, aliceKey, bobKey)+alpha.server())
	alice := g.client(t, "/mcp/alpha", aliceKey)
	alice.initialize(clientCaps)
	stolen := alice.sid

	bob := g.client(t, "/mcp/alpha", bobKey)
	bob.sid = stolen
	st, _, body := bob.post(`{"jsonrpc":"2.0","id":"b1","method":"tools/call","params":{"name":"echo","arguments":{"text":"bob"}}}`)
	foreignSession(t, "bob's tools/call with alice's session id", st, body)
	st, _, body = bob.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a1"}}`)
	foreignSession(t, "bob's notification with alice's session id", st, body)

	// alice's GET stream: bob can neither open it nor resume it.
	h := bob.headers()
	h.Set("Accept", "text/event-stream")
	st, _, body = g.request(t, http.MethodGet, "/mcp/alpha", h, "")
	foreignSession(t, "bob's GET stream of alice's session", st, body)
	h.Set("Last-Event-ID", "0")
	st, _, body = g.request(t, http.MethodGet, "/mcp/alpha", h, "")
	foreignSession(t, "bob resuming alice's stream (Last-Event-ID)", st, body)

	// The same id on another route of the same gateway.
	bobMerged := g.client(t, "/mcp", bobKey)
	bobMerged.sid = stolen
	st, _, body = bobMerged.post(`{"jsonrpc":"2.0","id":"b2","method":"tools/list"}`)
	foreignSession(t, "bob's tools/list on /mcp with alice's session id", st, body)

	// Ending it.
	st, _, body = g.request(t, http.MethodDelete, "/mcp/alpha", bob.headers(), "")
	foreignSession(t, "bob's DELETE of alice's session", st, body)

	// The legacy transport: alice's legacy session id in bob's POST.
	legacy := openLegacyStream(t, g, "/mcp/alpha", keyHeader(aliceKey))
	bobLegacy := &legacyStream{g: g, endpoint: legacy.endpoint, hdr: keyHeader(bobKey)}
	st, body = bobLegacy.post(t, `{"jsonrpc":"2.0","id":"b3","method":"tools/call","params":{"name":"echo","arguments":{"text":"bob-legacy"}}}`)
	foreignSession(t, "bob's POST to alice's legacy session", st, body)

	if got := alpha.received(); len(got) != 0 {
		t.Errorf("the upstream ran %q for bob", got)
	}
	// alice's sessions work on.
	if res := alice.callTool("a1", "echo", `{"text":"alice"}`); isToolError(res) || toolText(t, res) != "alpha/echo: alice" {
		t.Errorf("alice's call after the theft attempts: %s", describe(res))
	}
	if res := legacy.callTool(t, "a2", "echo", `{"text":"alice-legacy"}`); isToolError(res) || toolText(t, res) != "alpha/echo: alice-legacy" {
		t.Errorf("alice's legacy call after the theft attempts: %s", describe(res))
	}
	if n := g.metric(t, `mcpgate_security_refusals_total{kind="foreign_session"}`); n < 5 {
		t.Errorf("mcpgate_security_refusals_total{kind=\"foreign_session\"} = %v after bob's theft attempts, want at least 5", n)
	}
}
