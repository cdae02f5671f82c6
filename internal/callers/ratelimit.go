package callers

import (
	"math"
	"sync"
	"time"
)

// bucketIdle is how long a bucket may go unused before it is dropped. Any
// rate of at least one request a minute refills a bucket within a minute,
// so a dropped bucket is recreated exactly as it was: full.
const bucketIdle = 10 * time.Minute

// limiter holds one token bucket per key alias, in memory (per replica).
// A bucket holds up to rpm tokens, refills continuously at rpm per minute,
// and starts full. Its methods are safe for concurrent use.
type limiter struct {
	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	rpm    int
	last   time.Time // when tokens was computed
}

// allow takes a token from alias's bucket at now. When none is left it
// returns false and how long until one is.
func (l *limiter) allow(alias string, rpm int, now time.Time) (bool, time.Duration) {
	if rpm <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= time.Minute {
		l.sweep(now)
	}
	b := l.buckets[alias]
	if b == nil {
		if l.buckets == nil {
			l.buckets = make(map[string]*bucket)
		}
		b = &bucket{tokens: float64(rpm), rpm: rpm, last: now}
		l.buckets[alias] = b
	}
	perSecond := float64(rpm) / 60
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens += elapsed.Seconds() * perSecond
		b.last = now
	}
	// The key's limit may have changed since the bucket was made.
	b.rpm = rpm
	b.tokens = math.Min(b.tokens, float64(rpm))
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / perSecond * float64(time.Second))
}

// sweep drops the buckets idle for bucketIdle, which bounds the map by the
// keys used in the last ten minutes. Called with mu held.
func (l *limiter) sweep(now time.Time) {
	l.lastSweep = now
	for alias, b := range l.buckets {
		if now.Sub(b.last) >= bucketIdle {
			delete(l.buckets, alias)
		}
	}
}

// len reports how many buckets are held (for tests).
func (l *limiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// retryAfterSeconds rounds d up to whole seconds, at least one: the value
// of a Retry-After header after which a retry will succeed.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
