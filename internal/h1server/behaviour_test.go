package h1server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	return nc, bufio.NewReader(nc)
}

func post(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
}

// nextResponse reads the next response from br, its body whole.
func nextResponse(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the response's body: %v", err)
	}
	return resp, string(b)
}

// A streamed response (flushed) whose client goes away has its request's
// context cancelled, as net/http's; the handler is not left waiting.
func TestStreamClientGoneCancels(t *testing.T) {
	ended := make(chan error, 1)
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // as net/http, the watch starts once the body is read
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			ended <- nil
		case <-time.After(5 * time.Second):
			ended <- errors.New("the client left and the context was not cancelled")
		}
	}))
	nc, br := dial(t, addr)
	io.WriteString(nc, post("/s", "{}"))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if line != "data: one\n" || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("stream: %q %v", line, resp.TransferEncoding)
	}
	nc.Close()
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
}

// A stream whose client stays ends with the chunked terminator, and the
// connection serves the next request.
func TestStreamThenNextRequest(t *testing.T) {
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		for i := range 3 {
			fmt.Fprintf(w, "part %d\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	nc, br := dial(t, addr)
	io.WriteString(nc, post("/a", "x")+post("/b", "y"))
	for range 2 {
		if _, b := nextResponse(t, br); b != "part 0\npart 1\npart 2\n" {
			t.Fatalf("body %q", b)
		}
	}
}

// A writer kept by a goroutine past its handler cannot write into the
// next request's response on the same connection (another caller's).
func TestLateWriteRefused(t *testing.T) {
	late := make(chan http.ResponseWriter, 1)
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			late <- w
			io.WriteString(w, "first")
			return
		}
		lw := <-late
		_, err := lw.Write([]byte("LEAK"))
		lw.Header().Set("X-Leak", "1")
		fmt.Fprintf(w, "second late-write-err=%v", err != nil)
	}))
	nc, br := dial(t, addr)
	io.WriteString(nc, post("/first", "")+post("/second", ""))
	var bodies []string
	for range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("X-Leak") != "" {
			t.Error("a header set through the first request's writer reached the second response")
		}
		bodies = append(bodies, string(b))
	}
	if bodies[0] != "first" || bodies[1] != "second late-write-err=true" {
		t.Fatalf("bodies %q", bodies)
	}
}

// Hijack sends the head written so far (chunked, as net/http) and hands
// over the connection; the server leaves it alone from then on.
func TestHijack(t *testing.T) {
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusOK)
		nc, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrHijacked) {
			t.Errorf("write after hijack: %v", err)
		}
		go func() {
			defer nc.Close()
			io.WriteString(nc, "5\r\nheld!\r\n0\r\n\r\n")
		}()
	}))
	nc, br := dial(t, addr)
	io.WriteString(nc, "GET /h HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, b := nextResponse(t, br); b != "held!" || !resp.Close {
		t.Fatalf("hijacked body %q close=%v", b, resp.Close)
	}
}

// A client that trickles its header in is cut at ReadHeaderTimeout; one
// that sends nothing more after a response at IdleTimeout.
func TestSlowClientsCut(t *testing.T) {
	srv := newStd(http.HandlerFunc(echoHandler))
	srv.ReadHeaderTimeout = 300 * time.Millisecond
	srv.IdleTimeout = 400 * time.Millisecond
	s, addr := startServer(t, srv)
	t.Cleanup(func() { s.Close() })

	nc, _ := dial(t, addr)
	start := time.Now()
	io.WriteString(nc, "POST / HTTP/1.1\r\nHost: x\r\n")
	for {
		if _, err := io.WriteString(nc, "X-Drip: 1\r\n"); err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
		if time.Since(start) > 3*time.Second {
			t.Fatal("a client trickling its header was not cut")
		}
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("cut after %v, before ReadHeaderTimeout", d)
	}

	nc2, br := dial(t, addr)
	io.WriteString(nc2, post("/", ""))
	nextResponse(t, br)
	start = time.Now()
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("idle connection got bytes")
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Errorf("idle connection closed after %v, want about 400ms", d)
	}
}

// A body the handler does not read is drained up to maxDrain; a bigger
// one closes the connection after the response instead of being read.
func TestUnreadBody(t *testing.T) {
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	nc, br := dial(t, addr)
	big := maxDrain + 1
	fmt.Fprintf(nc, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", big)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close {
		t.Error("a response leaving more than maxDrain unread did not say Connection: close")
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Error("the connection stayed open")
	}
}

// A handler that panics loses its connection, not the server.
func TestPanicKeepsServing(t *testing.T) {
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/boom" {
			panic("boom")
		}
		io.WriteString(w, "fine")
	}))
	nc, br := dial(t, addr)
	io.WriteString(nc, post("/boom", ""))
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Fatal("a response after a panic")
	}
	resp, err := http.Post("http://"+addr+"/ok", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "fine" {
		t.Fatalf("after a panic: %q", b)
	}
}

// Shutdown closes idle connections, lets a request in progress finish
// (its response saying Connection: close) and then returns.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	s, addr := startServer(t, newStd(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done")
	})))
	idle, ibr := dial(t, addr)
	io.WriteString(idle, post("/quick", ""))
	if resp, err := http.ReadResponse(ibr, nil); err != nil {
		t.Fatal(err)
	} else {
		io.ReadAll(resp.Body)
	}
	busy, bbr := dial(t, addr)
	io.WriteString(busy, post("/slow", ""))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() { serr = s.Shutdown(ctx) })
	if _, err := ibr.ReadByte(); err == nil {
		t.Error("the idle connection was not closed")
	}
	close(release)
	resp, err := http.ReadResponse(bbr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close {
		t.Error("a response during Shutdown did not say Connection: close")
	}
	wg.Wait()
	if serr != nil {
		t.Fatal(serr)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("still accepting after Shutdown")
	}
}

// A handler reads the body while it streams its answer (full duplex).
func TestReadWhileWriting(t *testing.T) {
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "start\n")
		w.(http.Flusher).Flush()
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "got %d\n", len(b))
	}))
	resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader(strings.Repeat("z", 100000)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "start\ngot 100000\n" {
		t.Fatalf("%q", b)
	}
}

// Big responses go out whole: buffered ones with their length, bigger
// ones chunked.
func TestResponseSizes(t *testing.T) {
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 0
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		io.WriteString(w, strings.Repeat("b", n))
	}))
	for _, n := range []int{0, 1, maxBuffered - 1, maxBuffered, 3*maxBuffered + 7} {
		resp, err := http.Get(fmt.Sprintf("http://%s/?n=%d", addr, n))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(b) != n {
			t.Fatalf("n=%d: got %d bytes, %v", n, len(b), err)
		}
		if chunked := len(resp.TransferEncoding) > 0; chunked != (n >= maxBuffered) {
			t.Errorf("n=%d: chunked %v", n, chunked)
		}
	}
}

// http.ResponseController's deadlines reach the connection: a body read
// under a read deadline ends at it, and a write deadline ends with its
// response (the next one on the connection is not cut by it).
func TestHandlerDeadlines(t *testing.T) {
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		switch r.URL.Path {
		case "/read":
			if err := rc.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
				t.Error(err)
			}
			start := time.Now()
			_, err := io.ReadAll(r.Body)
			var ne net.Error
			fmt.Fprintf(w, "timeout=%t after=%v", errors.As(err, &ne) && ne.Timeout(), time.Since(start) < 2*time.Second)
		case "/write":
			if err := rc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
				t.Error(err)
			}
			io.WriteString(w, "first")
		default:
			io.WriteString(w, "second")
		}
	}))
	nc, br := dial(t, addr)
	io.WriteString(nc, "POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	if _, b := nextResponse(t, br); b != "timeout=true after=true" {
		t.Fatalf("a body read under a read deadline: %q", b)
	}

	nc2, br2 := dial(t, addr)
	io.WriteString(nc2, post("/write", ""))
	nextResponse(t, br2)
	time.Sleep(200 * time.Millisecond) // the first response's deadline has passed
	io.WriteString(nc2, post("/next", ""))
	resp, err := http.ReadResponse(br2, nil)
	if err != nil {
		t.Fatalf("the next response on the connection: %v", err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "second" {
		t.Fatalf("next: %q", b)
	}
}

// A goroutine still reading a body after its handler returned reads no
// byte of the next request on the connection (another caller's, behind a
// proxy that shares connections).
func TestLateBodyReadGetsNothing(t *testing.T) {
	lateBody := make(chan io.Reader, 1)
	got := make(chan string, 1)
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			lateBody <- r.Body
			io.WriteString(w, "first")
			return
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "second got %q", b)
	}))
	nc, br := dial(t, addr)
	// The first request's body is 3 bytes, of which the handler reads none.
	io.WriteString(nc, "POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	nextResponse(t, br)
	go func() {
		b, err := io.ReadAll(<-lateBody)
		got <- fmt.Sprintf("%q %v", b, err)
	}()
	time.Sleep(50 * time.Millisecond)
	io.WriteString(nc, post("/second", "SECRET"))
	if _, b := nextResponse(t, br); b != `second got "SECRET"` {
		t.Fatalf("the next request: %q", b)
	}
	if late := <-got; strings.Contains(late, "SECRET") || !strings.Contains(late, "invalid Read on closed Body") {
		t.Fatalf("a late read of the first body: %s", late)
	}
}

// A response to a request whose body is left unread beyond what is
// drained (a 413 for a body over the limit) reaches a client that is
// still sending the body: the connection ends with a FIN and a pause, as
// net/http's does, not at once with an RST, on which Go's own client
// reports the failed write of the body instead of the response.
func TestUnreadBodyResponseNotReset(t *testing.T) {
	addr := startFast(t, tooLarge)
	body := make([]byte, 8<<20)
	for i := range 20 {
		resp, err := http.Post("http://"+addr+"/", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "too large") {
			t.Fatalf("attempt %d: %d %q %v", i, resp.StatusCode, b, err)
		}
	}
}

// tooLarge refuses every request's body, unread, with a 413.
var tooLarge = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "too large", http.StatusRequestEntityTooLarge)
})

// read413 reads tooLarge's answer, which closes the connection.
func read413(t *testing.T, br *bufio.Reader) {
	t.Helper()
	if resp, _ := nextResponse(t, br); resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Fatalf("status %d, close %v", resp.StatusCode, resp.Close)
	}
}

// connsEnd waits, at most 5 s, for s's connection goroutines to end.
func connsEnd(t *testing.T, s *Server) {
	t.Helper()
	ended := make(chan struct{})
	go func() { s.wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection goroutine did not end")
	}
}

// The pause before closing a connection with its body unread ends as
// soon as the client closes its side, or the server closes: Close leaves
// no connection goroutine asleep behind it.
func TestUnreadBodyWaitEnds(t *testing.T) {
	for _, closer := range []string{"client", "server"} {
		t.Run(closer, func(t *testing.T) {
			s, addr := startServer(t, newStd(tooLarge))
			t.Cleanup(func() { s.Close() })
			nc, br := dial(t, addr)
			fmt.Fprintf(nc, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nabc", maxDrain+1)
			read413(t, br)
			start := time.Now()
			if closer == "client" {
				nc.Close()
			} else {
				s.Close()
			}
			connsEnd(t, s)
			if d := time.Since(start); d >= rstAvoidanceDelay*3/5 {
				t.Errorf("the connection ended %v after the %s closed, want at once (not after the %v pause)", d, closer, rstAvoidanceDelay)
			}
		})
	}
}

// countedListener counts the bytes the server reads from its
// connections.
type countedListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countedListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countedConn{nc.(*net.TCPConn), l.read}, nil
}

type countedConn struct {
	*net.TCPConn // CloseWrite too
	read         *atomic.Int64
}

func (c countedConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// WriteTo reads through Read, so that io.Copy counts too (the embedded
// TCPConn's WriteTo would read past the count).
func (c countedConn) WriteTo(w io.Writer) (int64, error) {
	return io.Copy(w, struct{ io.Reader }{c})
}

// A client that goes on sending a body the server refused, as fast as
// it can, gets the response and at most maxDrain more of its body read
// during the pause before the connection closes (reading all of it would
// let one client keep the server reading for the whole pause); the pause
// then ends on time, or at once on Close.
func TestUnreadBodyWaitBounded(t *testing.T) {
	for _, end := range []string{"pause", "Close"} {
		t.Run(end, func(t *testing.T) {
			var read atomic.Int64
			s := New(newStd(tooLarge))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan struct{})
			go func() { s.Serve(countedListener{ln, &read}); close(served) }()
			t.Cleanup(func() { s.Close(); <-served; s.wg.Wait() })

			nc, br := dial(t, ln.Addr().String())
			fmt.Fprintf(nc, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<30)
			sending := make(chan int64)
			go func() { // the hostile client's body, until the connection fails
				chunk := make([]byte, 64<<10)
				var sent int64
				stop := time.Now().Add(3 * time.Second)
				for time.Now().Before(stop) {
					n, err := nc.Write(chunk)
					sent += int64(n)
					if err != nil {
						break
					}
				}
				sending <- sent
			}()
			read413(t, br)
			start := time.Now()
			if end == "Close" {
				time.Sleep(50 * time.Millisecond) // into the wait that does not read
				s.Close()
			}
			connsEnd(t, s)
			d := time.Since(start)
			sent := <-sending
			t.Logf("client sent %d bytes, server read %d, connection ended after %v", sent, read.Load(), d)
			if n := read.Load(); n > maxDrain+64<<10 {
				t.Errorf("the server read %d bytes of a refused body, want at most about maxDrain (%d)", n, maxDrain)
			}
			switch {
			case end == "pause" && (d < rstAvoidanceDelay/2 || d > 3*rstAvoidanceDelay):
				t.Errorf("the pause lasted %v, want about %v", d, rstAvoidanceDelay)
			case end == "Close" && d > rstAvoidanceDelay*3/5:
				t.Errorf("the connection ended %v after Close, want at once", d)
			}
		})
	}
}

// A keep-alive connection's next request is served whether it comes
// late, in pieces, or right behind the last one (already buffered), each
// as soon as it is whole.
func TestKeepAliveWaitsThenReads(t *testing.T) {
	addr := startFast(t, http.HandlerFunc(echoHandler))
	nc, br := dial(t, addr)
	read := func(want string) {
		t.Helper()
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, b := nextResponse(t, br); !strings.Contains(b, want) {
			t.Fatalf("response %q, want it to hold %q", b, want)
		}
	}
	io.WriteString(nc, post("/first", "one"))
	read("one")
	// Late, and in pieces: the wait ends with the first byte, and the
	// read that follows waits for the rest.
	time.Sleep(50 * time.Millisecond)
	second := post("/second", "two")
	for _, part := range []string{second[:1], second[1:10], second[10:]} {
		io.WriteString(nc, part)
		time.Sleep(20 * time.Millisecond)
	}
	read("two")
	// Two at once: the second is in the buffer (or the socket) when the
	// first is answered.
	io.WriteString(nc, post("/third", "three")+post("/fourth", "four"))
	read("three")
	read("four")
}

type slotKey struct{ n int }

// A handler can give its request's context a few values in place
// (reqContext.SetValue): every context derived from the request's sees
// them, the request ends with them as before; a value set is never
// replaced, a value past the room, a nil key or a key that cannot be
// compared is refused; and the next request on the same connection
// (maybe another caller's, behind a proxy) starts without them.
func TestRequestContextSlot(t *testing.T) {
	type slot interface {
		SetValue(key, val any) bool
	}
	var mu sync.Mutex
	var got []string
	addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		ctx := r.Context()
		for i := range maxInPlace + 1 {
			if v := ctx.Value(slotKey{i}); v != nil {
				got = append(got, fmt.Sprintf("before: %v", v))
			}
		}
		s, ok := ctx.(slot)
		if !ok {
			got = append(got, "no slot")
			return
		}
		if s.SetValue(nil, "x") || s.SetValue([]byte("k"), "x") {
			got = append(got, "a nil or incomparable key taken")
		}
		for i := range maxInPlace {
			if !s.SetValue(slotKey{i}, r.URL.Path) {
				got = append(got, fmt.Sprintf("value %d refused", i))
			}
			if s.SetValue(slotKey{i}, "again") {
				got = append(got, fmt.Sprintf("value %d replaced", i))
			}
		}
		if s.SetValue(slotKey{maxInPlace}, "over") {
			got = append(got, "a value past the room taken")
		}
		child, cancel := context.WithCancel(context.WithValue(ctx, struct{ k int }{1}, 1))
		defer cancel()
		for _, c := range []context.Context{ctx, child, context.WithoutCancel(child)} {
			for i := range maxInPlace {
				if v, _ := c.Value(slotKey{i}).(string); v != r.URL.Path {
					got = append(got, fmt.Sprintf("a context sees %q for value %d", v, i))
				}
			}
			if v := c.Value(slotKey{maxInPlace}); v != nil {
				got = append(got, fmt.Sprintf("the refused value seen: %v", v))
			}
		}
		if ctx.Value(struct{ k int }{1}) != nil {
			got = append(got, "a child's value seen by its parent")
		}
		go func() { <-child.Done() }() // ends with the request
	}))
	nc, br := dial(t, addr)
	io.WriteString(nc, post("/first", "x")+post("/second", "y"))
	for range 2 {
		nextResponse(t, br)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Errorf("the handlers saw: %q", got)
	}
}

// deadlineConn records the deadlines set on a connection.
type deadlineConn struct {
	net.Conn
	mu          sync.Mutex
	read, write []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.read = append(c.read, t)
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.write = append(c.write, t)
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

type deadlineListener struct {
	net.Listener
	conns chan *deadlineConn
}

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	dc := &deadlineConn{Conn: c}
	l.conns <- dc
	return dc, nil
}

// A handler's deadlines reach the connection when a read or a write needs
// it: not for a body already in the buffer (the gateway sets and clears a
// read deadline around every POST's), a response's write deadline once
// (no reset after it: the next response's write sets its own or none);
// and a deadline set while a body read waits ends that read at once.
func TestDeadlinesWhenNeeded(t *testing.T) {
	readD := time.Date(2099, 1, 2, 3, 4, 5, 0, time.UTC)
	writeD := time.Now().Add(time.Hour)
	abort := make(chan struct{})
	s := New(newStd(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		switch r.URL.Path {
		case "/buffered":
			rc.SetReadDeadline(readD)
			io.ReadAll(r.Body)
			rc.SetReadDeadline(time.Time{})
			rc.SetWriteDeadline(writeD)
			io.WriteString(w, "ok")
		case "/plain":
			io.WriteString(w, "ok")
		case "/later", "/much-later", "/sooner":
			d := map[string]time.Duration{"/later": time.Second, "/much-later": time.Hour, "/sooner": -30 * time.Minute}[r.URL.Path]
			rc.SetWriteDeadline(writeD.Add(d))
			io.WriteString(w, "ok")
		case "/waiting":
			go func() { <-abort; rc.SetReadDeadline(time.Now()) }()
			start := time.Now()
			_, err := io.ReadAll(r.Body)
			var ne net.Error
			fmt.Fprintf(w, "timeout=%t soon=%t", errors.As(err, &ne) && ne.Timeout(), time.Since(start) < 2*time.Second)
		}
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dl := deadlineListener{Listener: ln, conns: make(chan *deadlineConn, 2)}
	done := make(chan struct{})
	go func() { s.Serve(dl); close(done) }()
	t.Cleanup(func() { s.Close(); <-done; s.wg.Wait() })

	nc, br := dial(t, ln.Addr().String())
	dc := <-dl.conns
	for _, req := range []string{post("/buffered", "abc"), post("/buffered", "abc"), post("/later", ""), post("/plain", ""),
		post("/buffered", "abc"), post("/much-later", ""), post("/sooner", "")} {
		io.WriteString(nc, req)
		nextResponse(t, br)
	}
	dc.mu.Lock()
	for _, d := range dc.read {
		if d.Equal(readD) {
			t.Error("the read deadline around a buffered body reached the connection")
		}
	}
	// The wait for each request: ReadHeaderTimeout for the first, then
	// IdleTimeout, kept while the requests come within a 32nd of it.
	if len(dc.read) < 2 || len(dc.read) > 3 {
		t.Errorf("%d read deadlines set for 7 quick requests, want 2 (3 if a header came in parts): %v", len(dc.read), dc.read)
	}
	// The same deadline again, or one a second later of an hour left,
	// keeps the connection's; none clears it; an hour later, or half an
	// hour sooner, is set.
	want := []time.Time{writeD, {}, writeD, writeD.Add(time.Hour), writeD.Add(-30 * time.Minute)}
	if !slices.EqualFunc(dc.write, want, time.Time.Equal) {
		t.Errorf("write deadlines set %v, want %v", dc.write, want)
	}
	dc.mu.Unlock()

	nc2, br2 := dial(t, ln.Addr().String())
	<-dl.conns
	io.WriteString(nc2, "POST /waiting HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	time.Sleep(100 * time.Millisecond) // the handler waits for the rest
	close(abort)
	if _, b := nextResponse(t, br2); b != "timeout=true soon=true" {
		t.Errorf("a deadline set while the body read waits: %q", b)
	}
}
