package fleet

import (
	"errors"
	"net/http"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
	sealed "github.com/mcpgate/mcpgate/internal/fleet"
)

// ring is a key ring of the given fleet.session_keys, as a replica builds
// it, for telling which key sealed an id.
func ring(t *testing.T, keys ...string) *sealed.Ring {
	t.Helper()
	fc := &config.Fleet{SessionKeys: keys}
	b, err := fc.SessionKeyBytes()
	if err != nil {
		t.Fatal(err)
	}
	r, err := sealed.NewRing(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testKeyRotation: scenario 8. The replicas are restarted one by one (a
// rolling restart, the balancer routing around the one down) with
// session_keys [new, old]: a session sealed under the old key still opens
// on every replica, and new sessions are sealed under the new key (a ring
// of the new key alone opens them, one of the old key alone does not).
func testKeyRotation(t *testing.T, f *Fleet, oldKey string) {
	ctx := t.Context()
	newKey := newSessionKey()
	oldRing, newRing := ring(t, oldKey), ring(t, newKey)
	before, err := newRawSession(ctx, http.DefaultClient, f.LB.URL+"/mcp", aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oldRing.OpenSession(before.ID()); err != nil {
		t.Fatalf("a session id before the rotation does not open under the old key: %v", err)
	}

	f.RotateKeys(newKey, oldKey)
	for _, r := range f.Replicas {
		n := r.Starts()
		r.Restart(t)
		if r.Starts() != n+1 {
			t.Fatalf("replica %s was not restarted", r.Name)
		}
	}
	f.LB.WaitUp(t)

	// The old session on each replica in turn, explicitly.
	f.LB.Route(f.LB.pinByHeader)
	defer f.LB.Route(nil)
	for _, r := range f.Replicas {
		before.Pin = r.Name
		rep, err := before.Call(ctx, "notes__get_note", map[string]any{"title": "gamma"})
		if err != nil || !rep.OK() || rep.Replica != r.Name {
			t.Errorf("the session sealed under the old key, on %s after the rotation: %v %v", r.Name, rep, err)
		}
	}
	before.Pin = ""

	for range len(f.Replicas) { // initialize on each replica in turn
		s, err := newRawSession(ctx, http.DefaultClient, f.LB.URL+"/mcp", aliceKey)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := newRing.OpenSession(s.ID()); err != nil {
			t.Errorf("a session initialized on %s after the rotation does not open under the new key alone: %v", s.InitOn, err)
		}
		if _, err := oldRing.OpenSession(s.ID()); !errors.Is(err, sealed.ErrUnknownKey) {
			t.Errorf("a session initialized on %s after the rotation: the old key alone opens it (%v); want ErrUnknownKey", s.InitOn, err)
		}
		if rep, err := s.Call(ctx, "notes__list_notes", map[string]any{}); err != nil || !rep.OK() {
			t.Errorf("a new session initialized on %s: %v %v", s.InitOn, rep, err)
		}
	}
}
