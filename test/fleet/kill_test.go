package fleet

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/postgres"
)

// callRecord is one tools/call of the load, as its client saw it.
type callRecord struct {
	client     int
	start, end time.Time
	ok         bool
	replica    string // HeaderReplica: who served, or who failed it
	what       string // the failure
}

// loadResult is what runLoad saw.
type loadResult struct {
	sessions []*rawSession
	calls    [][]callRecord // per client, in order
}

// runLoad opens loadClients sessions through the balancer (each with its
// own key) and has each call get_note back to back for d; at kill (if
// set) after the start it calls kill, and records the time just before.
func runLoad(t *testing.T, f *Fleet, d, at time.Duration, kill func()) (loadResult, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d+30*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loadClients}, Timeout: 10 * time.Second}
	res := loadResult{sessions: make([]*rawSession, loadClients), calls: make([][]callRecord, loadClients)}
	for i := range loadClients {
		s, err := newRawSession(ctx, hc, f.LB.URL+"/mcp", loadKey(i))
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		res.sessions[i] = s
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range res.sessions {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := callRecord{client: i, start: time.Now()}
				rep, err := s.Call(ctx, "notes__get_note", map[string]any{"title": "alpha"})
				c.end = time.Now()
				switch {
				case err != nil:
					c.what = err.Error()
				case !rep.OK():
					c.replica, c.what = rep.Replica, rep.String()
				default:
					c.replica, c.ok = rep.Replica, true
				}
				res.calls[i] = append(res.calls[i], c)
			}
		})
	}
	var killedAt time.Time
	if kill != nil {
		time.Sleep(at)
		killedAt = time.Now()
		kill()
		time.Sleep(d - at)
	} else {
		time.Sleep(d)
	}
	close(stop)
	wg.Wait()
	return res, killedAt
}

// okRecords counts each load key's audit records with outcome ok in
// PostgreSQL.
func okRecords(t *testing.T, dsn string) map[string]int {
	t.Helper()
	ctx := t.Context()
	st, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got := map[string]int{}
	for i := range loadClients {
		f := store.ToolCallFilter{KeyAlias: loadAlias(i), Outcome: "ok", Limit: 1000}
		for {
			calls, next, err := st.ListToolCalls(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			got[loadAlias(i)] += len(calls)
			if next == nil {
				break
			}
			f.Before = next
		}
	}
	return got
}

// testKillReplica: scenario 6. Replica a is SIGKILLed under load (16
// clients, each its own session and key, through the balancer): only the
// calls a had in flight fail (at most one per client, every one a's);
// every session keeps working on b and c, those a created included (the
// sealed id opens there); and every successful call's audit record is in
// PostgreSQL: the fleet runs with audit.durable, so a call is answered
// only once its record is committed.
func testKillReplica(t *testing.T, f *Fleet) {
	a := f.Replicas[0]
	const (
		duration = 3 * time.Second
		killAt   = 1500 * time.Millisecond
	)
	f.LB.ResetCounts()
	res, killedAt := runLoad(t, f, duration, killAt, a.Kill)
	served, failed := f.LB.Counts()
	t.Logf("balancer: served %v, failed %v", served, failed)

	var calls, fails, onA int
	for _, cs := range res.calls {
		perClientFails := 0
		for _, c := range cs {
			calls++
			if c.replica == a.Name {
				onA++
			}
			if c.ok {
				continue
			}
			fails++
			perClientFails++
			if c.replica != a.Name {
				t.Errorf("client %d: a call failed on %q, not on the killed replica: %s", c.client, c.replica, c.what)
			}
			if c.end.Before(killedAt) {
				t.Errorf("client %d: a call failed before the kill: %s", c.client, c.what)
			}
		}
		if perClientFails > 1 {
			t.Errorf("client %d: %d calls failed; want at most the one it had in flight", cs[0].client, perClientFails)
		}
	}
	t.Logf("%d calls in %v, %d served by a; %d failed (bound: %d in flight)", calls, duration, onA, fails, loadClients)
	if fails > loadClients {
		t.Errorf("%d calls failed; want at most %d (one in flight per client)", fails, loadClients)
	}

	// Every session, those initialized on a included, works after the
	// kill: the load's later calls, and one more call each now.
	var onAInit []int
	for i, s := range res.sessions {
		if s.InitOn == a.Name {
			onAInit = append(onAInit, i)
		}
		after := 0
		for _, c := range res.calls[i] {
			if c.ok && c.start.After(killedAt) {
				after++
			}
		}
		start := time.Now()
		rep, err := s.Call(t.Context(), "notes__get_note", map[string]any{"title": "beta"})
		if err != nil || !rep.OK() || rep.Replica == a.Name {
			t.Errorf("client %d (initialized on %s): a call after the kill: %v %v", i, s.InitOn, rep, err)
		} else { // audited like the others
			res.calls[i] = append(res.calls[i], callRecord{client: i, start: start, end: time.Now(), ok: true, replica: rep.Replica})
		}
		if after == 0 {
			t.Errorf("client %d (initialized on %s): no successful call after the kill", i, s.InitOn)
		}
	}
	if len(onAInit) == 0 {
		t.Error("no session was initialized on a: round robin should have put some there")
	}
	t.Logf("sessions initialized on a: %d of %d, all continued on b and c", len(onAInit), loadClients)

	// Audit: every answered call's record was committed before its
	// answer (audit.durable), on whichever replica served it.
	got := okRecords(t, f.DSN)
	lost := 0
	for i := range loadClients {
		ok := 0
		for _, c := range res.calls[i] {
			if c.ok {
				ok++
			}
		}
		alias := loadAlias(i)
		if got[alias] < ok {
			t.Errorf("%s: %d audit records in PostgreSQL for %d answered calls", alias, got[alias], ok)
			lost += ok - got[alias]
		}
		// No more records than answered calls, but for the one call a
		// may have recorded and then died before answering.
		if got[alias] > ok+1 {
			t.Errorf("%s: %d audit records, more than the %d answered calls (+1 in flight)", alias, got[alias], ok)
		}
	}
	t.Logf("audit: %d answered calls' records missing after the SIGKILL (want 0)", lost)

	a.Start(t)
	f.LB.WaitUp(t)
}

// testGracefulStop: a rolling restart's step under the same load: replica
// a gets SIGTERM. Every successful call's audit record is in PostgreSQL,
// with no exception this time (shutdown flushes the audit queue). A few
// calls still fail: mcpgate closes its listener and idle connections at
// once (it has no lame-duck period), so a request the balancer sends in
// the few milliseconds before it sees a go gets "connection refused" or
// a reset on a pooled connection (502, never retried). At most one per
// client, all on a; the count is logged.
func testGracefulStop(t *testing.T, f *Fleet) {
	a := f.Replicas[0]
	f.LB.ResetCounts()
	var stopped time.Duration
	res, _ := runLoad(t, f, 3*time.Second, 1500*time.Millisecond, func() {
		start := time.Now()
		a.Stop(t)
		stopped = time.Since(start)
	})
	served, failed := f.LB.Counts()
	t.Logf("SIGTERM to exit %v; balancer: served %v, failed %v (last: %s)", stopped.Round(time.Millisecond), served, failed, f.LB.LastError(a.Name))
	fails := 0
	for _, cs := range res.calls {
		n := 0
		for _, c := range cs {
			if !c.ok {
				n++
				if c.replica != a.Name {
					t.Errorf("client %d: a call failed on %q, not on the stopped replica: %s", c.client, c.replica, c.what)
				}
			}
		}
		fails += n
	}
	// shutdown_delay: /readyz said 503 while a still served, so the
	// balancer had taken it out of rotation before its listener closed.
	if fails != 0 {
		t.Errorf("%d calls failed during a graceful stop with shutdown_delay; want none", fails)
	}
	time.Sleep(time.Second) // b and c flush their audit batches
	got := okRecords(t, f.DSN)
	missing := 0
	for i := range loadClients {
		ok := 0
		for _, c := range res.calls[i] {
			if c.ok {
				ok++
			}
		}
		if got[loadAlias(i)] < ok {
			missing += ok - got[loadAlias(i)]
		}
	}
	t.Logf("%d calls failed; %d successful calls' audit records missing", fails, missing)
	if missing != 0 {
		t.Errorf("%d successful calls have no audit record after a graceful stop; want none", missing)
	}
	a.Start(t)
	f.LB.WaitUp(t)
}
