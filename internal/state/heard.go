package state

import (
	"sync"
	"sync/atomic"
	"time"
)

// Hearing the bus. A replica keeps its caches (keys, runtime servers, the
// sessions it holds) in step with the others by following the bus, and
// delivery is at most once: while the backend is down a publish fails,
// and while a subscription is broken what is published is lost. A
// replica cannot tell from the messages alone that some never came, so
// Heard says when it cannot trust that it heard everything: from the
// moment its backend stopped answering (Doubt, from a health probe) or a
// follower's subscription broke or lost messages, until every follower
// subscribed again and resynchronised from the source of truth after
// that moment. Meanwhile its owner checks what a missed message could
// have changed against that source before relying on it (a session ended
// on another replica, a server removed there).

// Heard tracks whether the followers of one process may trust that they
// heard every message published since their last resynchronisation. Its
// methods are safe for concurrent use, and on a nil *Heard (no bus:
// nothing to miss) Trusted is true and the others do nothing.
type Heard struct {
	mu sync.Mutex
	// gen grows with every Doubt: a resynchronisation that began before
	// one does not restore trust.
	gen  uint64
	down bool // between Doubt and Recovered
	// confirmed is, per follower, the gen its last successful
	// resynchronisation began in; 0: none since it (re)subscribed, lost
	// messages or began one.
	confirmed map[string]uint64
	renew     chan struct{} // closed by Recovered
	since     time.Time     // when it was last found trusted after not being
	trusted   bool
	// ok mirrors trusted for Trusted, which every request of a replica
	// may ask: a load, not a lock.
	ok atomic.Bool
}

// NewHeard returns a Heard with no follower: trusted until one is
// tracked or the backend is doubted.
func NewHeard() *Heard {
	h := &Heard{gen: 1, confirmed: map[string]uint64{}, renew: make(chan struct{}), trusted: true}
	h.ok.Store(true)
	return h
}

// set records trusted; h.mu is held.
func (h *Heard) set(trusted bool) {
	h.trusted = trusted
	h.ok.Store(trusted)
}

// Track adds follower what (FollowOptions.What), not trusted until its
// first resynchronisation. Call it before the follower's owner serves
// anything the follower keeps in step: Follow runs on its own goroutine.
func (h *Heard) Track(what string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.confirmed[what]; !ok {
		h.confirmed[what] = 0
		h.set(false)
	}
}

// Doubt records that the backend stopped answering: messages may be
// published that no follower hears, so nothing is trusted until it
// recovers and every follower resynchronised after this call.
func (h *Heard) Doubt() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	h.down = true
	h.set(false)
}

// Recovered records that the backend answers again: every follower
// subscribes afresh (its subscription may have lived through the outage
// without noticing, or reconnected before it was doubted) and
// resynchronises, which restores trust.
func (h *Heard) Recovered() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down = false
	close(h.renew)
	h.renew = make(chan struct{})
	h.update() // with no follower, trusted at once
}

// Trusted reports whether every follower heard every message since its
// last resynchronisation, as far as this process can tell: the backend
// answers and no follower broke or lost messages since.
func (h *Heard) Trusted() bool {
	return h == nil || h.ok.Load()
}

// Since is when the followers were last found trusted after not being
// (zero while they are not).
func (h *Heard) Since() time.Time {
	if h == nil {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.trusted {
		return time.Time{}
	}
	return h.since
}

// lost records that follower what may have missed messages (its
// subscription broke, failed, or reported a gap).
func (h *Heard) lost(what string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.confirmed[what] = 0
	h.set(false)
}

// begin starts a resynchronisation of what; done(ok) ends it.
func (h *Heard) begin(what string) (done func(ok bool)) {
	if h == nil {
		return func(bool) {}
	}
	h.mu.Lock()
	gen := h.gen
	h.confirmed[what] = 0
	h.set(false)
	h.mu.Unlock()
	return func(ok bool) {
		if !ok {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, tracked := h.confirmed[what]; !tracked || h.gen != gen {
			return // doubted meanwhile: what it read may already be stale
		}
		h.confirmed[what] = gen
		h.update()
	}
}

// update recomputes trusted; h.mu is held.
func (h *Heard) update() {
	ok := !h.down
	for _, g := range h.confirmed {
		if g != h.gen {
			ok = false
		}
	}
	if ok && !h.trusted {
		h.since = time.Now()
	}
	h.set(ok)
}

// renewal is closed at the next Recovered.
func (h *Heard) renewal() <-chan struct{} {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renew
}
