package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// planTables records the SQL store.SQLAudit builds for tool_calls instead
// of running it.
type planTables struct {
	auditTables
	queries *[]plannedQuery
}

type plannedQuery struct {
	name, sql string
	args      []any
	// wholeTable: the query sums every row (usage over all time), so a
	// scan is its plan; an index would only be read in place of it.
	wholeTable bool
}

func (p planTables) SelectToolCalls(_ context.Context, page string, args []any) ([]store.ToolCall, error) {
	*p.queries = append(*p.queries, plannedQuery{sql: selectToolCallsSQL(page), args: args})
	return nil, nil
}

func (p planTables) SumToolCalls(_ context.Context, col, where string, args []any) ([]store.Usage, error) {
	*p.queries = append(*p.queries, plannedQuery{sql: sumToolCallsSQL(col, where), args: args})
	return nil, nil
}

// TestToolCallIndexesUsed runs EXPLAIN QUERY PLAN for each query the
// admin API (GET /tool-calls and its filters, /usage, the console's
// series), the CLI (mcpgate audit, mcpgate usage) and the budget check
// run on tool_calls: each that reads part of the table (a filter, a
// period, a page) reads it through an index, and each index of the table serves at least one of them.
// Every index costs every audit record its update: one no query uses is
// a cost with no return.
func TestToolCallIndexesUsed(t *testing.T) {
	s := openTemp(t, t.TempDir())
	ctx := t.Context()
	var queries []plannedQuery
	a := store.SQLAudit{Dialect: dialect, Tables: planTables{auditTables{s}, &queries}}
	since := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	until := since.Add(time.Hour)
	before := &store.Cursor{Time: until, ID: 1000}
	run := func(name string, f func()) {
		n := len(queries)
		f()
		if len(queries) != n+1 {
			t.Fatalf("%s: %d queries recorded, want 1", name, len(queries)-n)
		}
		queries[n].name = name
	}
	for _, f := range []store.ToolCallFilter{
		{},                           // GET /tool-calls, mcpgate audit
		{Since: since, Until: until}, // the console's series, --since/--until
		{Before: before},             // the next page
		{KeyAlias: "ci"},
		{KeyAlias: "ci", Since: since, Before: before},
		{User: "alice"},
		{Team: "eng"},
		{Server: "github"},
		{Server: "github", Tool: "search"},
		{Server: "github", Tool: "search", Since: since, Until: until, Before: before},
		{Tool: "search"},
		{Outcome: "timeout"},
		{Outcome: "timeout", Since: since},
	} {
		run(fmt.Sprintf("ListToolCalls %+v", f), func() { a.ListToolCalls(ctx, f) })
	}
	for _, by := range []string{store.UsageByKey, store.UsageByUser, store.UsageByTeam} {
		for _, f := range []store.UsageFilter{
			{By: by},                             // GET /usage, mcpgate usage
			{By: by, Since: since, Until: until}, // a period, a series step
		} {
			run(fmt.Sprintf("SumUsage %+v", f), func() { a.SumUsage(ctx, f) })
			queries[len(queries)-1].wholeTable = f.Since.IsZero()
		}
	}
	// The budget check (cmd/mcpgate wire.go): one key's spend this period.
	run("SumUsage budget", func() {
		a.SumUsage(ctx, store.UsageFilter{By: store.UsageByKey, Key: "ci", Since: since})
	})

	used := map[string]bool{}
	for _, q := range queries {
		rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		indexed := false
		for _, d := range plan {
			if i := strings.Index(d, "USING INDEX "); i >= 0 {
				indexed = true
				used[strings.Fields(d[i+len("USING INDEX "):])[0]] = true
			}
			if i := strings.Index(d, "USING COVERING INDEX "); i >= 0 {
				indexed = true
				used[strings.Fields(d[i+len("USING COVERING INDEX "):])[0]] = true
			}
		}
		if !indexed && !q.wholeTable {
			t.Errorf("%s reads no index:\n  %s\n  plan: %q", q.name, q.sql, plan)
		}
		t.Logf("%s: %q", q.name, plan)
	}

	rows, err := s.r.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'tool_calls' AND sql IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var indexes []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, name)
	}
	if len(indexes) == 0 {
		t.Fatal("tool_calls has no index")
	}
	for _, name := range indexes {
		if !used[name] {
			t.Errorf("index %s serves none of the queries: drop it (each index costs every audit record)", name)
		}
	}
	slices.Sort(indexes)
	t.Logf("indexes: %v, used: %v", indexes, used)
}
