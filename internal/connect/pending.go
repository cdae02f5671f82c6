package connect

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// pending owns the connects in flight: the authorization requests sent
// to an authorization server (by state) and the connects asked for by a
// URL elicitation (tickets, by elicitation id). In a fleet (shared set)
// both also live in the shared store (shared.go), where any replica
// finds them.
type pending struct {
	// shared, in a fleet, holds the pending connects for every replica
	// (shared.go); nil: this process's maps only.
	shared state.Tickets
	log    *slog.Logger
	// ctx bounds the shared store's calls: it ends with Flows.Close.
	ctx context.Context

	// mu guards the fields below.
	mu      sync.Mutex
	states  map[string]*connState // state -> pending request
	tickets map[string]*ticket    // elicitation id -> connect asked for in a session
}

type connState struct {
	person, server string
	verifier       string
	binding        string // the connect cookie's value
	reg            *connReg
	scopes         []string // asked for (nil: the plan's)
	ticket         string   // the URL elicitation it completes ("": none)
	expires        time.Time
	redirect       string // taken from the shared store: reg's redirect URI (reg is nil)
}

// ticket is a pending connect asked for by a URL elicitation.
type ticket struct {
	person, server string
	scopes         []string // the scopes to ask for (nil: the plan's)
	expires        time.Time
	done           chan struct{} // closed once the callback stored tokens, or the connect failed
	// failure says why the connect failed, set before done is closed
	// (or, in a fleet, before Await's channel is): the call waiting on
	// it ends with it at once instead of at its client's timeout.
	failure atomic.Pointer[string]
}

// newTicket registers a ticket and returns its id.
func (c *pending) newTicket(t *ticket, now time.Time) (string, error) {
	id, err := randomToken()
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tickets == nil {
		c.tickets = map[string]*ticket{}
	}
	for k, o := range c.tickets {
		if now.After(o.expires) {
			delete(c.tickets, k)
		}
	}
	if len(c.tickets) >= maxPendingStates {
		return "", errTooMany
	}
	c.tickets[id] = t
	if c.shared != nil {
		// A fleet: the link may be opened on any replica.
		c.shareTicket(id, t, now)
	}
	return id, nil
}

// lookup is ticket id, made here or, in a fleet, on another replica;
// nil when it is unknown or expired.
func (c *pending) lookup(id string, now time.Time) *ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tickets[id]
	if t == nil && c.shared != nil {
		c.mu.Unlock()
		t = c.sharedTicketOf(id, now) // made on another replica
		c.mu.Lock()
	}
	if t == nil || now.After(t.expires) {
		return nil
	}
	return t
}

// dropTicket forgets ticket id, here and in the shared store.
func (c *pending) dropTicket(id string) {
	c.mu.Lock()
	delete(c.tickets, id)
	c.mu.Unlock()
	if c.shared != nil {
		c.forgetShared(id)
	}
}

// Outcomes of takeRequest.
const (
	requestTaken = iota
	requestUnknown
	requestForeign
)

// takeRequest takes the pending authorization request of state once, if
// it is the browser's (binding); another browser's is left for its owner.
func (c *pending) takeRequest(state, binding string, now time.Time) (*connState, int) {
	if state == "" {
		return nil, requestUnknown
	}
	if c.shared != nil {
		st, redirect, ok := c.takeState(state)
		if !ok {
			return nil, requestUnknown
		}
		if subtle.ConstantTimeCompare([]byte(st.binding), []byte(binding)) != 1 {
			c.putBackState(state, st, redirect, now)
			return nil, requestForeign
		}
		st.redirect = redirect
		return st, requestTaken
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.states[state]
	switch {
	case st == nil:
		return nil, requestUnknown
	case subtle.ConstantTimeCompare([]byte(st.binding), []byte(binding)) != 1:
		return nil, requestForeign
	}
	delete(c.states, state) // single use
	return st, requestTaken
}

// errTooMany: maxPendingStates connects are pending already.
var errTooMany = errors.New("too many connects pending")

// putRequest keeps pend under state until its callback takes it: in the
// shared store in a fleet (errShared when it failed), else here, where
// expired requests are dropped first.
func (c *pending) putRequest(state string, pend *connState, now time.Time) error {
	if c.shared != nil {
		if !c.shareState(state, pend, now) {
			return errShared
		}
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.states == nil {
		c.states = map[string]*connState{}
	}
	for k, s := range c.states {
		if now.After(s.expires) {
			delete(c.states, k)
		}
	}
	if len(c.states) >= maxPendingStates {
		return errTooMany
	}
	c.states[state] = pend
	return nil
}

// errShared: the fleet's shared store failed.
var errShared = errors.New("the shared store is unavailable")

// completeTicket tells the call waiting on elicitation id that the
// person's tokens are stored.
func (c *pending) completeTicket(id string) { c.endTicket(id, "") }

// failTicket tells the call waiting on elicitation id that its connect
// failed, and why (words for the caller: no address, no secret).
func (c *pending) failTicket(id, why string) {
	if why == "" {
		why = "the connect failed"
	}
	c.endTicket(id, why)
}

// endTicket ends ticket id: completed when failure is "", else failed.
func (c *pending) endTicket(id, failure string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	t := c.tickets[id]
	delete(c.tickets, id)
	c.mu.Unlock()
	if t != nil {
		if failure != "" {
			t.failure.Store(&failure)
		}
		close(t.done)
	} else if c.shared != nil {
		// The call waits on another replica: it polls for this.
		c.markDone(id, failure, time.Now())
	}
}
