package chaos

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"
)

// TestHostileUpstreams (issue 10, chaos 3; SPEC C6.2, C6.5, S23): three
// upstreams that misbehave inside tools/call, each behind a 2 s timeout.
//
//   - big answers a 100 MiB JSON body: invalid_response naming the 16 MiB
//     limit (limits.max_upstream_message), well before the timeout, with
//     gateway RSS growing by less than 100 MiB;
//   - sseforever streams SSE events forever and never replies: timeout,
//     at the 2 s budget (events must not keep the call alive);
//   - half sends half of its body and stalls: timeout at the 2 s budget;
//   - bigline, over stdio, writes a 100 MiB line: invalid_response naming
//     the 16 MiB limit, at once (the limit holds on every transport).
//
// Each has a gateway of its own (so its RSS is its own), shared with a
// well-behaved upstream. Each is tried twice, then the same upstream's
// well-behaved tool is called: it must succeed (the upstream session is
// usable, or was re-established when its stream no longer was). The
// well-behaved upstream's callers see no error and no call slower than
// 500 ms meanwhile; goroutines and descriptors end at their baseline.
func TestHostileUpstreams(t *testing.T) {
	const budget = 2 * time.Second
	limitRE := regexp.MustCompile(`(?i)16 ?MiB|16777216`)
	steady := startUpstream(t, "", "normal")
	for _, tc := range []struct {
		name      string
		transport string // http or stdio
		mode      string // chaosup -mode
		fault     string
		min, max  time.Duration
		message   *regexp.Regexp
		budgetFor string
		rssBound  bool // RSS growth must stay under 100 MiB
	}{
		{"big", "http", "big", "invalid_response", 0, budget, limitRE, "a fast refusal", true},
		{"forever", "http", "sseforever", "timeout", budget - 100*time.Millisecond, budget + time.Second, nil, "the 2s timeout", false},
		{"half", "http", "half", "timeout", budget - 100*time.Millisecond, budget + time.Second, nil, "the 2s timeout", false},
		{"bigline", "stdio", "big", "invalid_response", 0, budget, limitRE, "a fast refusal", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entry := stdioServer(tc.name, "2s", "-mode", tc.mode)
			if tc.transport == "http" {
				entry = httpServer(tc.name, startUpstream(t, "", tc.mode).url(), "2s")
			}
			dataDir := t.TempDir()
			g := startGateway(t, gatewayConfig(dataDir, entry+httpServer("steady", steady.url(), "5s")), dataDir, tc.name, "steady")
			steadyClients := g.mustConnect(t, "/mcp", 2)
			hostile := g.mustConnect(t, "/mcp", 1)[0]
			base := g.baseline(t)

			rec := &recorder{}
			lctx, lcancel := context.WithCancel(context.Background())
			var lwg sync.WaitGroup
			lwg.Go(func() { work(lctx, steadyClients, "steady", "steady__fast", nil, 5*time.Millisecond, 0, rec) })
			// RSS, every 10 ms, while the hostile calls run.
			var peak float64
			sctx, scancel := context.WithCancel(context.Background())
			var swg sync.WaitGroup
			swg.Go(func() {
				for sctx.Err() == nil {
					peak = max(peak, rssMiB(g.pid))
					time.Sleep(10 * time.Millisecond)
				}
			})

			tool := tc.name + "__fast"
			for attempt := 1; attempt <= 2; attempt++ {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				o := hostile.call(ctx, tool, nil)
				cancel()
				t.Logf("%s (attempt %d): %v", tool, attempt, o)
				t.Logf("FIGURE hostile %s attempt %d: %s in %d ms", tc.name, attempt, o.fault(), o.Dur.Milliseconds())
				switch {
				case o.ok():
					t.Errorf("%s: a result, want fault %s", tool, tc.fault)
				case o.fault() != tc.fault:
					t.Errorf("%s: %v, want fault %s", tool, o, tc.fault)
				case o.Dur < tc.min || o.Dur > tc.max:
					t.Errorf("%s: ended after %v, want %v..%v (%s)", tool, o.Dur, tc.min, tc.max, tc.budgetFor)
				case tc.message != nil && !tc.message.MatchString(o.Err.Message):
					t.Errorf("%s: message %q does not name the limit (%v)", tool, o.Err.Message, tc.message)
				}
			}
			scancel()
			swg.Wait()
			// The same upstream, well-behaved: usable after the fault. A
			// session that must be re-established may take its reconnect
			// backoff: a few tries within 3 s.
			slow := tc.name + "__slow"
			var o outcome
			for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				o = hostile.call(ctx, slow, map[string]any{"ms": 1})
				cancel()
				if o.ok() || time.Now().After(deadline) {
					break
				}
			}
			t.Logf("%s after the fault: %v", slow, o)
			if !o.ok() {
				t.Errorf("%s after the fault: %v, want a result (the upstream is usable again)", slow, o)
			}
			lcancel()
			lwg.Wait()

			var slowest time.Duration
			n := 0
			for _, r := range rec.all() {
				n++
				slowest = max(slowest, r.Dur)
				if !r.ok() {
					t.Errorf("steady caller during the fault: %v", r)
				}
			}
			if slowest > 500*time.Millisecond {
				t.Errorf("slowest steady call %v during the fault, want under 500ms", slowest)
			}
			growth := peak - base.RSS
			t.Logf("%d steady calls, slowest %v; RSS peak %.1f MiB (baseline %.1f, growth %.1f MiB)", n, slowest, peak, base.RSS, growth)
			t.Logf("FIGURE hostile %s RSS growth %.1f MiB", tc.name, growth)
			if tc.rssBound && growth >= 100 {
				t.Errorf("gateway RSS grew by %.1f MiB refusing a 100 MiB reply, want under 100 MiB", growth)
			}
			g.checkBaseline(t, base)
		})
	}
}
