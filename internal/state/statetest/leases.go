package statetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

var leaseTests = []test{
	{"Exclusive", testLeaseExclusive},
	{"Lapse", testLeaseLapse},
	{"Bounds", testLeaseBounds},
}

func testLeaseExclusive(t *testing.T, b state.Backend) {
	ctx := t.Context()
	ok, err := b.AcquireLease(ctx, "vault:x", "a", long)
	mustNot(t, "AcquireLease", err)
	if !ok {
		t.Fatal("a free lease was not acquired")
	}
	if ok, err := b.AcquireLease(ctx, "vault:x", "b", long); err != nil || ok {
		t.Fatalf("a held lease went to another holder: %v, %v", ok, err)
	}
	if ok, err := b.AcquireLease(ctx, "vault:x", "a", long); err != nil || !ok {
		t.Fatalf("the holder could not renew its lease: %v, %v", ok, err)
	}
	if ok, err := b.AcquireLease(ctx, "vault:y", "b", long); err != nil || !ok {
		t.Fatalf("another key's lease: %v, %v", ok, err)
	}
	// Another holder's release leaves the lease alone; the holder's frees it.
	mustNot(t, "ReleaseLease by another", b.ReleaseLease(ctx, "vault:x", "b"))
	if ok, _ := b.AcquireLease(ctx, "vault:x", "b", long); ok {
		t.Fatal("a release by a non-holder freed the lease")
	}
	mustNot(t, "ReleaseLease", b.ReleaseLease(ctx, "vault:x", "a"))
	if ok, err := b.AcquireLease(ctx, "vault:x", "b", long); err != nil || !ok {
		t.Fatalf("a released lease was not free: %v, %v", ok, err)
	}
	mustNot(t, "ReleaseLease unknown", b.ReleaseLease(ctx, "never", "a"))
}

func testLeaseLapse(t *testing.T, b state.Backend) {
	ctx := t.Context()
	if ok, err := b.AcquireLease(ctx, "k", "dead", ttl); err != nil || !ok {
		t.Fatalf("AcquireLease: %v, %v", ok, err)
	}
	eventually(t, "a lapsed lease goes to the next holder", func() (bool, error) {
		return b.AcquireLease(ctx, "k", "next", long)
	})
	// The lapsed holder's late release does not free the new one's.
	mustNot(t, "late ReleaseLease", b.ReleaseLease(ctx, "k", "dead"))
	if ok, _ := b.AcquireLease(ctx, "k", "third", long); ok {
		t.Error("a lapsed holder's release freed the next holder's lease")
	}
}

func testLeaseBounds(t *testing.T, b state.Backend) {
	ctx := t.Context()
	for _, tc := range []struct {
		key, holder string
		ttl         time.Duration
	}{
		{"", "h", long}, {"k", "", long}, {strings.Repeat("k", state.MaxKeyLen+1), "h", long}, {"k", "h", 0},
	} {
		if _, err := b.AcquireLease(ctx, tc.key, tc.holder, tc.ttl); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("AcquireLease(%d-byte key, %d-byte holder, %s): %v, want ErrInvalid", len(tc.key), len(tc.holder), tc.ttl, err)
		}
	}
}
