package upstream

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// C11.3: a pooled HTTP session is only an id, so an upstream that went
// away leaves it in place; the calls that cannot reach the upstream must
// still show in its health (down, with the cause), and the first call
// answered after it comes back on the same address marks it ready.
func TestHealthFollowsUnreachableCalls(t *testing.T) {
	f := newStreamableFake(t)
	addr := f.srv.Listener.Addr().String()
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"up": f.server("up")}})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := func() error {
		_, err := m.Call(ctx, "up", mcpwire.MethodToolsCall, json.RawMessage(`{"name":"echo","arguments":{"text":"x"}}`))
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if h := m.Health()["up"]; h.State != HealthReady {
		t.Fatalf("after a call: %+v", h)
	}

	f.srv.Close()
	start := time.Now()
	err := call()
	if KindOf(err) != KindUnreachable {
		t.Fatalf("a call with the upstream gone: %v (kind %s), want unreachable", err, KindOf(err))
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the unreachable call took %v", d)
	}
	h := m.Health()["up"]
	if h.State != HealthDown || h.LastError == "" {
		t.Errorf("health with the upstream gone: %+v, want down with the cause", h)
	}

	// Back on the same address, as a restarted process would be.
	// Go listeners set SO_REUSEADDR, so the port can be taken again at
	// once; failing to is a failure of the test's premise, not a reason
	// to leave the recovery unchecked.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("cannot listen on %s again: %v", addr, err)
	}
	back := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(f.serve)}}
	back.Start()
	defer back.Close()
	if err := call(); err != nil {
		t.Fatalf("a call after the upstream came back: %v", err)
	}
	if h := m.Health()["up"]; h.State != HealthReady || h.LastError != "" {
		t.Errorf("health after the upstream came back: %+v, want ready", h)
	}
}

// A server that keeps failing to connect is down since its first failure,
// not since the latest retry, and its health names the fault class of the
// last error (what the console and /readyz may show of it).
func TestHealthDownSinceTheFirstFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a closed port: every dial is refused
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{
		"gone": {Transport: config.TransportHTTP, URL: "http://" + addr + "/mcp"},
	}})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := func() error {
		_, err := m.Call(ctx, "gone", mcpwire.MethodToolsCall, json.RawMessage(`{"name":"x","arguments":{}}`))
		return err
	}
	if err := call(); Classify(err).Class != FaultUnreachable {
		t.Fatalf("a call to a closed port: %v, want unreachable", err)
	}
	first := m.Health()["gone"]
	if first.State != HealthDown || first.Fault != FaultUnreachable || first.Since.IsZero() {
		t.Fatalf("health after the first failure: %+v, want down, unreachable, with its time", first)
	}
	// Past the first backoff, the next call dials again and fails again.
	time.Sleep(2 * minReconnectBackoff)
	if err := call(); Classify(err).Class != FaultUnreachable {
		t.Fatalf("the second call: %v, want unreachable", err)
	}
	again := m.Health()["gone"]
	if again.State != HealthDown || again.Fault != FaultUnreachable || !again.Since.Equal(first.Since) {
		t.Errorf("health after failing again: %+v, want down since %v (the first failure)", again, first.Since)
	}
}
