package gateway

import (
	"context"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/state"
)

// What a replica does while it cannot trust that it heard the bus (SPEC
// S15, S8.2). The other replicas announce what they end or remove on the
// bus (fanout.go, the admin API's announcements), and the announcements
// only say what to re-read from the store. While the bus's backend is
// down, or a follower's subscription broke and has not resynchronised
// since (g.heard, state.Heard), an announcement may have been published
// that this replica never heard: a session DELETEd on another replica, a
// runtime server removed there. Until every follower resynchronised,
// this replica re-reads from the store, per use, what such a message
// would have changed before it relies on it:
//
//   - a session it holds: whether it was ended (the terminations); an
//     ended one ends here too (404), one it cannot check is refused with
//     503, never served on a guess;
//   - a runtime server it is about to call or list: the server as stored
//     (the admin API's ServerCheck brings this replica in line with it);
//     a removed one is not called, one it cannot check is refused.
//
// A sealed session it does not hold is checked against the terminations
// whatever the bus says (findSession), and refused with 503 when the
// store does not answer. Keys are re-read per use by the authenticator
// meanwhile (callers.Authenticator.SetFresh), by the same rule; the admin
// API re-reads toolsets, grants and vault entries every second.
//
// The reads are not cached, so a change another replica acknowledged
// before a request arrived is seen by that request; concurrent uses of
// one session, server or key share a read that began after they arrived
// (state.FreshReads), never one that began before. A bus heard again
// costs nothing here.

// freshTimeout bounds one read of the store made here (g.fresh).
const freshTimeout = 2 * time.Second

// BusHeard is what this replica knows of hearing the bus: the admin API's
// follower reports to it, and reads it to decide when to re-read what it
// serves. nil without a bus.
func (g *Gateway) BusHeard() *state.Heard { return g.heard }

// endedNow reads whether the session whose id hashes to hash was ended,
// afresh (g.fresh).
func (g *Gateway) endedNow(ctx context.Context, hash string) (bool, error) {
	return g.fresh.Read(ctx, "session:"+hash, func(ctx context.Context) (bool, error) {
		return g.terms.IsTerminated(ctx, hash, g.now())
	})
}

// checkHeld re-checks a session this replica holds when it may have
// missed the announcement of its end (see above): refusedEnded (its copy
// ends here), refusedUnverified when the store does not answer, else
// refusedNot. With the bus heard it checks nothing.
func (g *Gateway) checkHeld(ctx context.Context, s *session) refusal {
	if g.heard.Trusted() {
		return refusedNot
	}
	ended, err := g.endedNow(ctx, s.Hash())
	switch {
	case err != nil:
		g.log.Warn("cannot check whether a session was ended on another replica (the bus is not heard and the store does not answer): refused", "session", s.ID()[:8], "error", err)
		return refusedUnverified
	case ended:
		g.log.Info("session ended on another replica, found while the bus is not heard", "session", s.ID()[:8])
		s.close()
		return refusedEnded
	}
	return refusedNot
}

// ServerCheck brings this replica in line with runtime server name as the
// store holds it now: serving it as stored, or no longer serving it. It
// fails when the store cannot be read. The admin API sets one
// (SetServerCheck).
type ServerCheck func(ctx context.Context, name string) error

// SetServerCheck sets how a runtime server is re-read while the bus is
// not heard (see above).
func (g *Gateway) SetServerCheck(c ServerCheck) { g.serverCheck.Store(&c) }

// verifiedKey marks, in a request's context, servers already re-read for
// it (a tools/call re-reads its server once, not at each step).
type verifiedKey struct{}

func withVerified(ctx context.Context, server string) context.Context {
	return context.WithValue(ctx, verifiedKey{}, server)
}

// verifyServer re-reads runtime server from the store before this
// replica calls or lists it, when it may have missed the announcement of
// its removal or change (see above). gone: it is no longer served (e is
// then an "Unknown server" error); e alone: the store cannot tell, and
// the caller gets e instead of the call. A server of the config file, or
// one ctx already re-read, is not re-read.
func (g *Gateway) verifyServer(ctx context.Context, server string) (gone bool, e *jsonrpc.Error) {
	if g.heard.Trusted() {
		return false, nil
	}
	check := g.serverCheck.Load()
	if check == nil || g.file.Load().servers[server] != nil || ctx.Value(verifiedKey{}) == server {
		return false, nil
	}
	_, err := g.fresh.Read(ctx, "server:"+server, func(ctx context.Context) (bool, error) {
		return false, (*check)(ctx, server)
	})
	if err != nil {
		g.log.Warn("cannot re-read a runtime server while the bus is not heard (the store does not answer): not called", "server", server, "error", err)
		return false, jsonrpc.NewError(jsonrpc.CodeInternalError,
			"Server %s is unavailable: this gateway cannot confirm now that it is still configured (its store does not answer); try again shortly", server)
	}
	if _, ok := g.conf().Servers[server]; !ok {
		return true, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "Unknown server: %s", server)
	}
	return false, nil
}
