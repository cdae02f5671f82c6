package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestStdioUpstreamKilled (issue 10, chaos 2): a stdio upstream is
// SIGKILLed five times under load. Each time the gateway starts a new
// process (with backoff: deaths in quick succession are restarted later
// and later, never in a tight loop), reaps the dead one (no zombie), and
// never runs two copies; calls to it succeed again once it is back; the
// calls that fail around a kill fail fast, as unreachable (99% of them
// under 100 ms, none near the 5 s timeout: under 1 s); an HTTP
// upstream's callers see no error; goroutines and descriptors end at
// their baseline.
func TestStdioUpstreamKilled(t *testing.T) {
	const (
		kills    = 5
		failFast = 100 * time.Millisecond
		// failCeiling bounds every failure; failFast bounds the 99th
		// percentile (as in TestHTTPUpstreamRestart). On a CI machine
		// running the race tests beside this suite, all eight callers'
		// failures of one moment once took 450 ms together (5 or more of
		// 3,706); the steady server's calls of that moment are logged
		// beside them, to tell a stalled machine from a slow failure path.
		failCeiling = time.Second
	)
	steady := startUpstream(t, "", "normal")
	dataDir := t.TempDir()
	g := startGateway(t, gatewayConfig(dataDir, stdioServer("proc", "5s")+httpServer("steady", steady.url(), "5s")),
		dataDir, "proc", "steady")
	procClients := g.mustConnect(t, "/mcp", 8)
	steadyClients := g.mustConnect(t, "/mcp", 2)
	warm := &recorder{}
	wctx, wcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	work(wctx, procClients, "proc", "proc__fast", nil, 0, 0, warm)
	wcancel()
	base := g.baseline(t)

	rec := &recorder{}
	lctx, lcancel := context.WithCancel(context.Background())
	var lwg sync.WaitGroup
	lwg.Go(func() { work(lctx, procClients, "proc", "proc__fast", nil, 5*time.Millisecond, 0, rec) })
	lwg.Go(func() { work(lctx, steadyClients, "steady", "steady__fast", nil, 5*time.Millisecond, 0, rec) })

	var restarts []time.Duration // kill -> new process
	var recoveries []time.Duration
	var problems []string
	for i := range kills {
		time.Sleep(300 * time.Millisecond)
		live, _ := g.upstreamChildren()
		if len(live) != 1 {
			problems = append(problems, fmt.Sprintf("kill %d: %d copies of the stdio upstream running (%v), want 1", i+1, len(live), live))
			if len(live) == 0 {
				break
			}
		}
		victim := live[0]
		killed := time.Now()
		if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", victim, err)
		}
		// The new process, then the first successful call after it.
		var restarted time.Duration
		for deadline := killed.Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			live, _ := g.upstreamChildren()
			if len(live) > 0 && !slices.Contains(live, victim) {
				restarted = time.Since(killed)
				break
			}
		}
		if restarted == 0 {
			problems = append(problems, fmt.Sprintf("kill %d: no new process within 40s", i+1))
			break
		}
		restarts = append(restarts, restarted)
		recovered := time.Duration(0)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if slices.ContainsFunc(rec.all(), func(r record) bool { return r.server == "proc" && r.ok() && r.Start.After(killed.Add(restarted)) }) {
				recovered = time.Since(killed)
				break
			}
		}
		if recovered == 0 {
			problems = append(problems, fmt.Sprintf("kill %d: no successful call within 10s of the restart", i+1))
		}
		recoveries = append(recoveries, recovered)
	}
	// Calls made well after the last restart must all succeed.
	tailFrom := time.Now().Add(500 * time.Millisecond)
	time.Sleep(time.Second)
	lcancel()
	lwg.Wait()

	var steadyN, steadyBad, tailN, slowOrWrong int
	var fails []time.Duration
	var slow, steadyRecs []record
	faults := map[string]int{}
	all := rec.all()
	for _, r := range all {
		switch {
		case r.server == "steady":
			steadyN++
			steadyRecs = append(steadyRecs, r)
			if !r.ok() {
				steadyBad++
				if steadyBad <= 5 {
					problems = append(problems, "steady: "+r.String())
				}
			}
		case r.Start.After(tailFrom):
			tailN++
			if !r.ok() {
				problems = append(problems, "after the last restart: "+r.String())
			}
		case !r.ok():
			faults[r.fault()]++
			fails = append(fails, r.Dur)
			if r.Dur >= failFast {
				slow = append(slow, r)
			}
			if r.fault() != "unreachable" || r.Dur >= failCeiling {
				if slowOrWrong++; slowOrWrong <= 5 {
					problems = append(problems, "around a kill, want a fast unreachable: "+r.String())
				}
			}
		}
	}
	slices.Sort(fails)
	var slowest, p99 time.Duration
	if len(fails) > 0 {
		slowest, p99 = fails[len(fails)-1], fails[len(fails)*99/100]
	}
	t.Logf("kill -> new process: %v; kill -> first success: %v; %d proc calls failed around the kills (by fault %v, p99 %v, slowest %v); %d steady calls",
		restarts, recoveries, len(fails), faults, p99, slowest, steadyN)
	if p99 >= failFast {
		problems = append(problems, fmt.Sprintf("1%% of the failures around the kills took %v or more, want under %v (slowest %v)", p99, failFast, slowest))
	}
	for i, r := range slow {
		if i == 5 {
			t.Logf("... and %d more failures of %v or more", len(slow)-i, failFast)
			break
		}
		// The slowest steady call that overlapped it: as slow means the
		// whole machine (or the gateway) stalled, not the failure path.
		var overlap time.Duration
		for _, s := range steadyRecs {
			if s.Start.Before(r.Start.Add(r.Dur)) && r.Start.Before(s.Start.Add(s.Dur)) {
				overlap = max(overlap, s.Dur)
			}
		}
		t.Logf("slow failure %v (steady calls meanwhile took up to %v): %v", r.Dur.Round(time.Millisecond), overlap.Round(time.Millisecond), r.String())
	}
	t.Logf("FIGURE stdio-kill: restart delays %v, recoveries %v", restarts, recoveries)
	for _, p := range problems {
		t.Error(p)
	}
	if tailN == 0 {
		t.Error("no calls after the last restart")
	}
	// Backoff: deaths in quick succession may not be restarted at once
	// every time (a crash loop would spin); the last restart waits longer
	// than the first.
	if len(restarts) == kills && restarts[kills-1] <= restarts[0] {
		t.Errorf("restart delays %v do not back off", restarts)
	}

	// No zombie, exactly one copy.
	var live, zombies []int
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		live, zombies = g.upstreamChildren()
		if (len(live) == 1 && len(zombies) == 0) || time.Now().After(deadline) {
			break
		}
	}
	if len(zombies) > 0 {
		t.Errorf("zombie children of the gateway: %v", zombies)
	}
	if len(live) != 1 {
		t.Errorf("%d copies of the stdio upstream running (%v), want 1", len(live), live)
	}
	g.checkBaseline(t, base)
}
