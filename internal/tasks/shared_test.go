package tasks

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// replicas is a registry of live replica ids the tests kill from.
type replicas struct {
	mu   sync.Mutex
	live map[string]bool
}

func (r *replicas) alive(_ context.Context, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[id]
}

func (r *replicas) kill(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, id)
}

// twoReplicas are tables a and b sharing one SQLite store and one key,
// as two replicas of a fleet.
func twoReplicas(t *testing.T) (a, b *Table, reg *replicas) {
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key := []byte("0123456789abcdef0123456789abcdef")
	reg = &replicas{live: map[string]bool{"A": true, "B": true}}
	mk := func(id string) *Table {
		tb := NewTable(Options{Keys: [][]byte{key}, Shared: &Shared{Store: st, Replica: id, Alive: reg.alive, Watch: 10 * time.Millisecond}})
		t.Cleanup(tb.Close)
		return tb
	}
	return mk("A"), mk("B"), reg
}

func TestSharedAcrossReplicas(t *testing.T) {
	a, b, _ := twoReplicas(t)
	release := make(chan struct{})
	task, err := a.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{"content":[{"type":"text","text":"done"}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(alice, task.ID); err != nil || got.Status != Working || got.ID != task.ID {
		t.Fatalf("B get = %+v, %v", got, err)
	}
	// Another caller, or the owner on another route, is told nothing on B.
	for _, o := range []Owner{bob, aliceR2} {
		if _, err := b.Get(o, task.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("B get as %+v: %v", o, err)
		}
		if _, err := b.Cancel(o, task.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("B cancel as %+v: %v", o, err)
		}
		if list, _, err := b.List(o, ""); err != nil || len(list) != 0 {
			t.Fatalf("B list as %+v = %v, %v", o, list, err)
		}
	}
	// An altered id names nothing on B either (its MAC is checked before
	// the store is read).
	altered := task.ID[:len(task.ID)-2] + map[bool]string{true: "AA", false: "AB"}[task.ID[len(task.ID)-2:] != "AA"]
	if _, err := b.Get(alice, altered); !errors.Is(err, ErrNotFound) {
		t.Fatalf("B get of an altered id: %v", err)
	}
	list, _, err := b.List(alice, "")
	if err != nil || len(list) != 1 || list[0].ID != task.ID {
		t.Fatalf("B list = %+v, %v", list, err)
	}
	done := make(chan error, 1)
	go func() {
		fin, out, err := b.Result(t.Context(), alice, task.ID)
		if err == nil && (fin.Status != Completed || string(out.Result) != `{"content":[{"type":"text","text":"done"}]}`) {
			err = errors.New("B result: " + string(fin.Status) + " " + string(out.Result))
		}
		done <- err
	}()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B's tasks/result did not return")
	}
	// Finished: a Peek on B has the stored result.
	if fin, out, err := b.Peek(alice, task.ID); err != nil || fin.Status != Completed || out.Result == nil {
		t.Fatalf("B peek = %+v %s %v", fin, out.Result, err)
	}
}

func TestSharedCancelOnOtherReplica(t *testing.T) {
	a, b, _ := twoReplicas(t)
	stopped := make(chan struct{})
	task, err := a.Start(t.Context(), alice, "s", cfgShort, 0, func(ctx context.Context) Outcome {
		<-ctx.Done()
		close(stopped)
		return Outcome{Result: []byte(`{"content":[]}`)}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.Cancel(alice, task.ID)
	if err != nil || c.Status != Cancelled {
		t.Fatalf("B cancel = %+v, %v", c, err)
	}
	select {
	case <-stopped: // A read the row and stopped its call
	case <-time.After(10 * time.Second):
		t.Fatal("A's call still runs after B cancelled its task")
	}
	fin, _, err := a.Result(t.Context(), alice, task.ID)
	if err != nil || fin.Status != Cancelled {
		t.Fatalf("A result = %+v, %v; want cancelled", fin, err)
	}
	if _, err := b.Cancel(alice, task.ID); !errors.Is(err, ErrTerminal) {
		t.Fatalf("second cancel: %v, want ErrTerminal", err)
	}
}

func TestSharedReplicaStopped(t *testing.T) {
	a, b, reg := twoReplicas(t)
	release := make(chan struct{})
	task, err := a.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{"content":[]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg.kill("A")
	got, out, err := b.Peek(alice, task.ID)
	if err != nil || got.Status != Failed || got.StatusMessage != ReplicaStopped || out.Err == nil || out.Err.Message != ReplicaStopped {
		t.Fatalf("B peek after A died = %+v %+v %v; want failed with the reason", got, out.Err, err)
	}
	// A (not dead after all) finishing later does not overwrite it.
	close(release)
	fin, _, err := a.Result(t.Context(), alice, task.ID)
	if err != nil || fin.Status != Failed || fin.StatusMessage != ReplicaStopped {
		t.Fatalf("A result = %+v, %v", fin, err)
	}
}

// A table of the same key over the same store after a restart: the task
// the old process ran is failed, not left working forever.
func TestSharedRestart(t *testing.T) {
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key := []byte("0123456789abcdef0123456789abcdef")
	old := NewTable(Options{Keys: [][]byte{key}, Shared: &Shared{Store: st, Replica: "old"}})
	done, err := old.Start(t.Context(), alice, "s", cfgShort, 0, func(context.Context) Outcome { return Outcome{Result: []byte(`{"content":[]}`)} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := old.Result(t.Context(), alice, done.ID); err != nil {
		t.Fatal(err)
	}
	running, err := old.Start(t.Context(), alice, "s", cfgShort, 0, block(make(chan struct{}), `{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	// A crash: the row stays working (Close would store the call's end).
	restarted := NewTable(Options{Keys: [][]byte{key}, Shared: &Shared{Store: st, Replica: "new"}})
	defer restarted.Close()
	if got, out, err := restarted.Peek(alice, done.ID); err != nil || got.Status != Completed || string(out.Result) != `{"content":[]}` {
		t.Fatalf("finished task after restart = %+v %s %v", got, out.Result, err)
	}
	if got, err := restarted.Get(alice, running.ID); err != nil || got.Status != Failed || got.StatusMessage != ReplicaStopped {
		t.Fatalf("running task after restart = %+v, %v", got, err)
	}
	old.Close()
}

// max_per_caller counts the owner's tasks on every replica.
func TestSharedMaxPerCaller(t *testing.T) {
	a, b, _ := twoReplicas(t)
	cfg := Config{TTL: time.Minute, MaxPerCaller: 2}
	release := make(chan struct{})
	defer close(release)
	for _, tb := range []*Table{a, b} {
		if _, err := tb.Start(t.Context(), alice, "s", cfg, 0, block(release, `{}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Start(t.Context(), alice, "s", cfg, 0, block(release, `{}`), nil); !errors.Is(err, ErrTooMany) {
		t.Fatalf("third task across replicas: %v, want ErrTooMany", err)
	}
	if _, err := b.Start(t.Context(), bob, "s", cfg, 0, block(release, `{}`), nil); err != nil {
		t.Fatalf("another caller's task: %v", err)
	}
}

// A replica stopping (Close) fails its running tasks with the reason, for
// the others to show.
func TestSharedCloseFailsWithReason(t *testing.T) {
	a, b, _ := twoReplicas(t)
	task, err := a.Start(t.Context(), alice, "s", cfgShort, 0, block(make(chan struct{}), `{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	got, out, err := b.Peek(alice, task.ID)
	if err != nil || got.Status != Failed || got.StatusMessage != ReplicaStopped || out.Err == nil {
		t.Fatalf("B peek after A closed = %+v %+v %v", got, out.Err, err)
	}
}

// BenchmarkSharedGet: tasks/get of a finished task read from a SQLite
// store, against the memory-only table.
func BenchmarkSharedGet(b *testing.B) {
	st, err := sqlite.Open(b.Context(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for _, shared := range []bool{false, true} {
		b.Run(map[bool]string{false: "memory", true: "sqlite"}[shared], func(b *testing.B) {
			o := Options{}
			if shared {
				o.Shared = &Shared{Store: st, Replica: "A"}
			}
			tb := NewTable(o)
			defer tb.Close()
			task, err := tb.Start(b.Context(), alice, "s", cfgShort, 0, func(context.Context) Outcome { return Outcome{Result: []byte(`{"content":[]}`)} }, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := tb.Result(b.Context(), alice, task.ID); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := tb.Get(alice, task.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
