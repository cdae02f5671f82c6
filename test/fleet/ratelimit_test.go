package fleet

import (
	"net/http"
	"testing"
)

// fireLimited sends n stateless requests with the limited key through the
// balancer, one after the other (so round robin over the replicas), and
// returns how many were allowed (200) and refused (429); any other answer
// fails t.
func fireLimited(t *testing.T, f *Fleet, n int) (allowed, refused int) {
	t.Helper()
	c := statelessClient(http.DefaultClient, f.LB.URL+"/mcp", limitedKey)
	for range n {
		rep, err := c.Request(t.Context(), "tools/list", nil)
		switch {
		case err != nil:
			t.Fatalf("limited request: %v (balancer log: %s)", err, f.LB.Errors())
		case rep.Status == http.StatusOK:
			allowed++
		case rep.Status == http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("limited request: %v", rep)
		}
	}
	return allowed, refused
}

// localDecisions sums mcpgate_ratelimit_local_decisions_total over the
// replicas.
func localDecisions(t *testing.T, f *Fleet) float64 {
	t.Helper()
	var sum float64
	for _, r := range f.Replicas {
		v, err := metricFloat(r.Metric(t, "mcpgate_ratelimit_local_decisions_total"))
		if err != nil {
			t.Fatalf("replica %s: mcpgate_ratelimit_local_decisions_total: %v", r.Name, err)
		}
		sum += v
	}
	return sum
}

// testGlobalRateLimit: scenario 5. A key limited to limitedRPM requests a
// minute, hit round robin on three replicas: the fleet allows the limit
// (within one token per replica for refill and rounding), not three times
// it, and every decision was the shared one (no replica-local fallback).
func testGlobalRateLimit(t *testing.T, f *Fleet) {
	before := localDecisions(t, f)
	f.LB.ResetCounts()
	n := 3 * limitedRPM
	allowed, refused := fireLimited(t, f, n)
	t.Logf("%d requests round robin on %d replicas, limit %d/min: %d allowed, %d refused", n, len(f.Replicas), limitedRPM, allowed, refused)
	if allowed < limitedRPM || allowed > limitedRPM+len(f.Replicas) {
		t.Errorf("%d of %d allowed; want %d to %d (the limit, plus at most one token per replica)", allowed, n, limitedRPM, limitedRPM+len(f.Replicas))
	}
	served, _ := f.LB.Counts()
	for _, r := range f.Replicas {
		if served[r.Name] != int64(limitedRPM) {
			t.Errorf("replica %s answered %d of the requests, want %d (round robin)", r.Name, served[r.Name], limitedRPM)
		}
		if got := r.Metric(t, "mcpgate_ratelimit_degraded"); got != "0" {
			t.Errorf("replica %s: mcpgate_ratelimit_degraded %q, want 0", r.Name, got)
		}
	}
	if after := localDecisions(t, f); after != before {
		t.Errorf("%v rate-limit decisions were replica-local; want all global", after-before)
	}
}
