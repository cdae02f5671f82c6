package statetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

var rateLimitTests = []test{
	{"Burst", testRateBurst},
	{"Refill", testRateRefill},
	{"KeysApart", testRateKeys},
	{"Concurrent", testRateConcurrent},
}

// hourly allows 3 at once, then one an hour: no refill during a test.
var hourly = state.Limit{Events: 1, Per: time.Hour, Burst: 3}

func testRateBurst(t *testing.T, b state.Backend) {
	ctx := t.Context()
	for i, wantRemaining := range []int{2, 1, 0} {
		d, err := b.Allow(ctx, "k", hourly)
		mustNot(t, "Allow", err)
		if !d.Allowed || d.Remaining != wantRemaining || d.RetryAfter != 0 {
			t.Errorf("event %d: %+v, want allowed with %d remaining", i+1, d, wantRemaining)
		}
	}
	for i := range 2 {
		d, err := b.Allow(ctx, "k", hourly)
		mustNot(t, "Allow", err)
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 59*time.Minute || d.RetryAfter > time.Hour {
			t.Errorf("refused event %d: %+v, want refused, retry after about 1h", i+1, d)
		}
	}
	// Burst 0 means 1.
	d, err := b.Allow(ctx, "one", state.Limit{Events: 1, Per: time.Hour})
	mustNot(t, "Allow", err)
	if !d.Allowed || d.Remaining != 0 {
		t.Errorf("burst 0, first: %+v, want allowed, 0 remaining", d)
	}
	if d, _ := b.Allow(ctx, "one", state.Limit{Events: 1, Per: time.Hour}); d.Allowed {
		t.Errorf("burst 0, second: %+v, want refused", d)
	}
}

// An emptied bucket allows again once RetryAfter has passed, and a refused
// event takes nothing from it.
func testRateRefill(t *testing.T, b state.Backend) {
	ctx := t.Context()
	l := state.Limit{Events: 5, Per: time.Second, Burst: 1} // one per 200ms
	if d, err := b.Allow(ctx, "k", l); err != nil || !d.Allowed {
		t.Fatalf("first: %+v, %v", d, err)
	}
	var d state.Decision
	for range 3 { // refusals must not push the next allowed event back
		var err error
		d, err = b.Allow(ctx, "k", l)
		mustNot(t, "Allow", err)
		if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > l.Interval() {
			t.Fatalf("second: %+v, want refused with 0 < retry after <= %s", d, l.Interval())
		}
	}
	time.Sleep(d.RetryAfter + 20*time.Millisecond)
	if d, err := b.Allow(ctx, "k", l); err != nil || !d.Allowed {
		t.Errorf("after retry after: %+v, %v; want allowed", d, err)
	}
}

func testRateKeys(t *testing.T, b state.Backend) {
	ctx := t.Context()
	l := state.Limit{Events: 1, Per: time.Hour, Burst: 1}
	for _, k := range []string{"a", "b", "a:b", "c"} {
		if d, err := b.Allow(ctx, k, l); err != nil || !d.Allowed {
			t.Errorf("first event of %s: %+v, %v; want allowed", k, d, err)
		}
	}
	if d, _ := b.Allow(ctx, "a", l); d.Allowed {
		t.Error("second event of a allowed")
	}
}

// Many callers at once on one key: exactly the burst is allowed, as one
// round trip decides each.
func testRateConcurrent(t *testing.T, b state.Backend) {
	ctx := t.Context()
	l := state.Limit{Events: 1, Per: time.Hour, Burst: 25}
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 10 {
				d, err := b.Allow(ctx, "hot", l)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 25 || refused.Load() != 75 {
		t.Errorf("%d allowed, %d refused; want 25, 75", allowed.Load(), refused.Load())
	}
}
