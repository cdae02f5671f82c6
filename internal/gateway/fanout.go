package gateway

import (
	"context"
	"fmt"

	"github.com/mcpgate/mcpgate/internal/metrics"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
)

// Termination fan-out (SPEC S15, S8.2): announcing ended sessions and
// following the other replicas' announcements is relay.Bus's. What stays
// here is what an announcement does: this replica's copy of the session
// ends (busNotes.EndCopy), and after a gap every held session is checked
// against the terminations (terminations.Resync).

// announceEnded tells the other replicas that the sessions whose ids
// hash to hashes ended, and returns once each replica that heard it
// confirmed ending its copy (relay.Bus.AnnounceEnded), or after
// relay.Timeout. It returns how many sessions some replica did not
// confirm; that and a failure to publish are logged: the terminations
// remember the sessions anyway, and the other replicas' copies end when
// they hear it, idle out or resynchronise.
func (g *Gateway) announceEnded(ctx context.Context, hashes ...string) (unconfirmed int) {
	unconfirmed, err := g.fleetBus.AnnounceEnded(ctx, hashes...)
	switch {
	case err != nil:
		g.log.Warn("could not announce a terminated session to the other replicas", "error", err)
	case unconfirmed > 0:
		g.metrics.FleetUnconfirmed(metrics.UnconfirmedTermination, unconfirmed)
		g.log.Warn("not every replica confirmed ending its copies of terminated sessions in time; theirs end when it hears the announcement or resynchronises",
			"sessions", unconfirmed, "waited", fleetrelay.Timeout)
	}
	return unconfirmed
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
