package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer counts the TCP connections it accepts.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts, &conns
}

func newTestH1() *h1Transport {
	return newH1Transport(http.DefaultTransport, nil)
}

func TestH1ReusesConnections(t *testing.T) {
	ts, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("chunked") != "" {
			w.Write(b)
			w.(http.Flusher).Flush()
			w.Write([]byte("-tail"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	c := &http.Client{Transport: newTestH1()}
	for i := 0; i < 50; i++ {
		q := ""
		if i%2 == 1 {
			q = "?chunked=1"
		}
		resp, err := c.Post(ts.URL+q, "application/json", strings.NewReader(`{"n":1}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := `{"n":1}`
		if q != "" {
			want += "-tail"
		}
		if string(b) != want {
			t.Fatalf("body %q, want %q", b, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("50 sequential requests used %d connections, want 1", n)
	}
}

func TestH1BodyClosedEarlyIsNotReused(t *testing.T) {
	ts, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: one\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	c := &http.Client{Transport: newTestH1()}
	for i := 0; i < 3; i++ {
		resp, err := c.Get(ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // mid-stream: the connection cannot be reused
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("3 abandoned streams used %d connections, want 3", n)
	}
}

func TestH1RetriesIdleConnectionClosedByServer(t *testing.T) {
	ts, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	tr := newTestH1()
	c := &http.Client{Transport: tr}
	get := func() {
		t.Helper()
		resp, err := c.Post(ts.URL, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("body %q", b)
		}
	}
	get()
	// The server drops its idle keep-alive connections.
	ts.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	get()
	if n := conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2 (one retried after the server closed the idle one)", n)
	}
}

func TestH1CancelUnblocksRead(t *testing.T) {
	release := make(chan struct{})
	ts, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	c := &http.Client{Transport: newTestH1()}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL, strings.NewReader("{}"))
	start := time.Now()
	_, err := c.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancel took %v", d)
	}
}

func TestH1ConnectionCloseHonoured(t *testing.T) {
	ts, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Write([]byte("bye"))
	}))
	c := &http.Client{Transport: newTestH1()}
	for i := 0; i < 3; i++ {
		resp, err := c.Get(ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("connections = %d, want 3 (server said close)", n)
	}
}

func TestH1HTTPSGoesToFallback(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.Proto))
	}))
	defer ts.Close()
	c := &http.Client{Transport: newH1Transport(ts.Client().Transport, nil)}
	resp, err := c.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); len(b) == 0 {
		t.Error("empty body over TLS fallback")
	}
}

// Expired idle connections are closed when another one is pooled, not
// kept until that upstream is called again.
func TestH1PutPrunesExpiredIdle(t *testing.T) {
	tr := newTestH1()
	tr.idleTimeout = 50 * time.Millisecond
	a1, a2 := net.Pipe()
	b1, b2 := net.Pipe()
	defer a2.Close()
	defer b2.Close()
	tr.put(&h1Conn{t: tr, key: "k", nc: a1})
	time.Sleep(100 * time.Millisecond)
	tr.put(&h1Conn{t: tr, key: "k", nc: b1})
	a2.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := a2.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("expired idle connection not closed: read err = %v", err)
	}
	if n := len(tr.idle["k"]); n != 1 {
		t.Errorf("%d idle connections kept, want 1", n)
	}
}
