package gateway

import (
	"context"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
)

// Sessions across the fleet (SPEC S15): what the replicas tell each
// other about a session (its GET stream's claim, messages for that
// stream, list changes, its shared log level and subscriptions, resumed
// streams' readers) and when, is relay.Bus's. What stays here is what a
// note does to this replica's copy of a session (busNotes below), and
// the session records the fleet's session report reads (records).
// Without fleet mode nothing here runs.

// Fields of a session's shared state (relay.Bus).
const (
	fieldLive       = fleetrelay.FieldLive
	fieldLevel      = fleetrelay.FieldLevel
	fieldSubPrefix  = fleetrelay.FieldSubPrefix
	fieldInfo       = fleetrelay.FieldInfo
	fieldClient     = fleetrelay.FieldClient
	fieldHeldPrefix = fleetrelay.FieldHeldPrefix
)

// busTimeout bounds one publish, subscribe or read of the shared state.
const busTimeout = fleetrelay.Timeout

// fleetOn reports whether sessions are the fleet's (see above).
func (g *Gateway) fleetOn() bool { return g.shared != nil && g.ring != nil }

// newBus builds g's side of the bus; Start starts its followers.
func (g *Gateway) newBus() *fleetrelay.Bus {
	return fleetrelay.NewBus(g.bgCtx, fleetrelay.BusOptions{PubSub: g.bus, Shared: g.shared, Fleet: g.fleetOn(),
		Instance: g.instance, Heard: g.heard, Logger: g.log})
}

// busNotes is the gateway as the bus's follower sees it: what a note of
// another replica does to this replica's sessions (relay.SessionNotes,
// relay.Terminations).
type busNotes Gateway

func (b *busNotes) g() *Gateway { return (*Gateway)(b) }

func (b *busNotes) ReaderSeen(key string) { b.g().resumables.SawReader(key) }

func (b *busNotes) InvalidateLists(server, method string) { b.g().invalidateFor(server, method) }

// DeliverListChanged tells this replica's sessions and listeners that
// can see server that its list changed (another replica heard it).
func (b *busNotes) DeliverListChanged(server, method string) {
	g := b.g()
	n := jsonrpc.NewNotification(method, nil)
	g.forEachSession(server, func(s *session) { s.Notify(n) })
	g.notifyListeners(server, method, nil)
}

func (b *busNotes) StreamClaimed(hash string, version int64) {
	if s := b.g().sessionByHash(hash); s != nil {
		s.supersedeStream(version)
	}
}

func (b *busNotes) Message(hash string, m *jsonrpc.Message) {
	if s := b.g().sessionByHash(hash); s != nil {
		s.Notify(m)
	}
}

func (b *busNotes) Orphaned(hash string) {
	if s := b.g().sessionByHash(hash); s != nil {
		b.g().adoptSubscriptions(s)
	}
}

func (b *busNotes) StateChanged(ctx context.Context, hash string) {
	if s := b.g().sessionByHash(hash); s != nil {
		b.g().loadSessionState(ctx, s)
	}
}

// Resync recovers from missed notes: every sealed local session reloads
// its state, and a GET stream whose claim a newer one took ends.
func (b *busNotes) Resync(context.Context) {
	g := b.g()
	ctx, cancel := context.WithTimeout(g.bgCtx, 2*busTimeout)
	defer cancel()
	for _, s := range g.sessions.All() {
		if s.Token() == "" || s.Closed() {
			continue
		}
		g.loadSessionState(ctx, s)
		g.findRemoteStream(ctx, s)
		if newer := s.RemoteStream(); newer != 0 {
			s.supersedeStream(newer)
		}
		if ctx.Err() != nil {
			break
		}
	}
}

// sessionByHash is the live local session whose id hashes to h.
func (g *Gateway) sessionByHash(h string) *session {
	s, _ := g.sessions.ByHash(h)
	return s
}

// findRemoteStream learns whether another replica holds s's GET stream,
// for a copy that missed its claim note (made after it, or after a gap).
func (g *Gateway) findRemoteStream(ctx context.Context, s *session) {
	version, ok := g.fleetBus.StreamElsewhere(ctx, s.Hash())
	switch {
	case !ok:
	case version == 0:
		s.ForgetRemoteStream()
	default:
		s.LearnRemoteStream(version)
	}
}

// shareListChanged tells the other replicas that server's list changed.
// false: this replica's sessions already heard of it moments ago, from
// another replica or another upstream session of the server (the caller
// does not tell them again).
func (g *Gateway) shareListChanged(server, method string) bool {
	return g.fleetBus.ShareListChanged(server, method)
}

// invalidateFor drops the cached lists a list_changed method is about.
func (g *Gateway) invalidateFor(server, method string) {
	switch method {
	case mcpwire.NotifyToolsListChanged:
		g.cat.Invalidate(server, catalog.Tools)
	case mcpwire.NotifyPromptsListChanged:
		g.cat.Invalidate(server, catalog.Prompts)
	case mcpwire.NotifyResourcesListChanged:
		g.cat.Invalidate(server, catalog.Resources)
		g.cat.Invalidate(server, catalog.Templates)
	}
}

// forwardToStream hands msg to the replica holding s's GET stream (fleet
// mode), asking the shared state when this copy has not heard of one;
// false when no replica holds it. A request sent so is answered on any
// replica, and the answer forwarded here (its id names this replica).
func (g *Gateway) forwardToStream(s *session, msg *jsonrpc.Message) bool {
	if !g.fleetOn() || s.Token() == "" {
		return false
	}
	remote := s.RemoteStream() != 0
	if !remote {
		ctx, cancel := context.WithTimeout(g.bgCtx, busTimeout)
		g.findRemoteStream(ctx, s)
		cancel()
		remote = s.RemoteStream() != 0
	}
	if !remote {
		return false
	}
	g.fleetBus.Publish(fleetrelay.Note{Kind: fleetrelay.NoteMessage, Session: s.Hash(), Msg: jsonrpc.Encode(msg)})
	return true
}

// notifyOrForward sends msg on s's GET stream; when this replica holds
// none and another does, that one gets it through the bus. (Only then: a
// pooled upstream's message outside calls goes to every session of the
// server, most of which have no stream anywhere.)
func (g *Gateway) notifyOrForward(s *session, msg *jsonrpc.Message) {
	if s.Notify(msg) || !g.fleetOn() || s.Token() == "" {
		return
	}
	if s.RemoteStream() == 0 {
		return
	}
	g.fleetBus.Publish(fleetrelay.Note{Kind: fleetrelay.NoteMessage, Session: s.Hash(), Msg: jsonrpc.Encode(msg)})
}

// openFleetStream claims s's GET stream for st (opened now) and takes it
// over locally. false: a newer stream holds the claim, or s ended.
func (g *Gateway) openFleetStream(ctx context.Context, s *session, st *streamSender) (version int64, ok bool) {
	return g.fleetBus.ClaimStream(ctx, s.Hash(), s.ID()[:8], func(v int64) bool { return s.TakeOverStream(st, v) })
}

// keepFleetStream renews st's claim until it ends, ending it when a newer
// stream took over; the claim is released at the end.
func (g *Gateway) keepFleetStream(s *session, st *streamSender, version int64) {
	// A task, not the request's: the stream ends on Shutdown (or a
	// newer claim), and the release goes on after its request returned.
	started := g.tasks.start(func() {
		// A session with only a stream open is in use: its shared state
		// must not lapse under it.
		g.fleetBus.KeepStream(s.Hash(), s.ID()[:8], version, st.done, func() { g.touchSessionState(s) }, st.Finish)
	})
	if !started {
		st.Finish() // the gateway closed: no claim is kept
	}
}

// supersedeStream records that another replica holds s's GET stream
// since version, and ends this replica's if it is older.
func (s *session) supersedeStream(version int64) {
	if s.SupersedeStream(version) {
		s.g.log.Debug("GET stream superseded on another replica", "session", s.Short())
	}
}

// saveSessionFields writes fields of s's shared state and tells the other
// replicas' copies. A failure is logged: this copy has it anyway.
func (g *Gateway) saveSessionFields(ctx context.Context, s *session, set map[string]string, del ...string) {
	if !g.fleetOn() || s.Token() == "" {
		return
	}
	if err := g.fleetBus.SaveFields(ctx, s.Hash(), g.idleTimeout, set, del...); err != nil {
		g.log.Warn("could not share a session's state with the other replicas", "session", s.ID()[:8], "error", err)
		return
	}
	s.stateTouched.Store(g.now().UnixNano())
}

// loadSessionState makes s's log level the shared state's, and drops the
// upstream subscriptions s holds here that the state no longer has (its
// client unsubscribed through another replica).
func (g *Gateway) loadSessionState(ctx context.Context, s *session) {
	fields, err := g.fleetBus.Fields(ctx, s.Hash())
	if err != nil {
		g.log.Warn("could not read a session's shared state", "session", s.ID()[:8], "error", err)
		return
	}
	idx := -1
	if l, ok := fields[fieldLevel]; ok {
		idx = levelIndex(l)
	}
	// The upstreams this replica calls for s hear it before s's next call
	// (serve).
	s.AdoptLevel(idx)
	var dropped map[string]string
	// Lapsed or never written (the backend was unreachable): no evidence
	// the client unsubscribed.
	if fields[fieldLive] != "" {
		dropped = s.DropSubs(func(uri string) bool {
			_, ok := fields[fieldSubPrefix+uri]
			return ok || subField(uri) == ""
		})
	}
	for uri, server := range dropped {
		g.releaseSubscription(s, server, uri)
	}
}

// touchSessionState renews s's shared state while it is used, at most
// every sessionSeenEvery (and every quarter of the idle timeout): it
// lapses with the session, and says this replica holds a copy (the
// fleet's session report, sessions_admin.go).
func (g *Gateway) touchSessionState(s *session) {
	if g.records == nil {
		return
	}
	now := g.now().UnixNano()
	last := s.stateTouched.Load()
	if now-last < int64(min(g.idleTimeout/4, sessionSeenEvery)) || !s.stateTouched.CompareAndSwap(last, now) {
		return
	}
	g.tasks.start(func() {
		ctx, cancel := context.WithTimeout(g.bgCtx, busTimeout)
		defer cancel()
		// Never written (the backend was down at initialize) or lapsed
		// while this copy was in use: in use it is, so it is written.
		g.writeLive(ctx, s)
	})
}

// sessionSeenEvery is how often a copy in use says so in the shared
// state at most: the fleet's report of a session held elsewhere is that
// much behind on its idleness.
const sessionSeenEvery = 30 * time.Second

// markSessionLive records a new session in the shared state, so that
// its idleness is the fleet's (idleEverywhere), not one replica's, and
// the other replicas' administrators see and can end it.
func (g *Gateway) markSessionLive(ctx context.Context, s *session) {
	if g.records == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busTimeout)
	defer cancel()
	g.writeLive(ctx, s)
}

// writeLive writes s's record in the shared state: live, what the
// fleet's report shows of it, and that this replica holds a copy now.
func (g *Gateway) writeLive(ctx context.Context, s *session) {
	if s.Closed() {
		return // an ended session's state is dropped, not renewed
	}
	fields, err := g.sessionRecord(s)
	if err == nil {
		err = g.records.SetSessionFields(ctx, s.Hash(), fields, g.idleTimeout)
	}
	if err != nil {
		g.log.Debug("could not record a session in the shared state", "session", s.ID()[:8], "error", err)
		return
	}
	s.stateTouched.Store(g.now().UnixNano())
}

// forgetCopy says in the shared state that this replica no longer holds
// a copy of s (it closed); the session itself may live on elsewhere.
func (g *Gateway) forgetCopy(s *session) {
	if g.records == nil {
		return
	}
	g.tasks.start(func() {
		if g.sessionByHash(s.Hash()) != nil {
			return // a new copy took its place here
		}
		// Detached: Close ends every session after Shutdown, and each
		// copy's end is still recorded.
		ctx, cancel := g.detached(busTimeout)
		defer cancel()
		if err := g.records.DeleteSessionFields(ctx, s.Hash(), g.idleTimeout, fieldHeldPrefix+g.instance); err != nil {
			g.log.Debug("could not record a session copy's end in the shared state", "session", s.ID()[:8], "error", err)
		}
	})
}

// idleEverywhere reports whether the sealed session local, which this
// replica does not hold, went unused on every replica for longer than the
// idle timeout: its shared state (renewed on use anywhere) lapsed, and it
// was issued longer ago than that. The replica that created it remembers
// its idle end in the terminations, but one that died cannot; this is
// the fleet's own clock. An unreachable backend says nothing (not idle).
func (g *Gateway) idleEverywhere(ctx context.Context, fs fleet.Session, local string) bool {
	if !g.fleetOn() || g.now().Sub(fs.Issued) <= g.idleTimeout {
		return false
	}
	if !g.fleetBus.Lapsed(ctx, hashHex(local)) {
		return false
	}
	g.log.Debug("sealed session expired: idle on every replica", "session", local[:8])
	return true
}

// dropSessionState forgets the shared state of a session that ended for
// good (its id is remembered as ended).
func (g *Gateway) dropSessionState(ctx context.Context, hash string) {
	if g.records == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busTimeout)
	defer cancel()
	if err := g.records.DeleteSession(ctx, hash); err != nil {
		g.log.Debug("could not forget an ended session's shared state", "error", err)
	}
}

// subField is the state field of a subscription to uri; "" when the uri
// is too long to be one (the subscription then stays this copy's alone).
func subField(uri string) string { return fleetrelay.SubField(uri) }

// shareSubscription records s's subscription to uri (on: made; else
// ended) in its shared state: an unsubscribe through another replica then
// reaches the copy that holds the subscription upstream.
func (g *Gateway) shareSubscription(ctx context.Context, s *session, uri, server string, on bool) {
	f := subField(uri)
	if f == "" {
		return
	}
	if on {
		g.saveSessionFields(ctx, s, map[string]string{f: server})
	} else {
		g.saveSessionFields(ctx, s, nil, f)
	}
}

// adoptSubscriptions makes the subscriptions of s's shared state this
// replica's upstream subscriptions, when it holds s's GET stream (where
// the updates go): the copy that held them ended (relay.NoteOrphaned). A
// copy without the stream leaves them alone, so that only one replica
// subscribes for s.
func (g *Gateway) adoptSubscriptions(s *session) {
	if !s.StreamClaimed() {
		return
	}
	ctx, cancel := context.WithTimeout(g.bgCtx, 2*busTimeout)
	defer cancel()
	fields, err := g.fleetBus.Fields(ctx, s.Hash())
	if err != nil {
		g.log.Warn("could not read a session's shared state", "session", s.ID()[:8], "error", err)
		return
	}
	sc := &scope{g: g, sess: s, rt: &s.route, out: sessionOut{s}, caps: s.Caps()}
	for f, server := range fields {
		uri, ok := strings.CutPrefix(f, fieldSubPrefix)
		if !ok || !s.route.has(server) {
			continue
		}
		if !s.AddSub(uri, server) {
			continue
		}
		var e *jsonrpc.Error
		if g.boundFor(s, server) {
			_, e = g.forward(ctx, sc, server, mcpwire.MethodResourcesSubscribe, uriParams(uri))
		} else {
			e = g.subscribeUpstream(ctx, sc, server, uri, uriParams(uri))
		}
		if e != nil {
			s.RemoveSub(uri)
			g.log.Warn("could not take over a session's resource subscription", "session", s.ID()[:8], "server", server, "error", e.Message)
			continue
		}
		g.log.Debug("took over a session's resource subscription", "session", s.ID()[:8], "server", server)
	}
}
