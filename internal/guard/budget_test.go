package guard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// readSpent is what a call of alias at now finds spent in the period at
// start: a reservation of nothing, released at once. Safe to call from
// any goroutine.
func readSpent(t *testing.T, b *Budgets, alias string, start, now time.Time) float64 {
	t.Helper()
	r := &Reservation{b: b, alias: alias, start: start}
	spent, ok, err := b.reserve(context.Background(), r, 1e9, now)
	if err != nil || !ok {
		t.Errorf("reserve: %v (allowed %v)", err, ok)
	}
	r.Release(context.Background())
	return spent
}

// The spent sum is the store's (read at most every budgetRefresh) plus
// this replica's costs since; a new period reads again.
func TestBudgetSpent(t *testing.T) {
	reads, stored := 0, 10.0
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := day.Add(time.Hour)
	b := &Budgets{m: map[string]*budgetSpent{}, clock: func() time.Time { return now }, usage: func(_ context.Context, alias string, since time.Time) (float64, error) {
		reads++
		return stored, nil
	}}
	ctx := context.Background()
	call := &Reservation{b: b, alias: "k", start: day, est: 1}
	if v, ok, _ := b.reserve(ctx, call, 1e9, now); !ok || v != 10 || reads != 1 {
		t.Fatalf("first read: %v after %d reads", v, reads)
	}
	if v := readSpent(t, b, "k", day, now); v != 11 || reads != 1 {
		t.Errorf("with a call in flight: %v after %d reads, want its reservation counted", v, reads)
	}
	call.Settle(ctx, 2.5)
	stored = 99 // another replica's calls, not seen until the refresh
	if v := readSpent(t, b, "k", day, now.Add(time.Second)); v != 12.5 || reads != 1 {
		t.Errorf("cached: %v after %d reads", v, reads)
	}
	if v := readSpent(t, b, "k", day, now.Add(budgetRefresh)); v != 99 || reads != 2 {
		t.Errorf("refreshed: %v after %d reads", v, reads)
	}
	stored = 0
	if v := readSpent(t, b, "k", day.AddDate(0, 0, 1), now.Add(budgetRefresh+time.Second)); v != 0 || reads != 3 {
		t.Errorf("a new period: %v after %d reads", v, reads)
	}
	// No entry: nothing to settle into, no panic.
	(&Reservation{b: b, alias: "unknown", start: day}).Settle(ctx, 1)
}

// A read of the store that began before a call was settled does not
// forget the call (its audit record is not in what the read saw), and a
// read that began earlier than one already applied is dropped: twenty
// concurrent calls of one key on a budget of one run one (issue 22, hole
// 14, found by test/security's legacy batch).
func TestBudgetReadsDoNotForgetLaterCalls(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := day.Add(time.Hour)
	clock := now // when a call settles
	release := make(chan struct{})
	reading := make(chan struct{}, 1)
	slow := false
	b := &Budgets{m: map[string]*budgetSpent{}, clock: func() time.Time { return clock }, usage: func(context.Context, string, time.Time) (float64, error) {
		if slow {
			reading <- struct{}{}
			<-release
		}
		return 0, nil
	}}
	ctx := context.Background()
	call := &Reservation{b: b, alias: "k", start: day, est: 1}
	if v, ok, _ := b.reserve(ctx, call, 1e9, now); !ok || v != 0 {
		t.Fatalf("first read: %v", v)
	}
	// A stale entry's refresh begins, and is slow.
	slow = true
	later := now.Add(budgetRefresh)
	done := make(chan float64)
	go func() {
		done <- readSpent(t, b, "k", day, later)
	}()
	<-reading
	// Meanwhile the call is settled (after the read began).
	clock = later.Add(time.Millisecond)
	call.Settle(ctx, 1)
	close(release)
	if v := <-done; v != 1 {
		t.Errorf("a read that began before a settled call: spent %v, want 1 (the call is not in the store's sum yet)", v)
	}
	// While a refresh is in flight the key's other calls do not read the
	// store again: they count from the entry as it is, calls settled
	// meanwhile included, and the refresh, applied, keeps the calls
	// settled after it began.
	slow, release = true, make(chan struct{})
	t1 := later.Add(budgetRefresh)
	go func() {
		done <- readSpent(t, b, "k", day, t1)
	}()
	<-reading
	slow = false
	t2 := t1.Add(time.Second)
	call = &Reservation{b: b, alias: "k", start: day, est: 1}
	if v, ok, err := b.reserve(ctx, call, 1e9, t2); err != nil || !ok || v != 1 {
		t.Errorf("during the refresh: spent %v (%v), want 1 (the call settled after the last read)", v, err)
	}
	clock = t2.Add(time.Millisecond)
	call.Settle(ctx, 1)
	close(release)
	if v := <-done; v != 1 {
		t.Errorf("the refresh, applied: spent %v, want 1 (the call settled after it began)", v)
	}
	if v := readSpent(t, b, "k", day, t2.Add(time.Second)); v != 1 {
		t.Errorf("after the refresh: spent %v, want 1", v)
	}
}

// Many calls of one key at once read the store once: the first read of a
// key (the others wait for it) and each refresh of a stale entry (the
// others count from the entry meanwhile). Before, every call in flight
// read the period's whole sum, a quarter of the gateway's CPU at c=64.
func TestBudgetOneReadPerKeyAtATime(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := day.Add(time.Hour)
	var reads atomic.Int64
	var mu sync.Mutex // guards gate, closed to end the reads in flight
	gate := make(chan struct{})
	b := &Budgets{m: map[string]*budgetSpent{}, clock: func() time.Time { return now }, usage: func(context.Context, string, time.Time) (float64, error) {
		reads.Add(1)
		mu.Lock()
		g := gate
		mu.Unlock()
		<-g
		return 5, nil
	}}
	const n = 32
	run := func(at time.Time) []float64 {
		var wg sync.WaitGroup
		spent := make([]float64, n)
		for i := range n {
			wg.Go(func() { spent[i] = readSpent(t, b, "k", day, at) })
		}
		// Every call has reached the store or the entry before the read
		// ends (they wait on it or count from it).
		for reads.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		close(gate)
		gate = make(chan struct{})
		mu.Unlock()
		wg.Wait()
		return spent
	}
	for i, v := range run(now) {
		if v != 5 {
			t.Fatalf("first read, call %d: spent %v, want the store's 5", i, v)
		}
	}
	if got := reads.Load(); got != 1 {
		t.Errorf("%d calls of a new key read the store %d times, want once", n, got)
	}
	reads.Store(0)
	run(now.Add(budgetRefresh))
	if got := reads.Load(); got != 1 {
		t.Errorf("%d calls finding the entry stale read the store %d times, want once", n, got)
	}
	// A failed first read: the waiting calls read for themselves (each
	// gets the store's answer), and nothing is left half made.
	fail := errors.New("store down")
	b2 := &Budgets{m: map[string]*budgetSpent{}, clock: func() time.Time { return now }, usage: func(context.Context, string, time.Time) (float64, error) {
		return 0, fail
	}}
	r := &Reservation{b: b2, alias: "k", start: day, est: 1}
	if _, _, err := b2.reserve(context.Background(), r, 1e9, now); !errors.Is(err, fail) {
		t.Errorf("a failed read: %v, want the store's error", err)
	}
	if len(b2.m) != 0 {
		t.Errorf("a failed first read left %d entries", len(b2.m))
	}
}

// A read of the period's sum that takes long spaces the next one by
// budgetReadShare times as much: reading a busy key's month every five
// seconds must not take a CPU.
func TestBudgetSlowReadsSpaced(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := day.Add(time.Hour)
	reads := 0
	b := &Budgets{m: map[string]*budgetSpent{}, clock: func() time.Time { return now }}
	b.usage = func(context.Context, string, time.Time) (float64, error) {
		reads++
		now = now.Add(time.Second) // the read takes a second
		return 0, nil
	}
	readSpent(t, b, "k", day, now)
	if reads != 1 {
		t.Fatalf("%d reads", reads)
	}
	fetched := now.Add(-time.Second)
	if readSpent(t, b, "k", day, fetched.Add(budgetRefresh)); reads != 1 {
		t.Errorf("read again after %v, with the last read taking 1s: want %v between reads", budgetRefresh, budgetReadShare*time.Second)
	}
	if readSpent(t, b, "k", day, fetched.Add(budgetReadShare*time.Second)); reads != 2 {
		t.Errorf("not read again after %v", budgetReadShare*time.Second)
	}
}
