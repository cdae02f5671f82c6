// Package statetest is the conformance suite for state backends: one set
// of tests that every state.Backend must pass, so that the memory and
// Redis backends behave the same. It owns the behaviour package state
// documents (TTLs, bounds, ordering, the errors callers branch on, what
// happens while the backend is down) and nothing backend-specific (URLs,
// pools, scripts): each backend adds its own tests next to its call to
// [Run].
//
// TTLs are real and short (a few hundred milliseconds), since a Redis
// server keeps its own clock; the assertions leave room for a loaded
// machine rather than sleeping exactly.
package statetest

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// Harness says how the suite reaches a backend.
type Harness struct {
	// Open returns a new backend that shares nothing with the others it
	// returned (for example under its own key prefix), closed with
	// t.Cleanup. It is called from parallel subtests.
	Open func(t *testing.T) state.Backend
	// Outage, when set, returns a backend on a server of its own, and
	// stop and start functions that take that server down and bring it
	// back (same address, empty). Nil for a backend that cannot be
	// unavailable (memory): the outage tests are skipped.
	Outage func(t *testing.T) (b state.Backend, stop, start func())
}

// Run runs the suite against h.
func Run(t *testing.T, h Harness) {
	groups := []struct {
		name  string
		tests []test
	}{
		{"Terminations", terminationTests},
		{"Sessions", sessionTests},
		{"RateLimit", rateLimitTests},
		{"Replicas", replicaTests},
		{"StreamOwners", ownerTests},
		{"Events", eventTests},
		{"PubSub", pubsubTests},
		{"Leases", leaseTests},
		{"Tickets", ticketTests},
		{"Spending", spendingTests},
		{"Errors", errorTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, h.Open(t))
				})
			}
		})
	}
	t.Run("Outage", func(t *testing.T) {
		if h.Outage == nil {
			t.Skip("the backend cannot be unavailable")
		}
		t.Parallel()
		testOutage(t, h)
	})
}

type test struct {
	name string
	fn   func(t *testing.T, b state.Backend)
}

// ttl is the suite's short TTL; long is one that does not lapse during a
// test.
const (
	ttl  = 300 * time.Millisecond
	long = time.Hour
)

// eventually polls cond every 20ms until it holds or 5s have passed.
func eventually(t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 5s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustNot(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantErr fails unless err matches target (errors.Is).
func wantErr(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want %v", what, err, target)
	}
}

// LeakedGoroutines returns the stacks of goroutines of package state, its
// backends or go-redis still running, after waiting up to 2s for them to
// end: a TestMain reports them once every test has closed what it opened.
func LeakedGoroutines() string {
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaks []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			// redistest's own goroutines reap the test binary's server.
			if strings.Contains(g, "LeakedGoroutines") || strings.Contains(g, "/redistest.") {
				continue
			}
			if strings.Contains(g, "mcpgate/internal/state") || strings.Contains(g, "redis/go-redis") {
				leaks = append(leaks, g)
			}
		}
		if len(leaks) == 0 || time.Now().After(deadline) {
			return strings.Join(leaks, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Main runs the tests of m and fails the run if a goroutine of the state
// packages outlived them; it returns the exit code.
func Main(m *testing.M) int {
	return CheckLeaks(m.Run)
}

// CheckLeaks is Main for a TestMain that wraps m.Run (redistest.Main):
// it calls run, then checks for leaked goroutines.
func CheckLeaks(run func() int) int {
	code := run()
	if code == 0 {
		if leak := LeakedGoroutines(); leak != "" {
			fmt.Printf("leaked goroutines:\n%s\n", leak)
			code = 1
		}
	}
	return code
}
