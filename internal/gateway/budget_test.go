package gateway

import (
	"context"
	"testing"
	"time"
)

// The spent sum is the store's (read at most every budgetRefresh) plus
// this replica's costs since; a new period reads again.
func TestBudgetSpent(t *testing.T) {
	reads, stored := 0, 10.0
	b := &budgets{m: map[string]*budgetSpent{}, usage: func(_ context.Context, alias string, since time.Time) (float64, error) {
		reads++
		return stored, nil
	}}
	ctx := context.Background()
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := day.Add(time.Hour)
	if v, _ := b.spent(ctx, "k", day, now); v != 10 || reads != 1 {
		t.Fatalf("first read: %v after %d reads", v, reads)
	}
	b.add("k", 2.5)
	stored = 99 // another replica's calls, not seen until the refresh
	if v, _ := b.spent(ctx, "k", day, now.Add(time.Second)); v != 12.5 || reads != 1 {
		t.Errorf("cached: %v after %d reads", v, reads)
	}
	if v, _ := b.spent(ctx, "k", day, now.Add(budgetRefresh)); v != 99 || reads != 2 {
		t.Errorf("refreshed: %v after %d reads", v, reads)
	}
	stored = 0
	if v, _ := b.spent(ctx, "k", day.AddDate(0, 0, 1), now.Add(budgetRefresh+time.Second)); v != 0 || reads != 3 {
		t.Errorf("a new period: %v after %d reads", v, reads)
	}
	b.add("unknown", 1) // no entry: nothing to add to, no panic
}
