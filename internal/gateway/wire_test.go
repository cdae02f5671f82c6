package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/store"
)

// The exact bytes a raw upstream returns; the downstream must receive them
// unchanged except for the tool name the gateway prefixes.
const exoticTool = `{"name":"weird","title":"Weird","x-vendor":{"nested":[1,2,{"deep":true}]},"_meta":{"com.example/flag":"on","big":9007199254740993},"inputSchema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"pos":{"type":"integer","minimum":1}},"properties":{"n":{"$ref":"#/$defs/pos"},"mode":{"oneOf":[{"const":"a"},{"const":"b","description":"\u00e9\u2028"}]}},"additionalProperties":{"type":"string"},"required":["n"]},"annotations":{"readOnlyHint":true,"futureHint":7}}`

const exoticResult = `{"content":[{"type":"text","text":"ok","_meta":{"k":1}}],"structuredContent":{"id":9007199254740993,"f":1.50,"e":1e400},"isError":false,"unknownTop":{"a":[]},"_meta":{"trace":"x"}}`

// mcpUpstream is a streamable-HTTP MCP server written on raw bytes, so the
// test controls every byte of every reply: notifications get 202, and each
// request is answered by answer, which returns the JSON result, or writes
// the whole response itself and returns "".
func mcpUpstream(t testing.TB, answer func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		if result := answer(w, r, m); result != "" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

// rawUpstream serves tools (a JSON list body) and answers every call with
// callResult, counting calls.
func rawUpstream(t testing.TB, tools string, callResult string, calls *atomic.Int64) *httptest.Server {
	return mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "raw-1")
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"raw","version":"0"}}`
		case "tools/list":
			return `{"tools":[` + tools + `]}`
		case "tools/call":
			if calls != nil {
				calls.Add(1)
			}
			return callResult
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"nope"}}`, m.ID.Raw())
		return ""
	})
}

// rpc posts one raw message to the gateway and returns status, headers
// and the JSON-RPC message in the body (from JSON or the last SSE event).
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
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		r := jsonrpc.NewSSEReader(bytes.NewReader(b), 0)
		var last []byte
		for {
			ev, err := r.Next()
			if err != nil {
				break
			}
			last = ev.Data
		}
		b = last
	}
	return resp.StatusCode, resp.Header, b
}

func initSession(t testing.TB, url string) string {
	t.Helper()
	status, h, body := rpc(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if status != http.StatusOK {
		t.Fatalf("initialize: %d %s", status, body)
	}
	sid := h.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatal("initialize returned no Mcp-Session-Id")
	}
	rpc(t, url, map[string]string{"Mcp-Session-Id": sid}, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

// TestFidelity proves results and list items pass through byte-exact:
// unknown fields, _meta, integers beyond 2^53, exotic schema keywords.
func TestFidelity(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	raw := httpServer(up.URL + "/mcp")
	// Tasks off: otherwise a 2025-11-25 session is told each tool of
	// this server (which has no tasks) runs as a gateway task
	// (execution.taskSupport, tasks.go), the one member the gateway adds.
	raw.Tasks = &config.ServerTasks{Mode: config.TasksOff}
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"raw": raw}})
	for _, tc := range []struct {
		path, name string
	}{{"/mcp", "raw__weird"}, {"/mcp/raw", "weird"}} {
		t.Run(tc.path, func(t *testing.T) {
			url := gw.URL + tc.path
			sid := initSession(t, url)
			h := map[string]string{"Mcp-Session-Id": sid}
			_, _, body := rpc(t, url, h, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
			wantTool, _ := jsonrpc.Set([]byte(exoticTool), "name", jsonrpc.String(tc.name))
			want := `{"jsonrpc":"2.0","id":2,"result":{"tools":[` + string(wantTool) + `]}}`
			if string(body) != want {
				t.Errorf("tools/list not byte-exact:\n got %s\nwant %s", body, want)
			}
			_, _, body = rpc(t, url, h, `{"jsonrpc":"2.0","id":"c-9007199254740993","method":"tools/call","params":{"name":"`+tc.name+`","arguments":{"n":9007199254740993}}}`)
			want = `{"jsonrpc":"2.0","id":"c-9007199254740993","result":` + exoticResult + `}`
			if string(body) != want {
				t.Errorf("tools/call not byte-exact:\n got %s\nwant %s", body, want)
			}
			_, _, body = rpc(t, url, h, `{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`)
			if want := `{"jsonrpc":"2.0","id":9007199254740993,"result":{}}`; string(body) != want {
				t.Errorf("big integer id: got %s want %s", body, want)
			}
		})
	}
}

// TestBadInput checks the precise error for each kind of bad request.
func TestBadInput(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	cfg := &config.Config{MaxBodyBytes: 1 << 10, Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}}
	_, gw := startGateway(t, cfg)
	url := gw.URL + "/mcp"
	sid := initSession(t, url)
	withSession := map[string]string{"Mcp-Session-Id": sid}
	for _, tc := range []struct {
		name       string
		hdr        map[string]string
		body       string
		wantStatus int
		wantCode   int64
		wantMsg    string
	}{
		{"malformed JSON", withSession, `{"jsonrpc":"2.0","id":1,"method":`, 400, jsonrpc.CodeParseError, "Parse error"},
		{"not JSON-RPC", withSession, `{"id":1,"method":"ping"}`, 400, jsonrpc.CodeInvalidRequest, "jsonrpc"},
		{"scalar body", withSession, `42`, 400, jsonrpc.CodeInvalidRequest, "Invalid Request"},
		{"unknown method", withSession, `{"jsonrpc":"2.0","id":1,"method":"tools/explode"}`, 200, jsonrpc.CodeMethodNotFound, "tools/explode"},
		{"unknown tool", withSession, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"raw__nope"}}`, 200, jsonrpc.CodeInvalidParams, "Unknown tool: raw__nope"},
		{"tool of unknown server", withSession, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"secret__x"}}`, 200, jsonrpc.CodeInvalidParams, "Unknown tool: secret__x"},
		{"oversized body", withSession, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 2<<10) + `"}}`, 413, jsonrpc.CodeInvalidRequest, "exceeds 1024 bytes"},
		{"bad protocol version header", map[string]string{"Mcp-Protocol-Version": "1999-01-01"}, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, 400, jsonrpc.CodeInvalidRequest, "Unsupported MCP-Protocol-Version 1999-01-01"},
		{"foreign origin", map[string]string{"Origin": "http://evil.example.com"}, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, 403, jsonrpc.CodeInvalidRequest, "Invalid Origin header"},
		{"rebinding host", map[string]string{"Host": "evil.example.com"}, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, 403, jsonrpc.CodeInvalidRequest, "Invalid Host header"},
		{"initialize in batch", nil, `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}]`, 400, jsonrpc.CodeInvalidRequest, "initialize must be sent alone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.hdr {
				if k == "Host" {
					req.Host = v
				}
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status = %d, want %d (body %s)", resp.StatusCode, tc.wantStatus, body)
			}
			var m struct {
				Error *jsonrpc.Error `json:"error"`
			}
			if err := json.Unmarshal(body, &m); err != nil || m.Error == nil {
				t.Fatalf("body is not a JSON-RPC error: %s", body)
			}
			if m.Error.Code != tc.wantCode || !strings.Contains(m.Error.Message, tc.wantMsg) {
				t.Errorf("error = %d %q, want %d containing %q", m.Error.Code, m.Error.Message, tc.wantCode, tc.wantMsg)
			}
			if strings.Contains(string(body), "secret") && tc.name == "tool of unknown server" && strings.Contains(string(body), "server") {
				t.Errorf("error reveals server details: %s", body)
			}
		})
	}
	// The gateway still serves after all of that.
	if status, _, body := rpc(t, url, withSession, `{"jsonrpc":"2.0","id":5,"method":"ping"}`); status != 200 || string(body) != `{"jsonrpc":"2.0","id":5,"result":{}}` {
		t.Errorf("ping after bad input: %d %s", status, body)
	}
}

// TestSessionLifecycle covers sessionless requests, unknown session ids
// (404, S8.3), DELETE (idempotent, S8.1) and the GET stream.
func TestSessionLifecycle(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}})
	url := gw.URL + "/mcp"

	// Stateless: no session, not initialize.
	status, h, body := rpc(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if status != 200 || !strings.Contains(string(body), `"raw__weird"`) || h.Get("Mcp-Session-Id") != "" {
		t.Errorf("stateless tools/list: %d %q sid=%q", status, body, h.Get("Mcp-Session-Id"))
	}
	// Unknown session id: 404 so the client re-initializes (S8.3), not a
	// 400 loop (this was served as a new sessionless request before).
	status, _, body = rpc(t, url, map[string]string{"Mcp-Session-Id": "gone-after-restart"}, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if status != http.StatusNotFound || string(body) != bodyNeverIssued {
		t.Errorf("unknown session ping: %d %s", status, body)
	}

	sid := initSession(t, url)
	// GET stream opens for a live session; a second one conflicts.
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET stream: %v %v", err, resp)
	}
	resp2, err := http.DefaultClient.Do(req.Clone(req.Context()))
	if err != nil || resp2.StatusCode != http.StatusConflict {
		t.Errorf("second GET stream: %v, status %d, want 409", err, resp2.StatusCode)
	}
	resp2.Body.Close()

	for i := 0; i < 2; i++ {
		del, _ := http.NewRequest(http.MethodDelete, url, nil)
		del.Header.Set("Mcp-Session-Id", sid)
		dr, err := http.DefaultClient.Do(del)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(dr.Body)
		dr.Body.Close()
		if dr.StatusCode != 200 || string(b) != `{"message":"Session terminated successfully"}` {
			t.Errorf("DELETE #%d: %d %s", i+1, dr.StatusCode, b)
		}
	}
	// Ending the session ends its GET stream.
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, resp.Body); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("GET stream still open after DELETE")
	}
	resp.Body.Close()
}

// TestProxyRoute: /mcp/proxy serves tools only (S1.2).
func TestProxyRoute(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	url := gw.URL + "/mcp/proxy"
	_, _, body := rpc(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"p","version":"0"}}}`)
	var init struct {
		Result struct {
			Capabilities map[string]json.RawMessage `json:"capabilities"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &init); err != nil {
		t.Fatal(err)
	}
	if _, ok := init.Result.Capabilities["tools"]; !ok {
		t.Errorf("proxy route lacks tools: %s", body)
	}
	for _, c := range []string{"prompts", "resources", "completions"} {
		if _, ok := init.Result.Capabilities[c]; ok {
			t.Errorf("proxy route advertises %s: %s", c, body)
		}
	}
	_, _, body = rpc(t, url, nil, `{"jsonrpc":"2.0","id":2,"method":"prompts/list"}`)
	if want := `{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Operation unavailable on /mcp/proxy"}}`; string(body) != want {
		t.Errorf("prompts/list on proxy: %s", body)
	}
	_, _, body = rpc(t, url, nil, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__add","arguments":{"a":1,"b":1}}}`)
	if !strings.Contains(string(body), `"text":"2"`) {
		t.Errorf("tools/call on proxy: %s", body)
	}
}

// TestRepeatedNameKey: a tools/call whose params repeat "name" reaches the
// upstream with exactly the name the gateway checked.
func TestRepeatedNameKey(t *testing.T) {
	var seen atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil || !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		result := `{}`
		switch m.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"0"}}`
		case "tools/list":
			result = `{"tools":[{"name":"safe","inputSchema":{"type":"object"}},{"name":"danger","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			seen.Store(string(m.Params))
			result = `{"content":[]}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
	}))
	defer up.Close()
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL)}})
	for _, path := range []string{"/mcp/raw", "/mcp"} {
		name := "safe"
		if path == "/mcp" {
			name = "raw__safe"
		}
		// The gateway reads the last copy (as encoding/json and JSON.parse
		// do); the first copy must not survive to the upstream.
		rpc(t, gw.URL+path, nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"danger","name":"`+name+`","arguments":{}}}`)
		got, _ := seen.Load().(string)
		if strings.Count(got, `"name"`) != 1 || !strings.Contains(got, `"name":"safe"`) {
			t.Errorf("%s: upstream saw params %s, want exactly one name \"safe\"", path, got)
		}
	}
}

// TestBatch: a 2025-03-26 client may batch requests; replies come back as
// one JSON array in request order.
func TestBatch(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}})
	url := gw.URL + "/mcp"
	sid := initSession(t, url)
	status, _, body := rpc(t, url, map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-03-26"},
		`[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":"b","method":"nope/nope"}]`)
	want := `[{"jsonrpc":"2.0","id":"a","result":{}},{"jsonrpc":"2.0","id":"b","error":{"code":-32601,"message":"Method not found: nope/nope"}}]`
	if status != 200 || string(body) != want {
		t.Errorf("batch: %d %s\nwant %s", status, body, want)
	}
}

// TestOriginAndHostGates: configured origins and hosts pass, others do
// not (S2.1).
func TestOriginAndHostGates(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	_, gw := startGateway(t, &config.Config{
		AllowedOrigins: []string{"https://app.example.com"},
		AllowedHosts:   []string{"mcp.internal"},
		Servers:        map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")},
	})
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	for _, tc := range []struct {
		origin, host string
		want         int
	}{
		{"", "", 200},
		{"https://app.example.com", "", 200},
		{"http://localhost:6274", "", 200}, // a loopback page (the Inspector)
		{"https://evil.example.com", "", 403},
		{"null", "", 403},
		{"", "mcp.internal", 200},
		{"", "mcp.internal:4000", 200},
		{"", "attacker.example", 403},
	} {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/mcp", strings.NewReader(ping))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("origin %q host %q: status %d, want %d", tc.origin, tc.host, resp.StatusCode, tc.want)
		}
	}
}

// TestGetStreamErrors: the GET stream needs a live session and SSE.
func TestGetStreamErrors(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}})
	for _, tc := range []struct {
		sid, accept string
		want        int
	}{
		{"", "text/event-stream", 400},
		{"no-such-session", "text/event-stream", 404},
		{"x", "application/json", 406},
	} {
		req, _ := http.NewRequest(http.MethodGet, gw.URL+"/mcp", nil)
		req.Header.Set("Accept", tc.accept)
		if tc.sid != "" {
			req.Header.Set("Mcp-Session-Id", tc.sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET sid=%q accept=%q: %d, want %d", tc.sid, tc.accept, resp.StatusCode, tc.want)
		}
	}
}

// TestNoArgumentsInLogs: tool arguments never reach the log, even at debug
// level and even when the call fails.
func TestNoArgumentsInLogs(t *testing.T) {
	const secret = "sk-live-TOPSECRET-4242"
	up := rawUpstream(t, exoticTool, `{"content":[],"isError":true}`, nil)
	var logs syncBuffer
	_, gw := startGatewayWith(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Config: &config.Config{Servers: map[string]*config.Server{
			"raw":  httpServer(up.URL + "/mcp"),
			"gone": httpServer("http://127.0.0.1:1/mcp"),
		}}})
	args := `{"n":1,"token":"` + secret + `"}`
	for _, name := range []string{"raw__weird", "gone__x", "raw__missing"} {
		rpc(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+name+`","arguments":`+args+`}}`)
	}
	if logs.Len() == 0 {
		t.Fatal("nothing was logged at debug level; the check would prove nothing")
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("a tool argument reached the log:\n%s", logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
func (s *syncBuffer) Len() int       { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Len() }
func (s *syncBuffer) Reset()         { s.mu.Lock(); defer s.mu.Unlock(); s.b.Reset() }

// TestCORS: an allowed origin gets a preflight answer and CORS headers
// that expose the session id; a foreign origin gets neither.
func TestCORS(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	_, gw := startGateway(t, &config.Config{AllowedOrigins: []string{"https://app.example.com"},
		Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}})
	pre, _ := http.NewRequest(http.MethodOptions, gw.URL+"/mcp", nil)
	pre.Header.Set("Origin", "https://app.example.com")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	pre.Header.Set("Access-Control-Request-Headers", "content-type, mcp-session-id")
	resp, err := http.DefaultClient.Do(pre)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Mcp-Session-Id") {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	_, h, _ := rpc(t, gw.URL+"/mcp", map[string]string{"Origin": "https://app.example.com"},
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"web","version":"0"}}}`)
	if !strings.Contains(h.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id") || h.Get("Mcp-Session-Id") == "" {
		t.Errorf("initialize from an allowed origin: headers %v", h)
	}
	pre.Header.Set("Origin", "https://evil.example.com")
	resp, err = http.DefaultClient.Do(pre)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("foreign preflight: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestCORSPreflightWithKeys: a browser's preflight carries no
// credentials, so on a gateway with keys an allowed origin's preflight is
// answered before authentication (and does nothing); a foreign origin's
// is still 403, and the real request still needs its key.
func TestCORSPreflightWithKeys(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	keys := &memKeys{}
	secret := keys.add(t, store.Key{Alias: "web"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Config: &config.Config{
		AllowedOrigins: []string{"https://app.example.com"},
		Servers:        map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}}})
	preflight := func(origin string) *http.Response {
		t.Helper()
		pre, _ := http.NewRequest(http.MethodOptions, gw.URL+"/mcp", nil)
		pre.Header.Set("Origin", origin)
		pre.Header.Set("Access-Control-Request-Method", "POST")
		pre.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		resp, err := http.DefaultClient.Do(pre)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := preflight("https://app.example.com"); resp.StatusCode != http.StatusNoContent ||
		resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")), "authorization") {
		t.Errorf("an allowed origin's preflight without credentials: %d %v, want 204 with CORS", resp.StatusCode, resp.Header)
	}
	if resp := preflight("https://evil.example"); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("a foreign origin's preflight: %d %v, want 403 without CORS", resp.StatusCode, resp.Header)
	}
	if code, _, body := rpc(t, gw.URL+"/mcp", map[string]string{"Origin": "https://app.example.com"}, initBody); code != http.StatusUnauthorized {
		t.Errorf("the real request without a key: %d %s, want 401", code, body)
	}
	if code, h, body := rpc(t, gw.URL+"/mcp", map[string]string{"Origin": "https://app.example.com", callers.HeaderAPIKey: secret}, initBody); code != http.StatusOK || h.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("the real request with its key: %d %s", code, body)
	}
}

// TestHealthEndpoints: /healthz, /readyz (with per-upstream health) and
// /enabled.
func TestHealthEndpoints(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}})
	get := func(path string) (int, string) {
		resp, err := http.Get(gw.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != `{"status":"ok"}` {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get("/enabled"); code != 200 || body != `{"enabled":true}` {
		t.Errorf("/enabled: %d %s", code, body)
	}
	waitFor(t, "raw ready", func() bool {
		_, body := get("/readyz")
		return strings.Contains(body, `"raw":{"state":"ready"}`)
	})
	g.Shutdown()
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"ready":false`) {
		t.Errorf("/readyz while shutting down: %d %s", code, body)
	}
}

// TestInvalidToolNameWarned: a tool whose exposed name breaks the name
// rule is still listed, and the operator is told once.
func TestInvalidToolNameWarned(t *testing.T) {
	long := strings.Repeat("x", 126)
	up := rawUpstream(t, `{"name":"`+long+`","inputSchema":{"type":"object"}},{"name":"has space","inputSchema":{"type":"object"}}`, exoticResult, nil)
	var logs syncBuffer
	_, gw := startGatewayWith(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Config: &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}}})
	for i := 0; i < 2; i++ {
		_, _, body := rpc(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		if !strings.Contains(string(body), `"raw__has space"`) || !strings.Contains(string(body), `"raw__`+long+`"`) {
			t.Fatalf("tools missing from the list: %s", body)
		}
	}
	if n := strings.Count(logs.String(), "breaks the MCP name rule"); n != 2 {
		t.Errorf("%d warnings for 2 bad names listed twice, want 2:\n%s", n, logs.String())
	}
}
