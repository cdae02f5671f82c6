package guard

import (
	"context"
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
	// Two refreshes at once: the older one, finishing last, must not
	// overwrite what the newer one and a call since made of the sum.
	slow, release = true, make(chan struct{})
	t1 := later.Add(budgetRefresh)
	go func() {
		done <- readSpent(t, b, "k", day, t1)
	}()
	<-reading
	slow = false
	t2 := t1.Add(time.Second)
	call = &Reservation{b: b, alias: "k", start: day, est: 1}
	if v, ok, _ := b.reserve(ctx, call, 1e9, t2); !ok || v != 0 {
		t.Errorf("the newer refresh: spent %v, want 0 (the store has the call by then)", v)
	}
	clock = t2.Add(time.Millisecond)
	call.Settle(ctx, 1)
	close(release)
	if v := <-done; v != 1 {
		t.Errorf("the older refresh, applied last: spent %v, want 1", v)
	}
	if v := readSpent(t, b, "k", day, t2.Add(time.Second)); v != 1 {
		t.Errorf("after both refreshes: spent %v, want 1", v)
	}
}
