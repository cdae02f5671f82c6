package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// drainBudget is how long the gateway may take to exit after SIGTERM: its
// 10 s drain of in-flight calls plus the 2 s grace of a stdio child
// (README "Commands"; cmd/mcpgate drainTimeout, upstream.KillGrace).
const drainBudget = 12 * time.Second

// shutdownRE is what an error caused by the shutdown must say.
var shutdownRE = regexp.MustCompile(`(?i)shut|closing|draining|stopp`)

// TestSIGTERMUnderLoad (issue 10, chaos 5): 32 callers keep 300 ms calls
// in flight to a stdio and an HTTP upstream when the gateway gets
// SIGTERM. Every call either gets its result or fails with an error that
// says the gateway is shutting down (a refused connection once the
// listener is closed counts as such); no call is cut off mid-answer. The
// gateway exits 0 within its drain budget, its stdio child is gone, and
// every call that got a result has its audit row (read from the SQLite
// file after exit, per session).
func TestSIGTERMUnderLoad(t *testing.T) {
	const callers = 32
	steady := startUpstream(t, "", "normal")
	dataDir := t.TempDir()
	g := startGateway(t, gatewayConfig(dataDir, stdioServer("proc", "5s")+httpServer("steady", steady.url(), "5s")),
		dataDir, "proc", "steady")
	clients := g.mustConnect(t, "/mcp", callers)
	live, _ := g.upstreamChildren()
	if len(live) != 1 {
		t.Fatalf("stdio upstream processes before the signal: %v, want 1", live)
	}
	child := live[0]

	rec := &recorder{}
	var wg sync.WaitGroup
	stopAt := time.Now().Add(20 * time.Second) // a bound, never reached
	for i, c := range clients {
		server, tool := "proc", "proc__slow"
		if i%2 == 1 {
			server, tool = "steady", "steady__slow"
		}
		wg.Go(func() {
			for time.Now().Before(stopAt) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				o := c.call(ctx, tool, map[string]any{"ms": 300})
				cancel()
				rec.add(record{worker: i, server: server, outcome: o})
				if o.Net != nil {
					return // refused: the gateway is gone
				}
			}
		})
	}
	// Mid-call: the callers started together and each call takes 300 ms
	// plus the round trips.
	time.Sleep(1650 * time.Millisecond)
	sig := time.Now()
	drain, exitErr := g.stop(t, syscall.SIGTERM, drainBudget+5*time.Second)
	wg.Wait()
	t.Logf("FIGURE sigterm: exit %v after %d ms", exitErr, drain.Milliseconds())
	if exitErr != nil {
		t.Errorf("gateway exit after SIGTERM: %v, want 0", exitErr)
	}
	if drain > drainBudget {
		t.Errorf("gateway took %v to exit after SIGTERM, want under %v", drain, drainBudget)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", child)); err == nil {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", child))
		if exe == bins.up {
			t.Errorf("stdio upstream %d still running after the gateway exited", child)
			syscall.Kill(child, syscall.SIGKILL)
		}
	}

	// What each call got.
	okBySession := map[string]int{}
	var inflight, inflightOK, after, results int
	var problems []string
	for _, r := range rec.all() {
		sid := clients[r.worker].sid[:8]
		if r.ok() {
			results++
			okBySession[sid]++
		}
		end := r.Start.Add(r.Dur)
		switch {
		case r.Start.Before(sig) && end.After(sig):
			inflight++
			if r.ok() {
				inflightOK++
			} else if !shutdownError(r.outcome) {
				problems = append(problems, "in flight at SIGTERM: "+r.String())
			}
		case r.Start.After(sig):
			after++
			if !r.ok() && !shutdownError(r.outcome) {
				problems = append(problems, "sent after SIGTERM: "+r.String())
			}
		case !r.ok():
			problems = append(problems, "before SIGTERM: "+r.String())
		}
	}
	t.Logf("%d results; %d calls in flight at SIGTERM (%d got their result); %d sent after it; drain %v",
		results, inflight, inflightOK, after, drain.Round(time.Millisecond))
	for i, p := range problems {
		if i == 10 {
			t.Errorf("... and %d more", len(problems)-10)
			break
		}
		t.Error(p)
	}
	if inflight < callers/2 {
		t.Errorf("only %d calls in flight at SIGTERM; the load did not run", inflight)
	}

	// Every result has its audit row.
	rows, err := auditRows(filepath.Join(dataDir, "mcpgate.db"))
	if err != nil {
		t.Fatalf("read the audit table: %v", err)
	}
	missing := 0
	for sid, n := range okBySession {
		if got := rows[sid]["ok"]; got != n {
			missing += n - got
			t.Errorf("session %s: %d results, %d audit rows with outcome ok", sid, n, got)
		}
	}
	t.Logf("FIGURE sigterm audit: %d results, %d without an audit row", results, missing)
}

// shutdownError reports whether o is a failure that says the gateway is
// shutting down: an error naming it, HTTP 503, or a refused connection.
func shutdownError(o outcome) bool {
	switch {
	case o.Err != nil:
		return shutdownRE.MatchString(o.Err.Message) || o.Status == 503
	case o.Status == 503:
		return true
	case o.Net != nil:
		return errors.Is(o.Net, syscall.ECONNREFUSED)
	}
	return false
}

// auditRows counts the tool_calls rows of the store at path by session id
// prefix and outcome.
func auditRows(path string) (map[string]map[string]int, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rs, err := db.Query(`SELECT session_id_prefix, outcome, count(*) FROM tool_calls GROUP BY 1, 2`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]map[string]int{}
	for rs.Next() {
		var sid, outcome string
		var n int
		if err := rs.Scan(&sid, &outcome, &n); err != nil {
			return nil, err
		}
		if out[sid] == nil {
			out[sid] = map[string]int{}
		}
		out[sid][outcome] += n
	}
	return out, rs.Err()
}
