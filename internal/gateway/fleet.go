package gateway

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
	sessions "github.com/mcpgate/mcpgate/internal/session"
)

// Sealed session ids (SPEC S15, S8.3). With fleet.session_keys, the id a
// streamable-HTTP client holds is a token sealed under the fleet's ring
// that carries the session's record (route, owner, revision, client
// capabilities). A replica that holds the session finds it by the random
// id inside, as without keys; one that does not (another replica created
// it, or this process restarted) opens the token, checks owner and
// terminations, and re-creates the session from it; its upstream sessions
// are established lazily, as for a new session. Legacy SSE and stdio
// sessions live with their stream, so their ids stay local.
//
// Sealing and opening the ids and requestState is relay's (sealed.go);
// what this file keeps is what an opened id means for this replica's
// sessions. Operators (S13) see and terminate sessions by the random id:
// the token is never logged or reported. Without keys nothing here runs.

// newRing builds the ring of cfg's fleet.session_keys; nil without keys.
func newRing(cfg *config.Config) (*fleet.Ring, error) {
	keys, err := cfg.Fleet.SessionKeyBytes()
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	return fleet.NewRing(keys)
}

// newInitSession creates the session of an initialize request. With a
// ring its id is sealed, with the revision and capabilities initialize
// will settle on (the same functions decide them there).
func (g *Gateway) newInitSession(rt route, id *Identity, params json.RawMessage) *session {
	s := g.buildSession(rt, id, sessions.Params{})
	if g.ring != nil {
		var p mcpwire.InitializeParams
		if len(params) > 0 {
			_ = json.Unmarshal(params, &p) // initialize itself refuses bad params
		}
		var raw [fleet.IDLen]byte
		_, _ = hex.Decode(raw[:], []byte(s.ID()))
		tok, err := g.ring.SealSession(fleet.Session{
			ID:       raw,
			Owner:    fleet.OwnerHash(s.Owner()),
			Revision: mcpwire.Negotiate(p.ProtocolVersion),
			Caps:     fleetrelay.CapsBits(mcpwire.ParseClientCaps(p.Capabilities)),
			Route:    rt.path,
			Servers:  strings.Join(rt.header, ","),
			Issued:   s.Created(),
		})
		if err != nil {
			// A route too long to seal: the session works, on this
			// replica only.
			g.log.Debug("session id not sealed", "session", s.ID()[:8], "error", err)
		}
		s.SetToken(tok)
	}
	return g.storeSession(s, true)
}

// openSessionID opens a sealed session id: its fields and the local id
// they name. ok is false without a ring, or for anything that is not a
// token the ring sealed (a local id, a forged or tampered one, one of a
// removed key).
func (g *Gateway) openSessionID(sid string) (fs fleet.Session, local string, ok bool) {
	return fleetrelay.OpenSessionID(g.ring, sid)
}

// maxClockSkew is how far in the future a sealed id's issue time may be:
// replicas' clocks differ a little, never by minutes.
const maxClockSkew = time.Minute

// resumeSession re-creates, on this replica, the session a sealed id
// names (the caller is its owner and it was not ended: findSession
// checked). Concurrent first requests on one id share one session.
func (g *Gateway) resumeSession(sid string, fs fleet.Session, local string, id *Identity) (*session, refusal) {
	if fs.Issued.After(g.now().Add(maxClockSkew)) || !mcpwire.IsHandshake(fs.Revision) {
		return nil, refusedUnknown
	}
	rt, _, ok := g.routeFor(fs.Route, fs.Servers)
	if !ok {
		// A server of its route is gone: the client starts over.
		return nil, refusedUnknown
	}
	if !g.admitSession(id.Owner) {
		return nil, refusedBusy
	}
	s := g.buildSession(rt, id, sessions.Params{ID: local, Token: sid, Resumed: true,
		Created: fs.Issued, Rev: fs.Revision, Caps: fleetrelay.CapsOf(fs.Caps)})
	if other, inserted := g.sessions.InsertNew(s); !inserted {
		if other.Closed() {
			// Ended while this request looked: what ends a session
			// remembers its id first, so it is refused from now on.
			return nil, refusedEnded
		}
		if other.CheckOwner(id.Owner) != nil {
			g.metrics.SecurityRefusal(metrics.RefusedForeignSession)
			return nil, refusedForeign
		}
		return other, refusedNot
	}
	if g.fleetOn() {
		// Its log level, set on another replica, and where its GET
		// stream is (fleetbus.go).
		ctx, cancel := context.WithTimeout(g.bgCtx, busTimeout)
		g.loadSessionState(ctx, s)
		g.findRemoteStream(ctx, s)
		cancel()
	}
	g.log.Debug("session resumed from its sealed id", "session", s.ID()[:8], "issued", fs.Issued.UTC().Format(time.RFC3339))
	return s, refusedNot
}

// retire ends a session for want of use or room on this replica (idle
// expiry, the owner's cap). A session this replica resumed from its
// sealed id is only this replica's copy: its client may be using it on
// the replica that created it, so its id is not remembered as ended (a
// next request here resumes it again). The replica that created it
// remembers, as without keys (S8.2), unless the session is in use on
// another replica (its shared state was renewed there within the idle
// timeout): behind round robin the creator may see none of its requests
// for a while, and must not end it for the whole fleet. A session idle
// everywhere expires on every replica anyway (idleEverywhere).
func (g *Gateway) retire(s *session) {
	if s.Resumed() || g.usedElsewhere(s) {
		held := s.HasSubs()
		s.close()
		if held {
			// Its upstream subscriptions end with it; the session's GET
			// stream, wherever it is, takes them over (fleetbus.go).
			g.fleetBus.Publish(fleetrelay.Note{Kind: fleetrelay.NoteOrphaned, Session: s.Hash()})
		}
		return
	}
	// Detached from Shutdown: an expiry the janitor began is remembered
	// even when Shutdown comes meanwhile (Close waits for the janitor, bg).
	g.endSessionLogged(context.WithoutCancel(g.bgCtx), s)
}

// deleteSealed ends, for its owner, a session this replica does not hold
// (S8.1): its id is remembered as ended, so that it stays refused here
// and, with a shared store, on every replica. mine is false for another
// owner's; err (ErrNotRecorded) when the store did not remember it, and
// then nothing was done.
func (g *Gateway) deleteSealed(ctx context.Context, fs fleet.Session, local string, id *Identity) (mine bool, err error) {
	if fleet.OwnerHash(id.Owner) != fs.Owner {
		return false, nil
	}
	h := hashHex(local)
	if err := g.terms.MarkTerminated(ctx, h, g.now().Add(g.idleTimeout)); err != nil {
		return true, fmt.Errorf("%w: %w", ErrNotRecorded, err)
	}
	// The copies other replicas hold end before the answer (fanout.go).
	g.announceEnded(ctx, h)
	g.dropSessionState(ctx, h)
	return true, nil
}

// sealedStatePrefix marks a requestState sealed under the ring
// (relay.SealState).
const sealedStatePrefix = fleetrelay.SealedStatePrefix

// isGatewayState reports whether a requestState is one the gateway
// minted (else it is an upstream's, passed through: bridge.go).
func isGatewayState(state string) bool {
	return strings.HasPrefix(state, statePrefix) || strings.HasPrefix(state, sealedStatePrefix)
}

// mintState is the requestState of an exchange's next round: sealed under
// the ring when there is one, else signed with the process's own key.
func (g *Gateway) mintState(ex *exchange) string {
	if g.ring == nil {
		return mintState(ex)
	}
	st, ok := fleetrelay.SealState(g.ring, ex.id, ex.round.Add(1), g.advertise, ex.owner)
	if !ok {
		// An exchange id is 24 characters and a round at least 1: not
		// reached; the local form still resumes the call here.
		return mintState(ex)
	}
	return st
}

// openState verifies a requestState for owner: a sealed one with the
// ring, else the local form.
func (g *Gateway) openState(state, owner string) (id string, round int64, ok bool) {
	if g.ring == nil {
		return openState(state, owner)
	}
	st, sealed, ok := fleetrelay.OpenState(g.ring, state, owner)
	if !sealed {
		return openState(state, owner)
	}
	if !ok {
		return "", 0, false
	}
	return st.Exchange, st.Round, true
}

// usedElsewhere reports whether sealed session s, idle on this replica,
// was used on another within the idle timeout: its shared state, renewed
// by use anywhere, has not lapsed. Outside fleet mode, or with the
// backend unreachable, it is not (the session ends as on one process).
func (g *Gateway) usedElsewhere(s *session) bool {
	if !g.fleetOn() || s.Token() == "" {
		return false
	}
	return g.fleetBus.Live(g.bgCtx, s.Hash())
}
