package callers

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/redis"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store"
)

// openRedis opens a client of srv (one replica's backend), closed at the
// end of t.
func openRedis(t testing.TB, srv *redistest.Server) *redis.Backend {
	t.Helper()
	b, err := redis.Open(redis.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// recordLog counts the log records at each level.
type recordLog struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordLog) WithGroup(string) slog.Handler      { return h }
func (h *recordLog) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// TestSharedRateLimit: two replicas sharing one Redis enforce one limit.
func TestSharedRateLimit(t *testing.T) {
	srv := redistest.New(t)
	s := openStore(t)
	secret := addKey(t, s, store.Key{Alias: "k", RateLimitRPM: 10})
	a := newAuth(t, Options{Keys: s, RateLimiter: openRedis(t, srv)})
	b := newAuth(t, Options{Keys: s, RateLimiter: openRedis(t, srv)})

	allowed := map[int]int{}
	for i := range 20 {
		auth := []*Authenticator{a, b}[i%2]
		_, f := auth.Authenticate(request(remote, HeaderAPIKey, secret))
		switch {
		case f == nil:
			allowed[i%2]++
		case f.Status != http.StatusTooManyRequests:
			t.Fatalf("request %d: status %d", i+1, f.Status)
		}
	}
	if got := allowed[0] + allowed[1]; got != 10 {
		t.Errorf("allowed %d of 20 requests across two replicas (%v), want 10: the limit is global", got, allowed)
	}
	w := mustFail(t, b, request(remote, HeaderAPIKey, secret))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("over the limit: status %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
}

// TestSharedRateLimitFallback: while Redis is down each replica enforces
// limit/N on its own, says so once, and the limits are global again once
// Redis answers.
func TestSharedRateLimitFallback(t *testing.T) {
	srv := redistest.New(t)
	s := openStore(t)
	secret := addKey(t, s, store.Key{Alias: "k", RateLimitRPM: 10})
	clock := newFakeClock()
	logs := &recordLog{}
	var (
		mu     sync.Mutex
		modes  []bool
		locals int
	)
	a := newAuth(t, Options{
		Keys: s, RateLimiter: openRedis(t, srv), Now: clock.Now, Logger: slog.New(logs),
		Replicas:     func() int { return 2 },
		OnLimitMode:  func(d bool) { mu.Lock(); modes = append(modes, d); mu.Unlock() },
		OnLimitLocal: func() { mu.Lock(); locals++; mu.Unlock() },
	})
	count := func(n int) int {
		ok := 0
		for range n {
			_, f := a.Authenticate(request(remote, HeaderAPIKey, secret))
			if f == nil {
				ok++
			} else if f.Status != http.StatusTooManyRequests {
				t.Fatalf("status %d", f.Status)
			}
		}
		return ok
	}

	if got := count(3); got != 3 {
		t.Fatalf("with Redis up: %d of 3 allowed", got)
	}
	srv.Stop()
	if got := count(10); got != 5 {
		t.Errorf("Redis down, 2 replicas assumed: %d of 10 allowed, want 5 (10/2)", got)
	}
	mu.Lock()
	if len(modes) != 1 || !modes[0] || locals != 10 {
		t.Errorf("after the outage began: modes %v, local decisions %d; want [true], 10", modes, locals)
	}
	mu.Unlock()
	if got := logs.lines(); len(got) != 1 || got[0][:4] != "WARN" {
		t.Errorf("log lines %q, want one warning", got)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Within sharedRetry of the failure, the replica does not ask Redis.
	if got := count(1); got != 0 {
		t.Errorf("before the retry: %d allowed, want 0 (the local bucket is empty)", got)
	}
	clock.Advance(sharedRetry)
	// The restarted Redis is empty: its bucket is full again.
	if got := count(12); got != 10 {
		t.Errorf("Redis back: %d of 12 allowed, want 10", got)
	}
	mu.Lock()
	if len(modes) != 2 || modes[1] {
		t.Errorf("after recovery: modes %v, want [true false]", modes)
	}
	mu.Unlock()
	if got := logs.lines(); len(got) != 2 || got[1][:4] != "INFO" {
		t.Errorf("log lines %q, want a warning then one info line", got)
	}
}

// TestSharedLimitKeys: a key's bucket is its alias's, a JWT caller's its
// owner's, each in its own namespace, with a burst of the limit.
func TestSharedLimitKeys(t *testing.T) {
	rl := &spyLimiter{}
	sl := &sharedLimits{rl: rl, logger: slog.New(slog.DiscardHandler)}
	a := &Authenticator{shared: sl}
	now := time.Now()
	a.allow(context.Background(), limitKeyAlias, "k", 5, now)
	a.allow(context.Background(), limitKeyOwner, "owner", 5, now)
	if want := []string{"rl:key:k", "rl:owner:owner"}; len(rl.keys) != 2 || rl.keys[0] != want[0] || rl.keys[1] != want[1] {
		t.Errorf("keys %q, want %q", rl.keys, want)
	}
	if rl.limits[0] != (state.Limit{Events: 5, Per: time.Minute, Burst: 5}) {
		t.Errorf("limit %+v", rl.limits[0])
	}
}

type spyLimiter struct {
	keys   []string
	limits []state.Limit
}

func (s *spyLimiter) Allow(_ context.Context, key string, l state.Limit) (state.Decision, error) {
	s.keys = append(s.keys, key)
	s.limits = append(s.limits, l)
	return state.Decision{Allowed: true}, nil
}

// BenchmarkSharedRateLimit is the cost of a rate-limited key's request
// with the limit in Redis (one round trip on a unix socket), beside the
// same request limited in process.
func BenchmarkSharedRateLimit(b *testing.B) {
	srv := redistest.New(b)
	s := openStore(b)
	secret := addKey(b, s, store.Key{Alias: "k", RateLimitRPM: 1 << 30})
	for _, bb := range []struct {
		name string
		opts Options
	}{
		{"local", Options{Keys: s, CacheTTL: 1 << 62}},
		{"redis", Options{Keys: s, CacheTTL: 1 << 62, RateLimiter: openRedis(b, srv)}},
	} {
		a := newAuth(b, bb.opts)
		r := request(remote, HeaderAPIKey, secret)
		mustAuth(b, a, r)
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, f := a.Authenticate(r); f != nil {
					b.Fatal(f.Status)
				}
			}
		})
	}
}
