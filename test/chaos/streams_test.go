package chaos

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestIdleStreams (issue 10, chaos 4; SPEC S23): 2,000 sessions each hold
// their GET stream open and idle while another caller makes 1,000 calls.
// Every stream opens and stays open, every call succeeds (none slower
// than 1 s), and the cost of an idle stream is reported (RSS, goroutines
// and descriptors per stream). Once the streams are closed and the
// sessions deleted, goroutines and descriptors are back at the baseline.
func TestIdleStreams(t *testing.T) {
	const (
		streams = 2000
		calls   = 1000
		callers = 4
	)
	steady := startUpstream(t, "", "normal")
	dataDir := t.TempDir()
	g := startGateway(t, gatewayConfig(dataDir, httpServer("steady", steady.url(), "5s")), dataDir, "steady")
	caller := g.mustConnect(t, "/mcp", callers)
	warm := &recorder{}
	work(context.Background(), caller, "steady", "steady__fast", nil, 0, 20, warm)
	base := g.baseline(t)

	// The sessions, opened 32 at a time.
	sessions := make([]*client, streams)
	{
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		sem := make(chan struct{}, 32)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		for i := range sessions {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				c, err := g.connect(ctx, "/mcp")
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				sessions[i] = c
			})
		}
		wg.Wait()
		cancel()
		if firstErr != nil {
			t.Fatalf("opening %d sessions: %v", streams, firstErr)
		}
	}
	g.hc.CloseIdleConnections()
	time.Sleep(300 * time.Millisecond)
	withSessions := g.sample(t)

	// The streams: one connection each, on a transport of their own.
	streamHC := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1}}
	sctx, scancel := context.WithCancel(context.Background())
	ended := make(chan error, streams)
	{
		start := time.Now()
		sem := make(chan struct{}, 64)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []error
		for _, c := range sessions {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := c.stream(sctx, streamHC, ended); err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(failed) > 0 {
			scancel()
			t.Fatalf("%d of %d GET streams failed to open; first: %v", len(failed), streams, failed[0])
		}
		t.Logf("%d GET streams open in %v", streams, time.Since(start).Round(time.Millisecond))
	}
	time.Sleep(time.Second) // let allocations settle
	withStreams := g.sample(t)

	// The other caller's 1,000 calls, while every stream is open.
	rec := &recorder{}
	start := time.Now()
	work(context.Background(), caller, "steady", "steady__fast", nil, 0, calls/callers, rec)
	elapsed := time.Since(start)
	var slowest time.Duration
	bad := 0
	for _, r := range rec.all() {
		slowest = max(slowest, r.Dur)
		if !r.ok() {
			bad++
			if bad <= 5 {
				t.Errorf("call with %d idle streams open: %v", streams, r)
			}
		}
	}
	if n := len(rec.all()); n != calls || bad > 0 {
		t.Errorf("%d calls made, %d failed; want %d, 0", n, bad, calls)
	}
	if slowest > time.Second {
		t.Errorf("slowest call %v with %d idle streams open, want under 1s", slowest, streams)
	}
	select {
	case err := <-ended:
		t.Errorf("a GET stream ended while idle: %v", err)
	default:
	}

	perStreamKiB := (withStreams.RSS - withSessions.RSS) * 1024 / streams
	perSessionKiB := (withSessions.RSS - base.RSS) * 1024 / streams
	t.Logf("sessions: %v; with %d idle streams: %v; %d calls in %v (slowest %v)",
		withSessions, streams, withStreams, calls, elapsed.Round(time.Millisecond), slowest.Round(time.Microsecond))
	t.Logf("FIGURE idle-streams: %.1f KiB RSS, %.2f goroutines, %.2f fds per idle GET stream; %.1f KiB RSS per idle session; %d calls, slowest %.1f ms",
		perStreamKiB, float64(withStreams.Goroutines-withSessions.Goroutines)/streams,
		float64(withStreams.FDs-withSessions.FDs)/streams, perSessionKiB, calls, float64(slowest.Microseconds())/1000)

	// Close the streams and the sessions.
	scancel()
	for range streams {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("GET streams did not end within 10s of being closed")
		}
	}
	streamHC.CloseIdleConnections()
	{
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		sem := make(chan struct{}, 32)
		var wg sync.WaitGroup
		for _, c := range sessions {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				_ = c.close(ctx)
			})
		}
		wg.Wait()
		cancel()
	}
	g.checkBaseline(t, base)
}
