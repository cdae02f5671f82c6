package sqlite

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/store"
)

// variedCalls is realisticCallsFrom with the records the common shape
// leaves out: a denied call naming no server or tool, one with every text
// column set, and times off the millisecond and outside UTC.
func variedCalls(t0 time.Time, n int) []store.ToolCall {
	calls := realisticCallsFrom(t0, n)
	east := time.FixedZone("east", 5*3600)
	for i := range calls {
		c := &calls[i]
		switch {
		case i%17 == 3:
			c.Outcome, c.ErrorClass, c.Server, c.Tool = store.FaultDenied, store.FaultDenied, "", ""
			c.KeyAlias, c.SessionIDPrefix = "", ""
		case i%19 == 7:
			c.KeyAlias, c.User, c.Team = "k-é", "ü", "t"
			c.Outcome, c.ErrorClass, c.Guardrail = store.FaultBlocked, store.FaultBlocked, "g"
			c.DurationMs, c.RequestBytes, c.ResponseBytes, c.Cost = 1<<40, 1<<41, 1<<42, 0.125
		}
		if i%5 == 1 {
			c.Time = c.Time.Add(987654 * time.Nanosecond).In(east)
		}
	}
	return calls
}

// toolCallsAfter reads the tool_calls rows with an id above id, in id
// order, as the admin API's listing reads them.
func toolCallsAfter(t *testing.T, s *Store, id int64) []store.ToolCall {
	t.Helper()
	got, err := auditTables{s}.SelectToolCalls(t.Context(), " WHERE id > ? ORDER BY id", []any{id})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func lastToolCallID(t *testing.T, s *Store) int64 {
	t.Helper()
	var id int64
	if err := s.r.QueryRowContext(t.Context(), `SELECT coalesce(max(id), 0) FROM tool_calls`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// Every batch size from 1 to 300, so every chunk of insertChunks and every
// way to cut a batch into them runs (300 is two full chunks and a rest of
// 44 = 32+8+4): the rows read back are the records, field by field, in
// slice order with increasing ids, and the driver's arguments keep none of
// the batch's values.
func TestToolCallBatchesReadBack(t *testing.T) {
	s := openTemp(t, t.TempDir())
	t0 := time.Date(2026, 12, 3, 21, 0, 0, 0, time.UTC)
	for n := 1; n <= 300; n++ {
		calls := variedCalls(t0.Add(time.Duration(n)*time.Minute), n)
		before := lastToolCallID(t, s)
		if err := s.AppendToolCalls(t.Context(), calls); err != nil {
			t.Fatalf("batch of %d: %v", n, err)
		}
		got := toolCallsAfter(t, s, before)
		if len(got) != n {
			t.Fatalf("batch of %d: read back %d rows", n, len(got))
		}
		want := make([]store.ToolCall, n)
		for i, c := range calls {
			c.ID = got[i].ID
			c.Time = c.Time.UTC().Truncate(time.Millisecond)
			want[i] = c
			if i > 0 && got[i].ID <= got[i-1].ID {
				t.Fatalf("batch of %d: row %d has id %d after %d", n, i, got[i].ID, got[i-1].ID)
			}
		}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Fatalf("batch of %d read back (-got +want):\n%s", n, diff)
		}
	}
	checkArgsCleared(t, s)
}

// checkArgsCleared fails when the writer connection's insert arguments
// still hold a value after the batch that bound them.
func checkArgsCleared(t *testing.T, s *Store) {
	t.Helper()
	err := s.withWriter(t.Context(), func(w *writerConn) (bool, error) {
		if len(w.calls.args) == 0 {
			return false, errors.New("no insert arguments: the batches did not run on this connection")
		}
		for i, a := range w.calls.args {
			if a.Value != nil || a.Ordinal != i+1 {
				return false, fmt.Errorf("insert argument %d after the batch: %+v", i, a)
			}
		}
		return false, nil
	})
	if err != nil {
		t.Error(err)
	}
}

// A single record (AppendToolCall) goes through the same insert and gets
// its row's id.
func TestAppendToolCallID(t *testing.T) {
	s := openTemp(t, t.TempDir())
	for i, c := range variedCalls(time.Date(2026, 12, 3, 21, 0, 0, 0, time.UTC), 20) {
		id, err := s.AppendToolCall(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		got := toolCallsAfter(t, s, id-1)
		c.ID, c.Time = id, c.Time.UTC().Truncate(time.Millisecond)
		if len(got) != 1 || got[0] != c {
			t.Fatalf("record %d: AppendToolCall returned id %d, which holds %+v; want %+v", i, id, got, c)
		}
	}
	checkArgsCleared(t, s)
}

// writerConnOf returns the writer pool's current connection.
func writerConnOf(t *testing.T, s *Store) *writerConn {
	t.Helper()
	var wc *writerConn
	if err := s.withWriter(t.Context(), func(w *writerConn) (bool, error) { wc = w; return false, nil }); err != nil {
		t.Fatal(err)
	}
	return wc
}

// When the pool drops the writer's connection (ErrBadConn, or a
// statement the context interrupted, which leaves the connection invalid
// in the driver's eyes), the connection's statements are closed with it,
// and the next connection prepares its own and inserts.
func TestReplacedWriterConnInserts(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(t *testing.T, s *Store)
	}{
		{"bad conn", func(t *testing.T, s *Store) {
			if err := s.withWriter(t.Context(), func(*writerConn) (bool, error) { return true, nil }); err != nil {
				t.Fatal(err)
			}
		}},
		{"interrupted", func(t *testing.T, s *Store) {
			ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond) // long enough to start under load
			defer cancel()
			_, err := s.w.ExecContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c`)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("endless statement: %v, want the deadline's error", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t, t.TempDir())
			t0 := time.Date(2026, 12, 3, 21, 0, 0, 0, time.UTC)
			if err := s.AppendToolCalls(t.Context(), variedCalls(t0, 200)); err != nil {
				t.Fatal(err)
			}
			old := writerConnOf(t, s)
			tc.drop(t, s)
			for i, st := range old.calls.stmts {
				if st != nil {
					t.Errorf("the dropped connection's insert of %d rows is still open", insertChunks[i])
				}
			}
			before := lastToolCallID(t, s)
			calls := variedCalls(t0.Add(time.Hour), 200)
			if err := s.AppendToolCalls(t.Context(), calls); err != nil {
				t.Fatal(err)
			}
			if now := writerConnOf(t, s); now == old {
				t.Fatal("the writer's connection was not replaced")
			}
			if got := toolCallsAfter(t, s, before); len(got) != len(calls) {
				t.Errorf("after the connection was replaced, a batch of %d wrote %d rows", len(calls), len(got))
			}
		})
	}
}

// A batch whose context ends while it runs writes no row (one
// transaction), and the writer keeps working after it.
func TestCancelledBatchWritesNothing(t *testing.T) {
	s := openTemp(t, t.TempDir())
	t0 := time.Date(2026, 12, 3, 21, 0, 0, 0, time.UTC)
	before := lastToolCallID(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.AppendToolCalls(ctx, variedCalls(t0, 300)); err == nil {
		t.Fatal("a batch with an ended context was written")
	}
	if got := toolCallsAfter(t, s, before); len(got) != 0 {
		t.Fatalf("the cancelled batch wrote %d rows", len(got))
	}
	if err := s.AppendToolCalls(t.Context(), variedCalls(t0, 300)); err != nil {
		t.Fatal(err)
	}
	if got := toolCallsAfter(t, s, before); len(got) != 300 {
		t.Fatalf("the batch after a cancelled one wrote %d rows, want 300", len(got))
	}
}

// A row the database refuses in the middle of a batch (here a trigger's
// RAISE(FAIL), which keeps the rows its statement wrote before it, as
// the inserts' OR FAIL does) writes no row of the batch: the batch is one
// transaction, rolled back whole, so the writer's retry of it cannot
// write a record twice.
func TestRefusedRowWritesNoneOfItsBatch(t *testing.T) {
	s := openTemp(t, t.TempDir())
	t0 := time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)
	before := lastToolCallID(t, s)
	if _, err := s.w.ExecContext(t.Context(), `CREATE TEMP TRIGGER refuse BEFORE INSERT ON tool_calls WHEN NEW.tool = 'refused' BEGIN SELECT RAISE(FAIL, 'refused'); END`); err != nil {
		t.Fatal(err)
	}
	calls := variedCalls(t0, 300)
	calls[200].Tool = "refused" // in the second chunk of 128 rows
	if err := s.AppendToolCalls(t.Context(), calls); err == nil {
		t.Fatal("a batch with a refused row was written")
	}
	if got := toolCallsAfter(t, s, before); len(got) != 0 {
		t.Fatalf("the refused batch wrote %d rows", len(got))
	}
	calls[200].Tool = "fine"
	if err := s.AppendToolCalls(t.Context(), calls); err != nil {
		t.Fatal(err)
	}
	if got := toolCallsAfter(t, s, before); len(got) != 300 {
		t.Fatalf("the batch after a refused one wrote %d rows, want 300", len(got))
	}
}
