package connect

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"sync"
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
