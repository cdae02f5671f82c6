package gateway

import (
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Held GET streams (issue 25): an idle GET stream served the usual way
// keeps net/http's whole connection alive under it, about 30 KiB: the
// connection goroutine's stack (16 KiB, grown while serving the request
// and parked too deep to shrink), its background-read goroutine, read and
// write buffers. Most sessions' GET stream waits for the rare
// notification, so a gateway with many clients pays that per client.
//
// A held stream leaves net/http once its status and headers are written:
// serveGet (and serveLegacySSE after its endpoint event, serveListen for
// a subscriptions/listen POST) hijacks the HTTP/1.1 connection and
// returns, the handler chain unwinds and
// net/http's goroutine ends. What stays is a heldStream: the
// connection, the stream's queue (streamSender) and a keep-alive timer.
// A client that closes its connection is noticed at once, from the
// kernel's readiness, with no buffer: on Linux one goroutine of the
// gateway waits for every held socket (held_linux.go), elsewhere (and
// over TLS) a small goroutine per stream blocks reading it. Nothing
// writes while nothing is queued: a goroutine is started to write what is
// queued and ends when the queue is empty.
//
// The body is chunked, as net/http wrote it before (so a client sees the
// same bytes), and the response says Connection: close: the connection
// is not handed back to net/http when the stream ends, so the client must
// not reuse it; the stream's end is the chunked terminator, then the
// connection closes.
//
// Held only when nothing between the gateway's Middleware and the handler
// wraps the response (the debug header's writer does: such a stream is
// served the usual way), the request is HTTP/1.1 and the connection can
// be hijacked. HTTP/2 (and HTTP/1.0) streams are served as before. The
// Middleware's own end of the request (access log line, request metric,
// HTTP span) runs when the held stream ends, as it ran when the handler
// returned; a handler that wraps the Middleware (an embedder's) sees it
// return while the held stream goes on.
//
// What it must not do: write to the connection from two goroutines at
// once, let a client that stops reading pin memory (every write has the
// stream's write deadline, the queue its bounds), or outlive the
// gateway's Shutdown (heldStreams ends them all, and Close waits for
// their goroutines: they are the gateway's tasks).

// heldStream is one stream held off net/http. mu guards the fields
// below it; the fields above are set before any goroutine sees it.
type heldStream struct {
	g       *Gateway
	st      *streamSender
	conn    net.Conn
	entry   *accessEntry // the access log line's, or nil
	timeout time.Duration
	release func() // undoes what serveGet did for the stream (its slot, its count)
	// farewell, if set, ends the stream on the gateway's shutdown with a
	// last message (a listen request's answer) instead of cutting it.
	farewell func()
	ka       *time.Timer
	// rc and watchID: the connection's socket and its id in the
	// gateway's hangupWatch (held_linux.go), when it watches it; forgotten:
	// the stream ended (forget ran), so it is never watched. The three are
	// guarded by the hangupWatch's mu: the stream may end (a failed write)
	// while hold is still registering it. junk is what the client sent,
	// counted by whoever watches.
	rc        syscall.RawConn
	watchID   uint64
	forgotten bool
	junk      int

	mu        sync.Mutex
	writing   bool        // a writer goroutine runs
	dirty     bool        // kicked while writing: look again before stopping
	keepAlive bool        // a keep-alive comment is due
	stopping  bool        // the gateway is shutting down: end now
	hurry     bool        // the gateway is shutting down: the farewell is queued, write it within a second
	ended     bool        // end ran
	after     *requestEnd // the Middleware's end of the request, once it returned
}

// heldStreams are the held streams, so that Shutdown can end them: net/http's
// Server.Shutdown neither sees nor waits for a hijacked connection. The
// zero value is ready.
type heldStreams struct {
	mu     sync.Mutex // mu guards the fields below
	closed bool
	m      map[*heldStream]struct{}
}

func (hs *heldStreams) add(h *heldStream) bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closed {
		return false
	}
	if hs.m == nil {
		hs.m = map[*heldStream]struct{}{}
	}
	hs.m[h] = struct{}{}
	return true
}

// isClosed reports whether Shutdown began: nothing more is held.
func (hs *heldStreams) isClosed() bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.closed
}

func (hs *heldStreams) remove(h *heldStream) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	delete(hs.m, h)
}

// len is how many streams are held now.
func (hs *heldStreams) len() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return len(hs.m)
}

// stopAll ends every held stream and holds no more.
func (hs *heldStreams) stopAll() {
	hs.mu.Lock()
	hs.closed = true
	all := make([]*heldStream, 0, len(hs.m))
	for h := range hs.m {
		all = append(all, h)
	}
	hs.mu.Unlock()
	for _, h := range all {
		h.stop()
	}
}

// holdable returns the Middleware's writer of r's response when serveGet
// may hold the stream (see above), else nil.
func holdable(w http.ResponseWriter) *statusWriter {
	var sw *statusWriter
	switch x := w.(type) {
	case *statusWriter:
		sw = x
	case *accessLine:
		sw = &x.statusWriter
	default:
		return nil
	}
	if !sw.holdable {
		return nil
	}
	if _, ok := sw.ResponseWriter.(http.Hijacker); !ok {
		return nil
	}
	return sw
}

// hold takes the connection of a stream whose status and headers (with
// Connection: close) w has written, and serves st on it from now on; sw
// is holdable(w); release runs when the stream ends; farewell (or nil) is
// what Shutdown does to it, else it is cut (see heldStream). false: the
// stream could not be held (the gateway is shutting down, or the hijack
// failed), and the caller serves it the usual way; nothing was taken.
func (g *Gateway) hold(w http.ResponseWriter, sw *statusWriter, st *streamSender, release, farewell func()) bool {
	h := &heldStream{g: g, st: st, timeout: st.writeTimeout, release: release, farewell: farewell}
	a, _ := w.(*accessLine)
	if a != nil {
		h.entry = &a.e
	}
	if h.timeout <= 0 {
		h.timeout = writeTimeout
	}
	if g.held.isClosed() {
		return false // shutting down: run ends it at once
	}
	// Hijack writes what net/http holds of the response (its status
	// line and headers) first. What the client sent after the request
	// (a pipelined request) is left unread: the response says
	// Connection: close.
	conn, _, err := sw.ResponseWriter.(http.Hijacker).Hijack()
	if err != nil {
		return false
	}
	h.conn = conn
	// Nothing may reach net/http's response from here; dropping it lets
	// its buffers go (the Middleware keeps sw for the status).
	sw.ResponseWriter = hijackedWriter{}
	sw.held = h
	if a != nil {
		// Its line needs the method and path alone: the request (its
		// headers, its context) need not live as long as the stream.
		a.r = &http.Request{Method: a.r.Method, URL: &url.URL{Path: a.r.URL.Path}}
	}
	h.ka = time.AfterFunc(keepAliveInterval, h.keepAliveDue)
	// In the set once it is whole (Shutdown may stop it from now on),
	// before anything can end it (end takes it out).
	late := !g.held.add(h)
	if !g.watchHangup(h) && !g.tasks.start(h.watch) {
		h.end() // the gateway closed meanwhile
		return true
	}
	st.holdBy(h) // and write what was queued meanwhile
	if late {
		h.stop() // Shutdown began since isClosed: it ends at once
	}
	return true
}

// watch reads the connection until the client closes it (or end does):
// a client that went away is noticed at once, not at the next write. It
// is the goroutine of a stream the gateway's hangupWatch cannot watch
// (held_linux.go). A client has nothing to send on a held stream; what
// it sends anyway is discarded, and a client that keeps sending loses
// the stream.
func (h *heldStream) watch() {
	var b [64]byte
	for h.junk < maxHeldJunk {
		n, err := h.conn.Read(b[:])
		if err != nil {
			break
		}
		h.junk += n
	}
	h.end()
}

// maxHeldJunk bounds what a client may send on a held stream's connection.
const maxHeldJunk = 64 << 10

// keepAliveDue is the keep-alive timer's: one comment is written, and the
// timer runs again.
func (h *heldStream) keepAliveDue() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.keepAlive = true
	h.mu.Unlock()
	h.ka.Reset(keepAliveInterval)
	h.kick()
}

// kick makes sure a writer runs: something was queued, the stream
// finished, a keep-alive is due or the gateway is stopping.
func (h *heldStream) kick() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	if h.writing {
		h.dirty = true
		h.mu.Unlock()
		return
	}
	h.writing = true
	h.mu.Unlock()
	if !h.g.tasks.start(h.write) {
		h.end() // the gateway closed: nothing writes any more
	}
}

// stop ends the stream for the gateway's shutdown, within a second even
// when a write to a client that does not read is under way: with its
// farewell (which queues a last message and finishes the stream), else
// at once, what is queued left unwritten.
func (h *heldStream) stop() {
	h.mu.Lock()
	if h.farewell != nil {
		h.hurry = true
	} else {
		h.stopping = true
	}
	h.mu.Unlock()
	_ = h.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if h.farewell != nil {
		h.farewell()
		return
	}
	h.kick()
}

// write is the writer: it writes what is queued, one chunk per pass,
// until nothing is, and ends the stream when it finished, when the
// gateway stops, or when a write fails (a client gone, or one that did
// not read for the write timeout).
func (h *heldStream) write() {
	for {
		h.mu.Lock()
		h.dirty = false
		ka, stopping, hurry := h.keepAlive, h.stopping, h.hurry
		h.keepAlive = false
		h.mu.Unlock()
		// Finished before the queue is taken: what was queued before
		// Finish is in this take (a send after Finish is refused).
		finished := h.st.Done()
		var events [][]byte
		timeout := h.timeout
		if hurry {
			timeout = min(timeout, time.Second)
		}
		if stopping {
			// As before: on shutdown what is queued is not written, and
			// the end is not held up by a client that does not read.
			finished, timeout = true, min(timeout, time.Second)
		} else {
			events = h.st.takeAll()
		}
		buf, n := appendChunk(nil, events, ka)
		if finished {
			buf = append(buf, "0\r\n\r\n"...)
		}
		if len(buf) > 0 {
			_ = h.conn.SetWriteDeadline(time.Now().Add(timeout))
			if _, err := h.conn.Write(buf); err != nil {
				h.end()
				return
			}
			if h.entry != nil && n > 0 {
				h.entry.mu.Lock()
				h.entry.bytes += int64(n)
				h.entry.mu.Unlock()
			}
		}
		if finished {
			h.end()
			return
		}
		h.mu.Lock()
		if !h.dirty {
			h.writing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
	}
}

// appendChunk appends events and a keep-alive comment as one chunk of a
// chunked body; n is the size of what they carry (the access log's
// bytes, which do not count the chunk's framing).
func appendChunk(buf []byte, events [][]byte, keepAlive bool) (_ []byte, n int) {
	for _, e := range events {
		n += len(e)
	}
	if keepAlive {
		n += len(keepAliveComment)
	}
	if n == 0 {
		return buf, 0
	}
	buf = strconv.AppendInt(buf, int64(n), 16)
	buf = append(buf, "\r\n"...)
	for _, e := range events {
		buf = append(buf, e...)
	}
	if keepAlive {
		buf = append(buf, keepAliveComment...)
	}
	return append(buf, "\r\n"...), n
}

const keepAliveComment = ": keep-alive\n\n"

// end ends the stream, once: the connection closes, the stream's slot and
// count are released, and the Middleware's end of the request (if it
// returned already) runs.
func (h *heldStream) end() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	after := h.after
	h.after = nil
	h.mu.Unlock()
	h.g.hangups.forget(h) // before its descriptor can be another's
	_ = h.conn.Close()
	h.ka.Stop()
	h.st.Finish()
	h.release()
	h.g.held.remove(h)
	if after != nil {
		after.run()
	}
}

// afterEnd runs e when the stream ends, or now if it has.
func (h *heldStream) afterEnd(e *requestEnd) {
	h.mu.Lock()
	if !h.ended {
		h.after = e
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	e.run()
}

// hijackedWriter stands for a response whose connection a held stream
// took: nothing written to it goes anywhere.
type hijackedWriter struct{}

func (hijackedWriter) Header() http.Header       { return http.Header{} }
func (hijackedWriter) Write([]byte) (int, error) { return 0, http.ErrHijacked }
func (hijackedWriter) WriteHeader(int)           {}
