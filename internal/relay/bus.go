package relay

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
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
//     deliver to a local GET stream goes on the bus, and the replica
//     holding the stream delivers it; list_changed of a server is told to
//     every replica, which tells its local streams. A replica ignores its
//     own notes, so the replica that produced a message delivers it once;
//   - its log level and resource subscriptions are fields of the shared
//     Sessions state (ttl: the idle timeout, renewed while it is used), so
//     a copy resumed anywhere has its level, and a change on one replica
//     is announced and reloaded by the others' copies;
//   - resumed POST streams tell the replica running their call that a
//     client reads them (Resumables);
//   - sessions ended for an administrator, or for a client's DELETE of a
//     sealed id, are announced on a topic of their own, every replica
//     ends its copies and confirms it, and the announcer waits for the
//     confirmations (the termination fan-out, SPEC S8.2).
//
// Notes carry the hash of the session's local id (as the terminations
// key it), never the id or its token. Delivery is at most once: after a
// gap every follower resynchronises (its handler's Resync). Without fleet
// mode no session note is published or followed.

// Bus topics and the names their followers go by in logs and in Heard.
const (
	TopicSessions          = "gateway:sessions"
	FollowSessionsName     = "session notes"
	TopicTerminated        = "gateway:terminated"
	TopicEndedCopy         = "gateway:terminated:confirmed"
	FollowTerminationsName = "terminations"
)

// Kinds of notes.
const (
	NoteClaim   = "claim"  // a GET stream of Session was opened, Version
	NoteList    = "list"   // Server's list changed: Method
	NoteMessage = "msg"    // Msg for Session's GET stream
	NoteState   = "state"  // Session's shared state changed
	NoteReader  = "reader" // a client reads resumable Stream
	// NoteOrphaned: a copy of Session that held upstream subscriptions
	// ended without the session (idle here, used elsewhere).
	NoteOrphaned = "orphaned"
)

// Note is one note between replicas.
type Note struct {
	Kind    string          `json:"k"`
	From    string          `json:"o"`
	Session string          `json:"s,omitempty"`
	Version int64           `json:"v,omitempty"`
	Server  string          `json:"sv,omitempty"`
	Method  string          `json:"m,omitempty"`
	Stream  string          `json:"st,omitempty"`
	Msg     json.RawMessage `json:"msg,omitempty"`
}

// SessionNotes is what a replica does with the other replicas' session
// notes: the gateway's, on its local sessions (found by hash; a hash that
// names none here is ignored).
type SessionNotes interface {
	// ReaderSeen: a client reads resumable stream key (this replica's
	// own notes included).
	ReaderSeen(key string)
	// InvalidateLists drops the cached lists a list_changed method of
	// server is about; DeliverListChanged tells this replica's streams
	// (only when this replica did not hear the same change moments ago).
	InvalidateLists(server, method string)
	DeliverListChanged(server, method string)
	// StreamClaimed: another replica holds the GET stream since version.
	StreamClaimed(hash string, version int64)
	// Message is for the session's GET stream held here.
	Message(hash string, m *jsonrpc.Message)
	// Orphaned: the copy that held the session's upstream subscriptions
	// ended elsewhere.
	Orphaned(hash string)
	// StateChanged: reload the session's shared state.
	StateChanged(ctx context.Context, hash string)
	// Resync recovers from missed notes.
	Resync(ctx context.Context)
}

// Terminations is what a replica does with the fleet's terminations.
type Terminations interface {
	// EndCopy ends the local session whose id hashes to hash, if any.
	EndCopy(hash string)
	// Resync ends every local session the terminations remember; an error
	// says not every one was checked (retried).
	Resync(ctx context.Context) error
}

// BusOptions configure a Bus.
type BusOptions struct {
	// PubSub carries the notes; nil: a replica alone, nothing is told.
	PubSub state.PubSub
	// Shared is fleet mode's shared state (stream claims, session
	// fields); nil, or Fleet false: sessions are this replica's alone,
	// only terminations are told.
	Shared state.Backend
	Fleet  bool
	// Instance is this replica's id: the From of its notes and the
	// signature of its confirmations; "": a random one.
	Instance string
	// ConfirmTimeout bounds how long AnnounceEnded waits for the other
	// replicas' confirmations; 0: Timeout.
	ConfirmTimeout time.Duration
	// Heard says whether the followers may have missed a note; nil
	// without a PubSub.
	Heard  *state.Heard
	Logger *slog.Logger
}

// Bus is this replica's side of the notes between replicas. Safe for
// concurrent use. Its followers run from Start until ctx (NewBus's) ends,
// and Close waits for them.
type Bus struct {
	o   BusOptions
	ctx context.Context
	wg  sync.WaitGroup // the followers Start starts
	// lists: when each server's list changes were last told to this
	// replica's streams, by server and method.
	lists listSeen
	// ends: this replica's announcements of ended sessions waiting for
	// the other replicas to confirm, by session hash.
	ends state.Confirms
	// confirming: the hashes of the copies this replica ended whose
	// confirmations wait for sendConfirmations, woken by confirmWake.
	confirmMu   sync.Mutex
	confirming  []string
	confirmWake chan struct{}
}

// NewBus returns the bus of a replica; ctx is its owner's, ending with
// its shutdown: publishes and followers are bounded by it.
func NewBus(ctx context.Context, o BusOptions) *Bus {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Fleet = o.Fleet && o.Shared != nil
	if o.Instance == "" {
		o.Instance = rand.Text()[:16]
	}
	if o.ConfirmTimeout <= 0 {
		o.ConfirmTimeout = Timeout
	}
	return &Bus{o: o, ctx: ctx, confirmWake: make(chan struct{}, 1)}
}

// FleetOn reports whether sessions are the fleet's.
func (b *Bus) FleetOn() bool { return b.o.Fleet }

// Start follows the terminations and, in fleet mode, the session notes,
// each in a goroutine of its own until the bus's context ends. The
// followers are tracked in Heard before Start returns: until each
// resynchronised, what it keeps in step is not to be trusted.
func (b *Bus) Start(s SessionNotes, t Terminations) {
	if b.o.PubSub == nil {
		return
	}
	b.o.Heard.Track(FollowTerminationsName)
	b.wg.Go(func() { b.followTerminations(t) })
	if b.o.Fleet {
		b.o.Heard.Track(FollowSessionsName)
		b.wg.Go(func() { b.followSessions(s) })
	}
}

// Close waits for the followers, which end with the bus's context.
func (b *Bus) Close() { b.wg.Wait() }

// Publish tells the other replicas n (fleet mode). A failure is logged:
// what it says is recovered on the others' next resynchronisation, or
// lost.
func (b *Bus) Publish(n Note) {
	if b.o.PubSub == nil || !b.o.Fleet {
		return
	}
	n.From = b.o.Instance
	data, _ := json.Marshal(n)
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	if _, err := b.o.PubSub.Publish(ctx, TopicSessions, data); err != nil {
		b.o.Logger.Warn("could not tell the other replicas about a session", "kind", n.Kind, "error", err)
	}
}

func (b *Bus) followSessions(h SessionNotes) {
	state.Follow(b.ctx, b.o.PubSub, state.FollowOptions{
		Topics:  []string{TopicSessions},
		What:    FollowSessionsName,
		Heard:   b.o.Heard,
		Logger:  b.o.Logger,
		Timeout: Timeout,
		Handle: func(_ context.Context, m state.Message) {
			var n Note
			if json.Unmarshal(m.Data, &n) == nil {
				b.apply(h, n)
			}
		},
		// Notes before a subscription, or in a gap, were missed.
		Resync: func(ctx context.Context) error { h.Resync(ctx); return nil },
	})
}

func (b *Bus) apply(h SessionNotes, n Note) {
	if n.Kind == NoteReader {
		h.ReaderSeen(n.Stream)
		return
	}
	if n.From == b.o.Instance {
		return // done here already
	}
	switch n.Kind {
	case NoteList:
		h.InvalidateLists(n.Server, n.Method)
		if b.listHeardRemote(n.Server, n.Method) {
			h.DeliverListChanged(n.Server, n.Method)
		}
	case NoteClaim:
		h.StreamClaimed(n.Session, n.Version)
	case NoteMessage:
		if m, err := jsonrpc.Decode(n.Msg); err == nil {
			h.Message(n.Session, m)
		}
	case NoteOrphaned:
		h.Orphaned(n.Session)
	case NoteState:
		ctx, cancel := context.WithTimeout(b.ctx, Timeout)
		h.StateChanged(ctx, n.Session)
		cancel()
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

// ShareListChanged tells the other replicas that server's list changed
// (heard by this replica). false: this replica's sessions already heard
// of it moments ago, from another replica or another upstream session of
// the server (the caller does not tell them again). Outside fleet mode
// always true.
func (b *Bus) ShareListChanged(server, method string) bool {
	if !b.o.Fleet {
		return true
	}
	h := b.lists.heard(server, method)
	now := time.Now().UnixNano()
	prev := h.local.Swap(now)
	if now-h.remote.Load() < int64(listEcho) || now-prev < int64(listTwice) {
		return false
	}
	b.Publish(Note{Kind: NoteList, Server: server, Method: method})
	return true
}

// listHeardRemote records that another replica told of server's list
// change, and reports whether this replica's streams are to be told:
// not when this replica heard the same change itself moments ago.
func (b *Bus) listHeardRemote(server, method string) bool {
	h := b.lists.heard(server, method)
	now := time.Now().UnixNano()
	h.remote.Store(now)
	return now-h.local.Load() >= int64(listEcho)
}

// Terminations (SPEC S15, S8.2). A session resumed from its sealed id
// lives on as a copy on every replica that served it; the store's
// terminations refuse it only where no copy is held. So a replica that
// ends sessions announces them, every replica ends its copies, and the
// announcer waits until each replica that heard the announcement
// confirmed that its copy ended (state.Confirms): an administrator's
// termination, or a client's DELETE, is answered once no replica serves
// the session any more, not a moment before. A message is the hash of
// the session's local id; a confirmation is the hash and the confirming
// replica's id.

// AnnounceEnded tells the other replicas that the sessions whose ids hash
// to hashes ended, and waits, up to ConfirmTimeout, until every replica
// that heard it confirmed ending its copy. unconfirmed counts the
// sessions whose end some replica did not confirm in time (a replica
// that died, is stuck, or runs a version that does not confirm): their
// copies there end when it hears the announcement or resynchronises. err
// is the first publish that failed (the terminations remember the
// sessions anyway, and the other replicas' copies end when they idle out
// or their follower resynchronises). Without a PubSub it does nothing.
func (b *Bus) AnnounceEnded(ctx context.Context, hashes ...string) (unconfirmed int, err error) {
	if b.o.PubSub == nil || len(hashes) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.o.ConfirmTimeout)
	defer cancel()
	waits := make([]*state.Confirm, 0, len(hashes))
	defer func() {
		for _, w := range waits {
			b.ends.Drop(w)
		}
	}()
	// A chunk at a time, each confirmed before the next is announced
	// (until the deadline: past it, the rest is announced without
	// waiting): a follower then holds at most a chunk of announcements
	// and its confirmations, never SubscriptionBuffer's worth, which
	// would make it resynchronise (ending the copies without confirming
	// them). Ending every session of a user or a key stays confirmed.
	for len(hashes) > 0 {
		chunk := hashes[:min(len(hashes), announceChunk)]
		hashes = hashes[len(chunk):]
		first := len(waits)
		for _, h := range chunk {
			w := b.ends.Add(h)
			waits = append(waits, w)
			n, err := b.o.PubSub.Publish(ctx, TopicTerminated, []byte(h))
			if err != nil {
				return 0, err
			}
			b.ends.Expect(w, n)
		}
		for _, w := range waits[first:] {
			select {
			case <-w.Done():
			case <-ctx.Done():
			}
		}
	}
	for _, w := range waits {
		if !w.Confirmed() {
			unconfirmed++
		}
	}
	return unconfirmed, nil
}

// announceChunk is how many ends AnnounceEnded announces before waiting
// for their confirmations; far under state.SubscriptionBuffer.
const announceChunk = 64

// maxConfirmed is how many ended copies one confirmation names at most
// (about 4 KiB of message).
const maxConfirmed = 64

func (b *Bus) followTerminations(t Terminations) {
	b.wg.Go(b.sendConfirmations)
	state.Follow(b.ctx, b.o.PubSub, state.FollowOptions{
		Topics:  []string{TopicTerminated, TopicEndedCopy},
		What:    FollowTerminationsName,
		Heard:   b.o.Heard,
		Logger:  b.o.Logger,
		Timeout: Timeout,
		Handle: func(ctx context.Context, m state.Message) {
			switch m.Topic {
			case TopicTerminated:
				if hash := string(m.Data); len(hash) == 64 {
					t.EndCopy(hash)
					b.confirmEnded(hash)
				}
			case TopicEndedCopy:
				// "<hash> [<hash>...] <replica>": the ended copies a
				// replica confirms at once.
				f := strings.Fields(string(m.Data))
				if len(f) < 2 || len(f) > maxConfirmed+1 {
					return
				}
				from := f[len(f)-1]
				for _, hash := range f[:len(f)-1] {
					if len(hash) == 64 {
						b.ends.Heard(hash, from)
					}
				}
			}
		},
		// Announcements before a subscription, or in a gap, were missed.
		// One that could not read the store is retried.
		Resync: t.Resync,
	})
}

// confirmEnded queues the confirmation that this replica's copy of hash's
// session ended (or that it held none), for sendConfirmations: the
// follower does not wait for a publish per announcement, so it keeps up
// with many at once, and those queued meanwhile share a message.
func (b *Bus) confirmEnded(hash string) {
	b.confirmMu.Lock()
	b.confirming = append(b.confirming, hash)
	b.confirmMu.Unlock()
	select {
	case b.confirmWake <- struct{}{}:
	default:
	}
}

// sendConfirmations publishes the queued confirmations, maxConfirmed to a
// message, until the bus's context ends. A failure is logged: the
// announcer then reports those sessions' ends as unconfirmed.
func (b *Bus) sendConfirmations() {
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.confirmWake:
		}
		b.confirmMu.Lock()
		queued := b.confirming
		b.confirming = nil
		b.confirmMu.Unlock()
		for len(queued) > 0 {
			batch := queued[:min(len(queued), maxConfirmed)]
			queued = queued[len(batch):]
			ctx, cancel := context.WithTimeout(b.ctx, Timeout)
			_, err := b.o.PubSub.Publish(ctx, TopicEndedCopy, []byte(strings.Join(batch, " ")+" "+b.o.Instance))
			cancel()
			if err != nil {
				b.o.Logger.Warn("could not confirm ending terminated sessions' copies to the replica that ended them",
					"sessions", len(batch), "error", err)
			}
		}
	}
}

// streamClaimTTL is how long a GET stream's claim lives unrenewed: a
// replica that dies leaves a claim that lapses by itself.
const streamClaimTTL = time.Minute

// ClaimStream claims the GET stream of the session whose id hashes to
// hash for a stream opened now, and, if the claim holds, hands it to take
// (the local session takes the stream over, or refuses: false) and
// announces it. ok false: a newer stream holds the claim, or take
// refused. A claim the shared state could not record still holds here:
// others cannot be told to end theirs, and this one ends on its next
// renewal if a newer one took over.
func (b *Bus) ClaimStream(ctx context.Context, hash, short string, take func(version int64) bool) (version int64, ok bool) {
	version = time.Now().UnixNano()
	cctx, cancel := context.WithTimeout(ctx, Timeout)
	_, ok, err := b.o.Shared.ClaimStream(cctx, hash, state.StreamOwner{Replica: b.o.Instance, Version: version}, streamClaimTTL)
	cancel()
	if err != nil {
		b.o.Logger.Warn("cannot claim a session's GET stream in the shared state", "session", short, "error", err)
		ok = true
	}
	if !ok || !take(version) {
		return 0, false
	}
	b.Publish(Note{Kind: NoteClaim, Session: hash, Version: version})
	return version, true
}

// KeepStream renews the claim ClaimStream made until done closes, then
// releases it. It runs in a goroutine its caller owns and waits for.
// Each renewal first calls touch (a session with only a stream open is
// in use); a renewal that finds a newer claim calls superseded (which
// ends the stream, and so done).
func (b *Bus) KeepStream(hash, short string, version int64, done <-chan struct{}, touch, superseded func()) {
	o := state.StreamOwner{Replica: b.o.Instance, Version: version}
	t := time.NewTicker(streamClaimTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			ctx, cancel := context.WithTimeout(b.ctx, Timeout)
			_ = b.o.Shared.ReleaseStream(ctx, hash, o)
			cancel()
			return
		case <-t.C:
			touch()
			ctx, cancel := context.WithTimeout(b.ctx, Timeout)
			_, ok, err := b.o.Shared.ClaimStream(ctx, hash, o, streamClaimTTL)
			cancel()
			if err == nil && !ok {
				b.o.Logger.Debug("GET stream superseded by a newer one", "session", short)
				superseded()
			}
		}
	}
}

// StreamElsewhere says where the session's GET stream is, for a copy
// that missed its claim note: held by another replica since version
// (version > 0), held by none (0, true), or unknown (the shared state
// unreachable, or the claim is this replica's: ok false).
func (b *Bus) StreamElsewhere(ctx context.Context, hash string) (version int64, ok bool) {
	o, held, err := b.o.Shared.StreamOwnerOf(ctx, hash)
	switch {
	case err != nil:
		return 0, false
	case !held:
		return 0, true
	case o.Replica != b.o.Instance:
		return o.Version, true
	}
	return 0, false
}

// Fields of a session's shared state. FieldLive is in every write, so
// that state with no level and no subscription left is told apart from
// state that lapsed.
const (
	FieldLive      = "live"
	FieldLevel     = "level"
	FieldSubPrefix = "sub:" // + uri = server
	// What the fleet's session report shows of it: FieldInfo the
	// session's identity and route, FieldClient its client's name and
	// version (written by the copy that saw its initialize),
	// FieldHeldPrefix + a replica id the time (Unix ms) that replica last
	// used its copy.
	FieldInfo       = "info"
	FieldClient     = "client"
	FieldHeldPrefix = "at:"
)

// SubField is the state field of a subscription to uri; "" when the uri
// is too long to be one (the subscription then stays this copy's alone).
func SubField(uri string) string {
	f := FieldSubPrefix + uri
	if len(f) > state.MaxFieldLen || strings.ContainsRune(uri, 0) {
		return ""
	}
	return f
}

// SaveFields writes fields of the session's shared state (set, then
// del), with the idle timeout ttl, and tells the other replicas' copies
// to reload it.
func (b *Bus) SaveFields(ctx context.Context, hash string, ttl time.Duration, set map[string]string, del ...string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), Timeout)
	defer cancel()
	var err error
	if len(set) > 0 {
		set[FieldLive] = "1"
		err = b.o.Shared.SetSessionFields(ctx, hash, set, ttl)
	}
	if err == nil && len(del) > 0 {
		err = b.o.Shared.DeleteSessionFields(ctx, hash, ttl, del...)
	}
	if err != nil {
		return err
	}
	b.Publish(Note{Kind: NoteState, Session: hash})
	return nil
}

// Fields reads the session's shared state.
func (b *Bus) Fields(ctx context.Context, hash string) (map[string]string, error) {
	return b.o.Shared.SessionFields(ctx, hash)
}

// Live reports whether the session's shared state is there (renewed by
// use on any replica within its ttl); an unreachable backend, or a
// replica outside fleet mode, says no.
func (b *Bus) Live(ctx context.Context, hash string) bool {
	if !b.o.Fleet {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	fields, err := b.o.Shared.SessionFields(ctx, hash)
	return err == nil && fields[FieldLive] != ""
}

// Lapsed reports whether the session's shared state lapsed (or was
// never written): no replica used it within its ttl. An unreachable
// backend, or a replica outside fleet mode, says no.
func (b *Bus) Lapsed(ctx context.Context, hash string) bool {
	if !b.o.Fleet {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	fields, err := b.o.Shared.SessionFields(ctx, hash)
	return err == nil && fields[FieldLive] == ""
}
