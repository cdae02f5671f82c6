package storetest

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mcpgate/mcpgate/internal/store"
)

var auditTests = []test{
	{"RoundTrip", testAuditRoundTrip},
	{"Pagination", testAuditPagination},
	{"PageSize", testAuditPageSize},
	{"Filters", testAuditFilters},
}

var toolCallTests = []test{
	{"RoundTripAndFilters", testToolCalls},
	{"Invalid", testToolCallInvalid},
	{"Batch", testToolCallBatch},
	{"BatchInvalid", testToolCallBatchInvalid},
	{"BatchEmpty", testToolCallBatchEmpty},
	{"BatchSizes", testToolCallBatchSizes},
	{"Usage", testUsage},
}

// newestFirst sorts records the way listings return them.
func newestFirst[T any](recs []T, key func(T) (time.Time, int64)) []T {
	out := slices.Clone(recs)
	slices.SortFunc(out, func(a, b T) int {
		ta, ia := key(a)
		tb, ib := key(b)
		if c := tb.Compare(ta); c != 0 {
			return c
		}
		return cmp.Compare(ib, ia)
	})
	return out
}

func auditKey(e store.AuditEntry) (time.Time, int64) { return e.Time, e.ID }

func appendAudit(t testing.TB, s store.Store, e store.AuditEntry) store.AuditEntry {
	t.Helper()
	id, err := s.AppendAudit(t.Context(), e)
	if err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	e.ID = id
	return e
}

// listAllAudit follows next cursors to the end.
func listAllAudit(t *testing.T, s store.Store, f store.AuditFilter) (all []store.AuditEntry, pages []int) {
	t.Helper()
	for range 10_000 {
		page, next, err := s.ListAudit(t.Context(), f)
		if err != nil {
			t.Fatalf("ListAudit(%+v): %v", f, err)
		}
		all = append(all, page...)
		pages = append(pages, len(page))
		if next == nil {
			return all, pages
		}
		f.Before = next
	}
	t.Fatal("ListAudit never returned a nil cursor")
	return nil, nil
}

func testAuditRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := []store.AuditEntry{
		{Time: at(1), Actor: store.ActorMaster, Action: "key.create", Target: "ci", Detail: json.RawMessage(`{"servers":["github"],"n":12345678901234567890}`)},
		{Time: at(2), Actor: "ops-key", Action: "session.terminate", Target: "3f2a9c1b"},
	}
	var want []store.AuditEntry
	for _, e := range in {
		want = append(want, appendAudit(t, s, e))
	}
	if want[0].ID == want[1].ID || want[0].ID == 0 {
		t.Errorf("IDs %d, %d: want distinct and non-zero", want[0].ID, want[1].ID)
	}
	got, next, err := s.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if next != nil {
		t.Errorf("next = %+v, want nil", next)
	}
	if diff := gocmp.Diff(got, newestFirst(want, auditKey)); diff != "" {
		t.Errorf("ListAudit (-got +want):\n%s", diff)
	}
	if got[0].Detail != nil {
		t.Errorf("absent detail read back as %q, want nil", got[0].Detail)
	}

	before := time.Now().Add(-time.Second)
	id, err := s.AppendAudit(ctx, store.AuditEntry{Actor: "x", Action: "key.delete"})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err = s.ListAudit(ctx, store.AuditFilter{Action: "key.delete"})
	if err != nil || len(got) != 1 || got[0].ID != id || got[0].Time.Before(before) {
		t.Errorf("entry without Time = %+v, %v; want stamped with now", got, err)
	}

	for _, bad := range []store.AuditEntry{
		{Action: "key.create"},
		{Actor: "x"},
		{Actor: "x", Action: "key.create", Detail: json.RawMessage(`{`)},
	} {
		if _, err := s.AppendAudit(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("AppendAudit(%+v): err = %v, want ErrInvalid", bad, err)
		}
	}
}

func testAuditPagination(t *testing.T, s store.Store) {
	ctx := t.Context()
	var all []store.AuditEntry
	// Three entries per millisecond, appended out of time order, so the
	// order depends on both time and id.
	for i := range 250 {
		n := (i * 37) % 250
		all = append(all, appendAudit(t, s, store.AuditEntry{Time: at(n / 3), Actor: "a", Action: "key.create", Target: fmt.Sprint(n)}))
	}
	want := newestFirst(all, auditKey)

	got, pages := listAllAudit(t, s, store.AuditFilter{Limit: 100})
	if diff := gocmp.Diff(pages, []int{100, 100, 50}); diff != "" {
		t.Errorf("page sizes (-got +want):\n%s", diff)
	}
	if diff := gocmp.Diff(got, want); diff != "" {
		t.Errorf("pages (-got +want):\n%s", diff)
	}

	// An exact multiple of the page size ends with a nil cursor, not an
	// empty page.
	_, pages = listAllAudit(t, s, store.AuditFilter{Limit: 125})
	if diff := gocmp.Diff(pages, []int{125, 125}); diff != "" {
		t.Errorf("page sizes at an exact multiple (-got +want):\n%s", diff)
	}

	// Entries appended after the first page do not shift later pages.
	first, next, err := s.ListAudit(ctx, store.AuditFilter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	appendAudit(t, s, store.AuditEntry{Time: at(1_000_000), Actor: "a", Action: "key.create"})
	second, _, err := s.ListAudit(ctx, store.AuditFilter{Limit: 10, Before: next})
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(append(first, second...), want[:20]); diff != "" {
		t.Errorf("pages around a concurrent append (-got +want):\n%s", diff)
	}
	if *next != (store.Cursor{Time: first[9].Time, ID: first[9].ID}) {
		t.Errorf("next = %+v, want the last entry's (time, id)", *next)
	}
}

func testAuditPageSize(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i := range store.MaxPageSize + 1 {
		appendAudit(t, s, store.AuditEntry{Time: at(i), Actor: "a", Action: "x"})
	}
	for _, tt := range []struct{ limit, want int }{
		{0, store.DefaultPageSize},
		{-5, store.DefaultPageSize},
		{7, 7},
		{store.MaxPageSize, store.MaxPageSize},
		{store.MaxPageSize + 500, store.MaxPageSize},
	} {
		got, next, err := s.ListAudit(ctx, store.AuditFilter{Limit: tt.limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tt.want || next == nil {
			t.Errorf("Limit %d: %d entries, next %v; want %d and a cursor", tt.limit, len(got), next, tt.want)
		}
	}
}

func testAuditFilters(t *testing.T, s store.Store) {
	var all []store.AuditEntry
	actors := []string{store.ActorMaster, "ops", "ci"}
	actions := []string{"key.create", "key.delete", "session.terminate", "server.put"}
	for i := range 60 {
		all = append(all, appendAudit(t, s, store.AuditEntry{
			Time: at(i * 10), Actor: actors[i%3], Action: actions[i%4], Target: fmt.Sprint(i),
		}))
	}
	filter := func(keep func(store.AuditEntry) bool) []store.AuditEntry {
		var out []store.AuditEntry
		for _, e := range newestFirst(all, auditKey) {
			if keep(e) {
				out = append(out, e)
			}
		}
		return out
	}
	for _, tt := range []struct {
		name string
		f    store.AuditFilter
		keep func(store.AuditEntry) bool
	}{
		{"actor", store.AuditFilter{Actor: "ops"}, func(e store.AuditEntry) bool { return e.Actor == "ops" }},
		{"action", store.AuditFilter{Action: "session.terminate"}, func(e store.AuditEntry) bool { return e.Action == "session.terminate" }},
		{"since inclusive", store.AuditFilter{Since: at(500)}, func(e store.AuditEntry) bool { return !e.Time.Before(at(500)) }},
		{"until exclusive", store.AuditFilter{Until: at(100)}, func(e store.AuditEntry) bool { return e.Time.Before(at(100)) }},
		{"window and actor, paged", store.AuditFilter{Since: at(100), Until: at(500), Actor: store.ActorMaster, Limit: 3},
			func(e store.AuditEntry) bool {
				return e.Actor == store.ActorMaster && !e.Time.Before(at(100)) && e.Time.Before(at(500))
			}},
		{"actor and action", store.AuditFilter{Actor: "ci", Action: "key.delete", Limit: 2},
			func(e store.AuditEntry) bool { return e.Actor == "ci" && e.Action == "key.delete" }},
		{"no match", store.AuditFilter{Actor: "nobody"}, func(store.AuditEntry) bool { return false }},
	} {
		got, _ := listAllAudit(t, s, tt.f)
		if diff := gocmp.Diff(got, filter(tt.keep)); diff != "" {
			t.Errorf("%s (-got +want):\n%s", tt.name, diff)
		}
	}
}

func testToolCalls(t *testing.T, s store.Store) {
	ctx := t.Context()
	var all []store.ToolCall
	for i := range 24 {
		c := store.ToolCall{
			Time:            at(i % 5),
			KeyAlias:        []string{"ci", "dev"}[i%2],
			User:            []string{"alice", "bob", ""}[i%3],
			Team:            []string{"eng", "ops"}[i%2],
			Server:          []string{"github", "jira"}[i/12],
			Tool:            []string{"search", "create_issue", "get"}[i%3],
			DurationMs:      int64(i * 7),
			Outcome:         []string{"ok", "ok", "error", "denied"}[i%4],
			SessionIDPrefix: "3f2a9c1b",
			RequestBytes:    int64(100 + i),
			ResponseBytes:   int64(1 << 20),
			Cost:            float64(i%3) * 0.0025,
		}
		if c.Outcome != "ok" {
			c.ErrorClass = "upstream"
		}
		if c.Outcome == "denied" {
			c.Outcome, c.Guardrail = store.OutcomeBlocked, "deny-sql"
		}
		id, err := s.AppendToolCall(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		c.ID = id
		all = append(all, c)
	}
	key := func(c store.ToolCall) (time.Time, int64) { return c.Time, c.ID }
	want := func(keep func(store.ToolCall) bool) []store.ToolCall {
		var out []store.ToolCall
		for _, c := range newestFirst(all, key) {
			if keep(c) {
				out = append(out, c)
			}
		}
		return out
	}
	for _, tt := range []struct {
		name string
		f    store.ToolCallFilter
		keep func(store.ToolCall) bool
	}{
		{"all", store.ToolCallFilter{}, func(store.ToolCall) bool { return true }},
		{"key", store.ToolCallFilter{KeyAlias: "dev"}, func(c store.ToolCall) bool { return c.KeyAlias == "dev" }},
		{"user", store.ToolCallFilter{User: "bob"}, func(c store.ToolCall) bool { return c.User == "bob" }},
		{"team", store.ToolCallFilter{Team: "ops"}, func(c store.ToolCall) bool { return c.Team == "ops" }},
		{"server and tool", store.ToolCallFilter{Server: "jira", Tool: "get"}, func(c store.ToolCall) bool { return c.Server == "jira" && c.Tool == "get" }},
		{"outcome", store.ToolCallFilter{Outcome: store.OutcomeBlocked}, func(c store.ToolCall) bool { return c.Outcome == store.OutcomeBlocked && c.Guardrail == "deny-sql" }},
		{"window", store.ToolCallFilter{Since: at(1), Until: at(3)}, func(c store.ToolCall) bool { return !c.Time.Before(at(1)) && c.Time.Before(at(3)) }},
	} {
		f := tt.f
		f.Limit = 4
		got := ListAllToolCalls(t, s, f)
		if diff := gocmp.Diff(got, want(tt.keep)); diff != "" {
			t.Errorf("%s (-got +want):\n%s", tt.name, diff)
		}
	}
}

func testToolCallInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	ok := store.ToolCall{Server: "github", Tool: "search", Outcome: "ok"}
	for name, mutate := range map[string]func(*store.ToolCall){
		"no server":           func(c *store.ToolCall) { c.Server = "" },
		"no tool":             func(c *store.ToolCall) { c.Tool = "" },
		"no outcome":          func(c *store.ToolCall) { c.Outcome = "" },
		"full session id":     func(c *store.ToolCall) { c.SessionIDPrefix = "3f2a9c1b-7d4e-4f00-9a1b-0c2d3e4f5a6b" },
		"negative duration":   func(c *store.ToolCall) { c.DurationMs = -1 },
		"negative byte count": func(c *store.ToolCall) { c.ResponseBytes = -1 },
		"negative cost":       func(c *store.ToolCall) { c.Cost = -0.5 },
		"long guardrail name": func(c *store.ToolCall) { c.Guardrail = strings.Repeat("g", store.MaxGuardrailName+1) },
	} {
		c := ok
		mutate(&c)
		if _, err := s.AppendToolCall(ctx, c); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	before := time.Now().Add(-time.Second)
	if _, err := s.AppendToolCall(ctx, ok); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.ListToolCalls(ctx, store.ToolCallFilter{})
	if err != nil || len(got) != 1 || got[0].Time.Before(before) {
		t.Errorf("ListToolCalls = %+v, %v; want the one valid call, stamped now", got, err)
	}
	// A denied call names no server, and no tool when it had no name.
	if _, err := s.AppendToolCall(ctx, store.ToolCall{Outcome: store.FaultDenied, ErrorClass: store.FaultDenied}); err != nil {
		t.Errorf("a denied call without server or tool: %v", err)
	}
}

// ListAllToolCalls lists every tool call f selects, following the next
// cursors to the end; for a backend's own tests too.
func ListAllToolCalls(t *testing.T, s store.Store, f store.ToolCallFilter) []store.ToolCall {
	t.Helper()
	var all []store.ToolCall
	for range 10_000 {
		page, next, err := s.ListToolCalls(t.Context(), f)
		if err != nil {
			t.Fatalf("ListToolCalls(%+v): %v", f, err)
		}
		all = append(all, page...)
		if next == nil {
			return all
		}
		f.Before = next
	}
	t.Fatal("ListToolCalls never returned a nil cursor")
	return nil
}

func testToolCallBatch(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Seven calls per millisecond, so the order within a millisecond
	// depends on the ids, which must follow the slice.
	const n = 500
	in := make([]store.ToolCall, n)
	for i := range in {
		in[i] = store.ToolCall{
			Time:            at(i / 7),
			KeyAlias:        []string{"ci", "dev"}[i%2],
			User:            []string{"alice", "bob", ""}[i%3],
			Team:            "eng",
			Server:          []string{"github", "jira"}[i%2],
			Tool:            fmt.Sprintf("tool_%d", i%11),
			DurationMs:      int64(i),
			Outcome:         []string{"ok", "error"}[i%2],
			SessionIDPrefix: "3f2a9c1b",
			RequestBytes:    int64(i), // identifies the call below
			ResponseBytes:   int64(i) << 20,
			Guardrail:       []string{"", "pii"}[i%2],
			Cost:            float64(i) / 4,
		}
		if in[i].Outcome != "ok" {
			in[i].ErrorClass = "upstream"
		}
	}
	orig := slices.Clone(in)
	if err := s.AppendToolCalls(ctx, in); err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(in, orig); diff != "" {
		t.Errorf("AppendToolCalls changed its argument (-got +want):\n%s", diff)
	}

	got := ListAllToolCalls(t, s, store.ToolCallFilter{Limit: 128})
	if len(got) != n {
		t.Fatalf("listed %d calls, want %d", len(got), n)
	}
	// Ids are distinct and increase in slice order.
	ids := make([]int64, n)
	for _, c := range got {
		if c.ID == 0 || ids[c.RequestBytes] != 0 {
			t.Fatalf("call %d listed with id %d, or twice", c.RequestBytes, c.ID)
		}
		ids[c.RequestBytes] = c.ID
	}
	for i := 1; i < n; i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("call %d has id %d, call %d has id %d: want increasing in slice order", i-1, ids[i-1], i, ids[i])
		}
	}
	want := slices.Clone(orig)
	for i := range want {
		want[i].ID = ids[i]
	}
	if diff := gocmp.Diff(got, newestFirst(want, func(c store.ToolCall) (time.Time, int64) { return c.Time, c.ID })); diff != "" {
		t.Errorf("ListToolCalls after a batch (-got +want):\n%s", diff)
	}

	// A zero Time is stamped with now, like AppendToolCall; a set one is
	// kept.
	before := time.Now().Add(-time.Second)
	if err := s.AppendToolCalls(ctx, []store.ToolCall{
		{Server: "github", Tool: "stamped", Outcome: "ok"},
		{Time: at(-1), Server: "github", Tool: "kept", Outcome: "ok"},
	}); err != nil {
		t.Fatal(err)
	}
	for tool, check := range map[string]func(time.Time) bool{
		"stamped": func(ts time.Time) bool { return !ts.Before(before) && ts.Location() == time.UTC },
		"kept":    func(ts time.Time) bool { return ts.Equal(at(-1)) },
	} {
		got := ListAllToolCalls(t, s, store.ToolCallFilter{Tool: tool})
		if len(got) != 1 || !check(got[0].Time) {
			t.Errorf("%s: %+v", tool, got)
		}
	}
}

func testToolCallBatchInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	ok := store.ToolCall{Server: "github", Tool: "search", Outcome: "ok"}
	for name, mutate := range map[string]func(*store.ToolCall){
		"no server":           func(c *store.ToolCall) { c.Server = "" },
		"no tool":             func(c *store.ToolCall) { c.Tool = "" },
		"no outcome":          func(c *store.ToolCall) { c.Outcome = "" },
		"full session id":     func(c *store.ToolCall) { c.SessionIDPrefix = "3f2a9c1b-7d4e-4f00-9a1b-0c2d3e4f5a6b" },
		"negative duration":   func(c *store.ToolCall) { c.DurationMs = -1 },
		"negative byte count": func(c *store.ToolCall) { c.RequestBytes = -1 },
	} {
		for _, pos := range []int{0, 50, 99} {
			batch := make([]store.ToolCall, 100)
			for i := range batch {
				batch[i] = ok
			}
			mutate(&batch[pos])
			if err := s.AppendToolCalls(ctx, batch); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%s at %d: err = %v, want ErrInvalid", name, pos, err)
			}
		}
	}
	if got := ListAllToolCalls(t, s, store.ToolCallFilter{}); len(got) != 0 {
		t.Errorf("%d calls written by rejected batches, want none", len(got))
	}
}

// testToolCallBatchSizes: a backend may cut a batch into statements of
// several rows (at its parameter limit); every row of every size arrives
// once, with its own values, in slice order.
func testToolCallBatchSizes(t *testing.T, s store.Store) {
	ctx := t.Context()
	seq := 0
	var want []int64 // RequestBytes in write order
	for _, n := range []int{1, 2, 3, 127, 128, 129, 383, 4681, 4682, 9400} {
		batch := make([]store.ToolCall, n)
		for i := range batch {
			seq++
			batch[i] = store.ToolCall{Time: at(seq), Server: "s", Tool: fmt.Sprintf("t%d", seq%5),
				Outcome: "ok", RequestBytes: int64(seq), Cost: float64(seq)}
			want = append(want, int64(seq))
		}
		if err := s.AppendToolCalls(ctx, batch); err != nil {
			t.Fatalf("batch of %d: %v", n, err)
		}
	}
	got := ListAllToolCalls(t, s, store.ToolCallFilter{Limit: store.MaxPageSize})
	if len(got) != len(want) {
		t.Fatalf("listed %d calls, want %d", len(got), len(want))
	}
	slices.Reverse(got) // oldest first: at(seq) increases with seq
	for i, c := range got {
		if c.RequestBytes != want[i] || c.Cost != float64(want[i]) || c.Tool != fmt.Sprintf("t%d", want[i]%5) ||
			!c.Time.Equal(at(int(want[i]))) || (i > 0 && c.ID <= got[i-1].ID) {
			t.Fatalf("row %d = %+v, want the call numbered %d with an id above the one before", i, c, want[i])
		}
	}
}

func testToolCallBatchEmpty(t *testing.T, s store.Store) {
	for _, calls := range [][]store.ToolCall{nil, {}} {
		if err := s.AppendToolCalls(t.Context(), calls); err != nil {
			t.Errorf("AppendToolCalls(%#v) = %v, want nil", calls, err)
		}
	}
	if got := ListAllToolCalls(t, s, store.ToolCallFilter{}); len(got) != 0 {
		t.Errorf("%d calls after empty batches, want none", len(got))
	}
}

// testUsage: costs and calls summed per key, user and team over a period,
// costliest first; an unknown grouping is ErrInvalid.
func testUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	ul, ok := s.(store.UsageLog)
	if !ok {
		t.Fatal("the store cannot sum usage (store.UsageLog)")
	}
	calls := []store.ToolCall{
		{Time: at(1), KeyAlias: "ci", User: "alice", Team: "eng", Cost: 0.5},
		{Time: at(2), KeyAlias: "ci", User: "bob", Team: "eng", Cost: 0.25},
		{Time: at(3), KeyAlias: "dev", User: "alice", Team: "ops", Cost: 2},
		{Time: at(4), KeyAlias: "dev", User: "", Team: "ops"},
		{Time: at(9), KeyAlias: "late", User: "carol", Team: "eng", Cost: 100},
	}
	for i := range calls {
		calls[i].Server, calls[i].Tool, calls[i].Outcome = "s", "t", "ok"
	}
	if err := s.AppendToolCalls(ctx, calls); err != nil {
		t.Fatal(err)
	}
	approx := cmpopts.EquateApprox(0, 1e-9)
	for _, tt := range []struct {
		by   string
		want []store.Usage
	}{
		{store.UsageByKey, []store.Usage{{Group: "dev", Calls: 2, Cost: 2}, {Group: "ci", Calls: 2, Cost: 0.75}}},
		{store.UsageByUser, []store.Usage{{Group: "alice", Calls: 2, Cost: 2.5}, {Group: "bob", Calls: 1, Cost: 0.25}, {Group: "", Calls: 1, Cost: 0}}},
		{store.UsageByTeam, []store.Usage{{Group: "ops", Calls: 2, Cost: 2}, {Group: "eng", Calls: 2, Cost: 0.75}}},
	} {
		got, err := ul.SumUsage(ctx, store.UsageFilter{By: tt.by, Since: at(1), Until: at(9)})
		if err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(got, tt.want, approx); diff != "" {
			t.Errorf("by %s (-got +want):\n%s", tt.by, diff)
		}
	}
	all, err := ul.SumUsage(ctx, store.UsageFilter{By: store.UsageByKey})
	if err != nil || len(all) != 3 || all[0].Group != "late" {
		t.Errorf("unbounded period: %v, %v", all, err)
	}
	// One key's calls only (a budget's check).
	if one, err := ul.SumUsage(ctx, store.UsageFilter{By: store.UsageByKey, Key: "ci", Since: at(2)}); err != nil || gocmp.Diff(one, []store.Usage{{Group: "ci", Calls: 1, Cost: 0.25}}, approx) != "" {
		t.Errorf("key ci since 2: %v, %v", one, err)
	}
	if _, err := ul.SumUsage(ctx, store.UsageFilter{By: "server"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("by server: %v, want ErrInvalid", err)
	}
}
