package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
)

// build makes the backend state: names, closes it with the rest, and an
// unreachable Redis is a warning, not a failure to start.
func TestBuildState(t *testing.T) {
	srv := redistest.New(t)
	down := "unix://:s3cr3t@" + filepath.Join(t.TempDir(), "nothing.sock")
	for _, tc := range []struct {
		name   string
		state  config.State
		driver string
		logs   string
	}{
		{"default", config.State{}, "memory", ""},
		{"redis", config.State{Driver: config.StateRedis, URL: srv.URL()}, "redis", `msg="shared state" driver=redis`},
		{"redis down", config.State{Driver: config.StateRedis, URL: down}, "redis", "shared state unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs lockedBuffer // the admin follower started by build logs while the test reads
			cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__", State: tc.state}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			stk, err := build(t.Context(), cfg, slog.New(slog.NewTextHandler(&logs, nil)), cfg.Listen)
			if err != nil {
				t.Fatal(err)
			}
			if got := stk.state.Name(); got != tc.driver {
				t.Errorf("driver %s, want %s", got, tc.driver)
			}
			if !strings.Contains(logs.String(), tc.logs) || strings.Contains(logs.String(), "s3cr3t") {
				t.Errorf("logs %q, want %q and no password", logs.String(), tc.logs)
			}
			if err := stk.close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := stk.state.Ping(context.Background()); err == nil {
				t.Error("the state backend still answers after close")
			}
		})
	}
}

// A URL the config accepts but go-redis does not (an unknown query option)
// fails the start, naming the field, never the URL.
func TestBuildStateBadURL(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__",
		State: config.State{Driver: config.StateRedis, URL: "redis://:s3cr3t@localhost:6379/0?no_such_option=1"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := build(ctx, cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err == nil || !strings.Contains(err.Error(), "state.url") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("build: %v, want a state.url error without the URL", err)
	}
}

// With the redis driver two stacks enforce one rate limit; while Redis is
// down each enforces limit/state.replicas and the metric says so. With
// the memory driver each process keeps its own buckets.
func TestBuildStateRateLimits(t *testing.T) {
	srv := redistest.New(t)
	const secret = "mcpg_rate-limit-wiring-secret"
	newStack := func(t *testing.T, state string) *stack {
		return buildDoc(t, "listen: 127.0.0.1:0\ndata_dir: "+t.TempDir()+"\n"+
			"auth:\n  keys:\n    - {alias: k, key: "+secret+", rate_limit_rpm: 4}\n"+state)
	}
	allowed := func(stks ...*stack) int {
		n := 0
		for i := range 8 {
			r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
			r.Header.Set(callers.HeaderAPIKey, secret)
			if _, f := stks[i%len(stks)].auth.Authenticate(r); f == nil {
				n++
			} else if f.Status != http.StatusTooManyRequests {
				t.Fatalf("status %d", f.Status)
			}
		}
		return n
	}
	degraded := func(stk *stack) string { return metricLine(stk, "mcpgate_ratelimit_degraded") }

	t.Run("memory", func(t *testing.T) {
		if got := allowed(newStack(t, ""), newStack(t, "")); got != 8 {
			t.Errorf("memory driver, two processes: %d of 8 allowed, want 8 (4 each)", got)
		}
	})
	redisState := "state: {driver: redis, url: '" + srv.URL() + "', replicas: 2}\n"
	a, b := newStack(t, redisState), newStack(t, redisState)
	if got := allowed(a, b); got != 4 {
		t.Errorf("redis driver, two replicas: %d of 8 allowed, want 4", got)
	}
	if got := degraded(a); got != "mcpgate_ratelimit_degraded 0" {
		t.Errorf("Redis up: %q", got)
	}
	srv.Stop()
	if got := allowed(a); got != 2 {
		t.Errorf("Redis down: %d of 8 allowed, want 2 (4/2 replicas)", got)
	}
	if got := degraded(a); got != "mcpgate_ratelimit_degraded 1" {
		t.Errorf("Redis down: %q", got)
	}
}

// In a fleet (session keys, redis driver) the rate limits' fallback
// divides by the replicas the registry last listed, not by the static
// state.replicas: three live replicas with replicas: 1 configured each
// allow a third of the limit while Redis is down.
func TestBuildFleetSizeDividesTheFallback(t *testing.T) {
	srv := redistest.New(t)
	var stks []*stack
	for i := range 3 {
		stks = append(stks, startFleetReplica(t, srv.URL(), 1, i+1))
	}
	deadline := time.Now().Add(5 * time.Second)
	for stks[0].gw.FleetSize() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the first replica sees %d live replicas, want 3", stks[0].gw.FleetSize())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The count shows in the replica's metrics (its state probe, every
	// second, reads it).
	for want := "mcpgate_fleet_replicas 3"; metricLine(stks[0], "mcpgate_fleet_replicas") != want; {
		if time.Now().After(deadline.Add(3 * time.Second)) {
			t.Fatalf("%q, want %q", metricLine(stks[0], "mcpgate_fleet_replicas"), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.Stop()
	n := 0
	for range 8 {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		r.Header.Set(callers.HeaderAPIKey, fleetKeySecret)
		if _, f := stks[0].auth.Authenticate(r); f == nil {
			n++
		}
	}
	if n != 2 {
		t.Errorf("Redis down, three live replicas: %d of 8 allowed, want 2 (6/3)", n)
	}
}

// The gateway gets the shared state for its sessions only in fleet mode:
// without session keys a single process keeps its streams and
// cancellation local, whatever the state driver.
func TestFleetStateOnlyWithSessionKeys(t *testing.T) {
	sb := state.NewMemory(state.MemoryOptions{})
	defer sb.Close()
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))
	for _, tc := range []struct {
		name  string
		fleet *config.Fleet
		want  bool
	}{
		{"no fleet block", nil, false},
		{"no keys", &config.Fleet{Advertise: "http://10.0.0.5:4000"}, false},
		{"keys", &config.Fleet{SessionKeys: []string{key}}, true},
	} {
		if got := fleetState(&config.Config{Fleet: tc.fleet}, sb) != nil; got != tc.want {
			t.Errorf("%s: shared state given %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A registry listing with fewer replicas than state.replicas does not
// raise each replica's share of a limit: the first replica of a fleet
// that starts together, or the first to renew after Redis came back
// empty, lists itself alone until its next heartbeat, and Redis going
// down before then froze that count. Here a replica alone in the registry
// with replicas: 3 configured allows a third of the limit, not all of it.
func TestBuildFleetSizeUnderStateReplicas(t *testing.T) {
	srv := redistest.New(t)
	stk := startFleetReplica(t, srv.URL(), 3, 1)
	if n := stk.gw.FleetSize(); n != 1 {
		t.Fatalf("the replica sees %d live replicas, want 1 (itself)", n)
	}
	srv.Stop()
	n := 0
	for range 8 {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		r.Header.Set(callers.HeaderAPIKey, fleetKeySecret)
		if _, f := stk.auth.Authenticate(r); f == nil {
			n++
		}
	}
	if n != 2 {
		t.Errorf("Redis down, one replica listed, replicas: 3: %d of 8 allowed, want 2 (6/3)", n)
	}
}

// fleetKeySecret is the key startFleetReplica's replicas accept, limited
// to 6 requests a minute.
const fleetKeySecret = "mcpg_fleet-size-secret"

// startFleetReplica builds and starts a fleet replica on Redis at url
// (state.replicas: replicas), advertised as 10.0.0.<n>, with the one key
// fleetKeySecret; it stops with t.
func startFleetReplica(t *testing.T, url string, replicas, n int) *stack {
	t.Helper()
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32))
	doc := "listen: 127.0.0.1:0\ndata_dir: " + t.TempDir() + "\n" +
		"auth:\n  keys:\n    - {alias: k, key: " + fleetKeySecret + ", rate_limit_rpm: 6}\n" +
		"state: {driver: redis, url: '" + url + "', replicas: " + fmt.Sprint(replicas) + "}\n" +
		"fleet: {session_keys: ['" + key + "'], advertise: 'http://10.0.0." + fmt.Sprint(n) + ":4000'}\n"
	stk := buildDoc(t, doc)
	stk.gw.Start(t.Context())
	return stk
}

// buildDoc builds the stack of the config doc (no environment); it is
// closed with t.
func buildDoc(t *testing.T, doc string) *stack {
	t.Helper()
	cfg, err := config.Parse([]byte(doc), "", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	stk, err := build(t.Context(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stk.close(context.Background()) })
	return stk
}

// metricLine is the line of stk's /metrics for the unlabelled metric
// name ("" when absent).
func metricLine(stk *stack, name string) string {
	w := httptest.NewRecorder()
	stk.metrics.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(w.Body.String()) {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
