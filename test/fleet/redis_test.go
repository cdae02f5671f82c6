package fleet

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// readyState is the "state" entry of a replica's /readyz.
type readyState struct {
	Driver    string `json:"driver"`
	Status    string `json:"status"`
	LastError string `json:"last_error"`
}

// stateOf returns the status of /readyz and its state entry.
func (r *Replica) stateOf(t *testing.T) (int, readyState) {
	t.Helper()
	code, body := r.ReadyDetails()
	var doc struct {
		Ready bool       `json:"ready"`
		State readyState `json:"state"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("replica %s /readyz: %d %q: %v", r.Name, code, body, err)
	}
	return code, doc.State
}

// waitState waits until every replica's /readyz reports the state
// backend's status as want (and answers 200 throughout); it returns how
// long that took.
func waitState(t *testing.T, f *Fleet, want string) time.Duration {
	t.Helper()
	start := time.Now()
	for _, r := range f.Replicas {
		for {
			code, st := r.stateOf(t)
			if code != http.StatusOK {
				t.Fatalf("replica %s /readyz %d while the state is %q: a replica that serves must stay in rotation", r.Name, code, st.Status)
			}
			if st.Status == want {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("replica %s: state %+v after 10s, want %q", r.Name, st, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return time.Since(start)
}

// useSDK makes a few calls on an SDK session and fails t on any error.
func useSDK(t *testing.T, ctx context.Context, cs *mcp.ClientSession, what string) {
	t.Helper()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Errorf("%s: tools/list: %v", what, err)
	}
	for _, title := range []string{"alpha", "beta", "gamma"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__get_note", Arguments: map[string]any{"title": title}})
		if err != nil || res.IsError {
			t.Errorf("%s: get_note %s: %v %+v", what, title, err, res)
		}
	}
}

// testRedisOutage: scenario 7. Redis stops: stateless 2026-07-28 calls and
// sessions opened before keep working, and new sessions open; /readyz stays
// 200 and says "degraded", mcpgate_state_up is 0, rate limits fall back to
// limit/N per replica (mcpgate_ratelimit_degraded 1). Redis back: /readyz
// "ok", the gauge 1, and rate limits are global again.
func testRedisOutage(t *testing.T, f *Fleet) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if d := waitState(t, f, "ok"); d > time.Second {
		t.Logf("state ok on every replica after %v", d)
	}
	before := sdkConnect(t, ctx, f.LB.URL+"/mcp", aliceKey, revStateful)
	useSDK(t, ctx, before, "a session before the outage")
	// Every replica counts the whole fleet, which the fallback below
	// divides the limit by.
	want := strconv.Itoa(len(f.Replicas))
	for _, r := range f.Replicas {
		deadline := time.Now().Add(3 * time.Second)
		for r.Metric(t, "mcpgate_fleet_replicas") != want && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if got := r.Metric(t, "mcpgate_fleet_replicas"); got != want {
			t.Errorf("replica %s: mcpgate_fleet_replicas %q, want %s", r.Name, got, want)
		}
	}

	f.Redis.Stop()
	t.Logf("redis stopped; every replica reported it degraded within %v", waitState(t, f, "degraded"))
	for _, r := range f.Replicas {
		if _, st := r.stateOf(t); st.Driver != "redis" || st.LastError == "" {
			t.Errorf("replica %s /readyz state %+v: want the driver and the error", r.Name, st)
		}
		if got := r.Metric(t, "mcpgate_state_up"); got != "0" {
			t.Errorf("replica %s: mcpgate_state_up %q during the outage, want 0", r.Name, got)
		}
	}
	useSDK(t, ctx, sdkConnect(t, ctx, f.LB.URL+"/mcp", aliceKey, revStateless), "a stateless 2026-07-28 client during the outage")
	useSDK(t, ctx, before, "the session opened before the outage")
	useSDK(t, ctx, sdkConnect(t, ctx, f.LB.URL+"/mcp", aliceKey, revStateful), "a session opened during the outage")

	// Rate limits are replica-local: each replica allows limit/N.
	allowed, refused := fireLimited(t, f, 3*limitedRPM)
	t.Logf("during the outage: %d allowed, %d refused (limit %d/min, state.replicas %d)", allowed, refused, limitedRPM, len(f.Replicas))
	if allowed > limitedRPM {
		t.Errorf("%d allowed during the outage; want at most the limit %d (limit/N on each of N replicas)", allowed, limitedRPM)
	}
	for _, r := range f.Replicas {
		if got := r.Metric(t, "mcpgate_ratelimit_degraded"); got != "1" {
			t.Errorf("replica %s: mcpgate_ratelimit_degraded %q during the outage, want 1", r.Name, got)
		}
	}

	if err := f.Redis.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("redis restarted; every replica reported it ok within %v", waitState(t, f, "ok"))
	for _, r := range f.Replicas {
		if got := r.Metric(t, "mcpgate_state_up"); got != "1" {
			t.Errorf("replica %s: mcpgate_state_up %q after the outage, want 1", r.Name, got)
		}
	}
	// The limiter asks Redis again a second after its last failure; the
	// first limited request after that probes, and decides globally.
	time.Sleep(1100 * time.Millisecond)
	local := localDecisions(t, f)
	allowed, refused = fireLimited(t, f, 3*limitedRPM)
	t.Logf("after the outage: %d allowed, %d refused", allowed, refused)
	if allowed < limitedRPM || allowed > limitedRPM+len(f.Replicas) {
		t.Errorf("after the outage %d allowed; want %d to %d (global again; the restarted Redis is empty)", allowed, limitedRPM, limitedRPM+len(f.Replicas))
	}
	for _, r := range f.Replicas {
		if got := r.Metric(t, "mcpgate_ratelimit_degraded"); got != "0" {
			t.Errorf("replica %s: mcpgate_ratelimit_degraded %q after the outage, want 0", r.Name, got)
		}
	}
	if d := localDecisions(t, f) - local; d != 0 {
		t.Errorf("%v replica-local decisions after Redis came back; want none", d)
	}
	useSDK(t, ctx, before, "the session opened before the outage, after it")
}
