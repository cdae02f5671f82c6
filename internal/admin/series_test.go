package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// seriesRig is an API over a real SQLite store whose clock stands at now,
// called as the master key.
func seriesRig(t *testing.T, now time.Time, calls []store.ToolCall) func(path string) (int, string) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.AppendToolCalls(context.Background(), calls); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Listen: "127.0.0.1:0", ToolNameSeparator: "__"}
	g := gateway.New(gateway.Options{Config: cfg, Terminations: st})
	t.Cleanup(func() { g.Close(context.Background()) })
	api := New(Options{Gateway: g, Store: st, Config: cfg, Now: func() time.Time { return now },
		Authenticate: func(*http.Request) (*callers.Caller, *callers.Failure) { return &callers.Caller{Master: true}, nil }})
	return func(path string) (int, string) {
		w := httptest.NewRecorder()
		api.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Prefix+path, nil))
		return w.Code, w.Body.String()
	}
}

// GET /stats/series buckets the last hour's calls per server and minute,
// from the audit store: counts, errors (any outcome but ok) and
// nearest-rank p50/p99; calls before the hour are left out, and a minute
// without calls is zero.
func TestStatsSeries(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 30, 20, 0, time.UTC)
	// The window: the 60 minutes ending with 12:30's, [11:31, 12:31).
	var calls []store.ToolCall
	add := func(at time.Time, server, outcome string, ms ...int64) {
		for _, d := range ms {
			calls = append(calls, store.ToolCall{Time: at, Server: server, Tool: "t", Outcome: outcome, DurationMs: d})
		}
	}
	add(time.Date(2026, 11, 1, 11, 30, 59, 0, time.UTC), "calc", "ok", 999) // before the window
	add(time.Date(2026, 11, 1, 11, 31, 0, 0, time.UTC), "calc", "ok", 10, 20, 30, 40)
	add(time.Date(2026, 11, 1, 11, 31, 30, 0, time.UTC), "calc", "error", 100)
	add(time.Date(2026, 11, 1, 12, 30, 10, 0, time.UTC), "calc", "timeout", 5000)
	add(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC), "notes", "ok", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	get := seriesRig(t, now, calls)
	code, body := get("/stats/series")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var s StatsSeries
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if s.Since != "2026-11-01T11:31:00Z" || s.Until != "2026-11-01T12:31:00Z" || s.StepSeconds != 60 || s.Truncated || len(s.Servers) != 2 {
		t.Fatalf("series: %+v", s)
	}
	calc, notes := s.Servers[0], s.Servers[1]
	if calc.Server != "calc" || notes.Server != "notes" || len(calc.Points) != 60 || len(notes.Points) != 60 {
		t.Fatalf("servers: %s %d, %s %d", calc.Server, len(calc.Points), notes.Server, len(notes.Points))
	}
	want := map[string][]SeriesPoint{
		"calc": {
			{Time: "2026-11-01T11:31:00Z", Calls: 5, Errors: 1, P50Ms: 30, P99Ms: 100},
			{Time: "2026-11-01T11:32:00Z"},
			{Time: "2026-11-01T12:30:00Z", Calls: 1, Errors: 1, P50Ms: 5000, P99Ms: 5000},
		},
		"notes": {{Time: "2026-11-01T12:00:00Z", Calls: 10, P50Ms: 5, P99Ms: 10}},
	}
	got := map[string][]SeriesPoint{"calc": {calc.Points[0], calc.Points[1], calc.Points[59]}, "notes": {notes.Points[29]}}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("points (-got +want):\n%s", diff)
	}
	total := 0
	for _, p := range append(calc.Points, notes.Points...) {
		total += p.Calls
	}
	if total != 16 {
		t.Errorf("%d calls in the window, want 16", total)
	}
}

// Past maxSeriesRows calls in the hour the series reads no more, and says
// so.
func TestStatsSeriesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 20,000 rows")
	}
	now := time.Date(2026, 11, 1, 12, 30, 0, 0, time.UTC)
	calls := make([]store.ToolCall, maxSeriesRows+10)
	for i := range calls {
		calls[i] = store.ToolCall{Time: now.Add(-time.Duration(i) * 100 * time.Millisecond), Server: "calc", Tool: "t", Outcome: "ok"}
	}
	get := seriesRig(t, now, calls)
	code, body := get("/stats/series")
	var s StatsSeries
	if err := json.Unmarshal([]byte(body), &s); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	n := 0
	for _, p := range s.Servers[0].Points {
		n += p.Calls
	}
	if !s.Truncated || n != maxSeriesRows {
		t.Errorf("truncated %v, %d calls counted, want true and %d", s.Truncated, n, maxSeriesRows)
	}
}

// GET /usage/series sums cost and calls per group and bucket (hourly over
// 24h by default), names the costliest groups and folds the rest into
// "(other)"; unknown groupings and ranges are 400.
func TestUsageSeries(t *testing.T) {
	now := time.Date(2026, 11, 2, 9, 15, 0, 0, time.UTC)
	// 24 hourly buckets: [2026-11-01T10:00, 2026-11-02T10:00).
	var calls []store.ToolCall
	add := func(at string, key string, cost float64) {
		tm, _ := time.Parse(time.RFC3339, at)
		calls = append(calls, store.ToolCall{Time: tm, KeyAlias: key, User: "u-" + key, Server: "calc", Tool: "t", Outcome: "ok", Cost: cost})
	}
	add("2026-11-01T09:59:00Z", "ci", 100) // before the window
	add("2026-11-01T10:00:00Z", "ci", 1)
	add("2026-11-01T10:30:00Z", "ci", 2)
	add("2026-11-02T09:10:00Z", "ci", 0.5)
	for i := range 10 {
		add("2026-11-02T08:00:00Z", fmt.Sprintf("k%02d", i), float64(i)/100)
	}
	get := seriesRig(t, now, calls)
	code, body := get("/usage/series?by=key")
	var s UsageSeries
	if err := json.Unmarshal([]byte(body), &s); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	if s.By != "key" || s.Range != "24h" || s.StepSeconds != 3600 || len(s.Buckets) != 24 || s.Buckets[0] != "2026-11-01T10:00:00Z" || s.Buckets[23] != "2026-11-02T09:00:00Z" {
		t.Fatalf("series: %+v", s)
	}
	var names []string
	for _, g := range s.Groups {
		names = append(names, g.Group)
	}
	if diff := cmp.Diff(names, []string{"ci", "k09", "k08", "k07", "k06", "k05", "k04", "k03", otherGroup}); diff != "" {
		t.Errorf("groups (-got +want):\n%s", diff)
	}
	ci := s.Groups[0]
	if ci.TotalCalls != 3 || ci.TotalCost != 3.5 || ci.Calls[0] != 2 || ci.Cost[0] != 3 || ci.Calls[23] != 1 || ci.Cost[23] != 0.5 {
		t.Errorf("ci: %+v", ci)
	}
	if o := s.Groups[8]; o.TotalCalls != 3 || o.Calls[22] != 3 || fmt.Sprintf("%.2f", o.TotalCost) != "0.03" {
		t.Errorf("(other): %+v", o)
	}
	code, body = get("/usage/series?by=user&range=7d")
	if err := json.Unmarshal([]byte(body), &s); code != 200 || err != nil || s.StepSeconds != 6*3600 || len(s.Buckets) != 28 || s.Groups[0].Group != "u-ci" || s.Groups[0].TotalCost != 103.5 {
		t.Errorf("by user over 7d: %d %+v", code, s)
	}
	for _, q := range []string{"by=server", "range=1y"} {
		if code, body := get("/usage/series?" + q); code != http.StatusBadRequest || !strings.Contains(body, strings.SplitN(q, "=", 2)[0]) {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
}
