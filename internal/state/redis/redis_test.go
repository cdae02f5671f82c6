package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/redis"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/state/statetest"
)

// TestMain runs the tests on a throwaway redis-server, stopped whatever
// happens, and fails the run if a goroutine outlived them.
func TestMain(m *testing.M) {
	os.Exit(redistest.Main(func() int { return statetest.CheckLeaks(m.Run) }))
}

var prefixes atomic.Int64

// open opens a backend on srv under a prefix of its own.
func open(t *testing.T, srv *redistest.Server) *redis.Backend {
	t.Helper()
	b, err := redis.Open(redis.Options{URL: srv.URL(), Prefix: fmt.Sprintf("t%d:", prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestRedis(t *testing.T) {
	srv := redistest.Shared(t)
	statetest.Run(t, statetest.Harness{
		Open: func(t *testing.T) state.Backend { return open(t, srv) },
		Outage: func(t *testing.T) (state.Backend, func(), func()) {
			own := redistest.New(t)
			return open(t, own), own.Stop, func() {
				if err := own.Restart(); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
}

func TestOpenURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"redis://localhost:6379/0", true},
		{"redis://:s3cr3t@redis.internal:6379", true},
		{"rediss://user:s3cr3t@redis.internal", true},
		{"unix:///run/redis/redis.sock", true},
		{"unix://:s3cr3t@/run/redis.sock?db=2", true},
		{"redis://localhost:6379/0?dial_timeout=3s&pool_size=20", true},
		{"http://:s3cr3t@localhost:6379", false},
		{"redis://:s3cr3t@localhost:6379/notadb", false},
		{"redis://:s3cr3t@localhost:6379/?bogus_option=s3cr3t", false},
		{"redis://:s3cr3t@[::1", false},
		{"", false},
	} {
		b, err := redis.Open(redis.Options{URL: tc.url})
		if b != nil {
			b.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("Open(%q): %v, want ok %v", tc.url, err, tc.ok)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Open(%q): the error quotes the URL: %v", tc.url, err)
		}
	}
}

// Two backends under different prefixes on one server share nothing;
// under the same prefix they are two replicas of one fleet.
func TestPrefixes(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := t.Context()
	mk := func(prefix string) *redis.Backend {
		b, err := redis.Open(redis.Options{URL: srv.URL(), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	a1, a2, other := mk("fleet-a:"), mk("fleet-a:"), mk("fleet-b:")
	if err := a1.Terminate(ctx, "s", 60e9); err != nil {
		t.Fatal(err)
	}
	if ok, err := a2.Terminated(ctx, "s"); err != nil || !ok {
		t.Errorf("same prefix: Terminated = %v, %v; want true", ok, err)
	}
	if ok, err := other.Terminated(ctx, "s"); err != nil || ok {
		t.Errorf("other prefix: Terminated = %v, %v; want false", ok, err)
	}
}

// A caller's deadline that passes while Redis does not answer is
// ErrUnavailable (and DeadlineExceeded); a cancelled caller is neither
// unavailable nor a fault of the backend.
func TestContextErrors(t *testing.T) {
	srv := redistest.New(t)
	b := open(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.Terminated(ctx, "s")
	if !errors.Is(err, context.Canceled) || errors.Is(err, state.ErrUnavailable) {
		t.Errorf("cancelled: %v, want context.Canceled and not ErrUnavailable", err)
	}

	// A script spinning for 700ms holds the single-threaded server.
	o, err := goredis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(o)
	defer c.Close()
	spun := make(chan error, 1)
	go func() {
		spun <- c.Eval(context.Background(), `local t = redis.call('TIME')
local t0 = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - t0 > 700000
return 1`, nil).Err()
	}()
	// A real server's script: nothing tells the test it has begun, so
	// the pause stays (the script spins 700ms; 100ms in, it holds the
	// server, and a 100ms deadline still ends well before it finishes).
	time.Sleep(100 * time.Millisecond)
	dctx, dcancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer dcancel()
	_, err = b.Terminated(dctx, "s")
	if !errors.Is(err, state.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if err := <-spun; err != nil {
		t.Fatal(err)
	}
}
