package callers

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// Rate-limit keys in the shared backend. A key's bucket is its alias's; a
// JWT caller's is its owner fingerprint's, as in the local limiter.
const (
	limitKeyAlias = "rl:key:"
	limitKeyOwner = "rl:owner:"
)

// sharedRetry is how long a replica that found the shared limiter
// unavailable decides locally before asking it again (one request then
// probes it): an outage does not cost every request a failed round trip.
const sharedRetry = time.Second

// sharedLimits enforces the rate limits of a fleet in a shared backend
// (SPEC S15, issue 14) and falls back to a replica-local limiter enforcing
// rpm/N while the backend is unavailable, N being the assumed number of
// replicas. It logs each transition into and out of that mode once.
type sharedLimits struct {
	rl       state.RateLimiter
	replicas func() int
	logger   *slog.Logger
	onMode   func(degraded bool)
	onLocal  func()

	fallback limiter // the rpm/N buckets
	retryAt  atomic.Int64
	// degraded: deciding locally. Read on every request; changed, with
	// its log line and hook, under modeMu, so the hook sees the
	// transitions in order.
	degraded atomic.Bool
	modeMu   sync.Mutex
}

// allow takes one event of key's limit of rpm requests a minute (with a
// burst of rpm, as the local bucket's capacity). It reports whether the
// request may proceed and, if not, how long until it may.
func (s *sharedLimits) allow(ctx context.Context, key string, rpm int, now time.Time) (bool, time.Duration) {
	if !s.degraded.Load() || s.claimProbe(now) {
		d, err := s.rl.Allow(ctx, key, state.Limit{Events: rpm, Per: time.Minute, Burst: rpm})
		if err == nil {
			s.recovered()
			return d.Allowed, d.RetryAfter
		}
		if !errors.Is(err, state.ErrUnavailable) {
			// ErrInvalid (a key over MaxKeyLen) or ErrClosed: not an
			// outage; decide locally without changing mode.
			s.logger.Error("shared rate limit", attrErr, err)
			return s.local(key, rpm, now)
		}
		if ctx.Err() != nil {
			// The client went away: not the backend's fault.
			return s.local(key, rpm, now)
		}
		s.unavailable(err, now)
	}
	return s.local(key, rpm, now)
}

// claimProbe reports whether this request is the one that asks the
// backend again, once sharedRetry has passed since the last failure.
func (s *sharedLimits) claimProbe(now time.Time) bool {
	at := s.retryAt.Load()
	return now.UnixNano() >= at && s.retryAt.CompareAndSwap(at, now.Add(sharedRetry).UnixNano())
}

func (s *sharedLimits) local(key string, rpm int, now time.Time) (bool, time.Duration) {
	if s.onLocal != nil {
		s.onLocal()
	}
	return s.fallback.allow(key, max(rpm/s.replicaCount(), 1), now)
}

func (s *sharedLimits) replicaCount() int {
	if s.replicas == nil {
		return 1
	}
	return max(s.replicas(), 1)
}

func (s *sharedLimits) unavailable(err error, now time.Time) {
	s.retryAt.Store(now.Add(sharedRetry).UnixNano())
	s.modeMu.Lock()
	defer s.modeMu.Unlock()
	if s.degraded.Load() {
		return
	}
	s.degraded.Store(true)
	s.logger.Warn("rate limits are replica-local (each replica enforces limit/N) until the shared state answers", "replicas", s.replicaCount(), attrErr, err)
	if s.onMode != nil {
		s.onMode(true)
	}
}

func (s *sharedLimits) recovered() {
	if !s.degraded.Load() {
		return
	}
	s.modeMu.Lock()
	defer s.modeMu.Unlock()
	if !s.degraded.Load() {
		return
	}
	s.degraded.Store(false)
	s.logger.Info("rate limits are global again: the shared state answers")
	if s.onMode != nil {
		s.onMode(false)
	}
}
