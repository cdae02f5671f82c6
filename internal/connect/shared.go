package connect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// The connect flow in a fleet (SPEC S15, S19). Behind a round-robin
// balancer, the call that asks a person to connect (NewTicket), the
// link's confirmation page, the redirect to the authorization server and
// its callback each land on any replica. With Options.Tickets (a fleet's
// Redis) the pending connects live there:
//
//   - an elicitation's ticket (person, server, scopes) is readable on
//     every replica; its completion is a "done" marker the waiting call
//     polls for, beside the in-process channel;
//   - an authorization request (state -> person, verifier, browser
//     binding) is taken once, atomically, by whichever replica the
//     callback reaches; the client registration it used is read back
//     from the vault (registration.go).
//
// Keys in the shared store are digests of the ids: a copy of Redis does
// not hold a link or a state that would answer the callback.

// donePoll is how often a call waiting for a connect asks the shared
// store whether another replica completed it.
const donePoll = 250 * time.Millisecond

const (
	ticketConnect = "connect:ticket:"
	ticketDone    = "connect:done:"
	ticketState   = "connect:state:"
)

func ticketKey(prefix, id string) string {
	sum := sha256.Sum256([]byte(id))
	return prefix + hex.EncodeToString(sum[:])
}

// sharedTicket is an elicitation's ticket as the shared store holds it.
type sharedTicket struct {
	Person  string    `json:"person"`
	Server  string    `json:"server"`
	Scopes  []string  `json:"scopes,omitempty"`
	Expires time.Time `json:"expires"`
}

// sharedState is a pending authorization request as the shared store
// holds it.
type sharedState struct {
	Person   string    `json:"person"`
	Server   string    `json:"server"`
	Verifier string    `json:"verifier"`
	Binding  string    `json:"binding"`
	Redirect string    `json:"redirect"`
	Scopes   []string  `json:"scopes,omitempty"`
	Ticket   string    `json:"ticket,omitempty"`
	Expires  time.Time `json:"expires"`
}

// sharedTimeout bounds each call of the shared store.
const sharedTimeout = 2 * time.Second

// shareCtx bounds a call of the shared store; it also ends with
// Flows.Close.
func (c *pending) shareCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, sharedTimeout)
}

// put stores v under key until expires; false when the store failed.
func (c *pending) put(key string, v any, expires time.Time, now time.Time) bool {
	ttl := expires.Sub(now)
	if ttl <= 0 {
		return false
	}
	ctx, cancel := c.shareCtx()
	defer cancel()
	if err := state.PutTicketJSON(ctx, c.shared, key, v, ttl); err != nil {
		c.log.Warn("oauth connect: the fleet's shared store is unavailable", "error", err)
		return false
	}
	return true
}

// get reads (or takes) key into v.
func (c *pending) get(key string, v any, take bool) bool {
	ctx, cancel := c.shareCtx()
	defer cancel()
	ok, err := state.TicketJSON(ctx, c.shared, key, v, take)
	if err != nil {
		c.log.Warn("oauth connect: the fleet's shared store is unavailable", "error", err)
	}
	return ok
}

// shareTicket makes ticket id readable on every replica.
func (c *pending) shareTicket(id string, t *ticket, now time.Time) bool {
	return c.put(ticketKey(ticketConnect, id), sharedTicket{Person: t.person, Server: t.server, Scopes: t.scopes, Expires: t.expires}, t.expires, now)
}

// sharedTicketOf is ticket id as another replica made it (no channel: the
// call waits there).
func (c *pending) sharedTicketOf(id string, now time.Time) *ticket {
	var st sharedTicket
	if !c.get(ticketKey(ticketConnect, id), &st, false) || now.After(st.Expires) {
		return nil
	}
	return &ticket{person: st.Person, server: st.Server, scopes: st.Scopes, expires: st.Expires}
}

// Await is closed once ticket t is complete or failed (Failure says
// which): here, or, in a fleet, on the replica the callback reached. It
// stops with ctx, and with Close.
func (f *Flows) Await(ctx context.Context, t *Ticket) <-chan struct{} {
	c := &f.pending
	if c.shared == nil {
		return t.t.done
	}
	out := make(chan struct{})
	started := f.goTracked(func() {
		tick := time.NewTicker(donePoll)
		defer tick.Stop()
		for {
			select {
			case <-t.t.done:
				close(out)
				return
			case <-ctx.Done():
				return
			case <-f.ctx.Done():
				return
			case <-tick.C:
				// true: completed; a string: failed, and why.
				var done json.RawMessage
				if c.get(ticketKey(ticketDone, t.id), &done, false) {
					var why string
					if json.Unmarshal(done, &why) == nil {
						if why == "" {
							why = "the connect failed"
						}
						t.t.failure.Store(&why)
					}
					close(out)
					return
				}
			}
		}
	})
	if !started {
		return t.t.done // closed: this process's completions only
	}
	return out
}

// markDone records in the shared store that ticket id is complete
// (failure "": true), or failed (failure).
func (c *pending) markDone(id, failure string, now time.Time) {
	var v any = true
	if failure != "" {
		v = failure
	}
	c.put(ticketKey(ticketDone, id), v, now.Add(connectStateTTL), now)
}

// forgetShared drops ticket id's shared records.
func (c *pending) forgetShared(id string) {
	var v json.RawMessage
	c.get(ticketKey(ticketConnect, id), &v, true)
	c.get(ticketKey(ticketDone, id), &v, true)
}

// shareState stores a pending authorization request for any replica's
// callback.
func (c *pending) shareState(state string, st *connState, now time.Time) bool {
	return c.put(ticketKey(ticketState, state), sharedState{Person: st.person, Server: st.server, Verifier: st.verifier,
		Binding: st.binding, Redirect: st.reg.redirect, Scopes: st.scopes, Ticket: st.ticket, Expires: st.expires}, st.expires, now)
}

// takeState takes a pending authorization request once, fleet-wide. The
// registration is found again by the caller (it may be this replica's
// or one kept in the vault).
func (c *pending) takeState(state string) (*connState, string, bool) {
	var s sharedState
	if !c.get(ticketKey(ticketState, state), &s, true) {
		return nil, "", false
	}
	return &connState{person: s.Person, server: s.Server, verifier: s.Verifier, binding: s.Binding, scopes: s.Scopes,
		ticket: s.Ticket, expires: s.Expires}, s.Redirect, true
}

// putBackState returns a request taken by a browser it does not belong
// to, for its owner.
func (c *pending) putBackState(state string, st *connState, redirect string, now time.Time) {
	c.put(ticketKey(ticketState, state), sharedState{Person: st.person, Server: st.server, Verifier: st.verifier,
		Binding: st.binding, Redirect: redirect, Scopes: st.scopes, Ticket: st.ticket, Expires: st.expires}, st.expires, now)
}
