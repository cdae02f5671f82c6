package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/state"
)

// Sessions across the fleet (SPEC S15). In fleet mode (fleet.session_keys
// and a shared state backend) a session's copies on several replicas act
// as one session to its client:
//
//   - its standalone GET stream may be opened on any replica, and the
//     newest one takes over: it is claimed in the shared state with its
//     open time as version (StreamOwners), announced on the bus, and the
//     replica holding an older one ends it (on the announcement, or when
//     renewing its claim finds a newer one);
//   - a server-to-client message outside any call that one replica cannot
//     deliver to a local GET stream (resources/updated of a subscription
//     it holds upstream, a log message) goes on the bus, and the replica
//     holding the stream delivers it; list_changed of a server is told to
//     every replica, which tells its local streams. A replica ignores its
//     own notes, so the replica that produced a message delivers it once;
//   - its log level and resource subscriptions are fields of the shared
//     Sessions state (ttl: the idle timeout, renewed while it is used), so
//     a copy resumed anywhere has its level, and a change on one replica
//     is announced and reloaded by the others' copies (an unsubscribe
//     through any replica ends the upstream subscription where it is
//     held). A subscription is held upstream by the copy that made it;
//     when that copy idles out, the replica holding the GET stream takes
//     it over. One that stops takes its subscriptions with it;
//   - resumed POST streams tell the replica running their call that a
//     client reads them (resume.go).
//
// Notes carry the hash of the session's local id (as the terminations
// key it), never the id or its token. Delivery is at most once: after a
// gap every copy reloads its state and checks its stream's claim. Without
// fleet mode nothing here runs.

// topicSessions is the bus topic of the notes below.
const topicSessions = "gateway:sessions"

// followSessionsName names the notes' follower in logs and in g.heard.
const followSessionsName = "session notes"

// Kinds of notes.
const (
	noteClaim   = "claim"  // a GET stream of Session was opened, Version
	noteList    = "list"   // Server's list changed: Method
	noteMessage = "msg"    // Msg for Session's GET stream
	noteState   = "state"  // Session's shared state changed
	noteReader  = "reader" // a client reads resumable Stream
	// noteOrphaned: a copy of Session that held upstream subscriptions
	// ended without the session (idle here, used elsewhere).
	noteOrphaned = "orphaned"
)

// busNote is one note between replicas.
type busNote struct {
	Kind    string          `json:"k"`
	From    string          `json:"o"`
	Session string          `json:"s,omitempty"`
	Version int64           `json:"v,omitempty"`
	Server  string          `json:"sv,omitempty"`
	Method  string          `json:"m,omitempty"`
	Stream  string          `json:"st,omitempty"`
	Msg     json.RawMessage `json:"msg,omitempty"`
}

// streamClaimTTL is how long a GET stream's claim lives unrenewed: a
// replica that dies leaves a claim that lapses by itself.
const streamClaimTTL = time.Minute

// fleetOn reports whether sessions are the fleet's (see above).
func (g *Gateway) fleetOn() bool { return g.shared != nil && g.ring != nil }

// publishNote tells the other replicas n. A failure is logged: what it
// says is recovered on the others' next resynchronisation, or lost.
func (g *Gateway) publishNote(n busNote) {
	if g.bus == nil || !g.fleetOn() {
		return
	}
	n.From = g.instance
	b, _ := json.Marshal(n)
	ctx, cancel := context.WithTimeout(g.bgCtx, busTimeout)
	defer cancel()
	if err := g.bus.Publish(ctx, topicSessions, b); err != nil {
		g.log.Warn("could not tell the other replicas about a session", "kind", n.Kind, "error", err)
	}
}

// followSessions applies the other replicas' notes until Shutdown. It
// runs in its own goroutine, in g.bg.
func (g *Gateway) followSessions() {
	state.Follow(g.bgCtx, g.bus, state.FollowOptions{
		Topics:  []string{topicSessions},
		What:    followSessionsName,
		Heard:   g.heard,
		Logger:  g.log,
		Timeout: busTimeout,
		Handle: func(_ context.Context, m state.Message) {
			var n busNote
			if json.Unmarshal(m.Data, &n) == nil {
				g.applyNote(n)
			}
		},
		// Notes before a subscription, or in a gap, were missed.
		Resync: func(context.Context) error { g.resyncSessions(); return nil },
	})
}

func (g *Gateway) applyNote(n busNote) {
	if n.Kind == noteReader {
		g.resumables.SawReader(n.Stream)
		return
	}
	if n.From == g.instance {
		return // done here already
	}
	switch n.Kind {
	case noteList:
		g.invalidateFor(n.Server, n.Method)
		g.deliverListChanged(n.Server, n.Method)
	case noteClaim:
		if s := g.sessionByHash(n.Session); s != nil {
			s.supersedeStream(n.Version)
		}
	case noteMessage:
		if s := g.sessionByHash(n.Session); s != nil {
			if m, err := jsonrpc.Decode(n.Msg); err == nil {
				s.Notify(m)
			}
		}
	case noteOrphaned:
		if s := g.sessionByHash(n.Session); s != nil {
			g.adoptSubscriptions(s)
		}
	case noteState:
		if s := g.sessionByHash(n.Session); s != nil {
			ctx, cancel := context.WithTimeout(g.bgCtx, busTimeout)
			g.loadSessionState(ctx, s)
			cancel()
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
	o, ok, err := g.shared.StreamOwnerOf(ctx, s.Hash())
	if err != nil {
		return
	}
	switch {
	case !ok:
		s.ForgetRemoteStream()
	case o.Replica != g.instance:
		s.LearnRemoteStream(o.Version)
	}
}

// resyncSessions recovers from missed notes: every sealed local session
// reloads its state, and a GET stream whose claim a newer one took ends.
func (g *Gateway) resyncSessions() {
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

// listEcho is how close together this replica hearing a server's list
// change itself and hearing it from another replica count as one change.
// Every replica connected to a shared upstream usually hears its
// list_changed on its own upstream session as well: one change, told
// once to a stream.
const listEcho = time.Second

// listTwice is how close together this replica hearing the same list
// change twice counts as one: with several upstream sessions of a server
// in its pool, each tells it. Shorter than listEcho, as a second real
// change so soon after the first is likelier than across replicas.
const listTwice = 250 * time.Millisecond

// listHeard is when a list change of one server and method was last told
// to this replica's streams, by this replica's upstream session or by
// another replica.
type listHeard struct{ local, remote atomic.Int64 }

// listSeen holds when each server's list changes were last told to this
// replica's streams, by server and method.
type listSeen struct {
	mu sync.Mutex // mu guards the fields below
	m  map[listKey]*listHeard
}

type listKey struct{ server, method string }

func (ls *listSeen) heard(server, method string) *listHeard {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	k := listKey{server, method}
	h := ls.m[k]
	if h == nil {
		if ls.m == nil {
			ls.m = map[listKey]*listHeard{}
		}
		h = &listHeard{}
		ls.m[k] = h
	}
	return h
}

// shareListChanged tells the other replicas that server's list changed.
// false: this replica's sessions already heard of it moments ago, from
// another replica or another upstream session of the server (the caller
// does not tell them again).
func (g *Gateway) shareListChanged(server, method string) bool {
	if !g.fleetOn() {
		return true
	}
	h := g.listSeen.heard(server, method)
	now := time.Now().UnixNano()
	prev := h.local.Swap(now)
	if now-h.remote.Load() < int64(listEcho) || now-prev < int64(listTwice) {
		return false
	}
	g.publishNote(busNote{Kind: noteList, Server: server, Method: method})
	return true
}

// deliverListChanged tells this replica's sessions and listeners that can
// see server that its list changed (another replica heard it), unless
// this replica heard the same change itself moments ago.
func (g *Gateway) deliverListChanged(server, method string) {
	h := g.listSeen.heard(server, method)
	now := time.Now().UnixNano()
	h.remote.Store(now)
	if now-h.local.Load() < int64(listEcho) {
		return
	}
	n := jsonrpc.NewNotification(method, nil)
	g.forEachSession(server, func(s *session) { s.Notify(n) })
	g.notifyListeners(server, method, nil)
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

// notifyOrForward sends msg on s's GET stream; when this replica holds
// none and another does, that one gets it through the bus. (Only then: a
// pooled upstream's message outside calls goes to every session of the
// server, most of which have no stream anywhere.)
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
	g.publishNote(busNote{Kind: noteMessage, Session: s.Hash(), Msg: jsonrpc.Encode(msg)})
	return true
}

func (g *Gateway) notifyOrForward(s *session, msg *jsonrpc.Message) {
	if s.Notify(msg) || !g.fleetOn() || s.Token() == "" {
		return
	}
	if s.RemoteStream() == 0 {
		return
	}
	g.publishNote(busNote{Kind: noteMessage, Session: s.Hash(), Msg: jsonrpc.Encode(msg)})
}

// openFleetStream claims s's GET stream for st (opened now) and takes it
// over locally. false: a newer stream holds the claim, or s ended.
func (g *Gateway) openFleetStream(ctx context.Context, s *session, st *streamSender) (version int64, ok bool) {
	version = time.Now().UnixNano()
	cctx, cancel := context.WithTimeout(ctx, busTimeout)
	_, ok, err := g.shared.ClaimStream(cctx, s.Hash(), state.StreamOwner{Replica: g.instance, Version: version}, streamClaimTTL)
	cancel()
	if err != nil {
		// The stream still works here; others cannot be told to end
		// theirs, and this one ends on its next claim check if a newer
		// one took over.
		g.log.Warn("cannot claim a session's GET stream in the shared state", "session", s.ID()[:8], "error", err)
		ok = true
	}
	if !ok || !s.TakeOverStream(st, version) {
		return 0, false
	}
	g.publishNote(busNote{Kind: noteClaim, Session: s.Hash(), Version: version})
	return version, true
}

// keepFleetStream renews st's claim until it ends, ending it when a newer
// stream took over; the claim is released at the end.
func (g *Gateway) keepFleetStream(s *session, st *streamSender, version int64) {
	o := state.StreamOwner{Replica: g.instance, Version: version}
	// A task, not the request's: the stream ends on Shutdown (or a
	// newer claim), and the release goes on after its request returned.
	started := g.tasks.start(func() {
		t := time.NewTicker(streamClaimTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-st.done:
				ctx, cancel := context.WithTimeout(g.bgCtx, busTimeout)
				_ = g.shared.ReleaseStream(ctx, s.Hash(), o)
				cancel()
				return
			case <-t.C:
				// A session with only a stream open is in use: its
				// shared state must not lapse under it.
				g.touchSessionState(s)
				ctx, cancel := context.WithTimeout(g.bgCtx, busTimeout)
				_, ok, err := g.shared.ClaimStream(ctx, s.Hash(), o, streamClaimTTL)
				cancel()
				if err == nil && !ok {
					g.log.Debug("GET stream superseded by a newer one", "session", s.ID()[:8])
					st.Finish()
				}
			}
		}
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

// Fields of a session's shared state. fieldLive is in every write, so
// that state with no level and no subscription left is told apart from
// state that lapsed.
const (
	fieldLive      = "live"
	fieldLevel     = "level"
	fieldSubPrefix = "sub:" // + uri = server
	// What the fleet's session report shows of it (sessions_admin.go):
	// fieldInfo the session's identity and route, fieldClient its
	// client's name and version (written by the copy that saw its
	// initialize), fieldHeldPrefix + a replica id the time (Unix ms)
	// that replica last used its copy.
	fieldInfo       = "info"
	fieldClient     = "client"
	fieldHeldPrefix = "at:"
)

// saveSessionFields writes fields of s's shared state and tells the other
// replicas' copies. A failure is logged: this copy has it anyway.
func (g *Gateway) saveSessionFields(ctx context.Context, s *session, set map[string]string, del ...string) {
	if !g.fleetOn() || s.Token() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busTimeout)
	defer cancel()
	var err error
	if len(set) > 0 {
		set[fieldLive] = "1"
		err = g.shared.SetSessionFields(ctx, s.Hash(), set, g.idleTimeout)
	}
	if err == nil && len(del) > 0 {
		err = g.shared.DeleteSessionFields(ctx, s.Hash(), g.idleTimeout, del...)
	}
	if err != nil {
		g.log.Warn("could not share a session's state with the other replicas", "session", s.ID()[:8], "error", err)
		return
	}
	s.stateTouched.Store(g.now().UnixNano())
	g.publishNote(busNote{Kind: noteState, Session: s.Hash()})
}

// loadSessionState makes s's log level the shared state's, and drops the
// upstream subscriptions s holds here that the state no longer has (its
// client unsubscribed through another replica).
func (g *Gateway) loadSessionState(ctx context.Context, s *session) {
	fields, err := g.shared.SessionFields(ctx, s.Hash())
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
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	fields, err := g.shared.SessionFields(ctx, hashHex(local))
	if err != nil || fields[fieldLive] != "" {
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
func subField(uri string) string {
	f := fieldSubPrefix + uri
	if len(f) > state.MaxFieldLen || strings.ContainsRune(uri, 0) {
		return ""
	}
	return f
}

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
// the updates go): the copy that held them ended (noteOrphaned). A copy
// without the stream leaves them alone, so that only one replica
// subscribes for s.
func (g *Gateway) adoptSubscriptions(s *session) {
	if !s.StreamClaimed() {
		return
	}
	ctx, cancel := context.WithTimeout(g.bgCtx, 2*busTimeout)
	defer cancel()
	fields, err := g.shared.SessionFields(ctx, s.Hash())
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
