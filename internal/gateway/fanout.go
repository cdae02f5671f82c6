package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// Termination fan-out (SPEC S15, S8.2). A session resumed from its sealed
// id lives on as a copy on every replica that served it; the store's
// terminations refuse it only where no copy is held. So a replica that
// ends sessions for an administrator, or for a client's DELETE of a sealed
// id, announces them on the bus, and every replica ends its copies at
// once. Delivery is at most once: after a gap
// (the Lost marker, or a new subscription) a replica re-checks every
// session it holds against the terminations instead.
//
// A message is the hash of the session's local id (hashHex, as the
// terminations key it), never the id or its token.

// topicTerminated is the bus topic of administrator terminations.
const topicTerminated = "gateway:terminated"

// followTerminationsName names the terminations' follower in logs and in
// g.heard.
const followTerminationsName = "terminations"

// busTimeout bounds one publish or subscribe.
const busTimeout = 2 * time.Second

// announceTerminated tells the other replicas that sessions ended. A
// failure is logged: the terminations remember them anyway, and the
// other replicas' copies end when they idle out or their follower
// resynchronises.
func (g *Gateway) announceTerminated(ctx context.Context, victims []*session) {
	if g.bus == nil || len(victims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busTimeout)
	defer cancel()
	for _, s := range victims {
		if err := g.bus.Publish(ctx, topicTerminated, []byte(hashHex(s.ID()))); err != nil {
			g.log.Warn("could not announce a terminated session to the other replicas", "session", s.ID()[:8], "error", err)
			return
		}
	}
}

// announceEnded is announceTerminated for a session this replica holds
// no copy of, by the hash of its id.
func (g *Gateway) announceEnded(ctx context.Context, hash string) {
	if g.bus == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busTimeout)
	defer cancel()
	if err := g.bus.Publish(ctx, topicTerminated, []byte(hash)); err != nil {
		g.log.Warn("could not announce a terminated session to the other replicas", "error", err)
	}
}

// followTerminations ends this replica's copies of the sessions other
// replicas terminate, until Shutdown. It runs in its own goroutine, in
// g.bg.
func (g *Gateway) followTerminations() {
	state.Follow(g.bgCtx, g.bus, state.FollowOptions{
		Topics:  []string{topicTerminated},
		What:    followTerminationsName,
		Heard:   g.heard,
		Logger:  g.log,
		Timeout: busTimeout,
		Handle:  func(_ context.Context, m state.Message) { g.endCopies(string(m.Data)) },
		// Announcements before a subscription, or in a gap, were missed.
		// One that could not read the store is retried: until it works,
		// the held sessions are re-checked per request (unheard.go).
		Resync: func(context.Context) error { return g.resyncTerminated() },
	})
}

// endCopies ends the local session whose id hashes to hash, if any: the
// terminations already remember it.
func (g *Gateway) endCopies(hash string) {
	if len(hash) != 64 {
		return
	}
	if s := g.sessionByHash(hash); s != nil {
		g.log.Info("session terminated on another replica", "session", s.ID()[:8])
		s.close()
	}
}

// resyncTerminated ends every local session the terminations remember;
// an error says the store could not be read (not every one was checked).
func (g *Gateway) resyncTerminated() error {
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
