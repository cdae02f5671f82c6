package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/store"
)

var taskTests = []test{
	{"RoundTrip", testTaskRoundTrip},
	{"TerminalIsFinal", testTaskTerminalIsFinal},
	{"PerOwner", testTaskPerOwner},
	{"Sweep", testTaskSweep},
	{"Invalid", testTaskInvalid},
	{"Limit", testTaskLimit},
	{"LimitConcurrent", testTaskLimitConcurrent},
	{"Input", testTaskInput},
	{"Answers", testTaskAnswers},
	{"AnswersConcurrent", testTaskAnswersConcurrent},
}

func newTask(id, owner string, created int) store.TaskRecord {
	return store.TaskRecord{
		ID: id, Owner: fp(owner), Route: "/mcp", Server: "docs",
		Status: store.TaskWorking, CreatedAt: at(created), UpdatedAt: at(created),
		TTL: time.Hour, ExpiresAt: at(created).Add(time.Hour), Replica: "r1",
	}
}

func testTaskRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := newTask("00ff", "alice", 1)
	if err := s.CreateTask(ctx, r); err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	if err := s.CreateTask(ctx, r); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateTask again: %v, want ErrConflict", err)
	}
	got, err := s.GetTask(ctx, "00ff")
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Fatalf("GetTask (-want +got):\n%s", diff)
	}
	// Progress, then the result the moment it exists.
	r.Status, r.StatusMessage, r.UpdatedAt = store.TaskInputRequired, "waiting for you", at(2)
	if ok, err := s.UpdateTask(ctx, r); !ok || err != nil {
		t.Fatalf("UpdateTask: %v, %v", ok, err)
	}
	r.Status, r.StatusMessage, r.UpdatedAt, r.Result = store.TaskCompleted, "", at(3), json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`)
	if ok, err := s.UpdateTask(ctx, r); !ok || err != nil {
		t.Fatalf("UpdateTask (completed): %v, %v", ok, err)
	}
	if got, err = s.GetTask(ctx, "00ff"); err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Fatalf("after completion (-want +got):\n%s", diff)
	}
	if _, err := s.GetTask(ctx, "0100"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTask(unknown): %v, want ErrNotFound", err)
	}
	if ok, err := s.UpdateTask(ctx, newTask("0100", "alice", 1)); ok || err != nil {
		t.Fatalf("UpdateTask(unknown) = %v, %v; want false, nil", ok, err)
	}
}

// A cancel on one replica and a result on another: whichever is written
// first stays.
func testTaskTerminalIsFinal(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := newTask("aa", "alice", 1)
	if err := s.CreateTask(ctx, r); err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	c := r
	c.Status, c.StatusMessage, c.UpdatedAt = store.TaskCancelled, "The task was cancelled by request.", at(2)
	if ok, err := s.UpdateTask(ctx, c); !ok || err != nil {
		t.Fatalf("UpdateTask (cancel): %v, %v", ok, err)
	}
	done := r
	done.Status, done.UpdatedAt, done.Result = store.TaskCompleted, at(3), json.RawMessage(`{"content":[]}`)
	if ok, err := s.UpdateTask(ctx, done); ok || err != nil {
		t.Fatalf("UpdateTask after cancel = %v, %v; want false, nil", ok, err)
	}
	got, err := s.GetTask(ctx, "aa")
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Fatalf("terminal row changed (-want +got):\n%s", diff)
	}
}

func testTaskPerOwner(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, r := range []store.TaskRecord{newTask("b2", "alice", 5), newTask("b1", "alice", 5), newTask("b0", "alice", 9), newTask("c0", "mallory", 1)} {
		if err := s.CreateTask(ctx, r); err != nil {
			t.Fatalf("CreateTask: %v", err)
		}
	}
	got, err := s.ListTasks(ctx, fp("alice"))
	if err != nil {
		t.Fatalf("ListTasks: %v", err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	if diff := cmp.Diff([]string{"b1", "b2", "b0"}, ids); diff != "" {
		t.Fatalf("alice's tasks (-want +got):\n%s", diff)
	}
	if got, err := s.ListTasks(ctx, fp("nobody")); err != nil || len(got) != 0 {
		t.Fatalf("ListTasks(nobody) = %v, %v", got, err)
	}
}

func testTaskSweep(t *testing.T, s store.Store) {
	ctx := t.Context()
	old, young := newTask("d0", "alice", 0), newTask("d1", "alice", 0)
	old.TTL, old.ExpiresAt = time.Second, at(1000)
	for _, r := range []store.TaskRecord{old, young} {
		if err := s.CreateTask(ctx, r); err != nil {
			t.Fatalf("CreateTask: %v", err)
		}
	}
	if n, err := s.SweepTasks(ctx, at(999)); n != 0 || err != nil {
		t.Fatalf("SweepTasks before expiry = %d, %v", n, err)
	}
	if n, err := s.SweepTasks(ctx, at(1000)); n != 1 || err != nil {
		t.Fatalf("SweepTasks = %d, %v; want 1", n, err)
	}
	if _, err := s.GetTask(ctx, "d0"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("swept task: %v", err)
	}
	if _, err := s.GetTask(ctx, "d1"); err != nil {
		t.Fatalf("unexpired task: %v", err)
	}
}

func testTaskInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	for name, mut := range map[string]func(*store.TaskRecord){
		"no id":            func(r *store.TaskRecord) { r.ID = "" },
		"owner not digest": func(r *store.TaskRecord) { r.Owner = "alice" },
		"no server":        func(r *store.TaskRecord) { r.Server = "" },
		"no route":         func(r *store.TaskRecord) { r.Route = "" },
		"bad status":       func(r *store.TaskRecord) { r.Status = "done" },
		"no ttl":           func(r *store.TaskRecord) { r.TTL = 0 },
		"result working":   func(r *store.TaskRecord) { r.Result = json.RawMessage(`{}`) },
		"bad json": func(r *store.TaskRecord) {
			r.Status, r.Result = store.TaskCompleted, json.RawMessage(`{`)
		},
		"both": func(r *store.TaskRecord) {
			r.Status, r.Result, r.Error = store.TaskFailed, json.RawMessage(`{}`), json.RawMessage(`{}`)
		},
	} {
		r := newTask("e0", "alice", 0)
		mut(&r)
		if err := s.CreateTask(ctx, r); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: CreateTask err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.GetTask(ctx, "e0"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused task was stored: %v", err)
	}
}

// The limit counts the owner's unexpired tasks of one server on one route,
// whatever their status, and refuses the one past it without writing.
func testTaskLimit(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i, id := range []string{"f0", "f1"} {
		if err := s.CreateTaskWithin(ctx, newTask(id, "alice", i), 2); err != nil {
			t.Fatalf("CreateTaskWithin(%s): %v", id, err)
		}
	}
	third := newTask("f2", "alice", 2)
	if err := s.CreateTaskWithin(ctx, third, 2); !errors.Is(err, store.ErrTaskLimit) {
		t.Fatalf("third task: %v, want ErrTaskLimit", err)
	}
	if _, err := s.GetTask(ctx, "f2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused task was stored: %v", err)
	}
	// A finished task still counts until it expires.
	done := newTask("f0", "alice", 0)
	done.Status, done.Result = store.TaskCompleted, json.RawMessage(`{}`)
	if ok, err := s.UpdateTask(ctx, done); !ok || err != nil {
		t.Fatalf("UpdateTask: %v, %v", ok, err)
	}
	if err := s.CreateTaskWithin(ctx, third, 2); !errors.Is(err, store.ErrTaskLimit) {
		t.Fatalf("third task beside a finished one: %v, want ErrTaskLimit", err)
	}
	// Another owner, another server, another route: their own counts.
	other := []store.TaskRecord{newTask("f3", "mallory", 2), newTask("f4", "alice", 2), newTask("f5", "alice", 2)}
	other[1].Server, other[2].Route = "search", "/other"
	for _, r := range other {
		if err := s.CreateTaskWithin(ctx, r, 2); err != nil {
			t.Fatalf("CreateTaskWithin(%s): %v", r.ID, err)
		}
	}
	// An expired task does not count: one created at the expiry of f0.
	later := newTask("f6", "alice", 0)
	later.CreatedAt, later.UpdatedAt = at(0).Add(time.Hour), at(0).Add(time.Hour)
	later.ExpiresAt = later.CreatedAt.Add(time.Hour)
	if err := s.CreateTaskWithin(ctx, later, 2); err != nil {
		t.Fatalf("task once one expired: %v", err)
	}
	// No limit, and the limit's own checks.
	if err := s.CreateTaskWithin(ctx, newTask("f7", "alice", 3), 0); err != nil {
		t.Fatalf("CreateTaskWithin(limit 0): %v", err)
	}
	if err := s.CreateTaskWithin(ctx, newTask("f7", "alice", 3), 100); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateTaskWithin(taken id): %v, want ErrConflict", err)
	}
	bad := newTask("f8", "alice", 3)
	bad.Owner = "alice"
	if err := s.CreateTaskWithin(ctx, bad, 100); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("CreateTaskWithin(bad owner): %v, want ErrInvalid", err)
	}
}

// Many creates at once for one owner (as from several replicas): exactly
// the limit gets in, the rest are refused with ErrTaskLimit, nothing else
// fails.
func testTaskLimitConcurrent(t *testing.T, s store.Store) {
	const limit, tries = 5, 40
	ctx := t.Context()
	var wg sync.WaitGroup
	var ok, full atomic.Int64
	errc := make(chan error, tries)
	start := make(chan struct{})
	for i := range tries {
		wg.Go(func() {
			<-start
			err := s.CreateTaskWithin(ctx, newTask(fmt.Sprintf("g%02d", i), "alice", i%3), limit)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, store.ErrTaskLimit):
				full.Add(1)
			default:
				errc <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("CreateTaskWithin: %v", err)
	}
	if ok.Load() != limit || full.Load() != tries-limit {
		t.Fatalf("%d created, %d refused; want %d and %d", ok.Load(), full.Load(), limit, tries-limit)
	}
	recs, err := s.ListTasks(ctx, fp("alice"))
	if err != nil || len(recs) != limit {
		t.Fatalf("ListTasks = %d rows, %v; want %d", len(recs), err, limit)
	}
}

// The input column: written when given, kept when not, cleared by a
// terminal status; bytes as they were handed.
func testTaskInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := newTask("h0", "alice", 1)
	if err := s.CreateTask(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetTask(ctx, "h0"); err != nil || got.Input != nil {
		t.Fatalf("GetTask = %q, %v; want no input", got.Input, err)
	}
	pending := []byte("\x00sealed\xffbytes")
	r.Status, r.UpdatedAt, r.Input = store.TaskInputRequired, at(2), pending
	if ok, err := s.UpdateTask(ctx, r); !ok || err != nil {
		t.Fatalf("UpdateTask(input): %v, %v", ok, err)
	}
	if got, err := s.GetTask(ctx, "h0"); err != nil || string(got.Input) != string(pending) {
		t.Fatalf("input = %q, %v; want %q", got.Input, err, pending)
	}
	// An update without input keeps it; an empty one clears it.
	r.StatusMessage, r.Input = "still waiting", nil
	if ok, err := s.UpdateTask(ctx, r); !ok || err != nil {
		t.Fatalf("UpdateTask: %v, %v", ok, err)
	}
	if got, _ := s.GetTask(ctx, "h0"); string(got.Input) != string(pending) || got.StatusMessage != "still waiting" {
		t.Fatalf("after an update without input: %q %q", got.Input, got.StatusMessage)
	}
	r.Input = []byte{}
	if ok, err := s.UpdateTask(ctx, r); !ok || err != nil {
		t.Fatalf("UpdateTask(clear): %v, %v", ok, err)
	}
	if got, _ := s.GetTask(ctx, "h0"); got.Input != nil {
		t.Fatalf("cleared input = %q", got.Input)
	}
	// Set again, then the task ends: nothing is pending any more.
	r.Input = pending
	if ok, err := s.UpdateTask(ctx, r); !ok || err != nil {
		t.Fatal(ok, err)
	}
	r.Status, r.Input, r.Result = store.TaskCompleted, nil, json.RawMessage(`{}`)
	if ok, err := s.UpdateTask(ctx, r); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if got, _ := s.GetTask(ctx, "h0"); got.Input != nil || got.Status != store.TaskCompleted {
		t.Fatalf("terminal task = %s with input %q", got.Status, got.Input)
	}
}

// Answers: put (insert or ignore per key), take (returns and deletes, once),
// refused for an unknown task or a bad key, swept with their task.
func testTaskAnswers(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := newTask("j0", "alice", 1)
	other := newTask("j1", "bob", 1)
	for _, x := range []store.TaskRecord{r, other} {
		if err := s.CreateTask(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutTaskAnswers(ctx, "j0", map[string][]byte{"q1": []byte("first"), "q2": {0, 1, 0xff}, "q3": nil}); err != nil {
		t.Fatalf("PutTaskAnswers: %v", err)
	}
	// A second answer to q1 is ignored; q4 is new.
	if err := s.PutTaskAnswers(ctx, "j0", map[string][]byte{"q1": []byte("second"), "q4": []byte("four")}); err != nil {
		t.Fatalf("PutTaskAnswers again: %v", err)
	}
	if err := s.PutTaskAnswers(ctx, "j1", map[string][]byte{"q1": []byte("bob's")}); err != nil {
		t.Fatal(err)
	}
	got, err := s.TakeTaskAnswers(ctx, "j0")
	if err != nil {
		t.Fatalf("TakeTaskAnswers: %v", err)
	}
	want := map[string][]byte{"q1": []byte("first"), "q2": {0, 1, 0xff}, "q3": {}, "q4": []byte("four")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("answers (-want +got):\n%s", diff)
	}
	if got, err := s.TakeTaskAnswers(ctx, "j0"); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("second take = %v, %v; want an empty map", got, err)
	}
	// Taken, a key may be answered anew.
	if err := s.PutTaskAnswers(ctx, "j0", map[string][]byte{"q1": []byte("again")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.TakeTaskAnswers(ctx, "j0"); string(got["q1"]) != "again" || len(got) != 1 {
		t.Fatalf("take after a new answer = %q", got)
	}
	if err := s.PutTaskAnswers(ctx, "j9", map[string][]byte{"q1": nil}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PutTaskAnswers(unknown task): %v, want ErrNotFound", err)
	}
	for name, key := range map[string]string{"empty": "", "long": string(make([]byte, store.MaxTaskAnswerKey+1)), "nul": "a\x00b", "not utf-8": "\xff"} {
		err := s.PutTaskAnswers(ctx, "j0", map[string][]byte{"ok": []byte("x"), key: []byte("y")})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s key: %v, want ErrInvalid", name, err)
		}
	}
	if got, _ := s.TakeTaskAnswers(ctx, "j0"); len(got) != 0 {
		t.Fatalf("a refused put wrote %q", got)
	}
	if _, err := s.TakeTaskAnswers(ctx, ""); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("TakeTaskAnswers(no id): %v", err)
	}
	// Swept with the task: a task made again under the id has none.
	if n, err := s.SweepTasks(ctx, at(1).Add(time.Hour)); n != 2 || err != nil {
		t.Fatalf("SweepTasks = %d, %v", n, err)
	}
	if err := s.CreateTask(ctx, other); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TakeTaskAnswers(ctx, "j1"); err != nil || len(got) != 0 {
		t.Fatalf("answers of a swept task = %q, %v", got, err)
	}
}

// Takes racing puts: every answer is taken exactly once.
func testTaskAnswersConcurrent(t *testing.T, s store.Store) {
	const writers, perWriter, takers = 4, 25, 3
	ctx := t.Context()
	if err := s.CreateTask(ctx, newTask("k0", "alice", 1)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	taken := map[string]int{}
	take := func() error {
		got, err := s.TakeTaskAnswers(ctx, "k0")
		mu.Lock()
		defer mu.Unlock()
		for k, v := range got {
			if string(v) != "body-"+k {
				return fmt.Errorf("answer %s = %q", k, v)
			}
			taken[k]++
		}
		return err
	}
	var puts, takes sync.WaitGroup
	var done atomic.Bool
	errc := make(chan error, writers*perWriter+1000)
	for w := range writers {
		puts.Go(func() {
			for i := range perWriter {
				k := fmt.Sprintf("w%d-%02d", w, i)
				if err := s.PutTaskAnswers(ctx, "k0", map[string][]byte{k: []byte("body-" + k)}); err != nil {
					errc <- err
				}
			}
		})
	}
	for range takers {
		takes.Go(func() {
			for !done.Load() {
				if err := take(); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	puts.Wait()
	done.Store(true)
	takes.Wait()
	if err := take(); err != nil {
		t.Fatal(err)
	}
	close(errc)
	for err := range errc {
		t.Errorf("concurrent answers: %v", err)
	}
	if len(taken) != writers*perWriter {
		t.Fatalf("%d answers taken, want %d", len(taken), writers*perWriter)
	}
	for k, n := range taken {
		if n != 1 {
			t.Fatalf("answer %s taken %d times", k, n)
		}
	}
}
