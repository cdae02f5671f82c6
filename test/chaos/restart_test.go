package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestHTTPUpstreamRestart (issue 10, chaos 1): an HTTP upstream is
// SIGKILLed under load (16 callers) and comes back on the same port 3 s
// later. During the outage every call to it fails with fault unreachable,
// fast: 99% of them under 100 ms and none near the 5 s timeout (under
// 1 s); within 1 s of its
// return calls succeed again; /readyz shows it ready -> down -> ready; a
// second upstream's callers see no error at all; goroutines and
// descriptors end at their baseline.
func TestHTTPUpstreamRestart(t *testing.T) {
	const (
		callers       = 16
		outage        = 3 * time.Second // a service restart takes seconds
		failFast      = 100 * time.Millisecond
		recoverWithin = time.Second
		// failCeiling bounds every failure: a call that waited for a
		// backoff or a timeout takes a second or more. failFast bounds
		// the 99th percentile, not the maximum: on a loaded CI machine
		// the gateway and this test were once descheduled together for
		// ~150 ms, and all 16 callers' calls of that moment took 160 ms
		// (16 of 2,381), while 99% stayed fast.
		failCeiling = time.Second
	)
	addr := freeAddr(t)
	flaky := startUpstream(t, addr, "normal")
	steady := startUpstream(t, "", "normal")
	dataDir := t.TempDir()
	g := startGateway(t, gatewayConfig(dataDir,
		httpServer("flaky", flaky.url(), "5s")+httpServer("steady", steady.url(), "5s")),
		dataDir, "flaky", "steady")

	flakyClients := g.mustConnect(t, "/mcp", callers)
	steadyClients := g.mustConnect(t, "/mcp", 2)
	// Warm the pools at the load's own concurrency, so the baseline holds
	// the idle upstream connections the load will leave behind.
	warm := &recorder{}
	wctx, wcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	work(wctx, flakyClients, "flaky", "flaky__fast", nil, 0, 0, warm)
	wcancel()
	base := g.baseline(t)

	// Health, every 20 ms, for the whole run.
	var states []string
	hctx, hcancel := context.WithCancel(context.Background())
	var hwg sync.WaitGroup
	hwg.Go(func() {
		for hctx.Err() == nil {
			if h, err := g.health(); err == nil {
				if s := h["flaky"]; len(states) == 0 || states[len(states)-1] != s {
					states = append(states, s)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	rec := &recorder{}
	lctx, lcancel := context.WithCancel(context.Background())
	var lwg sync.WaitGroup
	lwg.Go(func() { work(lctx, flakyClients, "flaky", "flaky__fast", nil, 5*time.Millisecond, 0, rec) })
	lwg.Go(func() { work(lctx, steadyClients, "steady", "steady__fast", nil, 5*time.Millisecond, 0, rec) })

	time.Sleep(time.Second)
	killed := time.Now()
	flaky.kill()
	time.Sleep(outage)
	restarted := time.Now()
	startUpstream(t, addr, "normal") // the same port; stopped by its Cleanup
	back := time.Now()               // it accepts from here
	time.Sleep(2 * time.Second)
	lcancel()
	lwg.Wait()
	time.Sleep(100 * time.Millisecond)
	hcancel()
	hwg.Wait()

	recs := rec.all()
	var during, after, afterOK, steadyN int
	var fails []time.Duration
	var firstOK time.Time
	var bad []string
	for _, r := range recs {
		if r.server == "steady" {
			steadyN++
			if !r.ok() {
				bad = append(bad, "steady: "+r.String())
			}
			continue
		}
		switch {
		case r.Start.After(killed.Add(50*time.Millisecond)) && r.Start.Add(r.Dur).Before(restarted):
			// Wholly inside the outage.
			during++
			if r.ok() || r.fault() != "unreachable" || r.Dur >= failCeiling {
				bad = append(bad, "during the outage: "+r.String())
			}
			fails = append(fails, r.Dur)
		case r.Start.After(back):
			after++
			if r.ok() {
				afterOK++
				if firstOK.IsZero() || r.Start.Before(firstOK) {
					firstOK = r.Start
				}
			} else if r.Start.After(back.Add(recoverWithin)) {
				bad = append(bad, fmt.Sprintf("%v after the return: %v", r.Start.Sub(back).Round(time.Millisecond), r.String()))
			}
		}
	}
	recovery := time.Duration(-1)
	if !firstOK.IsZero() {
		recovery = firstOK.Sub(back)
	}
	slices.Sort(fails)
	var worstFail, p99 time.Duration
	if len(fails) > 0 {
		worstFail, p99 = fails[len(fails)-1], fails[len(fails)*99/100]
	}
	t.Logf("calls: %d during the outage (failures: p99 %v, slowest %v), %d after the return (%d ok), %d to steady; first success %v after the return; health %v",
		during, p99.Round(time.Microsecond), worstFail.Round(time.Microsecond), after, afterOK, steadyN, recovery.Round(time.Millisecond), states)
	t.Logf("FIGURE http-restart: fail-fast p99 %.1f ms, max %.1f ms, recovery %d ms, health %v",
		float64(p99.Microseconds())/1000, float64(worstFail.Microseconds())/1000, recovery.Milliseconds(), states)
	if during < callers {
		t.Errorf("only %d calls inside the outage; the load did not run", during)
	}
	if p99 >= failFast {
		t.Errorf("1%% of the failures during the outage took %v or more, want under %v (slowest %v)", p99, failFast, worstFail)
	}
	if recovery < 0 || recovery > recoverWithin {
		t.Errorf("calls succeeded again %v after the upstream's return, want within %v", recovery, recoverWithin)
	}
	for i, b := range bad {
		if i == 10 {
			t.Errorf("... and %d more", len(bad)-10)
			break
		}
		t.Error(b)
	}
	if !healthWent(states, "ready", "down", "ready") {
		t.Errorf("health of flaky went %v, want ready -> down -> ready", states)
	}
	g.checkBaseline(t, base)
}

// healthWent reports whether states passes through want in order (other
// states may come between).
func healthWent(states []string, want ...string) bool {
	i := 0
	for _, s := range states {
		if i < len(want) && s == want[i] {
			i++
		}
	}
	return i == len(want) && slices.Index(states, want[0]) == 0
}
