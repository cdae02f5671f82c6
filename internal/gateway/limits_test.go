package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// batchOf is a JSON-RPC batch of n tools/call requests of raw__weird.
func batchOf(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"raw__weird","arguments":{"n":1}}}`, i+1)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// S23: a batch larger than limits.max_batch gets one -32600 naming the
// limit and makes no upstream call; a batch at the limit is served.
func TestBatchLimit(t *testing.T) {
	var calls atomic.Int64
	up := rawUpstream(t, exoticTool, exoticResult, &calls)
	cfg := func(l config.Limits) *config.Config {
		return &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}, Limits: l}
	}
	_, gw := startGateway(t, cfg(config.Limits{}))
	hdr := map[string]string{"MCP-Protocol-Version": "2025-03-26"}

	code, _, body := rpc(t, gw.URL+"/mcp", hdr, batchOf(51))
	const want = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: batch of 51 requests exceeds limits.max_batch (50)"}}`
	if code != http.StatusBadRequest || string(body) != want {
		t.Errorf("batch of 51: %d %s\nwant 400 %s", code, body, want)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("a refused batch made %d upstream calls", n)
	}
	code, _, body = rpc(t, gw.URL+"/mcp", hdr, batchOf(50))
	if code != http.StatusOK || strings.Count(string(body), `"result"`) != 50 {
		t.Errorf("batch of 50: %d %.200s", code, body)
	}
	if n := calls.Load(); n != 50 {
		t.Errorf("a batch of 50 made %d upstream calls", n)
	}

	// The configured limit, on the stdio front too.
	calls.Store(0)
	g2, gw2 := startGateway(t, cfg(config.Limits{MaxBatch: 2}))
	code, _, body = rpc(t, gw2.URL+"/mcp", hdr, batchOf(3))
	const want3 = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: batch of 3 requests exceeds limits.max_batch (2)"}}`
	if code != http.StatusBadRequest || string(body) != want3 {
		t.Errorf("batch of 3 over 2: %d %s", code, body)
	}
	var out bytes.Buffer
	if err := g2.ServeStdioAs(context.Background(), "", strings.NewReader(batchOf(3)+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != want3 {
		t.Errorf("stdio batch of 3 over 2: %s", got)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("refused batches made %d upstream calls", n)
	}
}

// Valid JSON nested deeper than the decoder allows is a -32700 that says
// so (it was "invalid JSON"), over HTTP and stdio.
func TestNestingTooDeep(t *testing.T) {
	g, gw := startGateway(t, &config.Config{})
	deep := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}}`
	const want = `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: JSON nested deeper than 10000 levels"}}`
	code, _, body := rpc(t, gw.URL+"/mcp", nil, deep)
	if code != http.StatusBadRequest || string(body) != want {
		t.Errorf("deep body: %d %s", code, body)
	}
	var out bytes.Buffer
	if err := g.ServeStdioAs(context.Background(), "", strings.NewReader(deep+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != want {
		t.Errorf("stdio deep line: %s", got)
	}
}

// openGet opens the GET stream of session sid (or the legacy SSE stream
// when sid is ""), returning the response with its body still open.
func openGet(t *testing.T, url, sid string) *http.Response {
	t.Helper()
	path := "/mcp"
	if sid == "" {
		path = "/sse"
	}
	req, _ := http.NewRequest(http.MethodGet, url+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Test-Owner", "alice")
	if sid != "" {
		req.Header.Set(mcpwire.HeaderSessionID, sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// S23: limits.max_streams bounds the open long-lived streams of the
// process (GET, legacy SSE and subscriptions/listen streams): one more
// gets 503 naming the limit; a stream that ends makes room.
func TestMaxStreams(t *testing.T) {
	g, url := ownerGateway(t, Options{Config: &config.Config{
		Servers: map[string]*config.Server{"f": httpServer(faultyUpstream(t).URL + "/mcp")},
		Limits:  config.Limits{MaxStreams: 2},
	}})
	a, b := initOwned(t, url, "alice"), initOwned(t, url, "alice")
	first := openGet(t, url, a)
	legacy := openGet(t, url, "")
	if first.StatusCode != 200 || legacy.StatusCode != 200 {
		t.Fatalf("streams within the limit: %d %d", first.StatusCode, legacy.StatusCode)
	}
	const over = `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Service Unavailable: too many open streams (limits.max_streams 2); try again later"}}`
	for _, sid := range []string{b, ""} {
		resp := openGet(t, url, sid)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || string(body) != over {
			t.Errorf("stream over the limit (session %q): %d %s", sid, resp.StatusCode, body)
		}
	}
	code, body := statelessPost(t, url+"/mcp", map[string]string{"X-Test-Owner": "alice", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"},
		`{"jsonrpc":"2.0","id":"l1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},`+statelessMetaJSON+`}}`)
	if want := strings.Replace(over, `"id":null`, `"id":"l1"`, 1); code != http.StatusServiceUnavailable || body != want {
		t.Errorf("listen over the limit: %d %s", code, body)
	}
	// Calls are not streams: they are served at the limit.
	if code, body := send(t, http.MethodPost, url+"/mcp", "alice", b, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); code != 200 || !strings.Contains(body, "f__ok") {
		t.Errorf("a call at the stream limit: %d %.100s", code, body)
	}
	first.Body.Close()
	waitFor(t, "the first stream to close", func() bool { return g.OpenStreams() == 1 })
	if resp := openGet(t, url, b); resp.StatusCode != 200 {
		t.Errorf("a stream after one closed: %d", resp.StatusCode)
	}
}

// S23: limits.max_upstream_message reaches the upstream client: a reply
// over it fails the call instead of being read whole.
func TestMaxUpstreamMessage(t *testing.T) {
	big := `{"content":[{"type":"text","text":"` + strings.Repeat("x", 4096) + `"}]}`
	up := rawUpstream(t, exoticTool, big, nil)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}, Limits: config.Limits{MaxUpstreamMessage: 1024}})
	code, _, body := rpc(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"raw__weird","arguments":{"n":1}}}`)
	// The wording is the upstream client's; the fault class and the
	// figure are the contract.
	if !strings.Contains(string(body), `"fault":"invalid_response"`) || !strings.Contains(string(body), "1 KiB limit (limits.max_upstream_message)") {
		t.Errorf("a 4KiB reply over a 1KiB limit: %d %s", code, body)
	}
}

// S23: limits.sse_write_timeout bounds each SSE event's write. A client
// that opens its GET stream and never reads while the gateway pushes
// notifications loses the stream within the budget (it held the stream
// for the 30s write timeout before); its session survives and a new GET
// stream opens.
func TestSlowStreamReader(t *testing.T) {
	g, url := ownerGateway(t, Options{Config: &config.Config{
		Servers: map[string]*config.Server{"f": httpServer(faultyUpstream(t).URL + "/mcp")},
		Limits:  config.Limits{SSEWriteTimeout: 300 * time.Millisecond},
	}})
	sid := initOwned(t, url, "alice")
	sess := g.lookupSession(sid)
	streaming := func() bool {
		return sess.Streaming()
	}

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /mcp HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nX-Test-Owner: alice\r\n%s: %s\r\n\r\n",
		strings.TrimPrefix(url, "http://"), mcpwire.HeaderSessionID, sid)
	waitFor(t, "the GET stream", streaming)
	// Held off net/http (held.go): its writer has the deadline.
	waitFor(t, "the GET stream to be held", func() bool { return g.held.len() == 1 })

	// Push 64KiB notifications until the stream is gone; the client
	// reads nothing.
	params := []byte(`{"level":"info","data":"` + strings.Repeat("x", 64<<10) + `"}`)
	start := time.Now()
	pushed := 0
	for streaming() {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the stream of a client that reads nothing is still open after %v (%d events pushed)", time.Since(start), pushed)
		}
		if sess.Notify(jsonrpc.NewNotification("notifications/message", params)) {
			pushed++
		} else {
			time.Sleep(time.Millisecond) // the backlog is full
		}
	}
	d := time.Since(start)
	t.Logf("stream of a client that reads nothing closed after %v (%d events of 64KiB accepted)", d, pushed)
	if d > 3*time.Second {
		t.Errorf("the stream closed after %v, want within the 300ms write budget (plus filling the socket buffers)", d)
	}
	if g.lookupSession(sid) == nil {
		t.Fatal("the session ended with its stream")
	}
	waitFor(t, "the stream to be counted closed", func() bool { return g.OpenStreams() == 0 })
	if resp := openGet(t, url, sid); resp.StatusCode != 200 {
		t.Errorf("a new GET stream on the session: %d", resp.StatusCode)
	}
	if code, body := send(t, http.MethodPost, url+"/mcp", "alice", sid, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); code != 200 || !strings.Contains(body, "f__ok") {
		t.Errorf("a call on the session after its stream was dropped: %d %.100s", code, body)
	}
}

// A stream's queue is bounded in bytes as well as in events: large
// messages behind a client that does not read are dropped at 4MiB, and
// one message is always let through whatever its size.
func TestStreamBacklogBytes(t *testing.T) {
	st := newStreamSender(false, time.Second)
	params := []byte(`{"level":"info","data":"` + strings.Repeat("x", 64<<10) + `"}`)
	accepted := 0
	for st.send(jsonrpc.NewNotification("notifications/message", params)) == nil {
		accepted++
	}
	if q := st.backlog(); q > streamBacklogBytes {
		t.Errorf("%d events of 64KiB queued, %d bytes; want at most %d bytes", accepted, q, streamBacklogBytes)
	}
	if accepted < 60 || accepted > 64 {
		t.Errorf("%d events of 64KiB queued under a 4MiB bound", accepted)
	}
	huge := jsonrpc.NewNotification("notifications/message", []byte(`{"data":"`+strings.Repeat("y", 5<<20)+`"}`))
	if err := newStreamSender(false, time.Second).send(huge); err != nil {
		t.Errorf("one message over the bound on an empty queue: %v", err)
	}
	if got := len(st.takeAll()); got != accepted {
		t.Errorf("%d events taken off the queue, %d accepted", got, accepted)
	}
	if q := st.backlog(); q != 0 {
		t.Errorf("%d bytes counted after the queue was drained", q)
	}
}
