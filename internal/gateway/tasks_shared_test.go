package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// TestTasksAcrossReplicas: two replicas sharing one store, one registry
// and one fleet.session_keys: a task made on A is polled, listed, fetched
// and cancelled on B by its owner, and nobody else sees it on B.
func TestTasksAcrossReplicas(t *testing.T) {
	up, srv := startTaskUpstream(t)
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := state.NewMemory(state.MemoryOptions{})
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	bob := keys.add(t, store.Key{Alias: "bob"})
	replica := func(n int) string {
		cfg := &config.Config{Servers: map[string]*config.Server{"plain": srv}, Fleet: &config.Fleet{
			Advertise:   "http://127.0.0.1:" + string(rune('1'+n)) + "9999",
			SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))},
		}}
		_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Config: cfg, Replicas: reg, Tasks: st})
		return gw.URL + "/mcp/plain"
	}
	onA, onB := replica(0), replica(1)
	a, _ := newTaskClient(t, onA, alice, "2025-11-25")
	b, _ := newTaskClient(t, onB, alice, "2025-11-25")
	mallory, _ := newTaskClient(t, onB, bob, "2025-11-25")

	id := a.startTask("slow", "one")["taskId"].(string)
	if s := b.status(id); s != "working" {
		t.Fatalf("B: status %s", s)
	}
	if r := b.call("tasks/list", map[string]any{}); !strings.Contains(string(r.Result), id) {
		t.Fatalf("B: alice lists %s", r.Result)
	}
	wantNotFound(t, "bob get on B", mallory.call("tasks/get", map[string]string{"taskId": id}))
	wantNotFound(t, "bob result on B", mallory.call("tasks/result", map[string]string{"taskId": id}))
	wantNotFound(t, "bob cancel on B", mallory.call("tasks/cancel", map[string]string{"taskId": id}))
	if r := mallory.call("tasks/list", map[string]any{}); string(r.Result) != `{"tasks":[]}` {
		t.Errorf("B: bob lists %s", r.Result)
	}

	// A cancel on B stops the call A runs.
	two := a.startTask("slow", "two")["taskId"].(string)
	if r := b.call("tasks/cancel", map[string]string{"taskId": two}); r.Error != nil || !strings.Contains(string(r.Result), `"status":"cancelled"`) {
		t.Fatalf("B: tasks/cancel %+v %s", r.Error, r.Result)
	}
	select {
	case got := <-up.cancelled:
		if got != "two" {
			t.Fatalf("cancelled upstream call %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("A's upstream call still runs after B cancelled its task")
	}
	if s := a.status(two); s != "cancelled" {
		t.Fatalf("A: status after B's cancel %s", s)
	}

	close(up.release)
	r := b.call("tasks/result", map[string]string{"taskId": id})
	if r.Error != nil || !strings.Contains(string(r.Result), `"text":"slow:one"`) {
		t.Fatalf("B: tasks/result %+v %s", r.Error, r.Result)
	}
	if s := b.status(id); s != "completed" {
		t.Fatalf("B: status after result %s", s)
	}
}

// TestTasksSurviveRestart: one gateway with fleet.session_keys and a
// SQLite store, restarted: the task that finished before is fetched after,
// the task whose call the stop cut short is failed with the reason.
func TestTasksSurviveRestart(t *testing.T) {
	up, srv := startTaskUpstream(t)
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	srv.Name, srv.Timeout, srv.ProtocolVersion = "plain", 20*time.Second, config.ProtocolVersionAuto
	cfg := func() *config.Config {
		return &config.Config{Listen: "127.0.0.1:0", ToolNameSeparator: config.DefaultSeparator,
			Servers: map[string]*config.Server{"plain": srv},
			Fleet:   &config.Fleet{SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32))}}}
	}
	auth := newAuth(t, keys, nil)

	first := New(Options{Authenticator: auth, Config: cfg(), Tasks: st, Logger: testLogger(t), Version: "test"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first.Start(ctx)
	ts := httptest.NewServer(first)
	c, _ := newTaskClient(t, ts.URL+"/mcp/plain", alice, "2025-11-25")
	done := c.startTask("broken", "x")["taskId"].(string)
	if r := c.call("tasks/result", map[string]string{"taskId": done}); r.Error != nil {
		t.Fatalf("tasks/result before the restart: %+v", r.Error)
	}
	running := c.startTask("slow", "cut")["taskId"].(string)
	// The task's call runs in the background: the stop must find it
	// running upstream, not cancel it before it is sent.
	for started := false; !started; {
		select {
		case got := <-up.started:
			started = got == "cut"
		case <-time.After(10 * time.Second):
			t.Fatal("the task's call never reached the upstream")
		}
	}
	ts.CloseClientConnections()
	ts.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := first.Close(cctx); err != nil {
		t.Logf("close: %v", err)
	}
	select {
	case <-up.cancelled:
	case <-time.After(10 * time.Second):
		t.Error("the running call was not cancelled by the stop")
	}

	_, gw := startGatewayWith(t, Options{Authenticator: auth, Config: cfg(), Tasks: st})
	again, _ := newTaskClient(t, gw.URL+"/mcp/plain", alice, "2025-11-25")
	if r := again.call("tasks/result", map[string]string{"taskId": done}); r.Error != nil || !strings.Contains(string(r.Result), `"it broke"`) {
		t.Fatalf("tasks/result after the restart: %+v %s", r.Error, r.Result)
	}
	r := again.call("tasks/get", map[string]string{"taskId": running})
	if r.Error != nil || !strings.Contains(string(r.Result), `"status":"failed"`) || !strings.Contains(string(r.Result), "replica running this task stopped") {
		t.Fatalf("the cut task after the restart: %+v %s", r.Error, r.Result)
	}
}
