package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/metrics"
)

// fakeState is a state backend whose Ping answers what down says.
type fakeState struct{ down atomic.Bool }

func (f *fakeState) Name() string { return "fake" }
func (f *fakeState) Ping(context.Context) error {
	if f.down.Load() {
		return errors.New("fake: connection refused")
	}
	return nil
}

// TestReadyStateDegraded: /readyz reports the shared state backend, stays
// 200 while it is down (the replica still serves) with status degraded,
// and mcpgate_state_up follows.
func TestReadyStateDegraded(t *testing.T) {
	st := &fakeState{}
	m := metrics.New()
	const master = "mk_state_health_master_key_0123456789"
	auth := callers.New(callers.Options{MasterKey: master, Logger: testLogger(t)})
	t.Cleanup(func() { auth.Close() })
	g, gw := startGatewayWith(t, Options{Config: &config.Config{}, StateHealth: st, Metrics: m, MetricsOnMain: true, Authenticator: auth})
	// The details are an administrator's (an anonymous probe's view is
	// TestReadyzAnonymous's).
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, gw.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+master)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	gauge := func() string {
		_, body := get("/metrics")
		for line := range strings.Lines(body) {
			if strings.HasPrefix(line, "mcpgate_state_up ") {
				return strings.TrimSpace(line)
			}
		}
		return ""
	}
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, `"state":{"driver":"fake","since":`) || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("/readyz, state up: %d %s", code, body)
	}
	if got := gauge(); got != "mcpgate_state_up 1" {
		t.Errorf("state up: %q", got)
	}
	st.down.Store(true)
	g.probeState(t.Context())
	code, body := get("/readyz")
	if code != 200 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, `"last_error":"fake: connection refused"`) || !strings.Contains(body, `"ready":true`) {
		t.Errorf("/readyz, state down: %d %s", code, body)
	}
	if got := gauge(); got != "mcpgate_state_up 0" {
		t.Errorf("state down: %q", got)
	}
	// What the console's overview shows (GET /admin/v1/stats).
	if ss := g.SharedState(); ss == nil || ss.Driver != "fake" || ss.Status != "degraded" || ss.LastError != "fake: connection refused" || ss.Since == "" || ss.Replicas != 0 {
		t.Errorf("SharedState, state down: %+v", ss)
	}
	st.down.Store(false)
	g.probeState(t.Context())
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, `"status":"ok"`) || strings.Contains(body, "last_error") {
		t.Errorf("/readyz, state back: %d %s", code, body)
	}
	if got := gauge(); got != "mcpgate_state_up 1" {
		t.Errorf("state back: %q", got)
	}
	if ss := g.SharedState(); ss == nil || ss.Status != "ok" || ss.LastError != "" {
		t.Errorf("SharedState, state back: %+v", ss)
	}
}
