package statetest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/state"
)

var replicaTests = []test{
	{"HeartbeatList", testReplicas},
	{"Lapse", testReplicaLapse},
}

func testReplicas(t *testing.T, b state.Backend) {
	ctx := t.Context()
	got, err := b.LiveReplicas(ctx)
	mustNot(t, "LiveReplicas", err)
	if got == nil || len(got) != 0 {
		t.Errorf("no replicas: %#v, want an empty list", got)
	}
	for _, r := range []state.Replica{{ID: "r2", URL: "http://10.0.0.2:4000"}, {ID: "r1", URL: "http://10.0.0.1:4000"}, {ID: "r3", URL: "http://10.0.0.3:4000"}} {
		mustNot(t, "Heartbeat", b.Heartbeat(ctx, r, long))
	}
	// A heartbeat with a new URL replaces the old one.
	mustNot(t, "Heartbeat", b.Heartbeat(ctx, state.Replica{ID: "r3", URL: "http://10.0.0.33:4000"}, long))
	mustNot(t, "Deregister", b.Deregister(ctx, "r2"))
	mustNot(t, "Deregister unknown", b.Deregister(ctx, "never"))
	got, err = b.LiveReplicas(ctx)
	mustNot(t, "LiveReplicas", err)
	want := []state.Replica{{ID: "r1", URL: "http://10.0.0.1:4000"}, {ID: "r3", URL: "http://10.0.0.33:4000"}}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("live replicas (-got +want):\n%s", diff)
	}
}

func testReplicaLapse(t *testing.T, b state.Backend) {
	ctx := t.Context()
	mustNot(t, "Heartbeat", b.Heartbeat(ctx, state.Replica{ID: "gone", URL: "http://gone"}, ttl))
	mustNot(t, "Heartbeat", b.Heartbeat(ctx, state.Replica{ID: "alive", URL: "http://alive"}, ttl))
	mustNot(t, "Heartbeat", b.Heartbeat(ctx, state.Replica{ID: "alive", URL: "http://alive"}, long))
	eventually(t, "the silent replica lapses", func() (bool, error) {
		got, err := b.LiveReplicas(ctx)
		return len(got) == 1, err
	})
	got, _ := b.LiveReplicas(ctx)
	if diff := cmp.Diff(got, []state.Replica{{ID: "alive", URL: "http://alive"}}); diff != "" {
		t.Errorf("live replicas (-got +want):\n%s", diff)
	}
	// A lapsed replica comes back with its next heartbeat.
	mustNot(t, "Heartbeat", b.Heartbeat(ctx, state.Replica{ID: "gone", URL: "http://back"}, long))
	got, _ = b.LiveReplicas(ctx)
	if diff := cmp.Diff(got, []state.Replica{{ID: "alive", URL: "http://alive"}, {ID: "gone", URL: "http://back"}}); diff != "" {
		t.Errorf("live replicas (-got +want):\n%s", diff)
	}
}

var ownerTests = []test{
	{"NewerWins", testOwnerNewer},
	{"Release", testOwnerRelease},
	{"Lapse", testOwnerLapse},
}

func claim(t *testing.T, b state.Backend, id string, o state.StreamOwner, wantOK bool, wantCur state.StreamOwner) {
	t.Helper()
	cur, ok, err := b.ClaimStream(t.Context(), id, o, long)
	mustNot(t, "ClaimStream", err)
	if ok != wantOK || cur != wantCur {
		t.Errorf("ClaimStream(%s, %+v) = %+v, %v; want %+v, %v", id, o, cur, ok, wantCur, wantOK)
	}
}

func testOwnerNewer(t *testing.T, b state.Backend) {
	ctx := t.Context()
	if _, ok, err := b.StreamOwnerOf(ctx, "s"); err != nil || ok {
		t.Errorf("StreamOwnerOf with none: ok=%v, %v", ok, err)
	}
	a10 := state.StreamOwner{Replica: "a", Version: 10}
	b20 := state.StreamOwner{Replica: "b", Version: 20}
	claim(t, b, "s", a10, true, a10)
	claim(t, b, "s", a10, true, a10) // a renewal
	claim(t, b, "s", b20, true, b20) // newer
	claim(t, b, "s", a10, false, b20)
	claim(t, b, "s", state.StreamOwner{Replica: "c", Version: 20}, false, b20) // same version, another replica
	claim(t, b, "s", state.StreamOwner{Replica: "a", Version: -5}, false, b20)
	claim(t, b, "other", state.StreamOwner{Replica: "a", Version: -5}, true, state.StreamOwner{Replica: "a", Version: -5})
	o, ok, err := b.StreamOwnerOf(ctx, "s")
	if err != nil || !ok || o != b20 {
		t.Errorf("StreamOwnerOf = %+v, %v, %v; want %+v", o, ok, err, b20)
	}
}

func testOwnerRelease(t *testing.T, b state.Backend) {
	ctx := t.Context()
	a1 := state.StreamOwner{Replica: "a", Version: 1}
	b2 := state.StreamOwner{Replica: "b", Version: 2}
	claim(t, b, "s", a1, true, a1)
	claim(t, b, "s", b2, true, b2)
	mustNot(t, "ReleaseStream (superseded)", b.ReleaseStream(ctx, "s", a1))
	if o, ok, _ := b.StreamOwnerOf(ctx, "s"); !ok || o != b2 {
		t.Errorf("a superseded release removed the newer owner: %+v, %v", o, ok)
	}
	mustNot(t, "ReleaseStream", b.ReleaseStream(ctx, "s", b2))
	if o, ok, _ := b.StreamOwnerOf(ctx, "s"); ok {
		t.Errorf("after release: %+v", o)
	}
	// Released, an older claim may take it again.
	claim(t, b, "s", a1, true, a1)
	mustNot(t, "ReleaseStream of none", b.ReleaseStream(ctx, "never", a1))
}

func testOwnerLapse(t *testing.T, b state.Backend) {
	ctx := t.Context()
	b9 := state.StreamOwner{Replica: "b", Version: 9}
	if _, ok, err := b.ClaimStream(ctx, "s", b9, ttl); err != nil || !ok {
		t.Fatalf("ClaimStream: %v, %v", ok, err)
	}
	eventually(t, "the claim lapses", func() (bool, error) {
		_, ok, err := b.StreamOwnerOf(ctx, "s")
		return !ok, err
	})
	// A lapsed owner is no owner: an older claim succeeds.
	a1 := state.StreamOwner{Replica: "a", Version: 1}
	claim(t, b, "s", a1, true, a1)
}
