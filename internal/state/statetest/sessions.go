package statetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/state"
)

var terminationTests = []test{
	{"TerminateThenCheck", testTerminate},
	{"Lapses", testTerminationLapses},
}

func testTerminate(t *testing.T, b state.Backend) {
	ctx := t.Context()
	mustNot(t, "Terminate", b.Terminate(ctx, "s1", long))
	for id, want := range map[string]bool{"s1": true, "s2": false} {
		got, err := b.Terminated(ctx, id)
		mustNot(t, "Terminated", err)
		if got != want {
			t.Errorf("Terminated(%s) = %v, want %v", id, got, want)
		}
	}
	// Terminating again renews, it is not an error.
	mustNot(t, "Terminate again", b.Terminate(ctx, "s1", long))
}

func testTerminationLapses(t *testing.T, b state.Backend) {
	ctx := t.Context()
	mustNot(t, "Terminate", b.Terminate(ctx, "short", ttl))
	mustNot(t, "Terminate", b.Terminate(ctx, "renewed", ttl))
	mustNot(t, "Terminate", b.Terminate(ctx, "renewed", long))
	eventually(t, "termination lapses", func() (bool, error) {
		ok, err := b.Terminated(ctx, "short")
		return !ok, err
	})
	if ok, err := b.Terminated(ctx, "renewed"); err != nil || !ok {
		t.Errorf("renewed termination: Terminated = %v, %v; want true", ok, err)
	}
}

var sessionTests = []test{
	{"SetGetDelete", testSessionFields},
	{"TouchRenews", testSessionTouch},
	{"Lapses", testSessionLapses},
	{"Bound", testSessionBound},
	{"List", testListSessions},
}

func testSessionFields(t *testing.T, b state.Backend) {
	ctx := t.Context()
	got, err := b.SessionFields(ctx, "s")
	mustNot(t, "SessionFields of an unknown session", err)
	if got == nil || len(got) != 0 {
		t.Errorf("unknown session: %#v, want an empty map", got)
	}
	mustNot(t, "Set", b.SetSessionFields(ctx, "s", map[string]string{"log_level": "info", "sub:file:///a": "1"}, long))
	mustNot(t, "Set", b.SetSessionFields(ctx, "s", map[string]string{"log_level": "debug", "sub:file:///b": "1"}, long))
	mustNot(t, "Set other", b.SetSessionFields(ctx, "other", map[string]string{"log_level": "error"}, long))
	got, err = b.SessionFields(ctx, "s")
	mustNot(t, "SessionFields", err)
	want := map[string]string{"log_level": "debug", "sub:file:///a": "1", "sub:file:///b": "1"}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("fields (-got +want):\n%s", diff)
	}

	mustNot(t, "DeleteFields", b.DeleteSessionFields(ctx, "s", long, "sub:file:///a", "absent"))
	got, _ = b.SessionFields(ctx, "s")
	if diff := cmp.Diff(got, map[string]string{"log_level": "debug", "sub:file:///b": "1"}); diff != "" {
		t.Errorf("after DeleteSessionFields (-got +want):\n%s", diff)
	}
	// The returned map is a copy.
	got["log_level"] = "mutated"
	if again, _ := b.SessionFields(ctx, "s"); again["log_level"] != "debug" {
		t.Errorf("mutating the returned map changed the state: %q", again["log_level"])
	}

	mustNot(t, "DeleteSession", b.DeleteSession(ctx, "s"))
	if got, _ := b.SessionFields(ctx, "s"); len(got) != 0 {
		t.Errorf("after DeleteSession: %v", got)
	}
	if ok, err := b.TouchSession(ctx, "s", long); err != nil || ok {
		t.Errorf("TouchSession of a deleted session = %v, %v; want false", ok, err)
	}
	mustNot(t, "DeleteSession of an unknown session", b.DeleteSession(ctx, "never"))
	mustNot(t, "DeleteSessionFields of an unknown session", b.DeleteSessionFields(ctx, "never", long, "x"))
	if got, _ := b.SessionFields(ctx, "other"); got["log_level"] != "error" {
		t.Errorf("another session's state: %v", got)
	}
}

// TouchSession and every write renew the ttl; a read does not.
func testSessionTouch(t *testing.T, b state.Backend) {
	ctx := t.Context()
	mustNot(t, "Set", b.SetSessionFields(ctx, "touched", map[string]string{"log_level": "info"}, ttl))
	mustNot(t, "Set", b.SetSessionFields(ctx, "rewritten", map[string]string{"log_level": "info"}, ttl))
	mustNot(t, "Set", b.SetSessionFields(ctx, "untouched", map[string]string{"log_level": "info"}, ttl))
	ok, err := b.TouchSession(ctx, "touched", long)
	if err != nil || !ok {
		t.Fatalf("TouchSession = %v, %v; want true", ok, err)
	}
	mustNot(t, "Set", b.SetSessionFields(ctx, "rewritten", map[string]string{"x": "1"}, long))
	eventually(t, "the untouched session lapses", func() (bool, error) {
		got, err := b.SessionFields(ctx, "untouched")
		return len(got) == 0, err
	})
	for _, id := range []string{"touched", "rewritten"} {
		if got, err := b.SessionFields(ctx, id); err != nil || got["log_level"] != "info" {
			t.Errorf("%s session: %v, %v; want it alive", id, got, err)
		}
	}
}

func testSessionLapses(t *testing.T, b state.Backend) {
	ctx := t.Context()
	mustNot(t, "Set", b.SetSessionFields(ctx, "s", map[string]string{"a": "1", "b": "2"}, long))
	// Deleting a field renews the rest with the ttl given.
	mustNot(t, "DeleteSessionFields", b.DeleteSessionFields(ctx, "s", ttl, "a"))
	eventually(t, "the session lapses", func() (bool, error) {
		got, err := b.SessionFields(ctx, "s")
		return len(got) == 0, err
	})
	if ok, err := b.TouchSession(ctx, "s", long); err != nil || ok {
		t.Errorf("TouchSession of a lapsed session = %v, %v; want false", ok, err)
	}
	// A lapsed session starts again empty.
	mustNot(t, "Set", b.SetSessionFields(ctx, "s", map[string]string{"c": "3"}, long))
	got, _ := b.SessionFields(ctx, "s")
	if diff := cmp.Diff(got, map[string]string{"c": "3"}); diff != "" {
		t.Errorf("after lapsing (-got +want):\n%s", diff)
	}
}

// A session holds at most MaxSessionFields fields; a write that would pass
// the bound changes nothing.
func testSessionBound(t *testing.T, b state.Backend) {
	ctx := t.Context()
	fields := map[string]string{}
	for i := range state.MaxSessionFields - 1 {
		fields[fmt.Sprintf("sub:%d", i)] = "1"
	}
	mustNot(t, "Set to the bound less one", b.SetSessionFields(ctx, "big", fields, long))
	err := b.SetSessionFields(ctx, "big", map[string]string{"new1": "1", "new2": "2"}, time.Millisecond)
	wantErr(t, "Set past the bound", err, state.ErrInvalid)
	got, _ := b.SessionFields(ctx, "big")
	if len(got) != state.MaxSessionFields-1 || got["new1"] != "" {
		t.Errorf("a refused write changed the state: %d fields", len(got))
	}
	// Overwriting existing fields at the bound is fine.
	mustNot(t, "Set to the bound", b.SetSessionFields(ctx, "big", map[string]string{"new1": "1", "sub:0": "2"}, long))
	got, _ = b.SessionFields(ctx, "big")
	if len(got) != state.MaxSessionFields || got["sub:0"] != "2" {
		t.Errorf("%d fields, sub:0=%q; want %d, 2", len(got), got["sub:0"], state.MaxSessionFields)
	}
	// The refused write did not shorten the ttl.
	time.Sleep(10 * time.Millisecond)
	if got, _ := b.SessionFields(ctx, "big"); len(got) == 0 {
		t.Error("the session lapsed after a refused write with a 1ms ttl")
	}
	wantErr(t, "Set past the bound", b.SetSessionFields(ctx, "big", map[string]string{"new3": "1"}, long), state.ErrInvalid)
}

// ListSessions lists every session with state (not a lapsed or deleted
// one), each with the fields of the prefixes asked for, up to its limit.
func testListSessions(t *testing.T, b state.Backend) {
	ctx := t.Context()
	list := func(limit int, prefixes ...string) (map[string]map[string]string, bool) {
		t.Helper()
		got, complete, err := b.ListSessions(ctx, limit, prefixes...)
		mustNot(t, "ListSessions", err)
		m := map[string]map[string]string{}
		for _, s := range got {
			if _, dup := m[s.ID]; dup {
				t.Errorf("session %s listed twice", s.ID)
			}
			m[s.ID] = s.Fields
		}
		return m, complete
	}
	if got, complete := list(10); len(got) != 0 || !complete {
		t.Errorf("no sessions: %v (complete %v)", got, complete)
	}
	mustNot(t, "Set", b.SetSessionFields(ctx, "a", map[string]string{"info": "A", "at:r1": "1", "at:r2": "2", "sub:x": "s"}, long))
	mustNot(t, "Set", b.SetSessionFields(ctx, "b*[?]\\", map[string]string{"info": "B"}, long))
	mustNot(t, "Set", b.SetSessionFields(ctx, "c", map[string]string{"level": "debug"}, long))
	mustNot(t, "Set", b.SetSessionFields(ctx, "gone", map[string]string{"info": "G"}, long))
	mustNot(t, "Set", b.SetSessionFields(ctx, "lapses", map[string]string{"info": "L"}, ttl))
	mustNot(t, "DeleteSession", b.DeleteSession(ctx, "gone"))
	eventually(t, "the short-lived session lapses", func() (bool, error) {
		got, err := b.SessionFields(ctx, "lapses")
		return len(got) == 0, err
	})
	got, complete := list(10, "info", "at:")
	want := map[string]map[string]string{
		"a":       {"info": "A", "at:r1": "1", "at:r2": "2"},
		"b*[?]\\": {"info": "B"},
		"c":       {}, // listed, though none of its fields is asked for
	}
	if diff := cmp.Diff(got, want); diff != "" || !complete {
		t.Errorf("ListSessions(info, at:) (-got +want):\n%s(complete %v)", diff, complete)
	}
	got, _ = list(10)
	if diff := cmp.Diff(got["a"], map[string]string{"info": "A", "at:r1": "1", "at:r2": "2", "sub:x": "s"}); diff != "" {
		t.Errorf("ListSessions() of a, every field (-got +want):\n%s", diff)
	}
	got, complete = list(2, "info")
	if len(got) != 2 || complete {
		t.Errorf("ListSessions with limit 2 of 3: %d sessions (complete %v), want 2 and incomplete", len(got), complete)
	}
	got, complete = list(3, "info")
	if len(got) != 3 || !complete {
		t.Errorf("ListSessions with limit 3 of 3: %d sessions (complete %v), want 3 and complete", len(got), complete)
	}
	// More sessions than a backend reads at once: each listed once.
	const many = 1100
	for i := range many {
		mustNot(t, "Set", b.SetSessionFields(ctx, fmt.Sprintf("m%04d", i), map[string]string{"info": "M"}, long))
	}
	got, complete = list(state.MaxListSessions, "info")
	if len(got) != many+3 || !complete {
		t.Errorf("ListSessions of %d: %d listed (complete %v)", many+3, len(got), complete)
	}
	got, complete = list(many, "info")
	if len(got) != many || complete {
		t.Errorf("ListSessions of %d with limit %d: %d listed (complete %v)", many+3, many, len(got), complete)
	}
}
