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
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unique"

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
//
// Most sessions are idle most of the time, and a gateway holds many of
// them, so the record is small and lazy: what only some sessions use (a
// channel to wait on, a second call in flight, subscriptions) is made when
// first used and dropped when no longer needed (issue 25:
// TestIdleSessionFootprint in the gateway measures it).
type Session struct {
	// id is the session's own random id: the key of the table, what
	// operators see a prefix of (S13) and what terminations remember.
	id string
	// token is the sealed id its client holds; "": the client holds id.
	// Set once, before the session is in a table (SetToken).
	token string
	// hash is Hash(id): what terminations, the shared state and the bus
	// know the session by.
	hash string
	// who is interned: the sessions of one caller (from one address)
	// share one copy.
	who     unique.Handle[Who]
	created time.Time
	now     func() time.Time

	lastUsed atomic.Int64 // Unix ns
	inflight atomic.Int32
	// levelPending: the log level came from the shared state and the
	// upstreams this replica calls have not heard it yet.
	levelPending atomic.Bool
	resumed      bool

	// mu guards the fields below.
	mu sync.Mutex
	// maxSlots bounds the requests served at once (S11), used is how many
	// hold a slot (one per POST, a batch included); more wait for one
	// (waits.slots).
	maxSlots, used int32
	// closed: End ran. ready: initialize has completed, and the session
	// serves anything else (S11).
	closed, ready bool
	initialized   bool
	logLevel      int32 // minimum level relayed; -1: all
	// waits is what requests wait on, made by the first that waits: most
	// sessions never wait for anything.
	waits *waits

	rev           string
	caps          mcpwire.ClientCaps
	clientName    string
	clientVersion string
	stream        Stream
	streamVersion int64 // fleet mode: when the GET stream was opened; 0: not claimed
	remoteStream  int64 // fleet mode: version of a newer GET stream on another replica; 0: none known
	// The requests in flight by raw id: the first in call (a session
	// mostly has one at a time, which then needs no map), the others in
	// calls (nil when empty). A raw id is in one of the two.
	call  *InFlight
	calls map[string]*InFlight
	subs  map[string]string // uri -> server; nil when empty

	// idHeader is ClientIDHeader's value, made by its first call.
	idHeader atomic.Pointer[[]string]
}

// waits is what a session's requests wait on (under its mu).
type waits struct {
	// ended is closed by End; made by the first who waits for the end
	// (Ended, a waiting Acquire) and kept.
	ended chan struct{}
	// ready is what requests that came before initialize completed wait
	// on: closed and dropped by MarkReady.
	ready chan struct{}
	// slots are the requests waiting for a slot, first come first served,
	// each on its own channel of capacity 1 that Release hands the slot
	// over on; nil when none waits.
	slots []chan struct{}
}

// waitsLocked is s.waits, made if need be.
func (s *Session) waitsLocked() *waits {
	if s.waits == nil {
		s.waits = &waits{}
	}
	return s.waits
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
		who:      unique.Make(p.Who),
		created:  p.Created,
		now:      p.Now,
		maxSlots: int32(min(p.MaxInflight, math.MaxInt32)),
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

// ClientIDHeader is ClientID as a header value, made once: every
// response of the session carries it. It must not be modified (Header's
// Set replaces a value and Add appends to a copy, as its capacity is 1).
func (s *Session) ClientIDHeader() []string {
	id := s.ClientID()
	if v := s.idHeader.Load(); v != nil && (*v)[0] == id {
		return *v
	}
	v := []string{id}[:1:1]
	s.idHeader.Store(&v)
	return v
}

// Resumed: this replica re-created it from its sealed id.
func (s *Session) Resumed() bool { return s.resumed }

// Who is who created it.
func (s *Session) Who() Who { return s.who.Value() }

// Owner is its owner fingerprint (S4.1).
func (s *Session) Owner() string { return s.who.Value().Owner }

// CheckOwner refuses a request of any other owner than the session's
// (S4.2): ErrForeign.
func (s *Session) CheckOwner(owner string) error {
	if owner != s.who.Value().Owner {
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

// closedCh is an ended session's Ended when nobody asked before it ended.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Ended is closed when the session ends.
func (s *Session) Ended() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endedLocked()
}

func (s *Session) endedLocked() chan struct{} {
	if s.waits != nil && s.waits.ended != nil {
		return s.waits.ended
	}
	if s.closed {
		return closedCh
	}
	w := s.waitsLocked()
	w.ended = make(chan struct{})
	return w.ended
}

// MarkReady lets the session serve other requests (S11); called once
// initialize has completed.
func (s *Session) MarkReady() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		return
	}
	s.ready = true
	if s.waits != nil && s.waits.ready != nil {
		close(s.waits.ready)
		s.waits.ready = nil
	}
}

// Acquire waits until the session may serve one more request: initialize
// has completed and a slot is free (S11). false when the session ended
// first (ended: true) or done was closed (the client went away).
func (s *Session) Acquire(done <-chan struct{}) (ok, ended bool) {
	return s.acquire(nil, done)
}

// AcquireFor is Acquire until ctx ends, asking ctx for its Done channel
// only when it has to wait: a request's context may make that channel
// only when asked (package cancelctx), and a free slot is the usual case.
func (s *Session) AcquireFor(ctx context.Context) (ok, ended bool) {
	return s.acquire(ctx, nil)
}

// acquire is Acquire with done, or ctx's Done when done is nil.
func (s *Session) acquire(ctx context.Context, done <-chan struct{}) (ok, ended bool) {
	s.mu.Lock()
	for !s.ready {
		if s.closed {
			s.mu.Unlock()
			return false, true
		}
		w := s.waitsLocked()
		if w.ready == nil {
			w.ready = make(chan struct{})
		}
		ready, end := w.ready, s.endedLocked()
		s.mu.Unlock()
		if done == nil && ctx != nil {
			done = ctx.Done()
		}
		select {
		case <-ready:
		case <-end:
			return false, true
		case <-done:
			return false, false
		}
		s.mu.Lock()
	}
	if s.closed {
		s.mu.Unlock()
		return false, true
	}
	if s.used < s.maxSlots {
		s.used++
		s.mu.Unlock()
		return true, false
	}
	w := make(chan struct{}, 1)
	ws := s.waitsLocked()
	ws.slots = append(ws.slots, w)
	end := s.endedLocked()
	s.mu.Unlock()
	if done == nil && ctx != nil {
		done = ctx.Done()
	}
	select {
	case <-w:
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed { // handed a slot as it ended: the end wins
			s.releaseLocked()
			return false, true
		}
		return true, false
	case <-end:
		s.giveUp(w)
		return false, true
	case <-done:
		s.giveUp(w)
		return false, false
	}
}

// giveUp takes w out of the waiters, or, when Release handed it a slot
// meanwhile, passes that slot on.
func (s *Session) giveUp(w chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws := s.waits; ws != nil {
		if i := slices.Index(ws.slots, w); i >= 0 {
			ws.slots = slices.Delete(ws.slots, i, i+1)
			if len(ws.slots) == 0 {
				ws.slots = nil
			}
			return
		}
	}
	s.releaseLocked()
}

// Release gives back the slot Acquire took.
func (s *Session) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

// releaseLocked hands the slot to the first waiter, or frees it.
func (s *Session) releaseLocked() {
	ws := s.waits
	if ws == nil || len(ws.slots) == 0 {
		s.used--
		return
	}
	w := ws.slots[0]
	ws.slots[0] = nil
	ws.slots = ws.slots[1:]
	if len(ws.slots) == 0 {
		ws.slots = nil
	}
	w <- struct{}{} // capacity 1, sent once: never blocks
}

// InFlight is one request in flight (Start), by identity: with requests
// of a session running concurrently, a client that reuses an id must not
// make the first request's end forget the second's cancel.
type InFlight struct {
	raw    string
	cancel Canceler
}

// Canceler cancels one request in flight: a context.CancelFunc
// (CancelFunc), or a context that is its own cancel (the gateway's
// cancelctx.Context), which a method value would cost an allocation per
// request to pass as a func. Cancel may be called more than once.
type Canceler interface{ Cancel() }

// CancelFunc is a context.CancelFunc as a Canceler (no allocation: a
// func is one word).
type CancelFunc context.CancelFunc

// Cancel implements Canceler.
func (f CancelFunc) Cancel() { f() }

// Begin marks a request in flight, for idle expiry and cancellation
// (CancelCall); the returned end must be called when it is done.
func (s *Session) Begin(id jsonrpc.ID, cancel context.CancelFunc) (end func()) {
	c := s.Start(id, cancel)
	return func() { s.Finish(c) }
}

// Start is Begin without a function to allocate: Finish(c) must be
// called with what it returns (nil for a request that cannot be
// cancelled) when the request is done.
func (s *Session) Start(id jsonrpc.ID, cancel context.CancelFunc) *InFlight {
	if cancel == nil {
		return s.StartIn(nil, id, nil)
	}
	return s.StartIn(nil, id, CancelFunc(cancel))
}

// StartIn is Start with the caller's own InFlight c to fill (nil: one is
// allocated), for a caller that allocates it with something else, and
// its cancel as a Canceler. c must not be used again until Finish(c).
func (s *Session) StartIn(c *InFlight, id jsonrpc.ID, cancel Canceler) *InFlight {
	s.inflight.Add(1)
	s.Touch()
	if !id.IsValid() || cancel == nil {
		return nil
	}
	if c == nil {
		c = new(InFlight)
	}
	*c = InFlight{raw: id.Raw(), cancel: cancel}
	s.mu.Lock()
	if s.closed {
		// Ended while this request waited: it ends at once too.
		cancel.Cancel()
	} else {
		s.putCallLocked(c.raw, c)
	}
	s.mu.Unlock()
	return c
}

// Finish ends a request Start marked in flight.
func (s *Session) Finish(c *InFlight) {
	if c != nil {
		s.mu.Lock()
		s.dropCallLocked(c.raw, c)
		s.mu.Unlock()
	}
	s.Touch()
	s.inflight.Add(-1)
}

// putCallLocked records c as the request in flight with raw id raw (the
// latest of that id wins, as it would in one map).
func (s *Session) putCallLocked(raw string, c *InFlight) {
	switch {
	case s.call != nil && s.call.raw == raw:
		s.call = c
	case s.calls[raw] != nil:
		s.calls[raw] = c
	case s.call == nil:
		s.call = c
	default:
		if s.calls == nil {
			s.calls = map[string]*InFlight{}
		}
		s.calls[raw] = c
	}
}

// dropCallLocked forgets c, if it is still what raw names.
func (s *Session) dropCallLocked(raw string, c *InFlight) {
	if s.call == c {
		s.call = nil
		return
	}
	if s.calls[raw] == c {
		delete(s.calls, raw)
		if len(s.calls) == 0 {
			s.calls = nil // a map keeps its buckets: an idle session keeps none
		}
	}
}

// CancelCall cancels the request in flight whose raw id is rawID, if any.
func (s *Session) CancelCall(rawID string) {
	s.mu.Lock()
	c := s.calls[rawID]
	if s.call != nil && s.call.raw == rawID {
		c = s.call
	}
	s.mu.Unlock()
	if c != nil {
		c.cancel.Cancel()
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
	first, calls := s.call, s.calls
	s.call, s.calls = nil, nil
	e.Subs = s.subs
	s.subs = nil
	e.Roots = s.caps.Roots
	if s.waits != nil && s.waits.ended != nil {
		close(s.waits.ended)
	}
	s.mu.Unlock()
	if st != nil {
		st.Finish()
	}
	if first != nil {
		first.cancel.Cancel()
	}
	for _, c := range calls {
		c.cancel.Cancel()
	}
	return e, true
}

// Initialize records what initialize settled: the revision, the client's
// capabilities and its name and version.
func (s *Session) Initialize(rev string, caps mcpwire.ClientCaps, name, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev, s.caps = rev, caps
	// Interned: thousands of sessions of one client share its name.
	s.clientName, s.clientVersion = unique.Make(name).Value(), unique.Make(version).Value()
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
