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
)

// recorder is a replica's sessions and terminations as a test sees them:
// every call, in order, as one line.
type recorder struct {
	mu      sync.Mutex
	calls   []string
	resyncs chan struct{}
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
func (r *recorder) EndCopy(hash string)                      { r.add("end %s", hash) }
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
	if err := a.b.AnnounceEnded(context.Background(), "short", hashA); err != nil {
		t.Fatal(err)
	}
	b.rec.waitCalls(t, "end "+hashA)
	a.rec.waitCalls(t, "end "+hashA) // its own copies are ended by its caller; a second end is a no-op
	if b.rec.has("end short") {
		t.Error("a malformed termination reached the handler")
	}
	if err := NewBus(context.Background(), BusOptions{}).AnnounceEnded(context.Background(), hashA); err != nil {
		t.Errorf("without a bus: %v", err)
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
