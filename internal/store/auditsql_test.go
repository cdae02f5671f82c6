package store

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The clauses SQLAudit builds, in both backends' placeholders: every
// filter, in a fixed order, and one row more than the page.
func TestWhereClauses(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	unixMS := func(t time.Time) any { return t.UnixMilli() }
	for _, tc := range []struct {
		name string
		d    Dialect
		want string
	}{
		{"question marks", Dialect{Param: func(int) string { return "?" }, Time: unixMS},
			" WHERE actor = ? AND ts >= ? AND ts < ? AND (ts, id) < (?, ?) ORDER BY ts DESC, id DESC LIMIT 11"},
		{"numbered", Dialect{Param: func(n int) string { return "$" + strconv.Itoa(n) }, Time: unixMS},
			" WHERE actor = $1 AND ts >= $2 AND ts < $3 AND (ts, id) < ($4, $5) ORDER BY ts DESC, id DESC LIMIT 11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := SQLAudit{Dialect: tc.d}.where()
			w.eq("actor", "alice")
			w.eq("action", "") // no filter
			w.window(at, at.Add(time.Hour), &Cursor{Time: at.Add(time.Minute), ID: 7})
			if got := w.page(10); got != tc.want {
				t.Errorf("page(10) =\n%q, want\n%q", got, tc.want)
			}
			want := []any{"alice", at.UnixMilli(), at.Add(time.Hour).UnixMilli(), at.Add(time.Minute).UnixMilli(), int64(7)}
			if diff := cmp.Diff(w.args, want); diff != "" {
				t.Errorf("args (-got +want):\n%s", diff)
			}
		})
	}
	if got := (SQLAudit{Dialect: Dialect{Param: func(int) string { return "?" }}}).where().clause(); got != "" {
		t.Errorf("clause with no filter = %q, want empty", got)
	}
}

// insertRecorder is an AuditTables that keeps the batches it is handed.
type insertRecorder struct {
	AuditTables
	got [][]ToolCall
}

func (r *insertRecorder) InsertToolCalls(_ context.Context, calls []ToolCall, _ bool) error {
	r.got = append(r.got, calls)
	return nil
}

// A batch whose records are all timed (the audit writer's) reaches the
// backend as it is, without a copy; one with a zero time reaches it as a
// copy with that time stamped, the caller's slice unchanged.
func TestAppendToolCallsStampsACopy(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var r insertRecorder
	a := SQLAudit{Tables: &r}

	timed := []ToolCall{{Time: at, Server: "s", Tool: "t", Outcome: OutcomeOK}, {Time: at, Server: "s", Tool: "u", Outcome: OutcomeOK}}
	if err := a.AppendToolCalls(t.Context(), timed); err != nil {
		t.Fatal(err)
	}
	if got := r.got[0]; &got[0] != &timed[0] {
		t.Error("a timed batch was copied")
	}

	untimed := []ToolCall{{Time: at, Server: "s", Tool: "t", Outcome: OutcomeOK}, {Server: "s", Tool: "u", Outcome: OutcomeOK}}
	orig := slices.Clone(untimed)
	before := time.Now().Add(-time.Second)
	if err := a.AppendToolCallsSync(t.Context(), untimed); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(untimed, orig); diff != "" {
		t.Errorf("AppendToolCalls changed its argument (-got +want):\n%s", diff)
	}
	got := r.got[1]
	if &got[0] == &untimed[0] || !got[0].Time.Equal(at) || got[1].Time.Before(before) {
		t.Errorf("an untimed batch reached the backend as %+v", got)
	}
}
