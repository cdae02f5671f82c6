package upstream

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// gatedFake is a streamable fake whose echo calls with text "gated" wait
// until release is closed; entered receives one value per such call as it
// reaches the upstream.
func gatedFake(t *testing.T) (f *streamableFake, entered chan struct{}, release chan struct{}) {
	f = newStreamableFake(t)
	f.jsonReplies = true
	entered, release = make(chan struct{}, 64), make(chan struct{})
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		if m.Method == mcpwire.MethodToolsCall && strings.Contains(string(m.Params), `"gated"`) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return false
	}
	return f, entered, release
}

// TestRetireServerDrains: removing or replacing a server while calls are in
// flight on it lets those calls finish; only then is the old session
// closed, and new calls go to the new configuration (or fail as unknown).
func TestRetireServerDrains(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace bool
	}{{"remove", false}, {"replace", true}} {
		t.Run(tc.name, func(t *testing.T) {
			old, entered, release := gatedFake(t)
			m := NewManager(ManagerOptions{Servers: nil})
			defer m.Close()
			if err := m.AddServer("a", old.server("a")); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const n = 8
			var wg sync.WaitGroup
			errs := make([]error, n)
			got := make([]string, n)
			for i := range n {
				wg.Go(func() {
					got[i], errs[i] = callToolM(ctx, m, "a", "echo", `{"text":"gated"}`)
				})
			}
			for range n {
				<-entered
			}
			fresh := newStreamableFake(t)
			fresh.jsonReplies = true
			if tc.replace {
				if err := m.AddServer("a", fresh.server("a")); err != nil {
					t.Fatal(err)
				}
			} else if !m.RemoveServer("a") {
				t.Fatal("RemoveServer: false")
			}
			// The old session stays open while its calls run.
			if d := len(old.deletedIDs()); d != 0 {
				t.Fatalf("old session deleted with calls in flight")
			}
			after, err := callToolM(ctx, m, "a", "echo", `{"text":"after"}`)
			switch {
			case tc.replace && (err != nil || after != "after"):
				t.Fatalf("call after replace: %q, %v; want it answered by the new server", after, err)
			case !tc.replace && err == nil:
				t.Fatalf("call after remove: %q; want an error", after)
			}
			close(release)
			wg.Wait()
			for i := range n {
				if errs[i] != nil || got[i] != "gated" {
					t.Errorf("call %d in flight across the change: %q, %v", i, got[i], errs[i])
				}
			}
			waitFor(t, "the old session's DELETE", func() bool { return len(old.deletedIDs()) == 1 })
			if tc.replace && len(fresh.seen()) == 0 {
				t.Error("the new server saw no request")
			}
		})
	}
}

// TestRetiredSessionRefusesNewCalls: a request on a retired session is not
// sent (ErrRetired), so Manager.Call can send it elsewhere.
func TestRetiredSessionRefusesNewCalls(t *testing.T) {
	f, entered, release := gatedFake(t)
	s := connect(t, Options{Server: f.server("a")})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { _, err := callTool(ctx, s, "echo", `{"text":"gated"}`); done <- err }()
	<-entered
	retired := make(chan error, 1)
	go func() { retired <- s.retire(nil, 5*time.Second) }()
	waitFor(t, "retiring", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.retiring })
	_, err := callTool(ctx, s, "echo", `{"text":"x"}`)
	var ns *notSentError
	if !errors.Is(err, ErrRetired) || !errors.As(err, &ns) {
		t.Fatalf("call on a retiring session: %v; want a not-sent ErrRetired", err)
	}
	select {
	case <-s.Done():
		t.Fatal("session closed with a call in flight")
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("call in flight: %v", err)
	}
	<-retired
	<-s.Done()
}

func callToolM(ctx context.Context, m *Manager, server, name, args string) (string, error) {
	s, release, err := m.Acquire(ctx, server)
	if err != nil {
		return "", err
	}
	defer release()
	return callTool(ctx, s, name, args)
}

func (s *streamableFake) deletedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.deleted...)
}
