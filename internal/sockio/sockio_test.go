package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pair is a connected loopback TCP pair: the client end and the server
// end, both closed when the test ends.
func pair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		got <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, ok := <-got
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

func TestRawOnlyForPlainTCP(t *testing.T) {
	a, _ := pair(t)
	if c := New(a); (c.raw != nil) != (runtime.GOOS == "linux") {
		t.Errorf("TCP conn on %s: raw = %v", runtime.GOOS, c.raw != nil)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if New(p1).raw != nil {
		t.Error("a pipe took the raw path")
	}
	// A connection wrapped by something (TLS, a replay of read bytes)
	// is not a *net.TCPConn: its own methods must do the work.
	type wrapped struct{ net.Conn }
	if New(wrapped{a}).raw != nil {
		t.Error("a wrapped connection took the raw path")
	}
}

// Bytes go both ways whole and in order: a head and a body in one
// Write2, a plain Write, small reads and one larger than maxRaw (nc's own
// path: whatever is there, as much as the buffer takes).
func TestReadWrite(t *testing.T) {
	a, b := pair(t)
	ca, cb := New(a), New(b)
	head, body := []byte("HTTP/1.1 200 OK\r\n\r\n"), bytes.Repeat([]byte("x"), 3000)
	if n, err := ca.Write2(head, body); err != nil || n != int64(len(head)+len(body)) {
		t.Fatalf("Write2 = %d, %v", n, err)
	}
	if n, err := ca.Write([]byte("tail")); err != nil || n != 4 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	want := append(append(append([]byte{}, head...), body...), "tail"...)
	got := make([]byte, 0, len(want))
	buf := make([]byte, 7)
	for len(got) < len(want) {
		n, err := cb.Read(buf)
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %q..., want %q...", got[:40], want[:40])
	}
	// A Write2 with an empty part, either one.
	for _, parts := range [][2][]byte{{nil, []byte("b")}, {[]byte("a"), nil}, {nil, nil}} {
		n, err := ca.Write2(parts[0], parts[1])
		if err != nil || n != int64(len(parts[0])+len(parts[1])) {
			t.Fatalf("Write2(%q, %q) = %d, %v", parts[0], parts[1], n, err)
		}
	}
	if _, err := io.ReadFull(cb, buf[:2]); err != nil || string(buf[:2]) != "ba" {
		t.Fatalf("read %q, %v; want \"ba\"", buf[:2], err)
	}
	big := bytes.Repeat([]byte("B"), maxRaw+1000)
	if n, err := ca.Write(big); err != nil || n != len(big) {
		t.Fatalf("Write of %d bytes = %d, %v", len(big), n, err)
	}
	large := make([]byte, 2*maxRaw)
	got = got[:0]
	for len(got) < len(big) {
		n, err := cb.Read(large)
		if err != nil {
			t.Fatalf("Read into %d bytes after %d: %v", len(large), len(got), err)
		}
		got = append(got, large[:n]...)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("a large write came back changed")
	}
}

// A write to a full socket waits for room and is then written whole: the
// raw call finds no room, the poller waits (the write has not returned
// while nobody reads), and the rest goes once the reader reads.
func TestWriteWaitsForRoom(t *testing.T) {
	a, b := pair(t)
	// Fill the socket (and the peer's receive buffer) with net.Conn's own
	// writes, until one finds no room for 20 ms.
	filler := bytes.Repeat([]byte("f"), 64<<10)
	filled := 0
	for {
		_ = a.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := a.Write(filler)
		filled += n
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal(err)
			}
			break
		}
	}
	_ = a.SetWriteDeadline(time.Time{})

	head := bytes.Repeat([]byte("h"), 1000)
	body := make([]byte, maxRaw-len(head)) // the largest raw write
	for i := range body {
		body[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := New(a).Write2(head, body)
		wrote <- err
	}()
	select {
	case err := <-wrote:
		t.Fatalf("a write to a full socket nobody reads returned (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	got, err := io.ReadAll(io.LimitReader(b, int64(filled+len(head)+len(body))))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("Write2: %v", err)
	}
	if bytes.Count(got[:filled], []byte("f")) != filled {
		t.Fatal("the filler came back changed")
	}
	if !bytes.Equal(got[filled:], append(head, body...)) {
		t.Fatal("the reader got other bytes than were written")
	}
}

// Errors are those net.Conn's methods give for the same situation: a
// *net.OpError naming "read" or "write" and both ends, a timeout that is
// os.ErrDeadlineExceeded, a closed connection that is net.ErrClosed, the
// peer's end as io.EOF, a reset as the system call's error.
func TestErrorsAsNetConn(t *testing.T) {
	a, b := pair(t)
	ca := New(a)
	buf := make([]byte, 10)

	_ = a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := ca.Read(buf)
	_ = a.SetReadDeadline(time.Now().Add(-time.Second))
	_, want := a.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("read past its deadline: %v is not a net.Error timeout", err)
	}
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("read past its deadline: %q, net.Conn says %q", err, want)
	}
	_ = a.SetReadDeadline(time.Time{})

	_ = a.SetWriteDeadline(time.Now().Add(-time.Second))
	_, err = ca.Write([]byte("x"))
	_, want = a.Write([]byte("x"))
	if !errors.Is(err, os.ErrDeadlineExceeded) || err.Error() != want.Error() {
		t.Errorf("write past its deadline: %q, net.Conn says %q", err, want)
	}
	_, err = ca.Write2([]byte("x"), []byte("y"))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Write2 past its deadline: %v", err)
	}
	_ = a.SetWriteDeadline(time.Time{})

	// The peer's end: io.EOF itself, as net.Conn returns it.
	b.Close()
	if _, err := ca.Read(buf); err != io.EOF {
		t.Errorf("read after the peer closed: %v, want io.EOF", err)
	}
	// Writing to a closed peer resets the connection: the first write may
	// still succeed, a later one fails with the system call's error.
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		_, werr = ca.Write([]byte("after close"))
		time.Sleep(time.Millisecond)
	}
	var oe *net.OpError
	var se *os.SyscallError
	if !errors.As(werr, &oe) || oe.Op != "write" || !errors.As(werr, &se) ||
		!(errors.Is(werr, syscall.EPIPE) || errors.Is(werr, syscall.ECONNRESET)) {
		t.Errorf("write to a closed peer: %#v, want an OpError around EPIPE or ECONNRESET", werr)
	}

	a.Close()
	if _, err := ca.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := ca.Write(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after Close: %v, want net.ErrClosed", err)
	}
}

// A read waiting for data ends when the connection is closed from another
// goroutine, or when its deadline moves into the past (how the gateway
// cancels a request's I/O).
func TestBlockedReadUnblocks(t *testing.T) {
	for _, how := range []string{"close", "deadline"} {
		t.Run(how, func(t *testing.T) {
			a, _ := pair(t)
			ca := New(a)
			errc := make(chan error, 1)
			go func() {
				_, err := ca.Read(make([]byte, 10))
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			if how == "close" {
				a.Close()
			} else {
				_ = a.SetReadDeadline(time.Unix(1, 0))
			}
			select {
			case err := <-errc:
				if err == nil {
					t.Fatal("read returned no error")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("read still blocked")
			}
		})
	}
}

// One goroutine reads while another writes, as a streamed response's
// watch for its client going away reads while the handler writes; and
// writers from several goroutines each get their bytes out whole.
func TestConcurrentReadAndWrite(t *testing.T) {
	a, b := pair(t)
	ca, cb := New(a), New(b)
	const n, size = 200, 100
	var wg sync.WaitGroup
	wg.Go(func() { // b echoes what it reads
		buf := make([]byte, 1000)
		total := 0
		for total < 2*n*size {
			m, err := cb.Read(buf)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := cb.Write(buf[:m]); err != nil {
				t.Error(err)
				return
			}
			total += m
		}
	})
	msg := bytes.Repeat([]byte("m"), size)
	for range 2 {
		wg.Go(func() {
			for range n {
				if _, err := ca.Write2(msg[:size/2], msg[size/2:]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	got := 0
	buf := make([]byte, 1000)
	for got < 2*n*size {
		m, err := ca.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(buf[:m], []byte("m")) != m {
			t.Fatalf("read other bytes: %q", buf[:m])
		}
		got += m
	}
	wg.Wait()
}

// A read or write on the raw path allocates nothing.
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		// Its instrumentation allocates; CI runs this package without
		// the detector.
		t.Skip("allocation counts are off under the race detector")
	}
	a, b := pair(t)
	ca, cb := New(a), New(b)
	head, body, buf := []byte("head"), []byte("body"), make([]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := ca.Write2(head, body); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(cb, buf[:8]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per write and read, want 0", allocs)
	}
}

// BenchmarkRoundTrip sends 100 bytes and reads them back through an
// echoing peer, with this package and with net.Conn's own methods.
func BenchmarkRoundTrip(b *testing.B) {
	for _, raw := range []bool{true, false} {
		name := "sockio"
		if !raw {
			name = "net.Conn"
		}
		b.Run(name, func(b *testing.B) {
			x, y := pair(b)
			go func() {
				_, _ = io.Copy(y, y)
			}()
			var rw io.ReadWriter = x
			if raw {
				rw = New(x)
			}
			msg, buf := bytes.Repeat([]byte("e"), 100), make([]byte, 100)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rw.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(rw, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A Conn keeps nothing of a call's buffers once the call returns, whether
// it succeeded or failed: the next request on a connection may be another
// caller's, and a buffer left here would stay reachable (and unfreed) for
// the connection's life.
func TestKeepsNoBuffers(t *testing.T) {
	a, b := pair(t)
	ca, cb := New(a), New(b)
	if ca.raw == nil {
		t.Skip("no raw path on " + runtime.GOOS)
	}
	empty := func(when string) {
		t.Helper()
		for _, r := range []*raw{ca.raw, cb.raw} {
			if r.rp != nil || r.a != nil || r.b != nil || r.iov[0].Base != nil || r.iov[1].Base != nil {
				t.Errorf("%s: a buffer is still held: rp=%v a=%v b=%v iov=%v", when, r.rp != nil, r.a != nil, r.b != nil, r.iov)
			}
		}
	}
	if _, err := ca.Write2([]byte("secret head "), []byte("secret body")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(cb, make([]byte, 23)); err != nil {
		t.Fatal(err)
	}
	empty("after a write and a read")
	_ = b.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := cb.Read(make([]byte, 8)); err == nil {
		t.Fatal("a read past its deadline succeeded")
	}
	b.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = ca.Write2([]byte("x"), []byte("y"))
		time.Sleep(time.Millisecond)
	}
	if err == nil {
		t.Fatal("writes to a closed peer kept succeeding")
	}
	empty("after failed calls")
}
