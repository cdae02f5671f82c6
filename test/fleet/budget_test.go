package fleet

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/postgres"
)

// testFleetBudget: issue 22 hole 15. A key with a budget of one call a
// day, whose spending every replica has read already (warm caches: a
// call of a tool that does not exist costs nothing), calls once on each
// replica: exactly one call is answered, the other two are refused with
// the budget's 429, and one audit record exists. While Redis is down a
// call of the budgeted key is refused with a 503 saying why (rather than
// spent again on every replica) and a key without a budget keeps
// working; with Redis back, empty, the spending is read again from the
// store and the budget stays spent.
func testFleetBudget(t *testing.T, f *Fleet) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for _, r := range f.Replicas {
		rep, err := statelessClient(http.DefaultClient, r.URL+"/mcp", budgetedKey).Call(ctx, "notes__no_such_tool", nil)
		if err != nil || rep.Status != http.StatusOK || rep.Error == nil || !strings.Contains(rep.Error.Message, "Unknown tool") {
			t.Fatalf("replica %s: warming call: %v %+v", r.Name, err, rep)
		}
	}
	const spent = "Budget exceeded: key budgeted has spent 1 of its daily budget of 1; it renews at "
	answered := 0
	for _, r := range f.Replicas {
		rep, err := statelessClient(http.DefaultClient, r.URL+"/mcp", budgetedKey).Call(ctx, "notes__get_note", map[string]any{"title": "alpha"})
		switch {
		case err != nil:
			t.Fatalf("replica %s: %v", r.Name, err)
		case rep.OK():
			answered++
		case rep.Status != http.StatusTooManyRequests || !strings.Contains(rep.Body, spent):
			t.Errorf("replica %s: %d %s; want the answer or 429 %q", r.Name, rep.Status, rep.Body, spent)
		}
	}
	if answered != 1 {
		t.Errorf("%d of %d replicas answered a call on a one-call budget, want exactly 1", answered, len(f.Replicas))
	}
	// Every call is recorded (docs/failures.md): exactly one went
	// upstream; the others were refused by the budget.
	if n := auditCount(t, f.DSN, "budgeted"); n["ok"] != 1 || n["refused"] == 0 {
		t.Errorf("audit records of the budgeted key by outcome: %v, want ok 1 and the refusals", n)
	}

	f.Redis.Stop()
	const unavailable = "Service Unavailable: key budgeted has a budget, and the gateway cannot read its spending right now (the fleet's shared state does not answer); try again"
	for _, r := range f.Replicas {
		rep, err := statelessClient(http.DefaultClient, r.URL+"/mcp", budgetedKey).Call(ctx, "notes__get_note", map[string]any{"title": "alpha"})
		if err != nil || rep.Status != http.StatusServiceUnavailable || !strings.Contains(rep.Body, unavailable) {
			t.Errorf("replica %s, Redis down: %v %+v; want 503 %q", r.Name, err, rep, unavailable)
		}
		rep, err = statelessClient(http.DefaultClient, r.URL+"/mcp", aliceKey).Call(ctx, "notes__get_note", map[string]any{"title": "alpha"})
		if err != nil || !rep.OK() {
			t.Errorf("replica %s, Redis down: a key without a budget: %v %+v", r.Name, err, rep)
		}
	}
	if err := f.Redis.Restart(); err != nil {
		t.Fatal(err)
	}
	waitState(t, f, "ok")
	rep, err := statelessClient(http.DefaultClient, f.LB.URL+"/mcp", budgetedKey).Call(ctx, "notes__get_note", map[string]any{"title": "alpha"})
	if err != nil || rep.Status != http.StatusTooManyRequests || !strings.Contains(rep.Body, spent) {
		t.Errorf("after the outage: %v %+v; want 429 %q (the store's sum seeds the empty Redis)\n%s", err, rep, spent, stateLines(f))
	}
	if n := auditCount(t, f.DSN, "budgeted"); n["ok"] != 1 {
		t.Errorf("audit records of the budgeted key after the outage by outcome: %v, want still one ok", n)
	}
	// The restarted Redis holds no replica registry until every replica
	// has heartbeated again (once a second): the fleet is whole once it
	// has.
	time.Sleep(2 * time.Second)
}

// auditCount counts alias's tool-call records in PostgreSQL.
// auditCount counts the audit records of a key by outcome.
func auditCount(t *testing.T, dsn, alias string) map[string]int {
	t.Helper()
	st, err := postgres.Open(t.Context(), dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	calls, _, err := st.ListToolCalls(t.Context(), store.ToolCallFilter{KeyAlias: alias, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, c := range calls {
		n[c.Outcome]++
	}
	return n
}

// stateLines are the replicas' log lines about the shared state and
// budgets, for a failure after an outage: which operation failed, and why.
func stateLines(f *Fleet) string {
	var b strings.Builder
	for _, r := range f.Replicas {
		for _, l := range strings.Split(r.Log(), "\n") {
			if strings.Contains(l, "budget") || strings.Contains(l, "shared state") {
				fmt.Fprintf(&b, "%s: %s\n", r.Name, l)
			}
		}
	}
	return b.String()
}
