//go:build soak

package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestSoak is the soak benchmark (issue 10; bench/soak.sh, not in CI):
// SOAK_MINUTES (default 10) of mixed load on one gateway in front of a
// steady and a restarted HTTP upstream and a stdio upstream: tool calls,
// tools/list, sessions opened and closed, long-lived and short-lived GET
// streams, and every minute the HTTP upstream killed and restarted and
// the stdio child SIGKILLed. At the end of each minute the load pauses,
// in-flight work finishes, and the gateway's RSS, goroutines and open
// descriptors are printed. It fails if any of them grew by more than 10%
// from minute 2 to the last minute, or if a call to the steady upstream
// failed.
func TestSoak(t *testing.T) {
	minutes := 10
	if v := os.Getenv("SOAK_MINUTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("SOAK_MINUTES=%q: want a whole number >= 2", v)
		}
		minutes = n
	}
	minute := time.Minute
	if v := os.Getenv("SOAK_MINUTE"); v != "" { // shorter "minutes", to try the harness
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK_MINUTE=%q: %v", v, err)
		}
		minute = d
	}

	flakyAddr := freeAddr(t)
	flaky := startUpstream(t, flakyAddr, "normal")
	steady := startUpstream(t, "", "normal")
	dataDir := t.TempDir()
	g := startGateway(t, gatewayConfig(dataDir,
		httpServer("steady", steady.url(), "5s")+httpServer("flaky", flaky.url(), "5s")+stdioServer("proc", "5s")),
		dataDir, "steady", "flaky", "proc")

	// gate pauses the load for a sample: workers hold it for reading
	// around each operation.
	var gate sync.RWMutex
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var calls, steadyErrs, flakyErrs, procErrs, lists, listErrs, churned, streamsOpened, streamErrs atomic.Int64
	pause := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}

	// Tool calls: 4 workers over the three servers.
	tools := []struct{ server, tool string }{{"steady", "steady__fast"}, {"flaky", "flaky__fast"}, {"proc", "proc__slow"}}
	for i, c := range g.mustConnect(t, "/mcp", 4) {
		wg.Go(func() {
			for n := i; ctx.Err() == nil; n++ {
				tl := tools[n%len(tools)]
				gate.RLock()
				cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
				o := c.call(cctx, tl.tool, map[string]any{"ms": 5})
				ccancel()
				gate.RUnlock()
				calls.Add(1)
				if !o.ok() {
					switch tl.server {
					case "steady":
						steadyErrs.Add(1)
						t.Logf("steady call failed: %v", o)
					case "flaky":
						flakyErrs.Add(1)
					case "proc":
						procErrs.Add(1)
					}
				}
				pause(10 * time.Millisecond)
			}
		})
	}
	// Lists.
	lister := g.mustConnect(t, "/mcp", 1)[0]
	wg.Go(func() {
		for ctx.Err() == nil {
			gate.RLock()
			lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
			o := lister.request(lctx, "tools/list", map[string]any{}, false)
			lcancel()
			gate.RUnlock()
			lists.Add(1)
			if !o.ok() {
				listErrs.Add(1)
			}
			pause(100 * time.Millisecond)
		}
	})
	// Sessions opened, used and closed.
	wg.Go(func() {
		for ctx.Err() == nil {
			gate.RLock()
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			if c, err := g.connect(sctx, "/mcp"); err == nil {
				c.call(sctx, "steady__fast", nil)
				c.close(sctx)
				churned.Add(1)
			}
			scancel()
			gate.RUnlock()
			pause(50 * time.Millisecond)
		}
	})
	// GET streams: 20 held for the whole run, and one at a time opened
	// on a new session, held 2 s and closed with its session.
	streamHC := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1}}
	held := make(chan error, 20)
	for _, c := range g.mustConnect(t, "/mcp", 20) {
		if err := c.stream(ctx, streamHC, held); err != nil {
			t.Fatalf("held GET stream: %v", err)
		}
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			gate.RLock()
			sctx, scancel := context.WithCancel(context.Background())
			if c, err := g.connect(sctx, "/mcp"); err == nil {
				ended := make(chan error, 1)
				if err := c.stream(sctx, streamHC, ended); err != nil {
					streamErrs.Add(1)
				} else {
					streamsOpened.Add(1)
					pause(2 * time.Second)
					scancel()
					<-ended
				}
				cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
				c.close(cctx)
				ccancel()
			}
			scancel()
			gate.RUnlock()
			pause(100 * time.Millisecond)
		}
	})

	type sampleAt struct {
		minute int
		resources
	}
	var samples []sampleAt
	start := time.Now()
	fmt.Printf("soak: %d minutes of %v; load: 4 callers (steady, flaky, proc), tools/list every 100ms, a session opened+closed every 50ms, 20 held GET streams + 1 churned every 2s, restarts every minute\n", minutes, minute)
	for m := 1; m <= minutes; m++ {
		// Mid-minute: the restarts.
		time.Sleep(time.Until(start.Add(time.Duration(m-1)*minute + minute/2)))
		flaky.kill()
		if live, _ := g.upstreamChildren(); len(live) > 0 {
			syscall.Kill(live[0], syscall.SIGKILL)
		}
		time.Sleep(2 * time.Second)
		flaky = startUpstream(t, flakyAddr, "normal")

		// Minute's end: pause, settle, sample.
		time.Sleep(time.Until(start.Add(time.Duration(m) * minute)))
		gate.Lock()
		g.hc.CloseIdleConnections()
		time.Sleep(500 * time.Millisecond)
		r := g.sample(t)
		gate.Unlock()
		samples = append(samples, sampleAt{m, r})
		line := fmt.Sprintf("soak minute %2d: rss=%.1fMiB goroutines=%d fds=%d | calls=%d (errors: steady %d, flaky %d, proc %d) lists=%d (errors %d) sessions churned=%d streams churned=%d (errors %d)",
			m, r.RSS, r.Goroutines, r.FDs, calls.Load(), steadyErrs.Load(), flakyErrs.Load(), procErrs.Load(), lists.Load(), listErrs.Load(), churned.Load(), streamsOpened.Load(), streamErrs.Load())
		fmt.Println(line)
	}
	select {
	case err := <-held:
		t.Errorf("a held GET stream ended during the soak: %v", err)
	default:
	}
	cancel()
	wg.Wait()

	from, to := samples[1], samples[len(samples)-1]
	growth := func(name string, a, b float64) {
		pct := (b - a) / a * 100
		verdict := "ok"
		if pct > 10 {
			verdict = "FAIL"
			t.Errorf("%s grew %.1f%% from minute %d (%.1f) to minute %d (%.1f), want at most 10%%", name, pct, from.minute, a, to.minute, b)
		}
		fmt.Printf("soak %s: minute %d %.1f -> minute %d %.1f (%+.1f%%) %s\n", name, from.minute, a, to.minute, b, pct, verdict)
	}
	growth("rss_mib", from.RSS, to.RSS)
	growth("goroutines", float64(from.Goroutines), float64(to.Goroutines))
	growth("open_fds", float64(from.FDs), float64(to.FDs))
	if n := steadyErrs.Load(); n > 0 {
		t.Errorf("%d calls to the steady upstream failed", n)
	}
}
