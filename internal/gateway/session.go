package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// session is one stateful downstream session.
type session struct {
	// id is the session's own random id: the key of g.sessions, what
	// operators see a prefix of (S13) and what terminations remember.
	id string
	// token is the sealed id its client holds (fleet.go); "": the client
	// holds id. resumed: this replica re-created it from its token.
	token   string
	resumed bool
	// hash is hashHex(id): what terminations, the shared state and the
	// bus know the session by (fleetbus.go).
	hash  string
	g     *Gateway
	route route
	// Who created it (S4): requests of any other owner are refused.
	owner    string
	alias    string
	user     string
	team     string
	clientIP string
	// slots bounds the requests served at once (S11): a token per request
	// (one per POST, a batch included), limits.max_inflight_per_session
	// of them; more wait for one.
	slots chan struct{}
	// ready is closed once initialize has completed: only then does the
	// session serve anything else (S11).
	ready     chan struct{}
	readyOnce sync.Once
	// ended is closed by close, releasing every request still waiting.
	ended chan struct{}

	mu            sync.Mutex
	initialized   bool
	rev           string
	caps          mcpwire.ClientCaps
	clientName    string
	clientVersion string
	stream        streamer                 // GET stream, legacy SSE stream or stdout
	streamVersion int64                    // fleet mode: when the GET stream was opened (fleetbus.go); 0: not claimed
	remoteStream  int64                    // fleet mode: version of a newer GET stream on another replica; 0: none known
	calls         map[string]*inflightCall // in-flight downstream requests by raw id
	subs          map[string]string        // subscribed uri -> server
	logLevel      int                      // minimum level relayed; -1: all
	closed        bool
	// binding names the session's own upstream sessions, used when it
	// declared roots (relay.go).
	binding upstream.Binding

	created  time.Time
	lastUsed atomic.Int64
	inflight atomic.Int32
	// levelPending: the log level came from the shared state and the
	// upstreams this replica calls have not heard it yet (fleetbus.go).
	levelPending atomic.Bool
	// stateTouched is when the shared state was last renewed (Unix ns).
	stateTouched atomic.Int64
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newSession creates and stores a session. initializing: the session is
// created by an initialize request and serves nothing else until
// markReady is called; otherwise it serves at once.
func (g *Gateway) newSession(rt route, id *Identity, initializing bool) *session {
	return g.storeSession(g.buildSession(rt, id, newSessionID()), initializing)
}

// buildSession makes the session sid for the caller id, not yet stored.
func (g *Gateway) buildSession(rt route, id *Identity, sid string) *session {
	if id == nil {
		id = &Identity{Owner: "anonymous"}
	}
	s := &session{
		id:       sid,
		hash:     hashHex(sid),
		g:        g,
		route:    rt,
		owner:    id.Owner,
		alias:    id.Alias,
		user:     id.User,
		team:     id.Team,
		clientIP: id.ClientIP,
		slots:    make(chan struct{}, g.limits().MaxInflightPerSession),
		ready:    make(chan struct{}),
		ended:    make(chan struct{}),
		calls:    map[string]*inflightCall{},
		subs:     map[string]string{},
		logLevel: -1,
		created:  g.now(),
	}
	// Made once: every call of a session that declared roots carries it
	// (relay.go).
	s.binding = upstream.Binding{Key: "s/" + s.id, Origin: s, Started: s.boundStarted}
	s.touch()
	return s
}

// storeSession makes s findable; initializing: it serves nothing but
// initialize until markReady.
func (g *Gateway) storeSession(s *session, initializing bool) *session {
	if !initializing {
		s.markReady()
	}
	g.sessions.Store(s.id, s)
	g.byHash.Store(s.hash, s)
	return s
}

// lookupSession finds the live session whose client holds sid: by its
// local id, or by the one a sealed id names. A sealed session is found
// by its token only: the local id inside is not a credential.
func (g *Gateway) lookupSession(sid string) *session {
	_, local, sealed := g.openSessionID(sid)
	return g.liveSession(sid, local, sealed)
}

// liveSession is lookupSession for an id already opened: local is the id
// a sealed sid names.
func (g *Gateway) liveSession(sid, local string, sealed bool) *session {
	if !sealed {
		local = sid
	}
	if v, ok := g.sessions.Load(local); ok {
		s := v.(*session)
		if !s.isClosed() && (sealed || s.token == "") {
			return s
		}
	}
	return nil
}

func (s *session) touch() { s.lastUsed.Store(s.g.now().UnixNano()) }

func (s *session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *session) scopeCaps() mcpwire.ClientCaps {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caps
}

// inflightCall is one request in flight, by identity: with requests of
// a session running concurrently, a client that reuses an id must not
// make the first request's end forget the second's cancel.
type inflightCall struct{ cancel context.CancelFunc }

// markReady lets the session serve other requests (S11); called once
// initialize has completed.
func (s *session) markReady() {
	s.readyOnce.Do(func() { close(s.ready) })
}

// acquire waits until the session may serve one more request: initialize
// has completed and a slot is free (S11). false when the session ended
// first (ended: true) or done was closed (the client went away).
func (s *session) acquire(done <-chan struct{}) (ok, ended bool) {
	select {
	case <-s.ready:
	case <-s.ended:
		return false, true
	case <-done:
		return false, false
	}
	select {
	case s.slots <- struct{}{}:
	case <-s.ended:
		return false, true
	case <-done:
		return false, false
	}
	select {
	case <-s.ended: // both were ready: the end wins
		<-s.slots
		return false, true
	default:
	}
	return true, false
}

func (s *session) release() { <-s.slots }

// begin marks a request in flight, for idle expiry and cancellation; the
// returned end must be called when it is done.
func (s *session) begin(id jsonrpc.ID, cancel context.CancelFunc) (end func()) {
	s.inflight.Add(1)
	s.touch()
	var c *inflightCall
	if id.IsValid() && cancel != nil {
		c = &inflightCall{cancel: cancel}
		s.mu.Lock()
		if s.closed {
			// Ended while this request waited: it ends at once too.
			cancel()
		} else {
			s.calls[id.Raw()] = c
		}
		s.mu.Unlock()
	}
	return func() {
		if c != nil {
			s.mu.Lock()
			if s.calls[id.Raw()] == c {
				delete(s.calls, id.Raw())
			}
			s.mu.Unlock()
		}
		s.touch()
		s.inflight.Add(-1)
	}
}

func (s *session) cancelCall(rawID string) {
	s.mu.Lock()
	c := s.calls[rawID]
	s.mu.Unlock()
	if c != nil {
		c.cancel()
	}
}

// attachStream installs the standalone stream; only one at a time.
func (s *session) attachStream(st streamer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || (s.stream != nil && !s.stream.isDone()) {
		return false
	}
	s.stream = st
	return true
}

func (s *session) detachStream(st streamer) {
	s.mu.Lock()
	if s.stream == st {
		s.stream = nil
	}
	s.mu.Unlock()
}

// notify sends a message on the session's standalone stream, if any.
func (s *session) notify(msg *jsonrpc.Message) bool {
	s.mu.Lock()
	st := s.stream
	s.mu.Unlock()
	if st == nil {
		return false
	}
	return st.send(msg) == nil
}

// close ends the session: streams end, in-flight calls are cancelled,
// upstream subscriptions are released.
func (s *session) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	st := s.stream
	calls := s.calls
	s.calls = map[string]*inflightCall{}
	subs := s.subs
	s.subs = map[string]string{}
	bound := s.caps.Roots // only a session that declared roots has upstream sessions of its own
	s.mu.Unlock()
	close(s.ended)
	if st != nil {
		st.finish()
	}
	for _, c := range calls {
		c.cancel()
	}
	for uri, server := range subs {
		s.g.releaseSubscription(s, server, uri)
	}
	if bound {
		s.g.up.Unbind(sessionBinding(s)) // its own upstream sessions (relay.go)
	}
	// Only itself: a copy resumed from the same sealed id may already
	// have taken its place.
	s.g.sessions.CompareAndDelete(s.id, s)
	s.g.byHash.CompareAndDelete(s.hash, s)
	s.g.forgetCopy(s)
}

// janitor ends idle sessions that have nothing in flight (S12).
func (g *Gateway) janitor() {
	t := time.NewTicker(min(g.idleTimeout/4, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		g.expireIdle()
		g.purgeTerminations(context.Background())
	}
}

// expireIdle ends the sessions idle for longer than the idle timeout;
// a session with a request in flight is never idle (S12). Their ids are
// remembered, so their clients are told to start over (S8.2).
func (g *Gateway) expireIdle() {
	cutoff := g.now().Add(-g.idleTimeout).UnixNano()
	g.sessions.Range(func(_, v any) bool {
		s := v.(*session)
		if s.inflight.Load() == 0 && s.lastUsed.Load() < cutoff {
			s.mu.Lock()
			streaming := s.stream != nil && !s.stream.isDone()
			s.mu.Unlock()
			if !streaming {
				g.log.Debug("session expired", "session", s.id[:8])
				g.retire(s)
			}
		}
		return true
	})
}

// sender delivers messages related to one request (or one session) to the
// downstream.
type sender interface {
	send(msg *jsonrpc.Message) error
}

// streamer is a session's standalone channel to its downstream.
type streamer interface {
	sender
	finish()
	isDone() bool
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
	st.mu.Unlock()
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

func (st *streamSender) finish() { st.once.Do(func() { close(st.done) }) }

func (st *streamSender) isDone() bool {
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
	defer st.finish()
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
