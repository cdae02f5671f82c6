// Package session owns the downstream session table: the stateful
// sessions a gateway replica holds, how one is created, found, bound to
// its owner, ended and swept when idle, and each session's own state (its
// lifecycle, request slots, calls in flight, subscriptions, log level and
// standalone stream). Every access to a session goes through its methods,
// which take its lock: no other package locks a session or writes its
// fields.
//
// It knows nothing of HTTP, routes or upstreams: the gateway keeps those
// in its own type, which embeds a *Session, and does what ending a
// session means beyond it (releasing upstream subscriptions, shared
// state) with what End returns. It must not import internal/gateway.
package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// NewID is a new random session id (128 bits, hex).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Hash is what terminations, the shared state and the fleet's bus know a
// session id by: its sha256, hex. Never the id itself, which is a
// credential.
func Hash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// Who is who created a session (SPEC S4): its owner fingerprint and what
// operators see of the caller. Requests of any other owner are refused.
type Who struct {
	Owner    string // "anonymous" when the caller had none
	Alias    string
	User     string
	Team     string
	ClientIP string
}

// ErrForeign refuses a request of another owner than the session's
// (S4.2).
var ErrForeign = errors.New("the session is bound to a different caller")

// Stream is a session's standalone channel to its client (a GET stream,
// a legacy SSE stream, stdout): one at a time.
type Stream interface {
	Send(msg *jsonrpc.Message) error
	Finish()
	Done() bool
}

// Params are what a new session is made of.
type Params struct {
	// ID is the session's local id ("": NewID), Token the sealed id its
	// client holds instead ("": it holds ID).
	ID, Token string
	Who       Who
	// MaxInflight bounds the requests it serves at once (S11).
	MaxInflight int
	// Now is the gateway's clock; nil: time.Now.
	Now func() time.Time
	// Resumed: re-created on this replica from its sealed id, with the
	// revision and capabilities it holds, ready at once.
	Resumed bool
	Created time.Time // zero: Now()
	Rev     string
	Caps    mcpwire.ClientCaps
}

// Session is one stateful downstream session.
type Session struct {
	// id is the session's own random id: the key of the table, what
	// operators see a prefix of (S13) and what terminations remember.
	id string
	// token is the sealed id its client holds; "": the client holds id.
	// Set once, before the session is in a table (SetToken).
	token   string
	resumed bool
	// hash is Hash(id): what terminations, the shared state and the bus
	// know the session by.
	hash    string
	who     Who
	created time.Time
	now     func() time.Time

	// slots bounds the requests served at once (S11): a token per request
	// (one per POST, a batch included); more wait for one.
	slots chan struct{}
	// ready is closed once initialize has completed: only then does the
	// session serve anything else (S11).
	ready     chan struct{}
	readyOnce sync.Once
	// ended is closed by End, releasing every request still waiting.
	ended chan struct{}

	lastUsed atomic.Int64 // Unix ns
	inflight atomic.Int32
	// levelPending: the log level came from the shared state and the
	// upstreams this replica calls have not heard it yet.
	levelPending atomic.Bool

	// mu guards the fields below.
	mu            sync.Mutex
	closed        bool
	initialized   bool
	rev           string
	caps          mcpwire.ClientCaps
	clientName    string
	clientVersion string
	stream        Stream
	streamVersion int64            // fleet mode: when the GET stream was opened; 0: not claimed
	remoteStream  int64            // fleet mode: version of a newer GET stream on another replica; 0: none known
	calls         map[string]*call // in-flight requests by raw id
	subs          map[string]string
	logLevel      int // minimum level relayed; -1: all
}

// New makes a session, not yet in a table.
func New(p Params) *Session {
	if p.ID == "" {
		p.ID = NewID()
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Who.Owner == "" {
		p.Who.Owner = "anonymous"
	}
	s := &Session{
		id:       p.ID,
		token:    p.Token,
		resumed:  p.Resumed,
		hash:     Hash(p.ID),
		who:      p.Who,
		created:  p.Created,
		now:      p.Now,
		slots:    make(chan struct{}, p.MaxInflight),
		ready:    make(chan struct{}),
		ended:    make(chan struct{}),
		calls:    map[string]*call{},
		subs:     map[string]string{},
		logLevel: -1,
	}
	if s.created.IsZero() {
		s.created = p.Now()
	}
	if p.Resumed {
		s.rev, s.caps, s.initialized = p.Rev, p.Caps, true
		s.MarkReady()
	}
	s.Touch()
	return s
}

// Base is s itself: what a Table needs of the type that embeds it.
func (s *Session) Base() *Session { return s }

// ID is the session's local id. A credential: log only a prefix of it.
func (s *Session) ID() string { return s.id }

// Short is the prefix of its id that logs show.
func (s *Session) Short() string { return s.id[:min(8, len(s.id))] }

// Hash is Hash(ID()).
func (s *Session) Hash() string { return s.hash }

// Token is the sealed id its client holds; "": the client holds ID.
func (s *Session) Token() string { return s.token }

// SetToken sets the sealed id, before the session is in a table.
func (s *Session) SetToken(tok string) { s.token = tok }

// ClientID is the session id its client holds: the sealed token, or the
// local id.
func (s *Session) ClientID() string {
	if s.token != "" {
		return s.token
	}
	return s.id
}

// Resumed: this replica re-created it from its sealed id.
func (s *Session) Resumed() bool { return s.resumed }

// Who is who created it.
func (s *Session) Who() Who { return s.who }

// Owner is its owner fingerprint (S4.1).
func (s *Session) Owner() string { return s.who.Owner }

// CheckOwner refuses a request of any other owner than the session's
// (S4.2): ErrForeign.
func (s *Session) CheckOwner(owner string) error {
	if owner != s.who.Owner {
		return ErrForeign
	}
	return nil
}

// Created is when it was created (for a resumed one, when its id was
// issued).
func (s *Session) Created() time.Time { return s.created }

// Touch records a use now.
func (s *Session) Touch() { s.lastUsed.Store(s.now().UnixNano()) }

// LastUsed is when it was last used.
func (s *Session) LastUsed() time.Time { return time.Unix(0, s.lastUsed.Load()) }

// InFlight is how many of its requests are being served.
func (s *Session) InFlight() int { return int(s.inflight.Load()) }

// Closed reports whether it ended.
func (s *Session) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Ended is closed when the session ends.
func (s *Session) Ended() <-chan struct{} { return s.ended }

// MarkReady lets the session serve other requests (S11); called once
// initialize has completed.
func (s *Session) MarkReady() {
	s.readyOnce.Do(func() { close(s.ready) })
}

// Acquire waits until the session may serve one more request: initialize
// has completed and a slot is free (S11). false when the session ended
// first (ended: true) or done was closed (the client went away).
func (s *Session) Acquire(done <-chan struct{}) (ok, ended bool) {
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

// Release gives back the slot Acquire took.
func (s *Session) Release() { <-s.slots }

// call is one request in flight, by identity: with requests of a session
// running concurrently, a client that reuses an id must not make the
// first request's end forget the second's cancel.
type call struct{ cancel context.CancelFunc }

// Begin marks a request in flight, for idle expiry and cancellation
// (CancelCall); the returned end must be called when it is done.
func (s *Session) Begin(id jsonrpc.ID, cancel context.CancelFunc) (end func()) {
	s.inflight.Add(1)
	s.Touch()
	var c *call
	if id.IsValid() && cancel != nil {
		c = &call{cancel: cancel}
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
		s.Touch()
		s.inflight.Add(-1)
	}
}

// CancelCall cancels the request in flight whose raw id is rawID, if any.
func (s *Session) CancelCall(rawID string) {
	s.mu.Lock()
	c := s.calls[rawID]
	s.mu.Unlock()
	if c != nil {
		c.cancel()
	}
}

// Ending is what End took from the session, for the owner of what lies
// beyond it (upstream subscriptions and sessions) to release.
type Ending struct {
	// Subs are its subscriptions: uri -> server.
	Subs map[string]string
	// Roots: it declared roots, so it has upstream sessions of its own.
	Roots bool
}

// End ends the session: its stream ends, its requests in flight are
// cancelled, those waiting are released. ok is false when it had ended
// already.
func (s *Session) End() (e Ending, ok bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Ending{}, false
	}
	s.closed = true
	st := s.stream
	calls := s.calls
	s.calls = map[string]*call{}
	e.Subs = s.subs
	s.subs = map[string]string{}
	e.Roots = s.caps.Roots
	s.mu.Unlock()
	close(s.ended)
	if st != nil {
		st.Finish()
	}
	for _, c := range calls {
		c.cancel()
	}
	return e, true
}

// Initialize records what initialize settled: the revision, the client's
// capabilities and its name and version.
func (s *Session) Initialize(rev string, caps mcpwire.ClientCaps, name, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev, s.caps, s.clientName, s.clientVersion = rev, caps, name, version
}

// SetInitialized records the client's notifications/initialized.
func (s *Session) SetInitialized() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initialized = true
}

// Initialized reports whether the client sent notifications/initialized
// (or the session was resumed).
func (s *Session) Initialized() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initialized
}

// Rev is the revision initialize settled ("" before).
func (s *Session) Rev() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Caps are the client's capabilities.
func (s *Session) Caps() mcpwire.ClientCaps {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caps
}

// Client is the client's name and version, as its initialize said.
func (s *Session) Client() (name, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientName, s.clientVersion
}
