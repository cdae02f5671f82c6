package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	sessions "github.com/mcpgate/mcpgate/internal/session"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// session is one stateful downstream session: the record the session
// package owns (its id, owner, lifecycle, calls, subscriptions, level and
// stream, behind its methods), and what only the gateway knows of it: its
// route, its gateway and its own upstream sessions. Embedding keeps the
// record's methods at hand (s.ID(), s.Begin(...)) while every field of
// it stays behind them.
type session struct {
	*sessions.Session
	g     *Gateway
	route route
	// binding names the session's own upstream sessions, made by the
	// first call of a session that declared roots (relay.go): most never
	// need one.
	binding atomic.Pointer[upstream.Binding]
	// stateTouched is when the shared state was last renewed (Unix ns;
	// fleetbus.go).
	stateTouched atomic.Int64
	// shortHash is the short hash of the id that the access log, the
	// debug header and traces name the session by: made
	// once here rather than a sha256 and two strings on every request.
	shortHash string
}

// ShortHash is the first idPrefixLen hex digits of the sha256 of the
// session's id: it names the session in logs without revealing the id.
func (s *session) ShortHash() string { return s.shortHash }

// newSession creates and stores a session. initializing: the session is
// created by an initialize request and serves nothing else until
// MarkReady is called; otherwise it serves at once.
func (g *Gateway) newSession(rt route, id *Identity, initializing bool) *session {
	return g.storeSession(g.buildSession(rt, id, sessions.Params{}), initializing)
}

// buildSession makes a session of p for the caller id on rt, not yet
// stored.
func (g *Gateway) buildSession(rt route, id *Identity, p sessions.Params) *session {
	if id == nil {
		id = &Identity{Owner: "anonymous"}
	}
	p.Who = sessions.Who{Owner: id.Owner, Alias: id.Alias, User: id.User, Team: id.Team, ClientIP: id.ClientIP}
	p.MaxInflight = g.limits().MaxInflightPerSession
	p.Now = g.now
	ss := sessions.New(p)
	return &session{Session: ss, g: g, route: rt, shortHash: strings.Clone(hashHex(ss.ID())[:idPrefixLen])}
}

// storeSession makes s findable; initializing: it serves nothing but
// initialize until MarkReady.
func (g *Gateway) storeSession(s *session, initializing bool) *session {
	if !initializing {
		s.MarkReady()
	}
	g.sessions.Insert(s)
	return s
}

// close ends the session: streams end, in-flight calls are cancelled,
// upstream subscriptions are released.
func (s *session) close() {
	e, ok := s.End()
	if !ok {
		return
	}
	for uri, server := range e.Subs {
		s.g.releaseSubscription(s, server, uri)
	}
	if e.Roots {
		s.g.up.Unbind(sessionBinding(s)) // its own upstream sessions (relay.go)
	}
	// Only itself: a copy resumed from the same sealed id may already
	// have taken its place.
	s.g.sessions.Remove(s)
	s.g.forgetCopy(s)
}

// janitor ends idle sessions that have nothing in flight (S12), until ctx
// ends.
func (g *Gateway) janitor(ctx context.Context) {
	t := time.NewTicker(min(g.idleTimeout/4, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.expireIdle()
		if err := g.terms.Purge(ctx); err != nil {
			g.log.Warn("could not forget expired session ids", "error", err)
		}
	}
}

// expireIdle ends the sessions idle for longer than the idle timeout;
// a session with a request in flight is never idle (S12). Their ids are
// remembered, so their clients are told to start over (S8.2).
func (g *Gateway) expireIdle() {
	for _, s := range g.sessions.Idle(g.now().Add(-g.idleTimeout)) {
		g.log.Debug("session expired", "session", s.Short())
		g.retire(s)
	}
}

// sender delivers messages related to one request (or one session) to the
// downstream.
type sender interface {
	send(msg *jsonrpc.Message) error
}

var errStreamDone = errors.New("stream closed")

// streamSender is an SSE stream owned by an HTTP handler goroutine: sends
// are queued and written by that goroutine, never blocking the sender.
//
// The queue is a slice that grows with use, not a buffered channel: an
// idle stream (most of them: a client's GET stream waits for the rare
// notification) then costs a few words instead of 512 channel slots.
type streamSender struct {
	mu      sync.Mutex
	pending [][]byte      // events waiting to be written, under mu
	wake    chan struct{} // capacity 1: something was queued
	done    chan struct{}
	once    sync.Once
	legacy  bool // legacy SSE: events are named "message"
	// writeTimeout bounds writing one event (limits.sse_write_timeout): a
	// client that stops reading loses its stream, and with it the queue,
	// within that time; its session survives.
	writeTimeout time.Duration
	// queued is the size of the events waiting in pending (under mu),
	// bounded by streamBacklogBytes: a count alone would let a few large
	// messages pile up hundreds of megabytes behind a slow client.
	queued int64
	// held writes the stream once it was held off net/http (held.go;
	// under mu): sends and Finish kick it instead of waking run.
	held *heldStream
}

// Bounds of the events queued for one stream. An event that would go over
// either is dropped, unless the queue is empty (one message is always let
// through, whatever its size).
const (
	streamBacklogBytes  = 4 << 20
	streamBacklogEvents = 512
)

func newStreamSender(legacy bool, writeTimeout time.Duration) *streamSender {
	return &streamSender{wake: make(chan struct{}, 1), done: make(chan struct{}), legacy: legacy, writeTimeout: writeTimeout}
}

// Send is send, for the session that holds st as its stream.
func (st *streamSender) Send(msg *jsonrpc.Message) error { return st.send(msg) }

func (st *streamSender) send(msg *jsonrpc.Message) error {
	ev := &jsonrpc.Event{Data: jsonrpc.Encode(msg)}
	if st.legacy {
		ev.Name = "message"
	}
	return st.sendEvent(ev)
}

func (st *streamSender) sendEvent(ev *jsonrpc.Event) error {
	buf := jsonrpc.AppendEvent(nil, ev)
	n := int64(len(buf))
	st.mu.Lock()
	select {
	case <-st.done:
		st.mu.Unlock()
		return errStreamDone
	default:
	}
	if len(st.pending) > 0 && (len(st.pending) >= streamBacklogEvents || st.queued+n > streamBacklogBytes) {
		st.mu.Unlock()
		return errBacklogFull
	}
	st.pending = append(st.pending, buf)
	st.queued += n
	h := st.held
	st.mu.Unlock()
	if h != nil {
		h.kick()
		return nil
	}
	select {
	case st.wake <- struct{}{}:
	default: // already signalled: the writer takes everything queued
	}
	return nil
}

// errBacklogFull: a downstream that does not read its stream loses
// messages rather than stalling the upstream reader or growing memory.
var errBacklogFull = errors.New("stream backlog full")

// backlog is the size of the events waiting to be written.
func (st *streamSender) backlog() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.queued
}

// takeAll empties the queue and returns what was in it.
func (st *streamSender) takeAll() [][]byte {
	st.mu.Lock()
	defer st.mu.Unlock()
	all := st.pending
	st.pending = nil
	st.queued = 0
	return all
}

// Finish ends the stream: what is queued is written, then it closes.
func (st *streamSender) Finish() {
	st.once.Do(func() {
		close(st.done)
		st.mu.Lock()
		h := st.held
		st.mu.Unlock()
		if h != nil {
			h.kick()
		}
	})
}

// holdBy hands the stream's writing to h, which writes what is queued
// already: from now on run is not used.
func (st *streamSender) holdBy(h *heldStream) {
	st.mu.Lock()
	st.held = h
	queued := len(st.pending) > 0
	st.mu.Unlock()
	// After held is set: a Finish from now on kicks h itself.
	if queued || st.Done() {
		h.kick()
	}
}

// Done reports whether the stream ended.
func (st *streamSender) Done() bool {
	select {
	case <-st.done:
		return true
	default:
		return false
	}
}

// run writes queued events until the client goes away or finish is called.
func (st *streamSender) run(ctx context.Context, w http.ResponseWriter, stop <-chan struct{}) {
	rc := http.NewResponseController(w)
	// Every write must finish in time: a client that stops reading loses
	// its stream instead of holding this goroutine forever. The flush is
	// what reaches the network, so its error ends the stream too, at
	// once rather than at the next event.
	d := st.writeTimeout
	if d <= 0 {
		d = writeTimeout
	}
	w = deadlineWriter{w, rc, d}
	flush := func() bool {
		err := rc.Flush()
		return err == nil || errors.Is(err, http.ErrNotSupported)
	}
	t := time.NewTicker(keepAliveInterval)
	defer t.Stop()
	defer st.Finish()
	for {
		select {
		case <-st.wake:
			// Write all that is queued, then flush once.
			for _, b := range st.takeAll() {
				if _, err := w.Write(b); err != nil {
					return
				}
			}
			if !flush() {
				return
			}
		case <-t.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
			if !flush() {
				return
			}
		case <-st.done:
			// Flush what is left.
			for _, b := range st.takeAll() {
				_, _ = w.Write(b)
			}
			flush()
			return
		case <-ctx.Done():
			return
		case <-stop:
			return
		}
	}
}

type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d deadlineWriter) Write(b []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.ResponseWriter.Write(b)
}
