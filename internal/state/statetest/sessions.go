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
