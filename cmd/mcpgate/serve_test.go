package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
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
	srv := newHTTPServer(http.NotFoundHandler(), config.Limits{})
	if d := config.DefaultLimits(); srv.ReadHeaderTimeout != d.ReadHeaderTimeout || srv.IdleTimeout != d.IdleTimeout {
		t.Errorf("read header %v, idle %v", srv.ReadHeaderTimeout, srv.IdleTimeout)
	}
}
