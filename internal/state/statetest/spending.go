package statetest

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

var spendingTests = []test{
	{"SeedReserveSettle", testSpendSeed},
	{"Atomic", testSpendAtomic},
	{"Lapse", testSpendLapse},
	{"Bounds", testSpendBounds},
}

// A key without a sum asks for its seed; once seeded, reservations are
// taken while the sum is below the limit, and corrections move it.
func testSpendSeed(t *testing.T, b state.Backend) {
	ctx := t.Context()
	r := state.Reservation{Limit: 3, Cost: 1, TTL: long}
	d, err := b.Reserve(ctx, "budget:k", r)
	mustNot(t, "Reserve unseeded", err)
	if !d.Unknown || d.Allowed {
		t.Fatalf("an unknown key without a seed: %+v, want Unknown", d)
	}
	mustNot(t, "Spend unknown", b.Spend(ctx, "budget:k", 5, long))
	r.Seed, r.Seeded = 1.5, true
	d, err = b.Reserve(ctx, "budget:k", r)
	mustNot(t, "Reserve seeded", err)
	if !d.Allowed || d.Unknown || d.Spent != 1.5 {
		t.Fatalf("first reservation: %+v, want allowed with 1.5 spent (a Spend on an unknown key writes nothing)", d)
	}
	// A second seed does not overwrite the sum.
	r.Seed = 0
	d, _ = b.Reserve(ctx, "budget:k", r)
	if !d.Allowed || d.Spent != 2.5 {
		t.Fatalf("second reservation: %+v, want allowed with 2.5 spent", d)
	}
	d, _ = b.Reserve(ctx, "budget:k", r)
	if d.Allowed || d.Spent != 3.5 {
		t.Fatalf("at the limit: %+v, want refused with 3.5 spent", d)
	}
	// Releasing a reservation (a failed call) and correcting one by the
	// actual cost.
	mustNot(t, "Spend release", b.Spend(ctx, "budget:k", -1, long))
	mustNot(t, "Spend correct", b.Spend(ctx, "budget:k", -0.25, long))
	d, _ = b.Reserve(ctx, "budget:k", state.Reservation{Limit: 3, Cost: 0.125, TTL: long})
	if !d.Allowed || d.Spent != 2.25 {
		t.Fatalf("after corrections: %+v, want allowed with 2.25 spent", d)
	}
	if d, _ := b.Reserve(ctx, "budget:other", state.Reservation{Limit: 1, Cost: 1, TTL: long}); !d.Unknown {
		t.Errorf("another key shares the sum: %+v", d)
	}
}

// Reservations from many goroutines at once never take more than the
// limit allows: exactly limit/cost of them succeed.
func testSpendAtomic(t *testing.T, b state.Backend) {
	ctx := t.Context()
	const n = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range n {
		wg.Go(func() {
			d, err := b.Reserve(ctx, "budget:race", state.Reservation{Limit: 5, Cost: 1, TTL: long, Seeded: true})
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 5 {
		t.Errorf("%d of %d concurrent reservations went through on a limit of 5, want 5", allowed, n)
	}
}

func testSpendLapse(t *testing.T, b state.Backend) {
	ctx := t.Context()
	if d, err := b.Reserve(ctx, "budget:l", state.Reservation{Limit: 1, Cost: 1, TTL: ttl, Seeded: true}); err != nil || !d.Allowed {
		t.Fatalf("Reserve: %+v, %v", d, err)
	}
	// Every reservation renews the ttl, so the sum is looked at once,
	// after it had time to lapse.
	time.Sleep(3 * ttl)
	d, err := b.Reserve(ctx, "budget:l", state.Reservation{Limit: 1, Cost: 1, TTL: long})
	if err != nil || !d.Unknown {
		t.Errorf("a sum %s after its last write: %+v, %v; want Unknown", 3*ttl, d, err)
	}
}

func testSpendBounds(t *testing.T, b state.Backend) {
	ctx := t.Context()
	for name, r := range map[string]state.Reservation{
		"NaN limit":     {Limit: math.NaN(), Cost: 1, TTL: long},
		"infinite cost": {Limit: 1, Cost: math.Inf(1), TTL: long},
		"negative cost": {Limit: 1, Cost: -1, TTL: long},
		"negative seed": {Limit: 1, Cost: 1, TTL: long, Seed: -1, Seeded: true},
		"no ttl":        {Limit: 1, Cost: 1},
	} {
		_, err := b.Reserve(ctx, "budget:b", r)
		wantErr(t, "Reserve "+name, err, state.ErrInvalid)
	}
	_, err := b.Reserve(ctx, "", state.Reservation{Limit: 1, TTL: long})
	wantErr(t, "Reserve with an empty key", err, state.ErrInvalid)
	wantErr(t, "Spend NaN", b.Spend(ctx, "budget:b", math.NaN(), long), state.ErrInvalid)
}
