package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

// What a hostile upstream and a hostile caller choose, and how the CLI
// must show it.
const (
	hostileTool       = "x\x1b[2J\x1b]0;pwned\x07y"
	hostileToolShown  = `x\u001b[2J\u001b]0;pwned\u0007y`
	hostileDesc       = "copies \x1b]52;c;ZWNobyBwd25lZA==\x07 to your clipboard \u202eevil"
	hostileDescShown  = `copies \u001b]52;c;ZWNobyBwd25lZA==\u0007 to your clipboard \u202eevil`
	hostileClient     = "cli\u001b[2Jent"
	hostileClientShow = `cli\u001b[2Jent`
	hostileUser       = "bob\u009b2J\u202e"
	hostileUserShown  = `bob\u009b2J\u202e`
	hostileResult     = "line one\n\x1b[31mred\x1b[0m\rover"
	hostileResultShow = "line one\n\\u001b[31mred\\u001b[0m\\u000dover"
	hostileError      = "refused \x1b]0;owned\x07 by upstream"
)

// newHostileUpstream is a stateless MCP server that names a tool
// hostileTool with description hostileDesc, answers its call with
// hostileResult, and fails every initialize when fail is set, with
// hostileError.
func newHostileUpstream(t *testing.T, fail bool) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
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
		switch {
		case fail:
			answer["error"] = map[string]any{"code": -32603, "message": hostileError}
		case m.Method == "initialize":
			answer["result"] = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "evil\x1b[2J", "version": "1"}}
		case m.Method == "tools/list":
			answer["result"] = map[string]any{"tools": []any{map[string]any{"name": hostileTool, "description": hostileDesc,
				"inputSchema": map[string]any{"type": "object"}}}}
		case m.Method == "tools/call":
			answer["result"] = map[string]any{"content": []any{map[string]any{"type": "text", "text": hostileResult}}}
		default:
			answer["error"] = map[string]any{"code": -32601, "message": "Method not found"}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(s.Close)
	return s
}

// assertNoTerminalControls fails when out holds a byte or character a
// terminal acts on: ESC, BEL, CR, any other C0 but newline and tab, DEL,
// a C1 control, a bidi override or another invisible format character.
func assertNoTerminalControls(t testing.TB, what, out string) {
	t.Helper()
	for i, r := range out {
		if !termPrintable(r, true) {
			t.Errorf("%s prints %U at byte %d:\n%q", what, r, i, out)
			return
		}
	}
}

// Every command that prints what an upstream, a caller, a key's user or
// the audit log holds shows hostile characters as visible escapes, and
// --json keeps the exact values without raw controls.
func TestCLIRendersHostileData(t *testing.T) {
	clearAdminEnv(t)
	up, broken := newHostileUpstream(t, false), newHostileUpstream(t, true)
	const master = "master-key-0123456789"
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Auth: &config.CallerAuth{MasterKey: master},
		Servers: map[string]*config.Server{
			// Tool integrity would hold this tool (its name carries
			// terminal escapes: integrity's scanner quarantines it); this
			// test is about what the CLI prints once it is served.
			"evil": {Name: "evil", Transport: config.TransportHTTP, URL: up.URL + "/mcp", Timeout: 5 * time.Second,
				Integrity: &config.Integrity{Mode: config.IntegrityOff}},
			"broken": {Name: "broken", Transport: config.TransportHTTP, URL: broken.URL + "/mcp", Timeout: 5 * time.Second},
		}}
	stk, hs := gatewayAt(t, cfg, nil, "")
	defer stk.close(context.Background())
	defer hs.Close()
	t.Setenv("MCPGATE_URL", hs.URL)
	t.Setenv("MCPGATE_MASTER_KEY", master)

	// A key whose user came from somewhere else (a token claim, say).
	code, key, stderr := cli(t, "keys", "create", "--alias", "bob", "--user", hostileUser, "--servers", "evil")
	if code != 0 {
		t.Fatalf("keys create: exit %d: %s", code, stderr)
	}
	key = strings.TrimSpace(key)
	// The caller's session, named by the caller.
	initBody, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": hostileClient, "version": "1\x1b[0m"}}})
	st, h, body := post(t, hs.URL+"/mcp", key, string(initBody))
	if st != http.StatusOK || h.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize: %d %s", st, body)
	}
	callBody, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call",
		"params": map[string]any{"name": "evil__" + hostileTool, "arguments": map[string]any{}}})
	if st, _, body := post(t, hs.URL+"/mcp", key, string(callBody)); st != http.StatusOK || !strings.Contains(body, "line one") {
		t.Fatalf("tools/call: %d %s", st, body)
	}
	// Make the broken server's last error the upstream's message.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stk.gw.Upstreams().Session(ctx, "broken")
	// The audit row is written in the background.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, out, _ := cli(t, "audit", "--json")
		if strings.Contains(out, `"tool"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit row: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, tc := range []struct {
		args []string
		want []string // visible escapes the output must show
	}{
		{[]string{"tools", "list"}, []string{"evil__" + hostileToolShown, `copies \u001b]52;c;`}},
		{[]string{"sessions", "list"}, []string{hostileClientShow + `/1\u001b[0m`, hostileUserShown, "by client: " + hostileClientShow}},
		{[]string{"audit"}, []string{" " + hostileToolShown + " "}},
		{[]string{"keys", "list"}, []string{hostileUserShown}},
		{[]string{"usage", "--by", "user"}, []string{hostileUserShown}},
		{[]string{"servers", "status"}, []string{`refused \u001b]0;owned\u0007 by upstream`}},
		{[]string{"call", "evil__" + hostileTool, "--as", "bob"}, []string{hostileResultShow}},
		{[]string{"sessions", "terminate", "--user", hostileUser}, []string{"user=" + hostileUserShown, "client=" + hostileClientShow}},
	} {
		t.Run(strings.Join(tc.args[:min(2, len(tc.args))], " "), func(t *testing.T) {
			code, stdout, stderr := cli(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			assertNoTerminalControls(t, strings.Join(tc.args, " "), stdout+stderr)
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, stdout)
				}
			}
		})
	}

	// audit --follow prints as rows come: the same cells.
	fctx, fcancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer fcancel()
	_, stdout, stderr := cliContext(fctx, t, "audit", "--follow", "--interval", "200ms")
	assertNoTerminalControls(t, "audit --follow", stdout+stderr)
	if !strings.Contains(stdout, hostileToolShown) {
		t.Errorf("audit --follow:\n%s", stdout)
	}

	// --json: the exact values, written so that no terminal acts on them.
	code, stdout, stderr = cli(t, "tools", "list", "--json")
	if code != 0 {
		t.Fatalf("tools list --json: exit %d: %s", code, stderr)
	}
	assertNoTerminalControls(t, "tools list --json", stdout)
	var list struct {
		Tools []toolView `json:"tools"`
	}
	if err := json.Unmarshal([]byte(stdout), &list); err != nil || len(list.Tools) != 1 {
		t.Fatalf("tools list --json: %v\n%s", err, stdout)
	}
	if got := list.Tools[0]; got.Name != "evil__"+hostileTool || got.Description != hostileDesc {
		t.Errorf("--json changed the values: %q %q", got.Name, got.Description)
	}
	code, stdout, _ = cli(t, "audit", "--json")
	assertNoTerminalControls(t, "audit --json", stdout)
	if code != 0 || !strings.Contains(stdout, `\u001b[2J`) {
		t.Errorf("audit --json: exit %d\n%s", code, stdout)
	}

	// An error the gateway relays (here: a tool the key may not see,
	// named by the caller) is printed terminal-safe too.
	code, _, stderr = cli(t, "call", "nope\x1b[2J", "--as", "bob")
	assertNoTerminalControls(t, "call error", stderr)
	if code != 1 || !strings.Contains(stderr, `nope\u001b[2J`) {
		t.Errorf("call error: exit %d: %q", code, stderr)
	}
}

// doctor reaches the servers itself: a hostile upstream's error message
// is shown as escapes in the table, and kept exactly in --json.
func TestDoctorRendersHostileError(t *testing.T) {
	broken := newHostileUpstream(t, true)
	path := writeFile(t, t.TempDir(), "c.yaml", "servers:\n  broken:\n    transport: http\n    url: "+broken.URL+"/mcp\n")
	code, stdout, stderr := cli(t, "doctor", "--config", path, "--timeout", "5s")
	assertNoTerminalControls(t, "doctor", stdout+stderr)
	if code != 1 || !strings.Contains(stdout, `refused \u001b]0;owned\u0007 by upstream`) {
		t.Errorf("doctor: exit %d:\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, "doctor", "--config", path, "--timeout", "5s", "--json")
	assertNoTerminalControls(t, "doctor --json", stdout)
	var rep doctorReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 1 || len(rep.Servers) != 1 || !strings.Contains(rep.Servers[0].Detail, hostileError) {
		t.Errorf("doctor --json: exit %d, %v:\n%s", code, err, stdout)
	}
}

// connections list shows people as token claims name them (oidc:ISSUER|SUBJECT)
// and issuers as upstreams name them: as escapes.
func TestConnectionsRenderHostileNames(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, canned(`{"connections":[{"person":"oidc:https://idp|\u001b]0;x\u0007sub","server":"notes","kind":"oauth2_user",`+
		`"issuer":"https://as.example\u202e","scopes":["read\u009b"],"expires_at":"","last_used":""}]}`))
	code, stdout, stderr := cli(t, "connections", "list", "--url", f.URL)
	assertNoTerminalControls(t, "connections list", stdout+stderr)
	for _, w := range []string{`oidc:https://idp|\u001b]0;x\u0007sub`, `https://as.example\u202e`, `read\u009b`} {
		if code != 0 || !strings.Contains(stdout, w) {
			t.Errorf("exit %d: output lacks %q:\n%s", code, w, stdout)
		}
	}
}
