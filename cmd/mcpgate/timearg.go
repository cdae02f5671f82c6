package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseTimeArg reads a time flag: an RFC 3339 time, a date (2026-12-31,
// midnight UTC), or a duration from now (Go's 1h30m, plus d for days
// and w for weeks: 30d, 2w, 1d12h). A duration is counted back from now
// for a flag that asks for a past time (--since 1h: an hour ago) and
// forward for one that asks for a future one (--expires 30d: in thirty
// days).
func parseTimeArg(name, s string, now time.Time, future bool) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	d, err := parseLongDuration(s)
	if err != nil || d < 0 {
		example := "1h, 7d"
		if future {
			example = "30d, 12h"
		}
		return time.Time{}, &usageError{fmt.Sprintf("--%s: want a duration (%s) or an RFC 3339 time such as 2026-12-31T23:59:59Z, got %q", name, example, s)}
	}
	if future {
		return now.Add(d), nil
	}
	return now.Add(-d), nil
}

// parseLongDuration is time.ParseDuration with days (d, 24h) and weeks
// (w, 7d) in front: "30d", "2w", "1w2d", "1d12h".
func parseLongDuration(s string) (time.Duration, error) {
	var total time.Duration
	rest := strings.TrimSpace(s)
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 || i == len(rest) || (rest[i] != 'd' && rest[i] != 'w') {
			break
		}
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n > 100*366 {
			return 0, errors.New("too long")
		}
		unit := 24 * time.Hour
		if rest[i] == 'w' {
			unit *= 7
		}
		total += time.Duration(n) * unit
		rest = rest[i+1:]
	}
	if rest == "" {
		if s == "" {
			return 0, errors.New("empty")
		}
		return total, nil
	}
	d, err := time.ParseDuration(rest)
	if err != nil {
		return 0, err
	}
	return total + d, nil
}
