package store

import (
	"testing"
	"time"
)

// Budget periods are UTC days, weeks from Monday and calendar months.
func TestPeriodStart(t *testing.T) {
	at := time.Date(2026, 12, 3, 17, 4, 5, 0, time.FixedZone("x", 5*3600)) // Thursday 12:04 UTC
	for _, c := range []struct {
		period     string
		start, end string
	}{
		{BudgetDay, "2026-12-03T00:00:00Z", "2026-12-04T00:00:00Z"},
		{BudgetWeek, "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"},
		{BudgetMonth, "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
	} {
		s := PeriodStart(c.period, at)
		if got := s.Format(time.RFC3339); got != c.start {
			t.Errorf("%s start: %s, want %s", c.period, got, c.start)
		}
		if got := PeriodEnd(c.period, s).Format(time.RFC3339); got != c.end {
			t.Errorf("%s end: %s, want %s", c.period, got, c.end)
		}
	}
	// A Monday starts its own week; a Sunday belongs to the week before.
	if got := PeriodStart(BudgetWeek, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)); got.Day() != 30 {
		t.Errorf("Monday: %v", got)
	}
	if got := PeriodStart(BudgetWeek, time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)); got.Day() != 23 {
		t.Errorf("Sunday: %v", got)
	}
	if !PeriodStart("year", at).IsZero() {
		t.Errorf("an unknown period has a start")
	}
}
