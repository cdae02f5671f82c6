package gateway

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/h1server"
)

// serveListener serves g through the listener mcpgate serve runs
// (h1server in front of the gateway) until t ends, and returns its
// address.
func serveListener(t *testing.T, g *Gateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := h1server.New(&http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second})
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// C9.1 through the listener mcpgate serve runs (h1server in front of the
// gateway): a client that drops its call's stream mid-call ends the
// request's context from the listener's, and the upstream request is
// cancelled at once; notifications/cancelled ends another call the same
// way, from the session.
func TestH1ClientGoneCancelsUpstream(t *testing.T) {
	up := newStepper(t)
	g, _ := startGateway(t, &config.Config{Servers: map[string]*config.Server{"s": httpServer(up.http)}})
	url := "http://" + serveListener(t, g) + "/mcp"
	sid := initSession(t, url)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":200,"delay_ms":20},"_meta":{"progressToken":"t"}}}`

	resp := openSSE(t, http.MethodPost, url, sid, nil, call)
	readEvents(t, resp.Body, 1, 5*time.Second)
	resp.Body.Close()
	waitCancelled := func(n int32, what string) {
		t.Helper()
		start := time.Now()
		for up.cancelled.Load() < n {
			if time.Since(start) > 2*time.Second {
				t.Fatalf("%s: the upstream call not cancelled after %s", what, time.Since(start))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCancelled(1, "client gone")

	resp = openSSE(t, http.MethodPost, url, sid, nil, strings.Replace(call, `"id":7`, `"id":8`, 1))
	defer resp.Body.Close()
	readEvents(t, resp.Body, 1, 5*time.Second)
	if st, _, body := rpc(t, url, map[string]string{"Mcp-Session-Id": sid},
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8}}`); st != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: %d %s", st, body)
	}
	waitCancelled(2, "notifications/cancelled")
}
