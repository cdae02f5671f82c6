package upstream

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// A connection back in the pool a moment ago is reused without the
// liveness check; one the server closed in that moment (a restart, not a
// keep-alive timeout) costs the request nothing: it goes again on a fresh
// dial, and the server runs it once.
func TestH1TrustedReuseOfAClosedConnectionRetries(t *testing.T) {
	s := newRawServer(t, nil, func(nc net.Conn) { nc.Close() })
	tr := newTestH1()
	tr.trustIdle = time.Minute // every reuse in this test is trusted
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	for i := range 5 {
		body := fmt.Sprintf(`{"call":%d}`, i)
		if got, err := postBody(c, s.url(), body); err != nil || got != body {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	// Every call after the first met the closed connection, was sent
	// again on a dialled one, and was read by the server once.
	if n := s.requests.Load(); n != 5 {
		t.Errorf("server read %d requests, want 5", n)
	}
	if n := s.conns.Load(); n != 5 {
		t.Errorf("%d connections, want 5", n)
	}
}

// trusted holds only for a drained connection within trustIdle of its
// last response: past it, or with bytes maybe left in the socket, the
// reuse is checked.
func TestH1TrustedOnlyRecentAndDrained(t *testing.T) {
	s := newRawServer(t, nil, func(net.Conn) {})
	tr := newTestH1()
	tr.trustIdle = time.Minute // not the default's few ms: a loaded machine may take longer
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	if got, err := postBody(c, s.url(), "x"); err != nil || got != "x" {
		t.Fatalf("%q, %v", got, err)
	}
	tr.mu.Lock()
	idle := tr.idle[s.ln.Addr().String()]
	tr.mu.Unlock()
	if len(idle) != 1 {
		t.Fatalf("%d pooled connections, want 1", len(idle))
	}
	pc := idle[0]
	if !pc.drained || !pc.trusted() {
		t.Fatalf("a connection back from a short response: drained %v, trusted %v; want both", pc.drained, pc.trusted())
	}
	pc.drained = false
	if pc.trusted() {
		t.Error("a connection whose last read filled its buffer is trusted")
	}
	pc.drained = true
	pc.idleAt = time.Now().Add(-tr.trustIdle)
	if pc.trusted() {
		t.Errorf("a connection idle for %v is trusted", tr.trustIdle)
	}
}

// Past trustIdle the check is made: a server that wrote unasked-for bytes
// after its response (a 408 before closing) does not answer the next
// request with them; that goes on a fresh connection.
func TestH1StrayBytesPastTrustIdleAreSeen(t *testing.T) {
	s := newRawServer(t, nil, func(nc net.Conn) {
		time.Sleep(5 * time.Millisecond)
		fmt.Fprint(nc, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
	})
	tr := newTestH1()
	tr.trustIdle = time.Millisecond
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	if got, err := postBody(c, s.url(), "one"); err != nil || got != "one" {
		t.Fatalf("first call: %q, %v", got, err)
	}
	time.Sleep(50 * time.Millisecond) // the stray bytes are in the socket
	resp, err := c.Post(s.url(), "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("second call answered %d, want 200 on a fresh connection", resp.StatusCode)
	}
	if n := s.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}
