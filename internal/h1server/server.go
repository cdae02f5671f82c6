// Package h1server serves the gateway's plain HTTP/1.1 GET and POST
// requests on connections it owns, below net/http's per-request cost, and
// hands every other request, with the connection it came on, to a
// net/http Server that serves it as before (issue 25).
//
// Why: an MCP call is one small POST and one small response on a
// keep-alive connection. net/http's server pays, per request, for a
// background-read goroutine (started once the body is read, stopped
// through a read deadline in the past when the response ends), its
// chunking writer and header bookkeeping; together they were the largest
// cost of the gateway's own below its handler. Here a connection is one
// goroutine that reads a request, runs the handler with a response that
// is buffered, and writes the response with one write.
//
// What it owns: each accepted connection until it is handed off, hijacked
// or closed; the connection's read and write buffers; each request's
// response writer and context (a cancelctx.Context kept in the writer,
// which a handler's own request context watches rather than registering
// on), which die with their request.
//
// What it must not do:
//   - parse HTTP itself: http.ReadRequest (net/http's own parser) reads
//     every request; this package only finds where a header block ends
//     before letting it parse, so that a request it will not serve can be
//     handed off with every byte read so far replayed;
//   - serve what it does not fully understand: anything but a well-formed
//     HTTP/1.1 GET or POST with a Content-Length (or no) body, one valid
//     Host and valid header fields, without Expect or Upgrade, goes to
//     net/http, which answers it (an error too) exactly as it did before;
//   - let one request's writer reach another's response: the writer is
//     new for each request and refuses to write once its handler returned;
//   - let a client hold memory or a goroutine past the configured
//     timeouts: the header is read under ReadHeaderTimeout, the wait for
//     the next request under IdleTimeout, and a body the handler left
//     unread is drained only up to maxDrain before the connection closes.
//
// A response is buffered until the handler returns, flushes, hijacks or
// writes more than maxBuffered; then it is sent with a Content-Length,
// else chunked. A streamed response (flushed) notices a client that goes
// away as net/http does: a read that ends with an error cancels the
// request's context.
package h1server

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves connections accepted from a listener: the requests it
// understands itself, the rest through Fallback.
type Server struct {
	// Fallback serves every connection handed off; its Handler,
	// ReadHeaderTimeout, IdleTimeout and ErrorLog are this server's too.
	Fallback *http.Server

	mu       sync.Mutex
	ln       net.Listener
	handoff  *handoffListener
	conns    map[*conn]struct{}
	shutdown atomic.Bool
	wg       sync.WaitGroup // connection goroutines
	fallback chan error     // Fallback.Serve's result
	// closing is closed by Close: it ends a connection's wait that is
	// not a read (closeWriteAndWait).
	closing   chan struct{}
	closeOnce sync.Once
}

// New returns a Server that serves what it can itself and the rest
// through srv.
func New(srv *http.Server) *Server {
	return &Server{Fallback: srv, conns: map[*conn]struct{}{}, closing: make(chan struct{})}
}

// Serve accepts connections on ln until it is closed (Shutdown or Close),
// then returns http.ErrServerClosed; any other accept error that is not
// temporary is returned as it is.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.ln != nil {
		s.mu.Unlock()
		return errors.New("h1server: Serve called twice")
	}
	s.ln = ln
	s.handoff = newHandoffListener(ln.Addr())
	s.fallback = make(chan error, 1)
	s.mu.Unlock()
	go func() { s.fallback <- s.Fallback.Serve(s.handoff) }()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return http.ErrServerClosed
			}
			// The same rule as net/http: a temporary error (out of
			// file descriptors) is waited out, anything else ends
			// serving.
			if ne, ok := err.(interface{ Temporary() bool }); ok && ne.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logf("h1server: accept error: %v; retrying in %v", err, backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := newConn(s, nc)
		if !s.track(c, true) {
			_ = nc.Close()
			continue
		}
		s.wg.Go(c.serve)
	}
}

// track adds c to (add) or removes it from the live set; false: the
// server is shutting down and c was not added.
func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		return true
	}
	if s.shutdown.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// Shutdown stops accepting, closes idle connections, and waits for those
// serving a request to end theirs (they close after it) and for Fallback
// to shut down, or for ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginShutdown()
	errc := make(chan error, 1)
	go func() { errc <- s.Fallback.Shutdown(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.closeIdle() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			<-errc
			return ctx.Err()
		case <-tick.C:
		}
	}
	if err := <-errc; err != nil {
		return err
	}
	s.wg.Wait()
	return nil
}

// Close closes the listener and every connection at once, as
// http.Server.Close does.
func (s *Server) Close() error {
	s.beginShutdown()
	s.closeOnce.Do(func() { close(s.closing) })
	err := s.Fallback.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	return err
}

func (s *Server) beginShutdown() {
	s.shutdown.Store(true)
	s.mu.Lock()
	ln, ho := s.ln, s.handoff
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	if ho != nil {
		// Fallback closes it too, but only once its Serve runs: a
		// hand-off must not wait for a Serve that will never accept.
		_ = ho.Close()
	}
}

// closeIdle closes the connections waiting for a request and returns how
// many connections are left serving one.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy := 0
	for c := range s.conns {
		if c.idle.Load() {
			_ = c.nc.Close()
		} else {
			busy++
		}
	}
	return busy
}

// handOff gives nc, with replay (bytes read from it that nobody has
// served) to be read first, to Fallback.
func (s *Server) handOff(nc net.Conn, replay []byte) {
	rc := net.Conn(nc)
	if len(replay) > 0 {
		rc = newReplayConn(nc, replay)
	}
	if !s.handoff.give(rc) {
		_ = nc.Close() // shutting down
	}
}

func (s *Server) logf(format string, args ...any) {
	if l := s.Fallback.ErrorLog; l != nil {
		l.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// handoffListener is the listener Fallback serves: its connections are
// the ones Server hands off.
type handoffListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// give hands c to Fallback's accept loop; false: the listener is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }
