package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "access" {
			out = append(out, m)
		}
	}
	return out
}

// accessLogGateway is a gateway with keys whose access log (JSON) goes to
// buf, and one server, a, with the tool echo.
func accessLogGateway(t *testing.T, keys *memKeys) (*Gateway, *httptest.Server, *syncBuf) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "e", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("hi"), nil
	})
	buf := &syncBuf{}
	g, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), AccessLog: slog.New(slog.NewJSONHandler(buf, nil)),
		Config: &config.Config{Servers: map[string]*config.Server{"a": httpServer(serveSDK(t, srv).URL)}}})
	return g, gw, buf
}

// One access line per request, with the caller, the session's short hash
// and the MCP method and tool; never the key, the query string or an
// argument; health probes are not logged.
func TestAccessLog(t *testing.T) {
	keys := &memKeys{}
	secret := keys.add(t, store.Key{Alias: "ada-laptop", User: "ada"})
	_, gw, buf := accessLogGateway(t, keys)
	code, hdr, body := rpc(t, gw.URL+"/mcp?probe=x-secret-query", withKey(secret), initBody)
	if code != 200 {
		t.Fatalf("initialize: %d %s", code, body)
	}
	sid := hdr.Get(mcpwire.HeaderSessionID)
	h := withKey(secret)
	h[mcpwire.HeaderSessionID] = sid
	if code, _, body := rpc(t, gw.URL+"/mcp", h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__echo","arguments":{"password":"hunter2-argument"}}}`); code != 200 {
		t.Fatalf("call: %d %s", code, body)
	}
	if resp, err := http.Get(gw.URL + "/healthz"); err == nil {
		resp.Body.Close()
	}
	if code, _, _ := rpc(t, gw.URL+"/mcp", map[string]string{"X-Mcpgate-Api-Key": "mcpg_wrong-key-0123456789"}, initBody); code != 401 {
		t.Fatalf("a wrong key: %d", code)
	}
	lines := buf.lines()
	if len(lines) != 3 {
		t.Fatalf("%d access lines, want 3 (no /healthz):\n%s", len(lines), buf.b.String())
	}
	call := lines[1]
	for k, want := range map[string]any{"method": "POST", "route": "mcp", "status": float64(200), "alias": "ada-laptop", "user": "ada", "mcp_method": "tools/call", "tool": "a__echo"} {
		if call[k] != want {
			t.Errorf("call line %s = %v, want %v (%v)", k, call[k], want, call)
		}
	}
	if s, _ := call["session"].(string); len(s) != idPrefixLen || strings.Contains(sid, s) {
		t.Errorf("session %q: want a short hash, not a piece of the id", s)
	}
	if b, _ := call["bytes"].(float64); b <= 0 {
		t.Errorf("bytes %v", call["bytes"])
	}
	if lines[0]["mcp_method"] != "initialize" || lines[2]["status"] != float64(401) || lines[2]["alias"] != nil {
		t.Errorf("initialize line %v; refused line %v", lines[0], lines[2])
	}
	for _, leak := range []string{secret, "hunter2-argument", "x-secret-query", "mcpg_wrong-key", sid} {
		if strings.Contains(buf.b.String(), leak) {
			t.Errorf("the access log holds %q", leak)
		}
	}
}

// Through the listener mcpgate serve runs (h1server), the access line's
// entry rides the request's own context (no copy of the request): the
// line still names the caller, the session and the MCP method and tool,
// and a second request on the same connection has a line of its own.
func TestAccessLogThroughListener(t *testing.T) {
	keys := &memKeys{}
	secret := keys.add(t, store.Key{Alias: "ada-laptop", User: "ada"})
	g, _, buf := accessLogGateway(t, keys)
	url := "http://" + serveListener(t, g) + "/mcp"
	code, hdr, body := rpc(t, url, withKey(secret), initBody)
	if code != 200 {
		t.Fatalf("initialize: %d %s", code, body)
	}
	h := withKey(secret)
	h[mcpwire.HeaderSessionID] = hdr.Get(mcpwire.HeaderSessionID)
	for _, tool := range []string{"a__echo", "a__nope"} {
		if code, _, body := rpc(t, url, h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"`+tool+`","arguments":{}}}`); code != 200 {
			t.Fatalf("call %s: %d %s", tool, code, body)
		}
	}
	lines := buf.lines()
	if len(lines) != 3 {
		t.Fatalf("%d access lines, want 3:\n%s", len(lines), buf.b.String())
	}
	for i, tool := range []string{"a__echo", "a__nope"} {
		call := lines[i+1]
		for k, want := range map[string]any{"status": float64(200), "alias": "ada-laptop", "user": "ada", "mcp_method": "tools/call", "tool": tool} {
			if call[k] != want {
				t.Errorf("call line %d %s = %v, want %v (%v)", i, k, call[k], want, call)
			}
		}
		if s, _ := call["session"].(string); len(s) != idPrefixLen {
			t.Errorf("call line %d: session %q", i, s)
		}
	}
}

// A refused request's access line says why (unknown, disabled, expired
// key, no key, an address not allowed), and never names the key or its
// alias.
func TestAccessLogRefusalReason(t *testing.T) {
	keys := &memKeys{}
	disabled := keys.add(t, store.Key{Alias: "alias-disabled", Disabled: true})
	expired := keys.add(t, store.Key{Alias: "alias-expired", ExpiresAt: time.Now().Add(-time.Hour)})
	elsewhere := keys.add(t, store.Key{Alias: "alias-elsewhere", AllowedCIDRs: []string{"10.0.0.0/8"}})
	unknown, _ := callers.NewSecret()
	buf := &syncBuf{}
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), AccessLog: slog.New(slog.NewJSONHandler(buf, nil)),
		Config: &config.Config{Servers: map[string]*config.Server{}}})
	cases := []struct {
		key    string
		status int
		reason string
	}{
		{"", 401, callers.RefusedNoKey},
		{unknown, 401, callers.RefusedUnknown},
		{disabled, 401, callers.RefusedDisabled},
		{expired, 401, callers.RefusedExpired},
		{elsewhere, 403, callers.RefusedAddress},
	}
	for _, c := range cases {
		h := map[string]string{}
		if c.key != "" {
			h = withKey(c.key)
		}
		if code, _, body := rpc(t, gw.URL+"/mcp", h, initBody); code != c.status {
			t.Fatalf("%s: status %d %s, want %d", c.reason, code, body, c.status)
		}
	}
	lines := buf.lines()
	if len(lines) != len(cases) {
		t.Fatalf("%d access lines, want %d:\n%s", len(lines), len(cases), buf.b.String())
	}
	for i, c := range cases {
		if lines[i]["reason"] != c.reason || lines[i]["status"] != float64(c.status) {
			t.Errorf("line %d: status %v reason %v, want %d %q", i, lines[i]["status"], lines[i]["reason"], c.status, c.reason)
		}
	}
	for _, leak := range []string{"alias-", unknown, disabled, expired, elsewhere} {
		if strings.Contains(buf.b.String(), leak) {
			t.Errorf("the access log holds %q", leak)
		}
	}
}

// What one access line costs a request: the wrapper, the notes and the
// line, to a discarding JSON handler (a file or stderr adds its write).
func BenchmarkAccessLog(b *testing.B) {
	g := &Gateway{access: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		aw, ar, done := g.startAccess(w, r)
		noteCaller(ar.Context(), "ada-laptop", "ada")
		noteMCP(ar.Context(), "tools/call", "a__echo")
		_, _ = aw.Write([]byte("{}"))
		done()
	}
}

// An access line is logged with a context that marks it deferrable (the
// process's log may batch it, cmd/mcpgate logbatch.go); nothing else the
// gateway logs is.
func TestAccessLineDeferrable(t *testing.T) {
	var deferred []bool
	g := &Gateway{access: slog.New(ctxHandler{f: func(ctx context.Context) { deferred = append(deferred, DeferredLine(ctx)) }})}
	r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", nil)
	_, _, done := g.startAccess(httptest.NewRecorder(), r)
	done()
	if len(deferred) != 1 || !deferred[0] {
		t.Fatalf("access line deferrable: %v", deferred)
	}
	if DeferredLine(context.Background()) || DeferredLine(r.Context()) {
		t.Fatal("a plain context is deferrable")
	}
}

type ctxHandler struct{ f func(context.Context) }

func (h ctxHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h ctxHandler) Handle(ctx context.Context, _ slog.Record) error {
	h.f(ctx)
	return nil
}
func (h ctxHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h ctxHandler) WithGroup(string) slog.Handler      { return h }
