package relay

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/redis"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
)

// recorder is a replica's sessions and terminations as a test sees them:
// every call, in order, as one line.
type recorder struct {
	mu      sync.Mutex
	calls   []string
	resyncs chan struct{}
	// hold, when set, keeps EndCopy from returning until it is closed.
	hold chan struct{}
}

func newRecorder() *recorder { return &recorder{resyncs: make(chan struct{}, 16)} }

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

func (r *recorder) ReaderSeen(key string)                    { r.add("reader %s", key) }
func (r *recorder) InvalidateLists(server, method string)    { r.add("invalidate %s %s", server, method) }
func (r *recorder) DeliverListChanged(server, method string) { r.add("deliver %s %s", server, method) }
func (r *recorder) StreamClaimed(hash string, v int64)       { r.add("claimed %s", hash) }
func (r *recorder) Message(hash string, m *jsonrpc.Message)  { r.add("msg %s %s", hash, m.Method) }
func (r *recorder) Orphaned(hash string)                     { r.add("orphaned %s", hash) }
func (r *recorder) StateChanged(_ context.Context, h string) { r.add("state %s", h) }
func (r *recorder) EndCopy(hash string) {
	r.mu.Lock()
	hold := r.hold
	r.mu.Unlock()
	if hold != nil {
		<-hold
	}
	r.add("end %s", hash)
}

// holdEnds makes EndCopy wait until the returned func is called.
func (r *recorder) holdEnds() (release func()) {
	hold := make(chan struct{})
	r.mu.Lock()
	r.hold = hold
	r.mu.Unlock()
	return sync.OnceFunc(func() { close(hold) })
}
func (r *recorder) Resync(context.Context) {
	select {
	case r.resyncs <- struct{}{}:
	default:
	}
}

// terms is a recorder's Terminations (Resync returns an error there).
type terms struct{ *recorder }

func (t terms) Resync(ctx context.Context) error { t.recorder.Resync(ctx); return nil }

// waitCalls waits until r recorded want (in order, among its calls), or
// fails.
func (r *recorder) waitCalls(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := strings.Join(r.calls, "\n")
		r.mu.Unlock()
		if strings.Contains(got, strings.Join(want, "\n")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls:\n%s\nwant among them:\n%s", got, strings.Join(want, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *recorder) has(prefix string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}

// busMember is a Bus started on a shared state, with its recorders.
type busMember struct {
	b      *Bus
	rec    *recorder
	cancel context.CancelFunc
}

func startBus(t *testing.T, st state.Backend, inst string) *busMember {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := NewBus(ctx, BusOptions{PubSub: st, Shared: st, Fleet: true, Instance: inst, Heard: state.NewHeard()})
	m := &busMember{b: b, rec: newRecorder(), cancel: cancel}
	b.Start(m.rec, terms{m.rec})
	// Both followers subscribed: each resynchronised once.
	for range 2 {
		select {
		case <-m.rec.resyncs:
		case <-time.After(5 * time.Second):
			t.Fatal("the followers did not subscribe")
		}
	}
	t.Cleanup(func() { cancel(); b.Close() })
	return m
}

const hashA = "aa00000000000000000000000000000000000000000000000000000000000000"

// Notes reach the other replica's handler; a replica ignores its own
// (but for reader beats, which may be for a call it runs).
func TestBusNotes(t *testing.T) {
	st := memState(t)
	a, b := startBus(t, st, instA), startBus(t, st, instB)
	a.b.Publish(Note{Kind: NoteMessage, Session: hashA, Msg: jsonrpc.Encode(jsonrpc.NewNotification("notifications/message", nil))})
	a.b.Publish(Note{Kind: NoteOrphaned, Session: hashA})
	a.b.Publish(Note{Kind: NoteState, Session: hashA})
	a.b.Publish(Note{Kind: NoteClaim, Session: hashA, Version: 7})
	a.b.Publish(Note{Kind: NoteReader, Stream: "k1"})
	b.rec.waitCalls(t, "msg "+hashA+" notifications/message", "orphaned "+hashA, "state "+hashA, "claimed "+hashA, "reader k1")
	a.rec.waitCalls(t, "reader k1")
	if a.rec.has("msg") || a.rec.has("orphaned") || a.rec.has("state") || a.rec.has("claimed") {
		t.Error("a replica applied its own notes")
	}
}

// A list change heard on one replica is told to the others once: not
// again by a replica that heard it itself moments ago, and not twice by
// one that hears it twice (two upstream sessions) in a row.
func TestListChangedSharedOnce(t *testing.T) {
	st := memState(t)
	a, b := startBus(t, st, instA), startBus(t, st, instB)
	const m = "notifications/tools/list_changed"
	if !a.b.ShareListChanged("s1", m) {
		t.Fatal("the first change was not shared")
	}
	b.rec.waitCalls(t, "invalidate s1 "+m, "deliver s1 "+m)
	if a.b.ShareListChanged("s1", m) {
		t.Error("the same change heard twice in a row was told twice")
	}
	if b.b.ShareListChanged("s1", m) {
		t.Error("b told its streams again a change it just heard from a")
	}
	// b heard it itself first: a's note still invalidates b's lists,
	// without telling b's streams again.
	if !b.b.ShareListChanged("s2", m) {
		t.Fatal("b's own change was not shared")
	}
	a.rec.waitCalls(t, "invalidate s2 "+m, "deliver s2 "+m)
	time.Sleep(listTwice)
	if a.b.ShareListChanged("s2", m) {
		t.Error("a shared a change it heard from b moments ago")
	}
	off := NewBus(context.Background(), BusOptions{PubSub: st, Instance: "cccccccccccc"})
	if !off.ShareListChanged("s1", m) {
		t.Error("outside fleet mode a replica's own streams are not told")
	}
}

// An announced termination ends the copies on every replica; anything
// that is not a session hash is ignored.
func TestTerminationFanOut(t *testing.T) {
	st := memState(t)
	a, b := startBus(t, st, instA), startBus(t, st, instB)
	if _, err := st.Publish(context.Background(), TopicTerminated, []byte("short")); err != nil {
		t.Fatal(err)
	}
	if n, err := a.b.AnnounceEnded(context.Background(), hashA); err != nil || n != 0 {
		t.Fatalf("AnnounceEnded = %d, %v; want it confirmed", n, err)
	}
	b.rec.waitCalls(t, "end "+hashA)
	a.rec.waitCalls(t, "end "+hashA) // its own copies are ended by its caller; a second end is a no-op
	if b.rec.has("end short") {
		t.Error("a malformed termination reached the handler")
	}
	if n, err := NewBus(context.Background(), BusOptions{}).AnnounceEnded(context.Background(), hashA); err != nil || n != 0 {
		t.Errorf("without a bus: %d, %v", n, err)
	}
}

// AnnounceEnded returns only once every replica that heard it ended its
// copy: a replica whose EndCopy is still running holds the answer back
// (the gap CI found: a termination answered through one replica while
// the session still served on another).
func TestTerminationWaitsForEveryCopy(t *testing.T) {
	st := memState(t)
	a, b := startBus(t, st, instA), startBus(t, st, instB)
	release := b.rec.holdEnds()
	defer release()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := a.b.AnnounceEnded(context.Background(), hashA)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("AnnounceEnded returned (%d, %v) while b was still ending its copy", r.n, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case r := <-done:
		if r.n != 0 || r.err != nil {
			t.Errorf("AnnounceEnded = %d, %v; want every copy confirmed", r.n, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AnnounceEnded did not return once b ended its copy")
	}
	if !b.rec.has("end " + hashA) {
		t.Error("AnnounceEnded returned before b's copy ended")
	}
}

// A subscriber that never confirms (a replica that died after its
// subscription was counted, one stuck, a version that does not confirm)
// costs the announcer ConfirmTimeout, and its sessions are reported
// unconfirmed, never confirmed on a guess.
func TestTerminationUnconfirmed(t *testing.T) {
	st := memState(t)
	ctx, cancel := context.WithCancel(context.Background())
	a := NewBus(ctx, BusOptions{PubSub: st, Instance: instA, ConfirmTimeout: 200 * time.Millisecond, Heard: state.NewHeard()})
	rec := newRecorder()
	a.Start(rec, terms{rec})
	t.Cleanup(func() { cancel(); a.Close() })
	<-rec.resyncs
	silent, err := st.Subscribe(context.Background(), TopicTerminated)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	begin := time.Now()
	n, err := a.AnnounceEnded(context.Background(), hashA, strings.Repeat("b", 64))
	if err != nil || n != 2 {
		t.Errorf("AnnounceEnded with a silent subscriber = %d, %v; want both sessions unconfirmed", n, err)
	}
	if d := time.Since(begin); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("AnnounceEnded took %s; want the confirm timeout (200ms), once for both sessions", d)
	}
}

// The newest GET stream of a session holds its claim: the others learn
// where it is, the older holder is told, and the claim is released when
// the stream ends.
func TestStreamClaims(t *testing.T) {
	st := memState(t)
	a, b := startBus(t, st, instA), startBus(t, st, instB)
	ctx := context.Background()
	va, ok := a.b.ClaimStream(ctx, hashA, "aa", func(int64) bool { return true })
	if !ok || va == 0 {
		t.Fatal("a's claim failed")
	}
	b.rec.waitCalls(t, "claimed "+hashA)
	if v, ok := b.b.StreamElsewhere(ctx, hashA); !ok || v != va {
		t.Errorf("b: StreamElsewhere = %d %v, want a's version", v, ok)
	}
	if _, ok := a.b.StreamElsewhere(ctx, hashA); ok {
		t.Error("a: its own claim counts as elsewhere")
	}
	if _, ok := b.b.ClaimStream(ctx, strings.Repeat("b", 64), "bb", func(int64) bool { return false }); ok {
		t.Error("a claim the session refused holds")
	}
	done := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		a.b.KeepStream(hashA, "aa", va, done, func() {}, func() {})
	}()
	close(done)
	<-kept
	if v, ok := b.b.StreamElsewhere(ctx, hashA); !ok || v != 0 {
		t.Errorf("after release: StreamElsewhere = %d %v, want held by none", v, ok)
	}
}

// Saved fields are there for every replica, announced, and tell a live
// session from a lapsed one.
func TestSessionFields(t *testing.T) {
	st := memState(t)
	a, b := startBus(t, st, instA), startBus(t, st, instB)
	ctx := context.Background()
	if b.b.Live(ctx, hashA) || !b.b.Lapsed(ctx, hashA) {
		t.Error("a session never written is live")
	}
	if err := a.b.SaveFields(ctx, hashA, time.Minute, map[string]string{FieldLevel: "debug"}); err != nil {
		t.Fatal(err)
	}
	b.rec.waitCalls(t, "state "+hashA)
	f, err := b.b.Fields(ctx, hashA)
	if err != nil || f[FieldLevel] != "debug" || f[FieldLive] == "" {
		t.Errorf("fields %v %v", f, err)
	}
	if !b.b.Live(ctx, hashA) || b.b.Lapsed(ctx, hashA) {
		t.Error("a written session is not live")
	}
	if SubField(strings.Repeat("u", state.MaxFieldLen)) != "" || SubField("a\x00b") != "" || SubField("file:///x") != FieldSubPrefix+"file:///x" {
		t.Error("SubField")
	}
}

// A termination of many sessions at once (an administrator ending every
// session of a user or a key) across several replicas is confirmed, not
// lost in the followers' buffers: each follower keeps up with the
// announcements and the confirmations, so none resynchronises (which
// would end the copies without confirming them) and nothing is reported
// unconfirmed.
func TestTerminationOfManySessions(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testTerminationOfManySessions(t, memState(t)) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.New(t)
		st, err := redis.Open(redis.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		testTerminationOfManySessions(t, st)
	})
}

func testTerminationOfManySessions(t *testing.T, st state.Backend) {
	a := startBus(t, st, instA)
	others := []*busMember{startBus(t, st, instB), startBus(t, st, "replica-c")}
	hashes := make([]string, 1000)
	for i := range hashes {
		hashes[i] = fmt.Sprintf("%064x", i+1)
	}
	begin := time.Now()
	n, err := a.b.AnnounceEnded(context.Background(), hashes...)
	if err != nil || n != 0 {
		t.Errorf("AnnounceEnded of %d sessions on 3 replicas = %d unconfirmed, %v; want every one confirmed", len(hashes), n, err)
	}
	t.Logf("%d sessions ended on 3 replicas in %s", len(hashes), time.Since(begin))
	for _, m := range others {
		for _, h := range hashes {
			if !m.rec.has("end " + h) {
				t.Fatalf("a replica did not end its copy of %s before the announcement returned", h)
			}
		}
		select {
		case <-m.rec.resyncs:
			t.Error("a follower resynchronised: it fell behind the announcements")
		default:
		}
	}
}
