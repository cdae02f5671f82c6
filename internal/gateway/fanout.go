package gateway

import (
	"context"
	"fmt"
)

// Termination fan-out (SPEC S15, S8.2): announcing ended sessions and
// following the other replicas' announcements is relay.Bus's. What stays
// here is what an announcement does: this replica's copy of the session
// ends (busNotes.EndCopy), and after a gap every held session is checked
// against the terminations (terminations.Resync).

// announceTerminated tells the other replicas that sessions ended. A
// failure is logged: the terminations remember them anyway, and the
// other replicas' copies end when they idle out or their follower
// resynchronises.
func (g *Gateway) announceTerminated(ctx context.Context, victims []*session) {
	hashes := make([]string, len(victims))
	for i, s := range victims {
		hashes[i] = hashHex(s.ID())
	}
	if err := g.fleetBus.AnnounceEnded(ctx, hashes...); err != nil {
		g.log.Warn("could not announce a terminated session to the other replicas", "error", err)
	}
}

// announceEnded is announceTerminated for a session this replica holds
// no copy of, by the hash of its id.
func (g *Gateway) announceEnded(ctx context.Context, hash string) {
	if err := g.fleetBus.AnnounceEnded(ctx, hash); err != nil {
		g.log.Warn("could not announce a terminated session to the other replicas", "error", err)
	}
}

// terminations is the gateway as the terminations' follower sees it
// (relay.Terminations).
type terminations Gateway

// EndCopy ends the local session whose id hashes to hash, if any: the
// terminations already remember it.
func (t *terminations) EndCopy(hash string) {
	g := (*Gateway)(t)
	if s := g.sessionByHash(hash); s != nil {
		g.log.Info("session terminated on another replica", "session", s.ID()[:8])
		s.close()
	}
}

// Resync ends every local session the terminations remember; an error
// says the store could not be read (not every one was checked). Until it
// works, the held sessions are re-checked per request (unheard.go).
func (t *terminations) Resync(context.Context) error {
	g := (*Gateway)(t)
	ctx, cancel := context.WithTimeout(g.bgCtx, busTimeout)
	defer cancel()
	now := g.now()
	var failed error
	for _, s := range g.sessions.All() {
		if s.Closed() {
			continue
		}
		ended, err := g.terms.IsTerminated(ctx, hashHex(s.ID()), now)
		if err != nil {
			failed = fmt.Errorf("terminated-session resync: %w", err)
			break
		}
		if ended {
			g.log.Info("session terminated on another replica", "session", s.ID()[:8])
			s.close()
		}
	}
	return failed
}
