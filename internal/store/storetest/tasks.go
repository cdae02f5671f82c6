package storetest

import (
	"encoding/json"
	"errors"
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
