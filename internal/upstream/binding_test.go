package upstream

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

func callPID(t *testing.T, ctx context.Context, m *Manager, server string) string {
	t.Helper()
	res, err := m.Call(ctx, server, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"pid","arguments":{}}`))
	if err != nil {
		t.Fatalf("pid: %v", err)
	}
	pid, err := resultText(res)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// A binding gets a session (on stdio: a process) of its own, used by no
// one else; Unbind ends it and the next call of that binding dials anew.
func TestBindingGetsItsOwnSession(t *testing.T) {
	srv := stdioServer(t, "raw", nil)
	m := managerFor(t, srv)
	bg := context.Background()
	a := WithBinding(bg, Binding{Key: "A", Origin: "party-A"})
	b := WithBinding(bg, Binding{Key: "B", Origin: "party-B"})

	shared := callPID(t, bg, m, srv.Name)
	pidA := callPID(t, a, m, srv.Name)
	pidB := callPID(t, b, m, srv.Name)
	if pidA == shared || pidB == shared || pidA == pidB {
		t.Fatalf("pids shared=%s A=%s B=%s, want three processes", shared, pidA, pidB)
	}
	if again := callPID(t, a, m, srv.Name); again != pidA {
		t.Errorf("A's second call ran in process %s, want its own %s", again, pidA)
	}
	if again := callPID(t, bg, m, srv.Name); again != shared {
		t.Errorf("an unbound call ran in process %s, want the pooled %s", again, shared)
	}
	if h := m.Health()[srv.Name]; h.Sessions != 1 || h.Bound != 2 {
		t.Errorf("health sessions=%d bound=%d, want 1 and 2", h.Sessions, h.Bound)
	}
	if got := m.Bound("A"); len(got) != 1 || got[srv.Name] == nil {
		t.Errorf("Bound(A) = %v, want the one session on %s", got, srv.Name)
	}
	old := m.Bound("A")[srv.Name]
	m.Unbind("A")
	select {
	case <-old.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Unbind did not end A's session")
	}
	if got := m.Bound("A"); len(got) != 0 {
		t.Errorf("Bound(A) after Unbind = %v, want none", got)
	}
	if again := callPID(t, a, m, srv.Name); again == pidA || again == shared || again == pidB {
		t.Errorf("A after Unbind ran in process %s, want a new one (old %s, shared %s, B %s)", again, pidA, shared, pidB)
	}
	if got := callPID(t, b, m, srv.Name); got != pidB {
		t.Errorf("B after A's Unbind ran in %s, want still %s", got, pidB)
	}
}

// A server request a bound session sends while none of its party's calls
// is in flight is given the binding's origin (a pooled session's has
// none, see TestOriginAttributionWithoutStreams).
func TestBoundSessionDefaultOrigin(t *testing.T) {
	f := newStreamableFake(t)
	f.allowGet = true
	h := &recorder{}
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"up": f.server("up")}, Handler: h})
	t.Cleanup(func() { m.Close() })

	ctx := WithBinding(context.Background(), Binding{Key: "A", Origin: "party-A"})
	if _, err := m.Call(ctx, "up", mcpwire.MethodToolsList, nil); err != nil {
		t.Fatal(err)
	}
	// The bound session is the only one: its GET stream carries this.
	f.get <- jsonrpc.Encode(jsonrpc.NewRequest(jsonrpc.StringID("outside-1"), mcpwire.MethodRootsList, json.RawMessage(`{}`)))
	waitFor(t, "the roots/list on the GET stream", func() bool { _, reqs := h.got(); return len(reqs) == 1 })
	if _, reqs := h.got(); reqs[0].origin != "party-A" || reqs[0].method != mcpwire.MethodRootsList {
		t.Errorf("delivered %+v, want roots/list with origin party-A", reqs[0])
	}

}

// On stdio nothing ties a server request to a call: a bound session's
// goes to its party, not to the call that happens to be in flight (which
// may end before the answer).
func TestBoundStdioRequestGoesToTheParty(t *testing.T) {
	srv := stdioServer(t, "raw", nil)
	h := &recorder{}
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{srv.Name: srv}, Handler: h})
	t.Cleanup(func() { m.Close() })
	ctx := WithBinding(WithOrigin(context.Background(), "call-1"), Binding{Key: "A", Origin: "party-A"})
	res, err := m.Call(ctx, srv.Name, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"ask","arguments":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := resultText(res); text != `{"roots":[{"uri":"file:///work"}]}` {
		t.Errorf("ask = %q", text)
	}
	if _, reqs := h.got(); len(reqs) != 1 || reqs[0].origin != "party-A" {
		t.Errorf("delivered %+v, want one roots/list with origin party-A", reqs)
	}
}

// A reusable binding's session that asked its party nothing serves the
// next reusable binding (no new process); one that asked is closed.
func TestReusableBindingKeepsCleanSessions(t *testing.T) {
	srv := stdioServer(t, "raw", nil)
	h := &recorder{}
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{srv.Name: srv}, Handler: h})
	t.Cleanup(func() { m.Close() })
	req := func(key string) context.Context {
		return WithBinding(context.Background(), Binding{Key: key, Origin: "party-" + key, Reusable: true})
	}
	shared := callPID(t, context.Background(), m, srv.Name)
	first := callPID(t, req("R1"), m, srv.Name)
	m.Unbind("R1")
	if again := callPID(t, req("R2"), m, srv.Name); again != first || again == shared {
		t.Errorf("R2 ran in process %s, want R1's clean %s (shared %s)", again, first, shared)
	}
	// R2 is asked for roots: the session now holds R2's answer.
	if _, err := m.Call(req("R2"), srv.Name, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"ask","arguments":{}}`)); err != nil {
		t.Fatal(err)
	}
	if _, reqs := h.got(); len(reqs) != 1 || reqs[0].origin != "party-R2" {
		t.Errorf("delivered %+v, want roots/list to party-R2", reqs)
	}
	m.Unbind("R2")
	third := callPID(t, req("R3"), m, srv.Name)
	if third == first || third == shared {
		t.Errorf("R3 ran in process %s, want a new one (R2's asked, shared %s)", third, shared)
	}
	// R3's clean session is a spare, but not for a binding of a session.
	m.Unbind("R3")
	if got := callPID(t, WithBinding(context.Background(), Binding{Key: "S", Origin: "S"}), m, srv.Name); got == third || got == shared {
		t.Errorf("a non-reusable binding ran in process %s, want its own (spare %s, shared %s)", got, third, shared)
	}
}

// Started runs once per bound session, before any call of the binding
// uses it, even for a call that comes while it runs.
func TestBindingStartedBeforeFirstCall(t *testing.T) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"up": f.server("up")}})
	t.Cleanup(func() { m.Close() })
	var started atomic.Int64
	running, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ctx := WithBinding(context.Background(), Binding{Key: "A", Origin: "A", Started: func(ctx context.Context, server string, s Session) {
		once.Do(func() { close(running) })
		<-release
		started.Add(1)
	}})
	var wg sync.WaitGroup
	var early atomic.Int64
	call := func() {
		if _, err := callEcho(ctx, m, "up", "x"); err != nil {
			t.Error(err)
		}
		if started.Load() == 0 {
			early.Add(1)
		}
	}
	wg.Go(call)
	<-running
	wg.Go(call) // arrives while Started runs
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := started.Load(); n != 1 {
		t.Errorf("Started ran %d times, want once", n)
	}
	if n := early.Load(); n != 0 {
		t.Errorf("%d calls finished before Started had run", n)
	}
	if n := countMethod(f.seen(), mcpwire.MethodInitialize); n != 1 {
		t.Errorf("%d sessions dialled for one binding, want 1", n)
	}
}

// Bound sessions of a server are capped: past the cap the least recently
// used one is closed, and its party gets a new one when it comes back.
func TestBoundSessionsCapped(t *testing.T) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"up": f.server("up")}, MaxBoundPerServer: 2})
	t.Cleanup(func() { m.Close() })
	for _, key := range []string{"A", "B", "C"} {
		if _, err := callEcho(WithBinding(context.Background(), Binding{Key: key, Origin: key}), m, "up", key); err != nil {
			t.Fatal(err)
		}
	}
	if h := m.Health()["up"]; h.Bound != 2 {
		t.Errorf("bound sessions = %d, want the cap, 2", h.Bound)
	}
	if len(m.Bound("A")) != 0 || len(m.Bound("B")) != 1 || len(m.Bound("C")) != 1 {
		t.Errorf("after C: A=%d B=%d C=%d, want A (least recent) closed", len(m.Bound("A")), len(m.Bound("B")), len(m.Bound("C")))
	}
}

// A 2026-07-28 upstream keeps no per-session state: a binding is ignored.
func TestBindingIgnoredForStatelessUpstream(t *testing.T) {
	srv := stdioServer(t, "raw", map[string]string{"UPSTREAM_TEST_VERSION": mcpwire.Rev20251125})
	srv.ProtocolVersion = mcpwire.Rev20260728
	m := managerFor(t, srv)
	_, _ = m.Call(WithBinding(context.Background(), Binding{Key: "A", Origin: "A"}), srv.Name, mcpwire.MethodToolsList, nil)
	m.mu.Lock()
	n := len(m.serverMap()[srv.Name].bound)
	m.mu.Unlock()
	if n != 0 {
		t.Errorf("bound entries of a 2026-07-28 server = %d, want 0", n)
	}
}
