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
