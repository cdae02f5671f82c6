package state

import "time"

// GCRA decides one event of a generic cell rate algorithm bucket, in
// microseconds: now is the backend's clock, tat the bucket's theoretical
// arrival time (0 for an idle bucket), interval and burst from the Limit.
// It returns the new tat (unchanged when refused) and the decision. The
// Redis backend runs the same arithmetic in Lua (state/redis); keep them
// together.
//
// The bucket allows an event when, after taking it, tat is no more than
// burst intervals ahead of now: an idle key takes burst events at once,
// then one per interval.
func GCRA(now, tat, interval, burst int64) (int64, Decision) {
	tat = max(tat, now)
	newTAT := tat + interval
	allowAt := newTAT - interval*burst
	if now < allowAt {
		return tat, Decision{RetryAfter: time.Duration(allowAt-now) * time.Microsecond}
	}
	return newTAT, Decision{Allowed: true, Remaining: int((now - allowAt) / interval)}
}
