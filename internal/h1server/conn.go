package h1server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/mcpgate/mcpgate/internal/sockio"
)

const (
	// readBufSize is the connection's read buffer (net/http's size),
	// and so the longest header block served here: a longer one is
	// handed to net/http, which reads up to its MaxHeaderBytes.
	readBufSize = 4 << 10
	// maxBuffered is how much of a response is held before it is sent
	// chunked instead of with a Content-Length.
	maxBuffered = 64 << 10
	// maxKeptBuf is the largest response buffer a connection keeps for
	// its next request; a larger one is let go (an idle keep-alive
	// connection should not hold the memory of its largest response).
	maxKeptBuf = 16 << 10
	// writevFrom is the body size from which a response's head and body
	// go out in one writev rather than copied into one buffer.
	writevFrom = 4 << 10
	// maxDrain is how much of a body its handler left unread is read
	// and dropped so that the connection can serve the next request (as
	// net/http's 256 KiB); beyond it the connection closes.
	maxDrain = 256 << 10
)

// aLongTimeAgo is a deadline in the past: it makes a pending read return.
var aLongTimeAgo = time.Unix(1, 0)

// errResponseDone is a write to a response whose handler returned.
var errResponseDone = errors.New("h1server: response written after its handler returned")

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	// headReaders parse a header block already in a connection's
	// buffer (see conn.next).
	headReaders = sync.Pool{New: func() any { return &headReader{br: bufio.NewReaderSize(nil, 4<<10)} }}
)

type headReader struct {
	r  bytes.Reader
	br *bufio.Reader
}

// conn is one accepted connection, served by one goroutine (serve).
type conn struct {
	s       *Server
	nc      net.Conn
	sock    *sockio.Conn // reads and writes nc
	br      *bufio.Reader
	remote  string
	baseCtx context.Context
	// idle: waiting for a request (Shutdown closes it).
	idle atomic.Bool

	wbuf     []byte // the response body not yet sent
	out      []byte // what the next write sends
	werr     error  // the first write error: the connection is done
	lastPOST bool
	// The write deadline the connection has (wdl) and the one the
	// response being written asked for (wantWDL, zero: none; it ends
	// with its response). A write applies wantWDL first when they
	// differ (syncWriteDeadline): a response that sets one pays one
	// deadline change, not a set and a reset (issue 25).
	wdl, wantWDL time.Time
	// rdl is the read deadline idleDeadline gave the connection; rdlSet:
	// no other read deadline was set since (every other setter clears
	// it, from whatever goroutine).
	rdl    time.Time
	rdlSet atomic.Bool

	// parsed is the request parseRequest read, until serveRequest
	// copies it into the one its handler gets.
	parsed http.Request

	// watch is the goroutine noticing a streamed response's client
	// going away (watchPeer); nil when none runs.
	watch chan struct{}
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, sock: sockio.New(nc)}
	c.idle.Store(true) // a new connection has sent nothing yet
	return c
}

// serve serves c's requests until it closes, is handed off or hijacked.
func (c *conn) serve() {
	kept := false // handed off or hijacked: someone else owns nc
	c.br = readerPool.Get().(*bufio.Reader)
	c.br.Reset(c.sock)
	defer func() {
		c.s.track(c, false)
		if !kept {
			_ = c.nc.Close()
			c.br.Reset(nil)
			readerPool.Put(c.br)
		}
		c.br = nil
	}()
	c.remote = c.nc.RemoteAddr().String()
	c.baseCtx = context.WithValue(context.WithValue(context.Background(),
		http.ServerContextKey, c.s.Fallback), http.LocalAddrContextKey, c.nc.LocalAddr())
	srv := c.s.Fallback
	first := true
	for {
		wait := srv.IdleTimeout
		if first || wait <= 0 {
			wait = srv.ReadHeaderTimeout
		}
		c.idleDeadline(wait)
		c.idle.Store(true)
		if c.s.shutdown.Load() {
			return
		}
		// After a request, as net/http: less than four bytes before
		// the client's end is no request, and the connection closes.
		want := 4
		if first {
			want = 1
		}
		if _, err := c.br.Peek(want); err != nil {
			return
		}
		c.idle.Store(false)
		if c.lastPOST {
			// RFC 9112 section 2.2: a server may ignore the CRLF an
			// old client sends after a POST body, as net/http does.
			if b, _ := c.br.Peek(min(c.br.Buffered(), 4)); len(b) > 0 {
				n := 0
				for n < len(b) && (b[n] == '\r' || b[n] == '\n') {
					n++
				}
				_, _ = c.br.Discard(n)
				if c.br.Buffered() == 0 {
					c.lastPOST = false
					continue
				}
			}
			c.lastPOST = false
		}
		first = false
		req, ok, err := c.next()
		if err != nil && !errors.Is(err, io.EOF) {
			return // the header timed out, or the connection broke
		}
		if !ok {
			// Not ours, or the client stopped sending within a
			// header: net/http reads it, from its first byte (and
			// answers what it makes of it).
			kept = true
			buf, _ := c.br.Peek(c.br.Buffered())
			c.syncWriteDeadline() // none: net/http starts free
			c.s.handOff(c.nc, bytes.Clone(buf))
			c.br.Reset(nil)
			readerPool.Put(c.br)
			return
		}
		done, hijacked := c.serveRequest(req)
		if hijacked {
			kept = true
			return
		}
		if done {
			return
		}
	}
}

// next reads the next request when it is one served here (ok), leaving
// the connection's buffer untouched otherwise: a header block that does
// not fit the buffer, or a request not served here (see eligible).
func (c *conn) next() (req *http.Request, ok bool, err error) {
	n, err := c.headerEnd()
	if err != nil || n < 0 {
		return nil, false, err
	}
	head, _ := c.br.Peek(n)
	if !bytes.HasPrefix(head, []byte("POST ")) && !bytes.HasPrefix(head, []byte("GET ")) {
		return nil, false, nil
	}
	// The usual request is parsed here, into c.parsed (serveRequest's
	// WithContext makes the one request the handler gets of it);
	// anything else by net/http's parser.
	if parseRequest(head, &c.parsed) {
		if !eligible(&c.parsed) {
			c.parsed = http.Request{}
			return nil, false, nil
		}
		_, _ = c.br.Discard(n)
		return &c.parsed, true, nil
	}
	// net/http's parser reads the block from a copy of its own, so
	// that nothing is taken from the connection until the request is
	// known to be served here.
	hr := headReaders.Get().(*headReader)
	hr.r.Reset(head)
	hr.br.Reset(&hr.r)
	req, perr := http.ReadRequest(hr.br)
	whole := perr == nil && hr.br.Buffered() == 0 && hr.r.Len() == 0
	hr.r.Reset(nil)
	hr.br.Reset(nil)
	headReaders.Put(hr)
	if !whole || !eligible(req) {
		return nil, false, nil
	}
	_, _ = c.br.Discard(n)
	return req, true, nil
}

// headerEnd returns the length of the header block at the start of the
// connection's buffer, reading until it is whole; -1: it does not fit.
// The block ends with an empty line ("\r\n" or a bare "\n", which
// net/http's parser takes too).
func (c *conn) headerEnd() (int, error) {
	deadlined := false
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if i := endOfHeader(buf); i >= 0 {
			return i, nil
		}
		if len(buf) >= c.br.Size() {
			return -1, nil
		}
		if !deadlined {
			// The client is sending its header: ReadHeaderTimeout
			// counts from here (it was the idle wait until now).
			c.setReadDeadline(c.s.Fallback.ReadHeaderTimeout)
			deadlined = true
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return 0, err
		}
	}
}

// endOfHeader returns the length of the header block b starts with, up
// to and including its empty line, or -1 if b holds no empty line.
func endOfHeader(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		j += i
		if j+1 < len(b) && b[j+1] == '\n' {
			return j + 2
		}
		if j+2 < len(b) && b[j+1] == '\r' && b[j+2] == '\n' {
			return j + 3
		}
		i = j + 1
	}
}

// eligible reports whether req is served here: what net/http's server
// would accept and serve as a plain HTTP/1.1 exchange. Everything else
// (and every request net/http refuses, which it answers with its own
// error) goes to net/http.
func eligible(req *http.Request) bool {
	if req.ProtoMajor != 1 || req.ProtoMinor != 1 {
		return false
	}
	if req.Method != http.MethodPost && req.Method != http.MethodGet {
		return false
	}
	if len(req.TransferEncoding) > 0 || req.ContentLength < 0 || len(req.Trailer) > 0 {
		return false
	}
	// ReadRequest refused two Host fields and took the one into
	// req.Host (from the header when the target is not absolute).
	if req.URL.Host != "" || req.Host == "" || !httpguts.ValidHostHeader(req.Host) {
		return false
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
		switch k {
		case "Expect", "Upgrade", "Http2-Settings":
			return false
		}
	}
	return true
}

// serveRequest runs the handler for req and ends its response. done:
// the connection is to close; hijacked: the handler took it.
func (c *conn) serveRequest(req *http.Request) (done, hijacked bool) {
	w := &response{c: c, header: make(http.Header, 4), declared: -1, closeAfter: req.Close}
	w.ctx.Start(c.baseCtx) // which never ends: nothing to register on
	req = req.WithContext(&w.ctx)
	c.parsed = http.Request{} // req is a copy: nothing kept from it here
	req.RemoteAddr = c.remote
	w.req = req
	w.body.c, w.body.w = c, w
	w.body.n = req.ContentLength
	if req.ContentLength > 0 {
		req.Body = &w.body
	} else {
		req.Body = http.NoBody
	}
	c.wbuf = c.wbuf[:0]
	panicked := c.run(w, req)
	w.ctx.Cancel()
	c.stopWatch()
	left := w.body.end() // from here on nobody else reads the connection
	if w.hijacked {
		w.done.Store(true)
		return true, true
	}
	if panicked {
		w.done.Store(true)
		return true, false
	}
	err := w.finish()
	w.done.Store(true)
	// A handler's write deadline is its response's, as with net/http:
	// the next response on the connection starts free (its first write
	// clears the deadline, if it sets none of its own).
	c.wantWDL = time.Time{}
	if cap(c.wbuf) > maxKeptBuf {
		c.wbuf = nil
	}
	if cap(c.out) > maxKeptBuf {
		c.out = nil
	}
	if err != nil || w.closeAfter || c.s.shutdown.Load() {
		if err == nil && left > 0 {
			c.closeWriteAndWait()
		}
		return true, false
	}
	// What the handler left of the body is read and dropped, within
	// bounds, so that the next request starts where it should.
	if left > 0 {
		if left > maxDrain {
			c.closeWriteAndWait()
			return true, false
		}
		c.setReadDeadline(c.s.Fallback.ReadHeaderTimeout)
		if _, err := c.br.Discard(int(left)); err != nil {
			return true, false
		}
	}
	c.lastPOST = req.Method == http.MethodPost
	return false, false
}

// rstAvoidanceDelay is how long a connection closed with some of its
// request's body unread waits after its FIN, as net/http's does: closing
// a socket with unread bytes sends an RST, which makes the client drop
// the response it has not read yet (a 413 for a body over the limit) and
// see "connection reset" instead.
const rstAvoidanceDelay = 500 * time.Millisecond

// closeWriteAndWait ends c's sending side and waits up to
// rstAvoidanceDelay for the client to read the response before the
// connection closes. It waits by reading and dropping what the client
// still sends, not by sleeping: the wait ends as soon as the client
// closes its side (it has the response) or the server closes the
// connection (Close must not leave a goroutine asleep behind it), and
// what it read is not left in the socket to cause the RST. It reads at
// most maxDrain: a client still sending past that (a hostile one could
// send as fast as the loopback goes for the whole pause) is no longer
// read, and the rest of the pause is waited out, or cut by Close.
func (c *conn) closeWriteAndWait() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	end := time.Now().Add(rstAvoidanceDelay)
	c.setRead(end)
	if n, err := io.CopyN(io.Discard, c.nc, maxDrain); n < maxDrain || err != nil {
		return // the client closed its side, the pause ended, or Close
	}
	t := time.NewTimer(time.Until(end))
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.s.closing:
	}
}

// run calls the handler; true: it panicked (logged as net/http logs it,
// unless it is http.ErrAbortHandler).
func (c *conn) run(w *response, req *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logf("http: panic serving %v: %v\n%s", c.remote, v, buf)
			}
		}
	}()
	c.s.Fallback.Handler.ServeHTTP(w, req)
	return false
}

// setReadDeadline sets the read deadline d from now (none if d <= 0).
func (c *conn) setReadDeadline(d time.Duration) {
	var t time.Time
	if d > 0 {
		t = time.Now().Add(d)
	}
	c.setRead(t)
}

// setRead sets the read deadline t.
func (c *conn) setRead(t time.Time) {
	c.rdlSet.Store(false)
	_ = c.nc.SetReadDeadline(t)
}

// idleDeadline is setReadDeadline for the wait for the next request. The
// connection's deadline from the last wait is kept when it is earlier
// than d from now by no more than a 32nd of d, and nothing set another
// since: each request of a busy connection would otherwise change the
// runtime's timers to push the deadline a few milliseconds later (issue
// 25, as syncWriteDeadline). The wait may end up to a 32nd sooner than
// configured; never later.
func (c *conn) idleDeadline(d time.Duration) {
	if d <= 0 {
		c.setRead(time.Time{})
		return
	}
	t := time.Now().Add(d)
	if c.rdlSet.Load() && !c.rdl.IsZero() && c.rdl.Before(t) && t.Sub(c.rdl) <= d/32 {
		return
	}
	_ = c.nc.SetReadDeadline(t)
	c.rdl = t
	c.rdlSet.Store(true)
}

// syncWriteDeadline gives the connection the write deadline its
// response asked for, when it has another. A deadline the connection
// has already, earlier than the one asked for by no more than a 32nd of
// the time left to it, is kept: each response of a busy connection asks
// for "now plus the write timeout", a little later than the last one,
// and changing the connection's deadline is a change to the runtime's
// timers (about 1% of a call's CPU, issue 25). With the gateway's 30 s,
// a response may be cut up to about a second sooner than asked; never
// later.
func (c *conn) syncWriteDeadline() {
	want := c.wantWDL
	if c.wdl.Equal(want) {
		return
	}
	if !want.IsZero() && !c.wdl.IsZero() && c.wdl.Before(want) {
		if left := time.Until(want); want.Sub(c.wdl) <= left/32 {
			return
		}
	}
	_ = c.nc.SetWriteDeadline(want)
	c.wdl = want
}

// write sends c.out; the first error ends the connection.
func (c *conn) write() error {
	if c.werr != nil {
		return c.werr
	}
	c.syncWriteDeadline()
	_, err := c.sock.Write(c.out)
	if err != nil {
		c.werr = err
	}
	return err
}

// writeWith sends c.out, then body, in one system call.
func (c *conn) writeWith(body []byte) error {
	if c.werr != nil {
		return c.werr
	}
	c.syncWriteDeadline()
	_, err := c.sock.Write2(c.out, body)
	if err != nil {
		c.werr = err
	}
	return err
}

// watchPeer starts noticing that the client of a streamed response goes
// away, as net/http does: a read that ends in an error (not a byte of a
// next request, which stays buffered) cancels w's context. Only once the
// body is read (nothing else reads the connection then), and not when a
// next request is already buffered.
func (c *conn) watchPeer(w *response) {
	if c.watch != nil || w.body.unread() > 0 || c.br.Buffered() > 0 {
		return
	}
	c.setRead(time.Time{})
	done := make(chan struct{})
	c.watch = done
	br, ctx := c.br, &w.ctx
	go func() {
		defer close(done)
		if _, err := br.Peek(1); err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				ctx.Cancel()
			}
		}
	}()
}

// stopWatch ends watchPeer's goroutine, if any, and waits for it.
func (c *conn) stopWatch() {
	if c.watch == nil {
		return
	}
	c.setRead(aLongTimeAgo)
	<-c.watch
	c.watch = nil
	c.setRead(time.Time{})
}

// requestBody is a request's body: its Content-Length bytes of the
// connection. Close only stops reads: what is left is the connection's
// to drain or not (serveRequest), which closes it when the handler
// returns, so that a goroutine still reading it then can never read the
// next request's bytes (mu orders the two, as net/http's body lock).
type requestBody struct {
	c *conn
	w *response

	mu     sync.Mutex // guards the fields below, and the reads
	n      int64      // bytes not yet read
	closed bool
	// The read deadline the handler set and the connection does not
	// have yet (pending): applied before a read that needs the socket,
	// never when the body is in the buffer already, as a small one
	// usually is (issue 25: the gateway sets and clears one per POST).
	// reading: a read of the socket is under way (holding mu), which a
	// deadline set meanwhile applies to at once. Guarded by dmu, not mu,
	// so that setting a deadline never waits for the read it is to end.
	dmu     sync.Mutex
	rdl     time.Time
	pending bool
	reading bool
}

// setDeadline records the handler's read deadline t, and gives it to the
// connection at once when a read of the socket is under way.
func (b *requestBody) setDeadline(t time.Time) {
	b.dmu.Lock()
	defer b.dmu.Unlock()
	b.rdl, b.pending = t, true
	if b.reading {
		b.c.setRead(t)
		b.pending = false
	}
}

// applyDeadline gives the connection the pending read deadline, if any.
func (b *requestBody) applyDeadline() {
	b.dmu.Lock()
	defer b.dmu.Unlock()
	if b.pending {
		b.c.setRead(b.rdl)
		b.pending = false
	}
}

func (b *requestBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	n, err, read := b.readLocked(p)
	b.mu.Unlock()
	if read && b.w.streaming {
		// As net/http: a streamed response watches its client once
		// the body is read.
		b.c.watchPeer(b.w)
	}
	return n, err
}

// readLocked reads from the body; read: this read took its last byte.
func (b *requestBody) readLocked(p []byte) (n int, err error, read bool) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose, false
	}
	if b.n <= 0 {
		return 0, io.EOF, false
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	if b.c.br.Buffered() > 0 {
		n, err = b.c.br.Read(p) // no read of the socket: no deadline
	} else {
		b.dmu.Lock()
		if b.pending {
			b.c.setRead(b.rdl)
			b.pending = false
		}
		b.reading = true
		b.dmu.Unlock()
		n, err = b.c.br.Read(p)
		b.dmu.Lock()
		b.reading = false
		b.dmu.Unlock()
	}
	b.n -= int64(n)
	if err == io.EOF && b.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && b.n == 0 {
		err = io.EOF
	}
	return n, err, b.n == 0 && n > 0
}

func (b *requestBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// end closes the body for its handler and returns how much of it is
// left unread on the connection.
func (b *requestBody) end() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.n
}

// unread is how much of the body is left on the connection.
func (b *requestBody) unread() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

var _ io.ReadCloser = (*requestBody)(nil)
