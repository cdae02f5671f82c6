package gateway

import (
	"context"
	"sync/atomic"
	"time"
)

// How often, and how patiently, the shared state backend is asked whether
// it answers, for /readyz and mcpgate_state_up (and, beside it, how many
// replicas the fleet registry lists, mcpgate_fleet_replicas).
const (
	stateProbeInterval = time.Second
	stateProbeTimeout  = 500 * time.Millisecond
)

// StateChecker is the shared state backend as readiness sees it (SPEC
// S15). Ping must be safe for concurrent use and honour its context.
type StateChecker interface {
	Name() string
	Ping(ctx context.Context) error
}

// stateHealth is the last probe's outcome. A replica whose state backend
// does not answer still serves (rate limits fall back to limit/N, sessions
// open from their sealed ids), so it stays ready: /readyz reports the
// backend "degraded" with a 200, for a platform engineer to see and alert
// on, without a load balancer taking every replica out of rotation at
// once during a Redis outage.
type stateHealth struct {
	up      atomic.Bool
	since   atomic.Int64 // unix nanoseconds of the last change
	lastErr atomic.Pointer[string]
}

// probeState asks the backend once and records the answer (and its
// change) in the health, the gauge and the log.
func (g *Gateway) probeState(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, stateProbeTimeout)
	err := g.stateCheck.Ping(pctx)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: not the backend's fault
	}
	up := err == nil
	h := &g.stateHealth
	if err != nil {
		msg := err.Error()
		h.lastErr.Store(&msg)
		// Announcements published meanwhile reach nobody: until the
		// followers resynchronised after the outage, what they keep in
		// step is checked against the store before it is relied on
		// (unheard.go).
		g.heard.Doubt()
	}
	first := h.since.Load() == 0
	if first || h.up.Load() != up {
		h.up.Store(up)
		h.since.Store(g.now().UnixNano())
		switch {
		case !up:
			g.log.Warn("shared state unreachable: readiness reports it degraded", "driver", g.stateCheck.Name(), "error", err)
		case !first:
			g.log.Info("shared state answers again", "driver", g.stateCheck.Name())
			// The followers subscribe afresh and resynchronise.
			g.heard.Recovered()
		}
	}
	g.metrics.SetStateUp(up)
	// The registry's count as this replica sees it, beside the probe
	// that says whether it can still be read: an operator sees a fleet
	// whose replicas undercount each other (and so would divide a rate
	// limit by too few during an outage).
	if n := g.FleetSize(); n > 0 {
		g.metrics.SetFleetReplicas(n)
	}
}

// watchState probes the backend every stateProbeInterval until Shutdown,
// in a goroutine of g.bg.
func (g *Gateway) watchState() {
	t := time.NewTicker(stateProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-g.bgCtx.Done():
			return
		case <-t.C:
			g.probeState(g.bgCtx)
		}
	}
}

// stateReport is the "state" entry of /readyz; nil without a checker.
func (g *Gateway) stateReport() map[string]any {
	st := g.SharedState()
	if st == nil {
		return nil
	}
	r := map[string]any{"driver": st.Driver, "status": st.Status, "since": st.Since}
	if st.LastError != "" {
		r["last_error"] = st.LastError
	}
	return r
}

// SharedState is the shared state backend's health as this replica's
// probe last found it, and the fleet's size as it last read the replica
// registry: what an administrator sees of them on the console.
type SharedState struct {
	Driver string `json:"driver"`
	// Status is "ok" or "degraded" (the backend did not answer the
	// last probe; the replica still serves, see stateHealth).
	Status    string `json:"status"`
	Since     string `json:"since"` // RFC 3339: the last change of Status
	LastError string `json:"last_error,omitempty"`
	// Replicas is how many replicas the registry listed, this one
	// included; 0 outside a fleet.
	Replicas int `json:"replicas,omitempty"`
}

// SharedState reports the shared state backend; nil without one that is
// probed (the memory driver, a single process).
func (g *Gateway) SharedState() *SharedState {
	if g.stateCheck == nil {
		return nil
	}
	h := &g.stateHealth
	st := &SharedState{Driver: g.stateCheck.Name(), Status: "ok",
		Since: time.Unix(0, h.since.Load()).UTC().Format(time.RFC3339), Replicas: g.FleetSize()}
	if !h.up.Load() {
		st.Status = "degraded"
		if e := h.lastErr.Load(); e != nil {
			st.LastError = *e
		}
	}
	return st
}
