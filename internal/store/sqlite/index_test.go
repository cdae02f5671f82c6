package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
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
	// index: the index the plan must read; "": any.
	index string
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
		if f.KeyAlias != "" {
			// The partial index of keyed calls (schema version 8): the
			// query must carry its condition for SQLite to read it.
			queries[len(queries)-1].index = "tool_calls_key"
		}
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
	queries[len(queries)-1].index = "tool_calls_key"

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
		read := map[string]bool{}
		for _, d := range plan {
			for _, using := range []string{"USING INDEX ", "USING COVERING INDEX "} {
				if i := strings.Index(d, using); i >= 0 {
					indexed = true
					read[strings.Fields(d[i+len(using):])[0]] = true
				}
			}
		}
		for name := range read {
			used[name] = true
		}
		if !indexed && !q.wholeTable {
			t.Errorf("%s reads no index:\n  %s\n  plan: %q", q.name, q.sql, plan)
		}
		if q.index != "" && !read[q.index] {
			t.Errorf("%s does not read %s:\n  %s\n  plan: %q", q.name, q.index, q.sql, plan)
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

// A database at schema version 7, its tool_calls_key holding every call:
// opening it migrates to 8, whose tool_calls_key holds the keyed calls
// alone, and a listing by key still finds each of them, newest first,
// through that index.
func TestKeyIndexMigration(t *testing.T) {
	dir := t.TempDir()
	db := databaseAt(t, dir, 7)
	const rows = 300
	for i := range rows {
		key := ""
		if i%3 == 0 {
			key = "ci"
		}
		if _, err := db.Exec(`INSERT INTO tool_calls (ts, key_alias, server, tool, duration_ms, outcome) VALUES (?, ?, 'github', 'search', 1, 'ok')`,
			1000+i, key); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openTemp(t, dir)
	ctx := t.Context()
	var indexed int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM tool_calls INDEXED BY tool_calls_key WHERE key_alias <> ''`).Scan(&indexed); err != nil {
		t.Fatal(err)
	}
	if indexed != rows/3 {
		t.Fatalf("tool_calls_key finds %d calls, want the %d keyed ones", indexed, rows/3)
	}
	// A keyless call is not in the index: a query that would need it
	// there cannot be made to read it.
	if _, err := s.r.QueryContext(ctx, `SELECT count(*) FROM tool_calls INDEXED BY tool_calls_key WHERE key_alias = ''`); err == nil {
		t.Fatal("tool_calls_key serves a query for keyless calls: it still indexes them")
	}
	got := storetest.ListAllToolCalls(t, s, store.ToolCallFilter{KeyAlias: "ci", Limit: 40})
	if len(got) != rows/3 {
		t.Fatalf("listing by key found %d calls, want %d", len(got), rows/3)
	}
	for i, c := range got {
		if want := fromMS(int64(1000 + (rows - 3) - 3*i)); c.KeyAlias != "ci" || !c.Time.Equal(want) {
			t.Fatalf("call %d of the listing: key %q at %v, want ci at %v", i, c.KeyAlias, c.Time, want)
		}
	}
	usage, err := s.SumUsage(ctx, store.UsageFilter{By: store.UsageByKey})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, u := range usage {
		calls[u.Group] = u.Calls
	}
	if calls["ci"] != rows/3 || calls[""] != rows-rows/3 {
		t.Fatalf("usage by key after the migration: %v", calls)
	}
}
