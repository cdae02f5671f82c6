package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/sockio"
)

// h1Transport is the RoundTripper for plain-http upstreams. It does each
// exchange on the calling goroutine over a pooled HTTP/1.1 connection:
// net/http's Transport hands every request to two per-connection goroutines
// (writeLoop and readLoop), which on a busy gateway costs more CPU than the
// request itself. Requests it cannot serve that way (https, which may speak
// HTTP/2; an environment proxy) go to fallback.
//
// The response parsing is net/http's own (http.ReadResponse), so bodies
// (Content-Length, chunked, read-until-close) behave exactly as usual. A
// connection returns to the pool only once its response body has been read
// to the end and the server did not ask to close it.
type h1Transport struct {
	fallback  http.RoundTripper
	usesProxy func(*http.Request) bool
	dialer    net.Dialer
	// dial, when set, dials instead of dialer (the address guard of a
	// runtime server's transport, dialguard.go).
	dial        func(ctx context.Context, network, address string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration
	// trustIdle is how long after its last response a drained
	// connection is reused without the liveness check (see conn); 0
	// checks every reuse.
	trustIdle time.Duration

	mu   sync.Mutex
	idle map[string][]*h1Conn
}

type h1Conn struct {
	t      *h1Transport
	key    string
	nc     net.Conn
	sock   *sockio.Conn // reads and writes nc
	br     *bufio.Reader
	idleAt time.Time
	nread  int64 // bytes read from nc, to tell whether a response began
	// drained: the last read from nc returned less than it asked for,
	// so nothing more was waiting in the socket when it returned.
	drained bool
	live    *liveness
	abort   func() // unblocks the connection's I/O; made once, run on cancel
}

// Read counts what the response reader takes from the connection.
func (pc *h1Conn) Read(p []byte) (int, error) {
	n, err := pc.sock.Read(p)
	pc.nread += int64(n)
	pc.drained = n < len(p)
	return n, err
}

// h1Writers are the connections' request writers. A connection writes a
// request and then waits for the answer, which takes far longer, so a
// writer per connection sat idle nearly all the time: 4 KiB each, 256 KiB
// live at c=64 and twice that of peak heap.
var h1Writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, h1BufSize) }}

// aLongTimeAgo is a deadline in the past: it unblocks pending I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

func newH1Transport(fallback http.RoundTripper, usesProxy func(*http.Request) bool) *h1Transport {
	t := &h1Transport{
		fallback:    fallback,
		dialer:      net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		maxIdle:     256,
		idleTimeout: 90 * time.Second,
		trustIdle:   defaultTrustIdle,
		idle:        map[string][]*h1Conn{},
	}
	t.usesProxy = usesProxy
	return t
}

func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || (t.usesProxy != nil && t.usesProxy(req)) {
		return t.fallback.RoundTrip(req)
	}
	key := req.URL.Host
	if req.URL.Port() == "" {
		key = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	fresh := false
	for {
		pc, reused, err := t.conn(req.Context(), key, fresh)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := pc.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		pc.close()
		// A pooled connection the server closed just as the request went
		// out (the liveness check in conn passed a moment before) fails
		// before any response byte: send it again, once, as net/http does,
		// when the body can be sent again. Always on a dialled connection:
		// another pooled one may have been closed by the same keep-alive
		// timeout, and a second failure would reach the caller. A server
		// that drops a request it was given and was not idle-closing (a
		// crash) refuses the fresh dial, so the request is not run twice.
		if reused && !fresh && req.Context().Err() == nil && errors.Is(err, errIdleClosed) {
			if req.Body != nil && req.Body != http.NoBody {
				if req.GetBody == nil {
					return nil, err
				}
				body, gerr := req.GetBody()
				if gerr != nil {
					return nil, err
				}
				req = req.Clone(req.Context())
				req.Body = body
			}
			fresh = true
			continue
		}
		closeBody(req)
		return nil, err
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// errIdleClosed: the connection was gone before any response byte.
var errIdleClosed = errors.New("connection closed before the response")

// conn returns a connection for key: an idle pooled one that is still
// alive, else (or when fresh is set) a newly dialled one. reused says
// which it is.
func (t *h1Transport) conn(ctx context.Context, key string, fresh bool) (*h1Conn, bool, error) {
	for !fresh {
		pc := t.takeIdle(key)
		if pc == nil {
			break
		}
		// Servers close idle keep-alive connections on their own clock
		// (uvicorn and node after 5 s): check before use, outside the
		// lock, rather than learn it from a failed request; unless the
		// connection is trusted (recent and drained, see trusted).
		if pc.br.Buffered() == 0 && (pc.trusted() || pc.live.check()) {
			return pc, true, nil
		}
		pc.nc.Close()
	}
	dial := t.dialer.DialContext
	if t.dial != nil {
		dial = t.dial
	}
	nc, err := dial(ctx, "tcp", key)
	if err != nil {
		return nil, false, err
	}
	// 4 KiB each way, net/http's sizes: an MCP request and its reply's
	// head fit, a bigger body is read into the caller's buffer past
	// bufio and written in more than one piece, and a head that does not
	// fit goes to http.ReadResponse (h1read.go). 16 + 8 KiB per
	// connection was 1.5 MB live at c=64, about 4 MiB of peak RSS. The
	// writer is h1Writers', held only while a request is written.
	pc := &h1Conn{t: t, key: key, nc: nc, sock: sockio.New(nc), live: newLiveness(nc)}
	pc.br = bufio.NewReaderSize(pc, h1BufSize)
	pc.abort = func() { _ = nc.SetDeadline(aLongTimeAgo) }
	return pc, false, nil
}

// defaultTrustIdle: a connection back in the pool for less than this is
// reused without the liveness check. Keep-alive timeouts are seconds
// (gunicorn 2 s, uvicorn and node 5 s, nginx 75 s), so no server has
// closed such a connection on its idle clock; one that closed it for
// another reason (a restart, a crash) fails the request before any
// response byte, and RoundTrip sends it again on a fresh dial, as after
// any close the check could not see coming. At load every connection
// comes back within a millisecond or so, and the check (a system call
// through the runtime's poller on every reuse) was about 2% of a call's
// CPU. Short, because within it bytes an upstream sends unasked after a
// response would be read as its next answer on that connection.
const defaultTrustIdle = 10 * time.Millisecond

// trusted reports whether pc, just taken from the pool, may be reused
// without the liveness check: it came back less than trustIdle ago and
// its last read left nothing in the socket. What a server sends after a
// complete response (a stray byte, an unasked-for 408) is then what it
// sent within trustIdle of that response; bytes that came with it are
// seen by the Buffered check or, past the buffer, by this check's
// drained condition.
func (pc *h1Conn) trusted() bool {
	return pc.drained && time.Since(pc.idleAt) < pc.t.trustIdle
}

// takeIdle pops the most recently pooled connection of key that has not
// passed the idle timeout; expired ones on the way are closed.
func (t *h1Transport) takeIdle(key string) *h1Conn {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for list := t.idle[key]; len(list) > 0; list = t.idle[key] {
		pc := list[len(list)-1]
		t.idle[key] = list[:len(list)-1]
		if now.Sub(pc.idleAt) > t.idleTimeout {
			pc.nc.Close() // a close does not block
			continue
		}
		return pc
	}
	return nil
}

func (t *h1Transport) put(pc *h1Conn) {
	now := time.Now()
	pc.idleAt = now
	t.mu.Lock()
	list := t.idle[pc.key]
	// The oldest connections sit at the front: drop the expired ones, so
	// an upstream that is no longer called does not keep them forever.
	n := 0
	for n < len(list) && now.Sub(list[n].idleAt) > t.idleTimeout {
		n++
	}
	expired := list[:n:n]
	list = list[n:]
	keep := len(list) < t.maxIdle
	if keep {
		list = append(list, pc)
	}
	t.idle[pc.key] = list
	t.mu.Unlock()
	for _, old := range expired {
		old.nc.Close()
	}
	if !keep {
		pc.nc.Close()
	}
}

// CloseIdleConnections implements the optional interface http.Client uses.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*h1Conn{}
	t.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			pc.nc.Close()
		}
	}
	if c, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (pc *h1Conn) close() { pc.nc.Close() }

// h1BufSize is an upstream connection's read and write buffer.
const h1BufSize = 4 << 10

// abortOnCancel arranges for the connection's I/O to be aborted when ctx
// ends; stop withdraws that and reports whether it had not happened. An
// exchange (a call's request on a streamable transport) takes the
// connection itself, with no allocation per request.
func (pc *h1Conn) abortOnCancel(ctx context.Context) (stop h1Stop) {
	if x, ok := ctx.(*exchange); ok {
		x.setAbort(pc)
		return h1Stop{x: x, pc: pc}
	}
	return h1Stop{stop: context.AfterFunc(ctx, pc.abort)}
}

// h1Stop withdraws an abortOnCancel.
type h1Stop struct {
	x    *exchange
	pc   *h1Conn
	stop func() bool
}

func (s h1Stop) do() bool {
	if s.x != nil {
		return s.x.clearAbort(s.pc)
	}
	return s.stop()
}

func (pc *h1Conn) roundTrip(req *http.Request) (*http.Response, error) {
	// Cancelling the request unblocks whatever I/O is pending on the
	// connection; the connection is then not reused.
	stop := pc.abortOnCancel(req.Context())
	before := pc.nread
	bw := h1Writers.Get().(*bufio.Writer)
	bw.Reset(pc.sock)
	err := writeRequest(bw, req)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil) // nothing of this connection or request stays in the pool
	h1Writers.Put(bw)
	if err != nil {
		stop.do()
		return nil, pc.ioErr(req, err, true)
	}
	resp, body, err := readResponse(pc.br, req)
	if err != nil {
		stop.do()
		return nil, pc.ioErr(req, err, pc.nread == before)
	}
	if body == nil {
		body = new(h1Body)
	}
	body.rc, body.pc, body.stop, body.reuse = resp.Body, pc, stop, !resp.Close && !req.Close
	if resp.ContentLength == 0 || req.Method == http.MethodHead {
		// Nothing to read: release the connection now.
		_, _ = io.Copy(io.Discard, resp.Body)
		body.release(true)
	}
	resp.Body = body
	return resp, nil
}

// ioErr maps an I/O failure: a cancelled request reports its context's
// error; a failure before any response byte on a reused connection is
// errIdleClosed (retryable).
func (pc *h1Conn) ioErr(req *http.Request, err error, nothingRead bool) error {
	if cerr := req.Context().Err(); cerr != nil {
		return cerr
	}
	if nothingRead && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnReset(err)) {
		return fmt.Errorf("%w: %w", errIdleClosed, err)
	}
	return err
}

func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// h1Body returns its connection to the pool when read to the end.
type h1Body struct {
	rc    io.ReadCloser
	pc    *h1Conn
	stop  h1Stop
	reuse bool
	mu    sync.Mutex
	done  bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.release(true)
	} else if err != nil {
		b.release(false)
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.release(false)
	return nil
}

// release ends the exchange once: the connection goes back to the pool
// when the body was read completely, nothing cancelled it and the server
// keeps it open; otherwise it is closed.
func (b *h1Body) release(complete bool) {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	b.done = true
	b.mu.Unlock()
	notFired := b.stop.do()
	if complete && notFired && b.reuse {
		b.pc.t.put(b.pc)
		return
	}
	b.pc.close()
}
