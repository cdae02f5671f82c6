package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/h1server"
)

// The listener's slow-client limits (SPEC S23): a client that does not
// finish its headers within limits.read_header_timeout, and a keep-alive
// connection idle for limits.idle_timeout, are disconnected.
func TestListenerTimeouts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), config.Limits{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	// closedWithin reads conn until the server closes it and reports how
	// long that took.
	closedWithin := func(conn net.Conn) time.Duration {
		t.Helper()
		start := time.Now()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Fatalf("the server did not close the connection: %v", err)
		}
		return time.Since(start)
	}

	slow, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprint(slow, "GET /mcp HTTP/1.1\r\nHost: x\r\n") // and never the rest
	if d := closedWithin(slow); d < 150*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("a client trickling its headers was dropped after %v, want about 200ms", d)
	}

	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprint(idle, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 512)
	_ = idle.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := idle.Read(buf); err != nil || n == 0 {
		t.Fatalf("response: %v", err)
	}
	if d := closedWithin(idle); d < 200*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("an idle keep-alive connection was closed after %v, want about 300ms", d)
	}
}

// Zero limits (a Config built in code) are the documented defaults.
func TestListenerDefaults(t *testing.T) {
	hs, ok := newHTTPServer(http.NotFoundHandler(), config.Limits{}).(*h1server.Server)
	if !ok {
		t.Fatal("the default listener is not h1server's")
	}
	srv := hs.Fallback
	if d := config.DefaultLimits(); srv.ReadHeaderTimeout != d.ReadHeaderTimeout || srv.IdleTimeout != d.IdleTimeout {
		t.Errorf("read header %v, idle %v", srv.ReadHeaderTimeout, srv.IdleTimeout)
	}
	if _, ok := newHTTPServer(http.NotFoundHandler(), config.Limits{StandardHTTPServer: true}).(*http.Server); !ok {
		t.Error("standard_http_server: the listener is not net/http's")
	}
}

// shutdown_delay: after SIGTERM the process keeps serving while /readyz
// answers 503 (a balancer takes it out of rotation), then exits cleanly.
func TestShutdownDelay(t *testing.T) {
	gw, notes := buildBinary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gw.yaml")
	cfg := fmt.Sprintf("data_dir: ./state\nshutdown_delay: 1500ms\nservers:\n  notes: {transport: stdio, command: %s}\n", notes)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startGateway(t, gw, cfgPath)
	ready := func() int {
		resp, err := http.Get(p.url + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := ready(); code != 200 {
		t.Fatalf("/readyz before SIGTERM: %d", code)
	}
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := start.Add(time.Second)
	for ready() != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not turn 503 after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _, body := post(t, p.url+"/mcp", "", list); code != 200 || !strings.Contains(body, "notes__list_notes") {
		t.Errorf("a call during the lame-duck period: %d %s", code, body)
	}
	select {
	case err := <-p.done:
		took := time.Since(start)
		if err != nil || took < time.Second {
			t.Errorf("exit %v after %s; want a clean exit after the 1.5s delay", err, took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

// The body limit (SPEC S2.6, S23) holds on the listener mcpgate serve
// runs (h1server in front of net/http): an oversized POST gets 413 with
// a JSON-RPC error naming the size, the connection is not reused for
// the rest of the body, and the gateway keeps serving.
func TestBodyLimitOnTheListener(t *testing.T) {
	gw, notes := buildBinary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gw.yaml")
	cfg := fmt.Sprintf("data_dir: ./state\nmax_body_bytes: 64KiB\nservers:\n  notes: {transport: stdio, command: %s}\n", notes)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startGateway(t, gw, cfgPath)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"` + strings.Repeat("x", 512<<10) + `"}}`
	if code, _, b := post(t, p.url+"/mcp", "", body); code != http.StatusRequestEntityTooLarge || !strings.Contains(b, "exceeds 65536 bytes") {
		t.Fatalf("an oversized body: %d %s", code, b)
	}
	// Still serving.
	hr, err := http.Get(p.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		t.Fatalf("healthz after an oversized body: %d", hr.StatusCode)
	}
}
