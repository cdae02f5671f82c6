package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// GET /admin/v1/usage sums the audit's costs per key, user or team over
// [since, until), for admins only.
func TestUsage(t *testing.T) {
	r := newRig(t)
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	calls := []store.ToolCall{
		{Time: t0, KeyAlias: "ci", User: "alice", Team: "eng", Cost: 0.5},
		{Time: t0.Add(time.Hour), KeyAlias: "ci", User: "bob", Team: "eng", Cost: 0.25},
		{Time: t0.Add(2 * time.Hour), KeyAlias: "dev", User: "alice", Team: "ops", Cost: 2},
		{Time: t0.Add(48 * time.Hour), KeyAlias: "dev", User: "alice", Team: "ops", Cost: 50},
	}
	for i := range calls {
		calls[i].Server, calls[i].Tool, calls[i].Outcome = "calc", "add", "ok"
	}
	if err := r.store.AppendToolCalls(context.Background(), calls); err != nil {
		t.Fatal(err)
	}
	get := func(q string) UsageReport {
		t.Helper()
		code, body := r.do(t, "GET", "/admin/v1/usage?"+q, master, "")
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", q, code, body)
		}
		var rep UsageReport
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	day := "since=2026-11-01T00:00:00Z&until=2026-11-02T00:00:00Z"
	rep := get("by=user&" + day)
	if len(rep.Usage) != 2 || rep.Usage[0] != (UsageRow{Group: "alice", Calls: 2, Cost: 2.5}) || rep.Usage[1] != (UsageRow{Group: "bob", Calls: 1, Cost: 0.25}) || rep.Total != 2.75 {
		t.Errorf("by user: %+v", rep)
	}
	if rep := get("by=team&" + day); len(rep.Usage) != 2 || rep.Usage[0].Group != "ops" || rep.Usage[1] != (UsageRow{Group: "eng", Calls: 2, Cost: 0.75}) {
		t.Errorf("by team: %+v", rep)
	}
	if rep := get(""); rep.By != "key" || len(rep.Usage) != 2 || rep.Usage[0] != (UsageRow{Group: "dev", Calls: 2, Cost: 52}) {
		t.Errorf("default (by key, all time): %+v", rep)
	}
	for _, q := range []string{"by=server", "since=yesterday"} {
		if code, body := r.do(t, "GET", "/admin/v1/usage?"+q, master, ""); code != http.StatusBadRequest || !strings.Contains(body, strings.SplitN(q, "=", 2)[0]) {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
	user := r.createKey(t, `{"alias":"plain"}`)
	if code, _ := r.do(t, "GET", "/admin/v1/usage", user, ""); code != http.StatusForbidden && code != http.StatusUnauthorized {
		t.Errorf("a non-admin key got %d", code)
	}
}
