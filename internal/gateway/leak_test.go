package gateway

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/state"
)

// The goroutine-leak check (in the spirit of tailscale's
// tstest.ResourceCheck): every goroutine the gateway starts is started
// from its owner's context and waited for by its Close, so none is left
// once a test's cleanups ran. Package-wide, TestMain fails the run when
// goroutines outlive all tests; checkGoroutines compares one test's
// goroutines before and after.

// leakOptions are the goroutines the check does not count, each none of
// the gateway's and with the reason why; none so far.
var leakOptions []goleak.Option

// runLeakChecked runs the package's tests (TestMain) and fails the run
// when goroutines outlive them.
func runLeakChecked(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions...)
}

// checkGoroutines fails t when goroutines started during it are still
// running once its cleanups ran, after goleak's retries (a closed
// connection's goroutines end soon after, not before, Close returns).
// Call it first, so that its check runs last. The goroutines of the
// gateway itself must have ended when its Close returned: closed checks
// those at once.
func checkGoroutines(t testing.TB) *goroutineCheck {
	t.Helper()
	c := &goroutineCheck{t: t, before: map[string]bool{}}
	for _, g := range goroutines() {
		c.before[goroutineID(g)] = true
	}
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, leakOptions...)
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
	return c
}

type goroutineCheck struct {
	t      testing.TB
	before map[string]bool // ids of the goroutines running before
}

// closed fails the test for every goroutine started since the check that
// runs this package's code, but for an HTTP request's (the HTTP server's
// to wait for, in its Shutdown) and the test's own: call it as soon as
// the gateways closed. A goroutine that told its WaitGroup it is done
// may still be seen, on its way out: it runs none of this package's code
// any more.
func (c *goroutineCheck) closed() {
	c.t.Helper()
	for _, g := range goroutines() {
		frames, creator, _ := strings.Cut(g, "\ncreated by ")
		// Fleet relaying's goroutines are the gateway's too (started from
		// its context, waited for by its Close).
		ours := strings.Contains(frames, "mcpgate/internal/gateway.") || strings.Contains(frames, "mcpgate/internal/relay.")
		if c.before[goroutineID(g)] || !ours ||
			strings.HasPrefix(creator, "net/http.(*Server).Serve") || strings.HasPrefix(creator, "github.com/mcpgate/mcpgate/internal/gateway.Test") {
			continue
		}
		c.t.Errorf("a goroutine of the gateway outlived its Close:\n%s", g)
	}
}

// goroutines are the stacks of every goroutine but the caller's.
func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Split(string(buf), "\n\n")[1:]
}

// goroutineID is the number a stack's first line gives its goroutine.
func goroutineID(stack string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(stack, "goroutine "), " ")
	return id
}

// One lifecycle: a fleet of two replicas (shared state, replica registry,
// the bus followers, the heartbeat, the janitor) serves alice's session,
// created on A, used on A and, resumed from its sealed id, on B, then
// ended on A, and bob's, whose GET stream on A is open when the replicas
// close. When their Close returned, none of their goroutines is left,
// and once the test's servers closed, no goroutine it started.
func TestClosedGatewaysLeaveNoGoroutines(t *testing.T) {
	check := checkGoroutines(t)
	up := faultyUpstream(t)
	mem := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	a, urlA := ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), State: mem, Replicas: mem, IdleTimeout: time.Minute})
	b, urlB := ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), State: mem, Replicas: mem, IdleTimeout: time.Minute})

	alice := initOwned(t, urlA, "alice")
	for _, u := range []string{urlA, urlB} {
		if code, body := send(t, http.MethodPost, u+"/mcp", "alice", alice, callBody); code != http.StatusOK || !strings.Contains(body, "fine") {
			t.Fatalf("alice's call: %d %s", code, body)
		}
	}
	if code, body := send(t, http.MethodDelete, urlA+"/mcp", "alice", alice, ""); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("alice's DELETE: %d %s", code, body)
	}

	bob := initOwned(t, urlA, "bob")
	req, _ := http.NewRequest(http.MethodGet, urlA+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Test-Owner", "bob")
	req.Header.Set(mcpwire.HeaderSessionID, bob)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's GET stream: %v %v", resp, err)
	}
	streamEnded := make(chan struct{})
	go func() {
		defer close(streamEnded)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, g := range []*Gateway{a, b} {
		if err := g.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	check.closed()
	<-streamEnded // ended by A's Close
	http.DefaultClient.CloseIdleConnections()
}
