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
)

// session is one stateful downstream session.
type session struct {
	id    string
	g     *Gateway
	route route
	// Who created it (S4): requests of any other owner are refused.
	owner    string
	alias    string
	user     string
	team     string
	clientIP string
	// turn serialises the session's requests (S11): a token per request.
	turn chan struct{}

	mu            sync.Mutex
	initialized   bool
	rev           string
	caps          mcpwire.ClientCaps
	clientName    string
	clientVersion string
	stream        streamer                      // GET stream, legacy SSE stream or stdout
	calls         map[string]context.CancelFunc // in-flight downstream requests by raw id
	subs          map[string]string             // subscribed uri -> server
	logLevel      int                           // minimum level relayed; -1: all
	closed        bool

	created  time.Time
	lastUsed atomic.Int64
	inflight atomic.Int32
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (g *Gateway) newSession(rt route, id *Identity) *session {
	if id == nil {
		id = &Identity{Owner: "anonymous"}
	}
	s := &session{
		id:       newSessionID(),
		g:        g,
		route:    rt,
		owner:    id.Owner,
		alias:    id.Alias,
		user:     id.User,
		team:     id.Team,
		clientIP: id.ClientIP,
		turn:     make(chan struct{}, 1),
		calls:    map[string]context.CancelFunc{},
		subs:     map[string]string{},
		logLevel: -1,
		created:  g.now(),
	}
	s.touch()
	g.sessions.Store(s.id, s)
	return s
}

func (g *Gateway) lookupSession(id string) *session {
	if v, ok := g.sessions.Load(id); ok {
		s := v.(*session)
		if !s.isClosed() {
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

// begin marks a request in flight, for idle expiry and cancellation.
func (s *session) begin(id jsonrpc.ID, cancel context.CancelFunc) {
	s.inflight.Add(1)
	s.touch()
	if id.IsValid() && cancel != nil {
		s.mu.Lock()
		s.calls[id.Raw()] = cancel
		s.mu.Unlock()
	}
}

func (s *session) end(id jsonrpc.ID) {
	if id.IsValid() {
		s.mu.Lock()
		delete(s.calls, id.Raw())
		s.mu.Unlock()
	}
	s.touch()
	s.inflight.Add(-1)
}

func (s *session) cancelCall(rawID string) {
	s.mu.Lock()
	cancel := s.calls[rawID]
	s.mu.Unlock()
	if cancel != nil {
		cancel()
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
	s.calls = map[string]context.CancelFunc{}
	subs := s.subs
	s.subs = map[string]string{}
	s.mu.Unlock()
	if st != nil {
		st.finish()
	}
	for _, c := range calls {
		c()
	}
	for uri, server := range subs {
		s.g.releaseSubscription(s, server, uri)
	}
	s.g.up.Unbind(sessionBinding(s)) // its own upstream sessions (relay.go)
	s.g.sessions.Delete(s.id)
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
	}
}

// expireIdle ends the sessions idle for longer than the idle timeout;
// a session with a request in flight is never idle (S12).
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
				s.close()
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
type streamSender struct {
	ch     chan []byte
	done   chan struct{}
	once   sync.Once
	legacy bool // legacy SSE: events are named "message"
}

func newStreamSender(legacy bool) *streamSender {
	return &streamSender{ch: make(chan []byte, 512), done: make(chan struct{}), legacy: legacy}
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
	select {
	case <-st.done:
		return errStreamDone
	default:
	}
	select {
	case st.ch <- buf:
		return nil
	case <-st.done:
		return errStreamDone
	default:
		// A downstream that does not read its stream loses messages
		// rather than stalling the upstream reader.
		return errors.New("stream backlog full")
	}
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
	flusher, _ := w.(http.Flusher)
	rc := http.NewResponseController(w)
	// Every write must finish in time: a client that stops reading loses
	// its stream instead of holding this goroutine forever.
	w = deadlineWriter{w, rc}
	t := time.NewTicker(keepAliveInterval)
	defer t.Stop()
	defer st.finish()
	for {
		select {
		case b := <-st.ch:
			if _, err := w.Write(b); err != nil {
				return
			}
			// Drain what is queued before flushing once.
			for n := len(st.ch); n > 0; n-- {
				if _, err := w.Write(<-st.ch); err != nil {
					return
				}
			}
			if flusher != nil {
				flusher.Flush()
			}
		case <-t.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		case <-st.done:
			// Flush what is left.
			for n := len(st.ch); n > 0; n-- {
				_, _ = w.Write(<-st.ch)
			}
			if flusher != nil {
				flusher.Flush()
			}
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
	rc *http.ResponseController
}

func (d deadlineWriter) Write(b []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	return d.ResponseWriter.Write(b)
}
