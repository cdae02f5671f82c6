package authserver

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/state"
)

// Shared holds the in-flight records of browser flows for a fleet
// (state.Tickets): behind a round-robin balancer, /oauth/authorize, the
// login form, the IdP's callback, the consent and /oauth/token of one
// login each land on any replica. With it, pending requests, issued
// codes and confirmation codes live there instead of in this process's
// tables; Take is atomic, so a code is redeemed once across the fleet.
//
// Its leases (state.Leases) serialise the rotation of one refresh token
// across replicas, as tokenMu does within one.
type Shared interface {
	PutTicket(ctx context.Context, key string, data []byte, ttl time.Duration) error
	GetTicket(ctx context.Context, key string) ([]byte, bool, error)
	TakeTicket(ctx context.Context, key string) ([]byte, bool, error)
	AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, key, holder string) error
}

// refreshLease holds a refresh token's rotation for the fleet: of the
// replicas refreshing one token at once, one rotates it and the others
// then find it spent (a reuse, as within one process). It waits at most
// twice sharedTimeout; with the shared store unreachable it goes on
// unleased (the in-process lock still holds).
func (t *sharedTables) refreshLease(tok string) (release func(), err error) {
	key := "oauth:refresh:" + sha256Hex(tok)
	holder := randomToken(16)
	ctx, cancel := context.WithTimeout(context.Background(), 2*sharedTimeout)
	defer cancel()
	for {
		ok, err := t.s.AcquireLease(ctx, key, holder, 2*sharedTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return nil, &oauthError{Status: http.StatusServiceUnavailable, Code: "temporarily_unavailable", Description: "another replica is refreshing this token; try again"}
			}
			t.log.Warn("oauth: shared login state unavailable", attrErr, err)
			return func() {}, nil
		}
		if ok {
			return func() {
				rctx, cancel := t.ctx()
				defer cancel()
				_ = t.s.ReleaseLease(rctx, key, holder) // else it lapses
			}, nil
		}
		select {
		case <-ctx.Done():
			return nil, &oauthError{Status: http.StatusServiceUnavailable, Code: "temporarily_unavailable", Description: "another replica is refreshing this token; try again"}
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// sharedTimeout bounds one round trip to the shared tables: a browser
// waits behind it.
const sharedTimeout = 2 * time.Second

// sharedTables reaches the Shared store for the in-memory tables. A
// failure is logged and reads as "no such record" (the browser starts
// over), never as a record that is not there.
type sharedTables struct {
	s   Shared
	log *slog.Logger
}

func (t sharedTables) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), sharedTimeout)
}

func (t sharedTables) put(key string, v any, ttl time.Duration) bool {
	if ttl <= 0 {
		return false
	}
	ctx, cancel := t.ctx()
	defer cancel()
	if err := state.PutTicketJSON(ctx, t.s, key, v, ttl); err != nil {
		t.log.Warn("oauth: shared login state unavailable", attrErr, err)
		return false
	}
	return true
}

func (t sharedTables) get(key string, v any, take bool) bool {
	ctx, cancel := t.ctx()
	defer cancel()
	ok, err := state.TicketJSON(ctx, t.s, key, v, take)
	if err != nil {
		t.log.Warn("oauth: shared login state unavailable", attrErr, err)
	}
	return ok
}

func (t sharedTables) has(key string) bool {
	var v json.RawMessage
	return t.get(key, &v, false)
}

// pendingRecord is a pending request as the shared table holds it.
type pendingRecord struct {
	ID          string          `json:"id"`
	Binding     string          `json:"binding"`
	CSRF        string          `json:"csrf"`
	Expires     time.Time       `json:"expires"`
	Issuer      string          `json:"issuer"`
	Client      *client         `json:"client,omitempty"`
	RedirectURI string          `json:"redirect_uri,omitempty"`
	State       string          `json:"state,omitempty"`
	Scope       string          `json:"scope,omitempty"`
	Resource    string          `json:"resource,omitempty"`
	Challenge   string          `json:"challenge,omitempty"`
	IdPState    string          `json:"idp_state,omitempty"`
	Nonce       string          `json:"nonce,omitempty"`
	Verifier    string          `json:"verifier,omitempty"`
	Person      *oauth.Identity `json:"person,omitempty"`
	ConfirmTo   string          `json:"confirm_to,omitempty"`
}

func pendingRecordOf(p *pending) pendingRecord {
	return pendingRecord{ID: p.id, Binding: p.binding, CSRF: p.csrf, Expires: p.expires, Issuer: p.issuer, Client: p.client,
		RedirectURI: p.redirectURI, State: p.state, Scope: p.scope, Resource: p.resource, Challenge: p.challenge,
		IdPState: p.idpState, Nonce: p.nonce, Verifier: p.verifier, Person: p.person, ConfirmTo: p.confirmTo}
}

func (r pendingRecord) pending() pending {
	return pending{id: r.ID, binding: r.Binding, csrf: r.CSRF, expires: r.Expires, issuer: r.Issuer, client: r.Client,
		redirectURI: r.RedirectURI, state: r.State, scope: r.Scope, resource: r.Resource, challenge: r.Challenge,
		idpState: r.IdPState, nonce: r.Nonce, verifier: r.Verifier, person: r.Person, confirmTo: r.ConfirmTo}
}

const (
	ticketPending  = "oauth:pending:"
	ticketIdPState = "oauth:idp-state:"
	ticketCode     = "oauth:code:"
	ticketUnused   = "oauth:code-unused:"
	ticketReused   = "oauth:code-reused:"
	ticketFamily   = "oauth:code-family:"
	ticketConfirm  = "oauth:confirm:"
)

func (ps *pendingStore) sharedAdd(p *pending, now time.Time) bool {
	ttl := p.expires.Sub(now)
	if !ps.shared.put(ticketPending+p.id, pendingRecordOf(p), ttl) {
		return false
	}
	if p.idpState != "" {
		return ps.shared.put(ticketIdPState+p.idpState, p.id, ttl)
	}
	return true
}

func (ps *pendingStore) sharedGet(id string, now time.Time, take bool) (pending, bool) {
	var r pendingRecord
	if id == "" || !ps.shared.get(ticketPending+id, &r, take) || !now.Before(r.Expires) {
		return pending{}, false
	}
	return r.pending(), true
}

func (ps *pendingStore) sharedByIDPState(state string, now time.Time) (pending, bool) {
	var id string
	if state == "" || !ps.shared.get(ticketIdPState+state, &id, false) {
		return pending{}, false
	}
	return ps.sharedGet(id, now, false)
}

// sharedUpdate is a read, fn, write: one browser drives one request, so
// two replicas do not update the same one at once.
func (ps *pendingStore) sharedUpdate(id string, now time.Time, fn func(*pending)) bool {
	p, ok := ps.sharedGet(id, now, false)
	if !ok {
		return false
	}
	old := p.idpState
	fn(&p)
	if p.idpState != old && old != "" {
		var gone string
		ps.shared.get(ticketIdPState+old, &gone, true)
	}
	return ps.sharedAdd(&p, now)
}

func (cs *codeStore) sharedAdd(hash string, c *authCode, now time.Time) bool {
	rec := codeRecord{ClientID: c.clientID, RedirectURI: c.redirectURI, Resource: c.resource, Scope: c.scope,
		Challenge: c.challenge, Issuer: c.issuer, Person: c.person, Expires: c.expires, Keep: c.keep}
	ttl := c.keep.Sub(now)
	return cs.shared.put(ticketCode+hash, rec, ttl) && cs.shared.put(ticketUnused+hash, true, ttl)
}

// sharedRedeem is redeem across the fleet: of the replicas redeeming one
// code at once, the one that takes its "unused" ticket wins; the others,
// and any later use, see it used.
func (cs *codeStore) sharedRedeem(hash string, now time.Time, check func(*authCode) error) (*authCode, bool, error) {
	var rec codeRecord
	if !cs.shared.get(ticketCode+hash, &rec, false) || !now.Before(rec.Keep) {
		return nil, false, nil
	}
	out := &authCode{clientID: rec.ClientID, redirectURI: rec.RedirectURI, resource: rec.Resource, scope: rec.Scope,
		challenge: rec.Challenge, issuer: rec.Issuer, person: rec.Person, expires: rec.Expires, keep: rec.Keep}
	reuse := func() (*authCode, bool, error) {
		cs.shared.put(ticketReused+hash, true, rec.Keep.Sub(now))
		var fam string
		if cs.shared.get(ticketFamily+hash, &fam, false) {
			out.family = fam
		}
		out.used = true
		return out, true, nil
	}
	if !cs.shared.has(ticketUnused + hash) {
		return reuse()
	}
	if !now.Before(rec.Expires) {
		return nil, false, nil
	}
	if err := check(out); err != nil {
		return nil, false, err
	}
	var unused bool
	if !cs.shared.get(ticketUnused+hash, &unused, true) {
		return reuse() // another replica redeemed it meanwhile
	}
	out.used = true
	return out, false, nil
}

func (cs *codeStore) sharedSetFamily(hash, family string) bool {
	cs.shared.put(ticketFamily+hash, family, codeTTL+pendingTTL)
	return cs.shared.has(ticketReused + hash)
}

// codeRecord is an authorization code as the shared table holds it.
type codeRecord struct {
	ClientID    string         `json:"client_id"`
	RedirectURI string         `json:"redirect_uri"`
	Resource    string         `json:"resource"`
	Scope       string         `json:"scope"`
	Challenge   string         `json:"challenge"`
	Issuer      string         `json:"issuer"`
	Person      oauth.Identity `json:"person"`
	Expires     time.Time      `json:"expires"`
	Keep        time.Time      `json:"keep"`
}
