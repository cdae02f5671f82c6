package authserver

import (
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// The in-memory tables: pending authorization requests, authorization
// codes and rate-limit windows. All are bounded and swept by the janitor;
// lookups also treat an expired entry as absent, so the sweep only frees
// memory.

// pending is an authorization request between /oauth/authorize and the
// redirect back to the client.
type pending struct {
	id      string
	binding string // sha256 of the browser's binding cookie
	csrf    string // hidden in the login and consent forms
	expires time.Time

	issuer      string // the issuer the request came in under
	client      *client
	redirectURI string
	state       string
	scope       string
	resource    string
	challenge   string // the client's PKCE S256 challenge

	// The IdP leg: our own state, nonce and PKCE verifier.
	idpState, nonce, verifier string

	person *oauth.Identity // set once the person has logged in

	// confirmTo is set for a confirmation (confirm.go) instead of an
	// authorization request: where the browser goes back to.
	confirmTo string
}

type pendingStore struct {
	shared  *sharedTables // a fleet's: the table lives there (shared.go)
	mu      sync.Mutex
	max     int
	byID    map[string]*pending
	byState map[string]string // IdP state -> pending id
}

func newPendingStore(max int) *pendingStore {
	return &pendingStore{max: max, byID: map[string]*pending{}, byState: map[string]string{}}
}

// add stores p; false when the table is full of live requests.
func (ps *pendingStore) add(p *pending, now time.Time) bool {
	if ps.shared != nil {
		return ps.sharedAdd(p, now)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.byID) >= ps.max {
		ps.sweepLocked(now)
		if len(ps.byID) >= ps.max {
			return false
		}
	}
	ps.byID[p.id] = p
	if p.idpState != "" {
		ps.byState[p.idpState] = p.id
	}
	return true
}

// get returns a copy of a live pending request.
func (ps *pendingStore) get(id string, now time.Time) (pending, bool) {
	if ps.shared != nil {
		return ps.sharedGet(id, now, false)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.byID[id]
	if !ok || !now.Before(p.expires) {
		return pending{}, false
	}
	return *p, true
}

// byIDPState returns a copy of the live request an IdP state belongs to.
func (ps *pendingStore) byIDPState(state string, now time.Time) (pending, bool) {
	if ps.shared != nil {
		return ps.sharedByIDPState(state, now)
	}
	ps.mu.Lock()
	id, ok := ps.byState[state]
	ps.mu.Unlock()
	if !ok {
		return pending{}, false
	}
	return ps.get(id, now)
}

// update applies fn to a live request under the lock; false when it is
// gone.
func (ps *pendingStore) update(id string, now time.Time, fn func(*pending)) bool {
	if ps.shared != nil {
		return ps.sharedUpdate(id, now, fn)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.byID[id]
	if !ok || !now.Before(p.expires) {
		return false
	}
	old := p.idpState
	fn(p)
	if p.idpState != old {
		delete(ps.byState, old)
		if p.idpState != "" {
			ps.byState[p.idpState] = p.id
		}
	}
	return true
}

// take removes a live request and returns it: the last step of a request
// happens once.
func (ps *pendingStore) take(id string, now time.Time) (pending, bool) {
	if ps.shared != nil {
		return ps.sharedGet(id, now, true)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.byID[id]
	if !ok {
		return pending{}, false
	}
	ps.removeLocked(p)
	if !now.Before(p.expires) {
		return pending{}, false
	}
	return *p, true
}

func (ps *pendingStore) remove(id string) {
	if ps.shared != nil {
		ps.sharedGet(id, time.Time{}, true)
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.byID[id]; ok {
		ps.removeLocked(p)
	}
}

func (ps *pendingStore) removeLocked(p *pending) {
	delete(ps.byID, p.id)
	if p.idpState != "" {
		delete(ps.byState, p.idpState)
	}
}

func (ps *pendingStore) sweep(now time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.sweepLocked(now)
}

func (ps *pendingStore) sweepLocked(now time.Time) {
	for _, p := range ps.byID {
		if !now.Before(p.expires) {
			ps.removeLocked(p)
		}
	}
}

// authCode is an issued authorization code, kept under its sha256.
type authCode struct {
	clientID    string
	redirectURI string
	resource    string
	scope       string
	challenge   string
	issuer      string
	person      oauth.Identity
	expires     time.Time // when it can no longer be redeemed
	keep        time.Time // when it is forgotten: a while later, to recognise reuse

	// Once redeemed, the code stays until it expires so that a second
	// use is recognised and the family issued from it revoked (OAuth 2.1
	// section 4.1.3).
	used   bool
	reused bool // a second use came before the first had its family
	family string
}

type codeStore struct {
	shared *sharedTables // a fleet's: the table lives there (shared.go)
	mu     sync.Mutex
	max    int
	codes  map[string]*authCode
}

func newCodeStore(max int) *codeStore {
	return &codeStore{max: max, codes: map[string]*authCode{}}
}

func (cs *codeStore) add(hash string, c *authCode, now time.Time) bool {
	if cs.shared != nil {
		return cs.sharedAdd(hash, c, now)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.codes) >= cs.max {
		cs.sweepLocked(now)
		if len(cs.codes) >= cs.max {
			return false
		}
	}
	cs.codes[hash] = c
	return true
}

// redeem uses a live code: check (the client, redirect URI, issuer and
// PKCE bindings) runs under the lock, and only a code that passes it is
// marked used, so that a request that could not have redeemed the code
// does not burn it for its rightful client. A code used before comes back
// with reused set (and the family it gave, if known yet), so the caller
// can revoke what was issued from it, whoever presents it. An unknown or
// expired code is nil.
func (cs *codeStore) redeem(hash string, now time.Time, check func(*authCode) error) (c *authCode, reused bool, err error) {
	if cs.shared != nil {
		return cs.sharedRedeem(hash, now, check)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	live, ok := cs.codes[hash]
	if !ok || !now.Before(live.keep) || !live.used && !now.Before(live.expires) {
		return nil, false, nil
	}
	out := *live
	if live.used {
		live.reused = true
		return &out, true, nil
	}
	if err := check(&out); err != nil {
		return nil, false, err
	}
	live.used = true
	return &out, false, nil
}

// setFamily records the refresh token family issued from a redeemed code
// and reports whether the code was used again meanwhile (then the family
// is to be revoked too).
func (cs *codeStore) setFamily(hash, family string) (reused bool) {
	if cs.shared != nil {
		return cs.sharedSetFamily(hash, family)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c, ok := cs.codes[hash]
	if !ok {
		return false
	}
	c.family = family
	return c.reused
}

func (cs *codeStore) sweep(now time.Time) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.sweepLocked(now)
}

func (cs *codeStore) sweepLocked(now time.Time) {
	for h, c := range cs.codes {
		if !now.Before(c.keep) {
			delete(cs.codes, h)
		}
	}
}

// limiter allows n events per window per key (a client address), in
// fixed windows. It tracks at most maxLimiterKeys keys; beyond that new
// keys are let through untracked rather than locking everyone out.
type limiter struct {
	n      int
	window time.Duration

	mu   sync.Mutex
	keys map[string]*limitWindow
}

type limitWindow struct {
	start time.Time
	count int
}

const maxLimiterKeys = 10000

func newLimiter(n int, window time.Duration) *limiter {
	return &limiter{n: n, window: window, keys: map[string]*limitWindow{}}
}

func (l *limiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.keys[key]
	if !ok {
		if len(l.keys) >= maxLimiterKeys {
			l.sweepLocked(now)
			if len(l.keys) >= maxLimiterKeys {
				return true
			}
		}
		w = &limitWindow{start: now}
		l.keys[key] = w
	}
	if now.Sub(w.start) >= l.window {
		w.start, w.count = now, 0
	}
	if w.count >= l.n {
		return false
	}
	w.count++
	return true
}

func (l *limiter) sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
}

func (l *limiter) sweepLocked(now time.Time) {
	for k, w := range l.keys {
		if now.Sub(w.start) >= l.window {
			delete(l.keys, k)
		}
	}
}
