package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
)

// Per-caller state (SPEC S24). What the gateway starts for one caller (a
// server-initiated request relayed to it, a progress route, a 2026-07-28
// exchange) is kept under an id the gateway minted, with its owner: only
// the owner can reach it by that id, whoever else sends the id. The ids
// are random (randomID), so an id is no one's to guess; the owner check
// makes one that leaked (logged, shown, replayed) worth nothing to anyone
// else. A caller that names another's entry is told exactly what it is
// told for an id that never existed: it learns nothing.

// party is who may touch a piece of per-caller state: the downstream
// session it was made for, or, for a caller without a session, that
// caller's owner fingerprint (S4.1) on one route. The zero party is no
// one's: nothing it owns can be reached.
//
// Two anonymous callers share an owner fingerprint when the gateway
// cannot tell them apart (auth.anonymous behind one address: "ip:" of
// that address, or "anonymous"); their sessions still tell them apart,
// their sessionless requests on one route do not. What protects those is
// the randomness of the ids alone.
type party struct {
	owner   string // Identity.Owner
	session string // the session's hash (hashHex of its local id); "": none
	route   string // a sessionless caller's route (route.id); "" with a session, whose route is its own
}

// sessionParty is the party of session s: s itself.
func sessionParty(s *session) party { return party{owner: s.Owner(), session: s.Hash()} }

// partyOf is the party of a request of owner on rt, in session sess (nil
// for a stateless request).
func partyOf(sess *session, owner string, rt *route) party {
	if sess != nil {
		return sessionParty(sess)
	}
	if rt == nil {
		return party{owner: owner}
	}
	return party{owner: owner, route: rt.id}
}

// routeID names a route as the party of a sessionless caller knows it: its
// path and x-mcp-servers header, hashed so that it is short and safe in a
// header of a fleet hop (peers.go). resolveRoute computes it once per
// route (route.id).
func routeID(path string, header []string) string {
	return hashHex(path + "\x00" + strings.Join(header, ","))[:32]
}

// randomID is 128 random bits in lower-case hex: the part of a minted id
// nobody can guess.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b[:])
}

// ownedTable holds per-caller entries by a minted id, each with its owner
// (a party, or what else owns it: the upstream server a progress token was
// given to). What a caller's message reaches (get, take) names who sent
// it, and only the owner gets the entry; an entry whose owner is the zero
// value is no one's. The gateway's own bookkeeping (has, drop, each) names
// no one. Safe for concurrent use; the zero value is an empty table.
type ownedTable[O comparable, V any] struct {
	mu sync.Mutex // mu guards the fields below
	m  map[string]*ownedEntry[O, V]
}

type ownedEntry[O comparable, V any] struct {
	owner O
	v     V
}

// put stores v under id for owner and returns what removes exactly this
// entry (a later one under the same id stays).
func (t *ownedTable[O, V]) put(id string, owner O, v V) (remove func()) {
	e := &ownedEntry[O, V]{owner: owner, v: v}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*ownedEntry[O, V]{}
	}
	t.m[id] = e
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.m[id] == e {
			delete(t.m, id)
		}
	}
}

// lookupLocked is the entry id if by owns it. foreign: there is one,
// another's (for the gateway's log only: whoever asked is told nothing).
func (t *ownedTable[O, V]) lookupLocked(id string, by O) (e *ownedEntry[O, V], foreign bool) {
	e, ok := t.m[id]
	if !ok {
		return nil, false
	}
	var none O
	if e.owner == none || e.owner != by {
		return nil, true
	}
	return e, false
}

// get returns the value under id when by owns it.
func (t *ownedTable[O, V]) get(id string, by O) (v V, ok, foreign bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, foreign := t.lookupLocked(id, by)
	if e == nil {
		return v, false, foreign
	}
	return e.v, true, false
}

// take removes and returns the value under id when by owns it; once only,
// however many ask at the same time.
func (t *ownedTable[O, V]) take(id string, by O) (v V, ok, foreign bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, foreign := t.lookupLocked(id, by)
	if e == nil {
		return v, false, foreign
	}
	delete(t.m, id)
	return e.v, true, false
}

// has reports whether an entry is kept under id, whoever owns it: for
// the gateway's own routing (which replica runs what), never an answer
// to a caller.
func (t *ownedTable[O, V]) has(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[id]
	return ok
}

// drop removes the entry under id, whoever owns it.
func (t *ownedTable[O, V]) drop(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

// each calls fn for every entry's value, outside the lock: fn may use the
// table (an exchange that ends drops itself).
func (t *ownedTable[O, V]) each(fn func(V)) {
	t.mu.Lock()
	vs := make([]V, 0, len(t.m))
	for _, e := range t.m {
		vs = append(vs, e.v)
	}
	t.mu.Unlock()
	for _, v := range vs {
		fn(v)
	}
}
