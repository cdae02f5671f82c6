package gateway

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// heldClient is the client end of a GET stream over a bare connection:
// it reads the response's head and then its chunks, as they come.
type heldClient struct {
	conn net.Conn
	r    *bufio.Reader
	head string
}

// openHeld opens session sid's GET stream on a connection of its own.
func openHeld(t *testing.T, url, sid string) *heldClient {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /mcp HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nX-Test-Owner: alice\r\n%s: %s\r\n\r\n",
		addr, mcpwire.HeaderSessionID, sid)
	c := &heldClient{conn: conn, r: bufio.NewReader(conn)}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("the GET stream's head: %v %q", err, c.head)
		}
		if line == "\r\n" {
			break
		}
		c.head += line
	}
	if !strings.HasPrefix(c.head, "HTTP/1.1 200") {
		t.Fatalf("GET stream: %q", c.head)
	}
	return c
}

// chunk reads the body's next chunk ("" for the terminator).
func (c *heldClient) chunk(t *testing.T) string {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("a chunk's size: %v", err)
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(line, "\r\n"), 16, 64)
	if err != nil {
		t.Fatalf("a chunk's size line %q: %v", line, err)
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, b); err != nil {
		t.Fatalf("a chunk of %d bytes: %v", n, err)
	}
	if string(b[n:]) != "\r\n" {
		t.Fatalf("a chunk not ended by CRLF: %q", b)
	}
	return string(b[:n])
}

// chunkWithin is chunk, or false when no chunk begins within d (the
// client is done with the connection after that).
func (c *heldClient) chunkWithin(d time.Duration) (string, bool) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", false
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(line, "\r\n"), 16, 64)
	if err != nil || n == 0 {
		return "", false
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return "", false
	}
	return string(b[:n]), true
}

// A GET stream over HTTP/1.1 is held off net/http: its response says
// Connection: close and is chunked as before, events arrive as chunks,
// and a client that closes its connection is noticed at once (its
// session's one stream slot is freed, the stream no longer counted). Its
// one access line is written when it ends, with its status, its bytes
// and how long it lasted.
func TestHeldStreamClientGone(t *testing.T) {
	buf := &syncBuf{}
	g, url := ownerGateway(t, Options{AccessLog: slog.New(slog.NewJSONHandler(buf, nil))})
	sid := initOwned(t, url, "alice")
	sess := g.lookupSession(sid)
	c := openHeld(t, url, sid)
	for _, h := range []string{"Connection: close\r\n", "Transfer-Encoding: chunked\r\n", "Content-Type: text/event-stream\r\n"} {
		if !strings.Contains(c.head, h) {
			t.Errorf("the held stream's head lacks %q:\n%s", h, c.head)
		}
	}
	waitFor(t, "the stream to be held", func() bool { return g.held.len() == 1 })
	before := len(buf.lines())

	if !sess.Notify(jsonrpc.NewNotification("notifications/tools/list_changed", nil)) {
		t.Fatal("the held stream refused a notification")
	}
	ev := c.chunk(t)
	if !strings.HasPrefix(ev, "data: ") || !strings.HasSuffix(ev, "\n\n") || !strings.Contains(ev, `"notifications/tools/list_changed"`) {
		t.Errorf("the event: %q", ev)
	}
	// The stream may also carry the list_changed of the catalog filling
	// as the upstream connects, before or after this one: every byte
	// sent is counted, so what was sent is what was read, once nothing
	// more comes.
	sent := len(ev)
	for {
		more, ok := c.chunkWithin(300 * time.Millisecond)
		if !ok {
			break
		}
		sent += len(more)
	}
	// Still one stream per session while it is held.
	if resp := openGet(t, url, sid); resp.StatusCode != http.StatusConflict {
		t.Errorf("a second GET stream beside the held one: %d", resp.StatusCode)
	}

	time.Sleep(50 * time.Millisecond)
	c.conn.Close()
	waitFor(t, "the closed stream to be noticed", func() bool {
		return !sess.Streaming() && g.OpenStreams() == 0 && g.held.len() == 0
	})
	waitFor(t, "the stream's access line", func() bool { return len(buf.lines()) > before })
	var line map[string]any
	for _, l := range buf.lines() {
		if l["method"] == "GET" {
			line = l
		}
	}
	if line == nil || line["status"] != float64(200) || line["bytes"] != float64(sent) || line["session"] == nil {
		t.Errorf("the held stream's access line: %v (%d bytes of events read)", line, sent)
	}
	if ms, _ := strconv.ParseFloat(fmt.Sprint(line["ms"]), 64); ms < 50 {
		t.Errorf("the access line says the stream lasted %v ms, want its whole life (at least 50)", line["ms"])
	}
	// The slot is free: a new stream opens.
	c2 := openHeld(t, url, sid)
	waitFor(t, "the new stream to be held", func() bool { return g.held.len() == 1 })
	c2.conn.Close()
}

// The gateway's Shutdown ends held streams at once (net/http's own
// Shutdown does not see hijacked connections): the client reads the
// body's end, then the connection closes; nothing is left running after
// Close.
func TestHeldStreamShutdown(t *testing.T) {
	g, url := ownerGateway(t, Options{})
	var cs []*heldClient
	for range 3 {
		cs = append(cs, openHeld(t, url, initOwned(t, url, "alice")))
	}
	waitFor(t, "the streams to be held", func() bool { return g.held.len() == 3 })
	late := initOwned(t, url, "alice")
	start := time.Now()
	g.Shutdown()
	for _, c := range cs {
		// Notifications queued before (list_changed as the catalog
		// fills) may come first; then the end.
		got := "-"
		for i := 0; i < 20 && got != ""; i++ {
			if got = c.chunk(t); got != "" && !strings.HasPrefix(got, "data: ") {
				t.Errorf("after Shutdown the stream sent %q, want events or its end", got)
			}
		}
		if got != "" {
			t.Errorf("after Shutdown the stream did not end")
		}
		if _, err := c.r.ReadByte(); err != io.EOF {
			t.Errorf("after the stream's end the connection is still open: %v", err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("held streams ended %v after Shutdown", d)
	}
	waitFor(t, "the streams released", func() bool { return g.held.len() == 0 && g.OpenStreams() == 0 })
	// Nothing is held after Shutdown: a stream that opens now is served
	// the usual way, and ends at once.
	c := openHeld(t, url, late)
	if got := c.chunk(t); got != "" || g.held.len() != 0 {
		t.Errorf("a stream opened after Shutdown sent %q (%d held)", got, g.held.len())
	}
}

// A client that keeps sending on its held stream's connection (it has
// nothing to send there) loses the stream; what it sent is never served
// as a request.
func TestHeldStreamJunk(t *testing.T) {
	g, url := ownerGateway(t, Options{})
	sid := initOwned(t, url, "alice")
	c := openHeld(t, url, sid)
	waitFor(t, "the stream to be held", func() bool { return g.held.len() == 1 })
	pipelined := fmt.Sprintf("DELETE /mcp HTTP/1.1\r\nHost: x\r\nX-Test-Owner: alice\r\n%s: %s\r\n\r\n", mcpwire.HeaderSessionID, sid)
	if _, err := io.WriteString(c.conn, pipelined); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if g.lookupSession(sid) == nil || g.held.len() != 1 {
		t.Fatal("a request sent on a held stream's connection was served, or ended the stream")
	}
	junk := strings.Repeat("x", 8<<10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 16 {
			if _, err := io.WriteString(c.conn, junk); err != nil {
				return
			}
		}
	}()
	waitFor(t, "the stream of a client sending junk to end", func() bool { return g.held.len() == 0 && g.OpenStreams() == 0 })
	<-done
	if g.lookupSession(sid) == nil {
		t.Error("the session ended with its stream")
	}
}

// A keep-alive comment goes out as a chunk of its own, written by a
// goroutine that ends once it is written.
func TestHeldStreamKeepAlive(t *testing.T) {
	g, url := ownerGateway(t, Options{})
	c := openHeld(t, url, initOwned(t, url, "alice"))
	waitFor(t, "the stream to be held", func() bool { return g.held.len() == 1 })
	g.held.mu.Lock()
	var h *heldStream
	for x := range g.held.m {
		h = x
	}
	g.held.mu.Unlock()
	h.keepAliveDue()
	if got := c.chunk(t); got != keepAliveComment {
		t.Errorf("keep-alive chunk %q", got)
	}
	waitFor(t, "the writer to end", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return !h.writing
	})
}

// HTTP/2 has no connection to hijack: its GET streams are served by
// net/http as before, and work.
func TestHTTP2StreamNotHeld(t *testing.T) {
	g, _ := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{"f": httpServer(faultyUpstream(t).URL + "/mcp")}}})
	ts := httptest.NewUnstartedServer(g)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	hc := ts.Client()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/mcp", strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sid := resp.Header.Get(mcpwire.HeaderSessionID)
	if resp.ProtoMajor != 2 || sid == "" {
		t.Fatalf("initialize over HTTP/2: %s %d session %q", resp.Proto, resp.StatusCode, sid)
	}
	req, _ = http.NewRequest(http.MethodGet, ts.URL+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(mcpwire.HeaderSessionID, sid)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || resp.Header.Get("Connection") != "" {
		t.Fatalf("GET stream over HTTP/2: %s %d %v", resp.Proto, resp.StatusCode, resp.Header)
	}
	sess := g.lookupSession(sid)
	waitFor(t, "the stream", sess.Streaming)
	if n := g.held.len(); n != 0 {
		t.Errorf("%d streams held over HTTP/2", n)
	}
	sess.Notify(jsonrpc.NewNotification("notifications/tools/list_changed", nil))
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the HTTP/2 stream: %v", err)
		}
		if strings.Contains(line, "notifications/tools/list_changed") {
			break
		}
	}
	resp.Body.Close()
	waitFor(t, "the HTTP/2 stream to close", func() bool { return g.OpenStreams() == 0 })
}

// Over TLS a held stream's connection has no socket of its own to watch
// (it is a *tls.Conn): a goroutine reading it notices its client going
// away instead, as promptly.
func TestHeldStreamOverTLS(t *testing.T) {
	g, _ := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{"f": httpServer(faultyUpstream(t).URL + "/mcp")}}})
	ts := httptest.NewTLSServer(g)
	defer ts.Close()
	hc := ts.Client()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/mcp", strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sid := resp.Header.Get(mcpwire.HeaderSessionID)
	req, _ = http.NewRequest(http.MethodGet, ts.URL+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(mcpwire.HeaderSessionID, sid)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.ProtoMajor != 1 {
		t.Fatalf("GET stream over TLS: %s %d", resp.Proto, resp.StatusCode)
	}
	waitFor(t, "the stream to be held", func() bool { return g.held.len() == 1 })
	sess := g.lookupSession(sid)
	sess.Notify(jsonrpc.NewNotification("notifications/tools/list_changed", nil))
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the held TLS stream: %v", err)
		}
		if strings.Contains(line, "notifications/tools/list_changed") {
			break
		}
	}
	resp.Body.Close()
	hc.Transport.(*http.Transport).CloseIdleConnections()
	waitFor(t, "the closed TLS stream to be noticed", func() bool {
		return !sess.Streaming() && g.OpenStreams() == 0 && g.held.len() == 0
	})
}

// On Linux a held stream costs no goroutine of its own while idle: one
// goroutine of the gateway watches every held connection.
func TestHeldStreamsNoGoroutines(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a goroutine per held stream watches its client here")
	}
	g, url := ownerGateway(t, Options{})
	const n = 50
	sids := make([]string, n)
	for i := range sids {
		sids[i] = initOwned(t, url, "alice")
	}
	openHeld(t, url, initOwned(t, url, "alice")) // the watcher starts
	waitFor(t, "the first stream to be held", func() bool { return g.held.len() == 1 })
	before := runtime.NumGoroutine()
	var cs []*heldClient
	for _, sid := range sids {
		cs = append(cs, openHeld(t, url, sid))
	}
	waitFor(t, "the streams to be held", func() bool { return g.held.len() == n+1 })
	time.Sleep(100 * time.Millisecond) // net/http's goroutines end
	if d := runtime.NumGoroutine() - before; d > n/10 {
		t.Errorf("%d held streams added %d goroutines", n, d)
	}
	for _, c := range cs {
		c.conn.Close()
	}
	waitFor(t, "the closed streams to be noticed", func() bool { return g.held.len() == 1 && g.OpenStreams() == 1 })
}

// A legacy SSE stream (2024-11-05) is held too: its endpoint event and
// the replies to its POSTs arrive as chunks, and its session, which
// lives as long as the stream, ends as soon as the client closes it.
func TestHeldLegacyStream(t *testing.T) {
	g, url := ownerGateway(t, Options{})
	addr := strings.TrimPrefix(url, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /sse HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nX-Test-Owner: alice\r\n\r\n", addr)
	c := &heldClient{conn: conn, r: bufio.NewReader(conn)}
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("the legacy stream's head: %v %q", err, c.head)
		}
		if line == "\r\n" {
			break
		}
		c.head += line
	}
	if !strings.HasPrefix(c.head, "HTTP/1.1 200") || !strings.Contains(c.head, "Connection: close\r\n") {
		t.Fatalf("legacy stream: %q", c.head)
	}
	ev := c.chunk(t)
	_, endpoint, ok := strings.Cut(strings.TrimSuffix(ev, "\n\n"), "data: ")
	if !strings.HasPrefix(ev, "event: endpoint\n") || !ok {
		t.Fatalf("the endpoint event: %q", ev)
	}
	waitFor(t, "the legacy stream to be held", func() bool { return g.held.len() == 1 })
	sid := endpoint[strings.Index(endpoint, "session_id=")+len("session_id="):]
	if g.lookupSession(sid) == nil {
		t.Fatalf("no session %q", sid)
	}
	if code, body := send(t, http.MethodPost, url+endpoint, "alice", "", `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`); code != http.StatusAccepted {
		t.Fatalf("a legacy POST: %d %s", code, body)
	}
	// Notifications (list_changed as the catalog fills) may come first.
	got := ""
	for i := 0; i < 20 && !strings.Contains(got, `"id":7`); i++ {
		got += c.chunk(t)
	}
	if !strings.HasPrefix(got, "event: message\n") || !strings.Contains(got, `"id":7`) || !strings.Contains(got, "f__ok") {
		t.Errorf("the reply on the held legacy stream: %.300q", got)
	}
	conn.Close()
	waitFor(t, "the legacy session to end with its stream", func() bool {
		return g.lookupSession(sid) == nil && g.held.len() == 0 && g.OpenStreams() == 0
	})
}

// Shutdown does not wait for a write to a client that does not read
// (limits.sse_write_timeout is long here): its held stream ends within
// about a second.
func TestHeldStreamShutdownSlowReader(t *testing.T) {
	g, url := ownerGateway(t, Options{Config: &config.Config{
		Servers: map[string]*config.Server{"f": httpServer(faultyUpstream(t).URL + "/mcp")},
		Limits:  config.Limits{SSEWriteTimeout: time.Minute},
	}})
	sid := initOwned(t, url, "alice")
	sess := g.lookupSession(sid)
	c := openHeld(t, url, sid)
	_ = c.conn.(*net.TCPConn).SetReadBuffer(4096)
	waitFor(t, "the stream to be held", func() bool { return g.held.len() == 1 })
	// Fill the socket buffers until the writer is stuck in a write.
	params := []byte(`{"level":"info","data":"` + strings.Repeat("x", 64<<10) + `"}`)
	for range 64 {
		sess.Notify(jsonrpc.NewNotification("notifications/message", params))
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	g.Shutdown()
	waitFor(t, "the slow reader's stream to end", func() bool { return g.held.len() == 0 && g.OpenStreams() == 0 })
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown ended a stuck held stream after %v, want about a second", d)
	}
}

// A subscriptions/listen stream (2026-07-28) is held too: its
// acknowledgement and notifications arrive as chunks, and on the
// gateway's shutdown the listen request is answered (resultType
// complete) before the body ends, as when net/http served it.
func TestHeldListenStream(t *testing.T) {
	g, url := ownerGateway(t, Options{})
	addr := strings.TrimPrefix(url, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"jsonrpc":"2.0","id":"L1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` + statelessMetaJSON + `}}`
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"X-Test-Owner: alice\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	c := &heldClient{conn: conn, r: bufio.NewReader(conn)}
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("the listen stream's head: %v %q", err, c.head)
		}
		if line == "\r\n" {
			break
		}
		c.head += line
	}
	if !strings.HasPrefix(c.head, "HTTP/1.1 200") || !strings.Contains(c.head, "Connection: close\r\n") {
		t.Fatalf("listen stream: %q", c.head)
	}
	if ack := c.chunk(t); !strings.Contains(ack, "notifications/subscriptions/acknowledged") {
		t.Fatalf("the acknowledgement: %q", ack)
	}
	waitFor(t, "the listen stream to be held", func() bool { return g.held.len() == 1 && openListeners(g) == 1 })
	g.notifyListeners("f", "notifications/tools/list_changed", nil)
	if got := c.chunk(t); !strings.Contains(got, "notifications/tools/list_changed") || !strings.Contains(got, `"L1"`) {
		t.Errorf("a notification on the held listen stream: %q", got)
	}
	g.Shutdown()
	got := "-"
	answered := false
	for i := 0; i < 20 && got != ""; i++ {
		got = c.chunk(t)
		answered = answered || strings.Contains(got, `"id":"L1","result"`) && strings.Contains(got, `"complete"`)
	}
	if !answered || got != "" {
		t.Errorf("on shutdown the held listen stream ended (%v) without its answer (%v)", got == "", answered)
	}
	waitFor(t, "the listener to be released", func() bool { return g.held.len() == 0 && openListeners(g) == 0 && g.OpenStreams() == 0 })
}
