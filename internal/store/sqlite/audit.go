package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mcpgate/mcpgate/internal/store"
)

// auditTables runs store.SQLAudit's statements on audit_log and
// tool_calls.
type auditTables struct{ s *Store }

func (a auditTables) InsertAudit(ctx context.Context, e store.AuditEntry) (int64, error) {
	var detail sql.NullString
	if len(e.Detail) > 0 {
		detail = sql.NullString{String: string(e.Detail), Valid: true}
	}
	res, err := a.s.w.ExecContext(ctx, `INSERT INTO audit_log (ts, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)`,
		ms(e.Time), e.Actor, e.Action, e.Target, detail)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

func (a auditTables) SelectAudit(ctx context.Context, page string, args []any) ([]store.AuditEntry, error) {
	return selectRows(ctx, a.s.r, `SELECT id, ts, actor, action, target, detail FROM audit_log`+page, args,
		func(sc scanner) (store.AuditEntry, error) {
			var e store.AuditEntry
			var ts int64
			var detail sql.NullString
			err := sc.Scan(&e.ID, &ts, &e.Actor, &e.Action, &e.Target, &detail)
			e.Time = fromMS(ts)
			if detail.Valid {
				e.Detail = json.RawMessage(detail.String)
			}
			return e, err
		})
}

const toolCallCols = `id, ts, key_alias, user_id, team_id, server, tool, duration_ms,
	outcome, error_class, session_id_prefix, request_bytes, response_bytes, guardrail, cost`

// insertCols are the columns an insert sets: id is left to AUTOINCREMENT.
const insertCols = `ts, key_alias, user_id, team_id, server, tool, duration_ms,
	outcome, error_class, session_id_prefix, request_bytes, response_bytes, guardrail, cost`

// toolCallParams is how many parameters one row takes.
const toolCallParams = 14

// insertToolCalls is the INSERT of n rows. One statement for many rows
// parses, plans and updates the indexes' and AUTOINCREMENT's bookkeeping
// once per statement instead of once per row: it halves the cost per
// record of a batch (docs/benchmarks.md "Audit and memory").
//
// OR FAIL: a refused row ends the statement without undoing the rows it
// wrote before, so SQLite keeps no statement journal (a copy of every
// page the statement changes, to undo it alone): about 15% of a record's
// cost. Undoing is the transaction's job: InsertToolCalls rolls the
// whole batch back on any error (TestRefusedRowWritesNoneOfItsBatch),
// and a lone row (InsertToolCall) is its own statement.
func insertToolCalls(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT OR FAIL INTO tool_calls (` + insertCols + `) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(insertRow)
	}
	return b.String()
}

// insertRow is one row's VALUES. A text parameter bound to NULL stores
// the empty string (bindToolCall): the driver copies each string it binds into C
// memory and records the copy in a slice it grows for every execution,
// and most records leave several text columns empty (no caller identity
// without auth, no error class, no guardrail).
const insertRow = `(?, coalesce(?, ''), coalesce(?, ''), coalesce(?, ''), coalesce(?, ''), coalesce(?, ''), ?, ` +
	`coalesce(?, ''), coalesce(?, ''), coalesce(?, ''), ?, ?, coalesce(?, ''), ?)`

// insertChunks are the row counts of the prepared multi-row inserts, the
// largest first: a batch is cut into chunks of maxInsertRows rows, and the
// rest written with the powers of two that sum to it, so any batch takes
// at most log2(maxInsertRows)+1 statements beyond its full chunks, each
// prepared once per connection. maxInsertRows*toolCallParams (1792) is far
// under SQLite's limit on a statement's parameters (32766).
var insertChunks = [...]int{128, 64, 32, 16, 8, 4, 2, 1}

// maxInsertRows is insertChunks[0].
const maxInsertRows = 128

func (a auditTables) InsertToolCall(ctx context.Context, c store.ToolCall) (int64, error) {
	var id int64
	err := a.s.withWriter(ctx, func(w *writerConn) (bool, error) {
		var err error
		id, err = w.calls.insert(ctx, w, []store.ToolCall{c})
		return false, err
	})
	return id, err
}

// InsertToolCalls writes calls in one transaction with the prepared
// multi-row inserts (insertChunks), in slice order, so their ids increase
// in slice order. It runs on the writer's driver connection (writer.go),
// whose statements are already prepared.
//
// With sync, the transaction runs with synchronous=FULL, which syncs the
// WAL at its commit: the batch survives a power loss, not only a crash of
// the process (NORMAL, the connection's setting, syncs at checkpoints).
// The connection goes back to NORMAL after it.
func (a auditTables) InsertToolCalls(ctx context.Context, calls []store.ToolCall, sync bool) error {
	return a.s.withWriter(ctx, func(w *writerConn) (drop bool, err error) {
		if sync {
			if _, err := w.ExecContext(ctx, "PRAGMA synchronous = FULL", nil); err != nil {
				return false, err
			}
			defer func() {
				// Not back to NORMAL: drop the connection, so the
				// pool's next one opens with the DSN's settings.
				_, rerr := w.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous = NORMAL", nil)
				drop = rerr != nil
			}()
		}
		tx, err := w.BeginTx(ctx, driver.TxOptions{}) // IMMEDIATE: see the package doc
		if err != nil {
			return false, err
		}
		if _, err := w.calls.insert(ctx, w, calls); err != nil {
			tx.Rollback()
			return false, err
		}
		return false, tx.Commit()
	})
}

// toolCallInserts are a writer connection's prepared inserts into
// tool_calls, and the arguments they bind, both kept from batch to batch:
// preparing a 128-row insert costs more than running it, and the
// arguments (maxInsertRows*toolCallParams values, 70 KiB) would otherwise
// be a batch's largest garbage. No value outlives its batch: insert
// clears them, so the pool's connection keeps none of a batch's strings.
type toolCallInserts struct {
	// stmts[i] inserts insertChunks[i] rows; nil until first used.
	stmts [len(insertChunks)]execStmt
	// args has each Ordinal set; its Values are nil between batches.
	args []driver.NamedValue
}

type execStmt interface {
	driver.Stmt
	driver.StmtExecContext
}

// prepare prepares every insert not prepared yet.
func (t *toolCallInserts) prepare(ctx context.Context, c *writerConn) error {
	for i := range insertChunks {
		if _, err := t.stmt(ctx, c, i); err != nil {
			return err
		}
	}
	return nil
}

// stmt returns the insert of insertChunks[i] rows, prepared on c.
func (t *toolCallInserts) stmt(ctx context.Context, c *writerConn, i int) (execStmt, error) {
	if st := t.stmts[i]; st != nil {
		return st, nil
	}
	ds, err := c.PrepareContext(ctx, insertToolCalls(insertChunks[i]))
	if err != nil {
		return nil, fmt.Errorf("prepare insert of %d tool calls: %w", insertChunks[i], err)
	}
	st, ok := ds.(execStmt)
	if !ok {
		ds.Close()
		return nil, fmt.Errorf("prepare insert of %d tool calls: driver statement %T lacks ExecContext", insertChunks[i], ds)
	}
	t.stmts[i] = st
	return st, nil
}

// insert runs the inserts of calls on c, in slice order, and returns the
// id of the last row.
func (t *toolCallInserts) insert(ctx context.Context, c *writerConn, calls []store.ToolCall) (last int64, err error) {
	defer t.clear()
	var b boxes
	for i, rest := 0, calls; len(rest) > 0; i++ {
		n := insertChunks[i]
		if len(rest) < n {
			continue
		}
		st, err := t.stmt(ctx, c, i)
		if err != nil {
			return 0, err
		}
		args := t.argsOf(n)
		for ; len(rest) >= n; rest = rest[n:] {
			for j := range n {
				bindToolCall(args[j*toolCallParams:(j+1)*toolCallParams], &rest[j], &b)
			}
			res, err := st.ExecContext(ctx, args)
			if err != nil {
				return 0, err
			}
			if last, err = res.LastInsertId(); err != nil {
				return 0, err
			}
		}
	}
	return last, nil
}

// argsOf returns the arguments of an insert of n rows.
func (t *toolCallInserts) argsOf(n int) []driver.NamedValue {
	if k := n * toolCallParams; len(t.args) < k {
		t.args = make([]driver.NamedValue, k)
		for j := range t.args {
			t.args[j].Ordinal = j + 1
		}
	}
	return t.args[:n*toolCallParams]
}

// clear drops the batch's values: don't keep its strings alive.
func (t *toolCallInserts) clear() {
	for j := range t.args {
		t.args[j].Value = nil
	}
}

// close closes the prepared statements.
func (t *toolCallInserts) close() error {
	var errs []error
	for i, st := range t.stmts {
		if st != nil {
			errs = append(errs, st.Close())
			t.stmts[i] = nil
		}
	}
	return errors.Join(errs...)
}

// bindToolCall sets the values of one row's parameters (insertCols),
// boxing them through b.
func bindToolCall(row []driver.NamedValue, c *store.ToolCall, b *boxes) {
	row[0].Value = box(&b[0], ms(c.Time))
	row[1].Value = text(&b[1], c.KeyAlias)
	row[2].Value = text(&b[2], c.User)
	row[3].Value = text(&b[3], c.Team)
	row[4].Value = text(&b[4], c.Server)
	row[5].Value = text(&b[5], c.Tool)
	row[6].Value = box(&b[6], c.DurationMs)
	row[7].Value = text(&b[7], c.Outcome)
	row[8].Value = text(&b[8], c.ErrorClass)
	row[9].Value = text(&b[9], c.SessionIDPrefix)
	row[10].Value = box(&b[10], c.RequestBytes)
	row[11].Value = box(&b[11], c.ResponseBytes)
	row[12].Value = text(&b[12], c.Guardrail)
	row[13].Value = box(&b[13], c.Cost)
}

// text is the value of a text parameter: nil for "", which insertRow
// stores as the empty string.
func text(recent *[recentBoxes]any, s string) any {
	if s == "" {
		return nil
	}
	return box(recent, s)
}

// boxes holds, for each parameter of a row, the last values bound to it,
// boxed. The driver takes values as `any`, and boxing a string or an
// integer past 255 allocates; a batch's records mostly repeat recent
// records' key, user, team, server, tool, outcome, millisecond, sizes and
// price, and share their boxes. One lives for one batch (insert's), so it
// keeps none of the batch's strings alive after it.
type boxes [toolCallParams][recentBoxes]any

// recentBoxes is how many values boxes keeps per parameter: a batch mixes
// a few keys, servers and tools, and a lookup that misses compares this
// many.
const recentBoxes = 4

// box returns v boxed, sharing the box of an equal recent value.
func box[T comparable](recent *[recentBoxes]any, v T) any {
	for _, x := range recent {
		if y, ok := x.(T); ok && y == v {
			return x
		}
	}
	copy(recent[1:], recent[:])
	recent[0] = v
	return recent[0]
}

func (a auditTables) SelectToolCalls(ctx context.Context, page string, args []any) ([]store.ToolCall, error) {
	return selectRows(ctx, a.s.r, selectToolCallsSQL(page), args,
		func(sc scanner) (store.ToolCall, error) {
			var c store.ToolCall
			var ts int64
			err := sc.Scan(&c.ID, &ts, &c.KeyAlias, &c.User, &c.Team, &c.Server, &c.Tool, &c.DurationMs,
				&c.Outcome, &c.ErrorClass, &c.SessionIDPrefix, &c.RequestBytes, &c.ResponseBytes, &c.Guardrail, &c.Cost)
			c.Time = fromMS(ts)
			return c, err
		})
}

func (a auditTables) SumToolCalls(ctx context.Context, col, where string, args []any) ([]store.Usage, error) {
	return selectRows(ctx, a.s.r, sumToolCallsSQL(col, where), args,
		func(sc scanner) (store.Usage, error) {
			var u store.Usage
			err := sc.Scan(&u.Group, &u.Calls, &u.Cost)
			return u, err
		})
}

// The queries on tool_calls, apart from their runs: TestToolCallIndexesUsed
// asks SQLite's planner how it runs them.

func selectToolCallsSQL(page string) string {
	return `SELECT ` + toolCallCols + ` FROM tool_calls` + page
}

func sumToolCallsSQL(col, where string) string {
	return `SELECT ` + col + `, COUNT(*), TOTAL(cost) FROM tool_calls` + where +
		` GROUP BY ` + col + ` ORDER BY TOTAL(cost) DESC, ` + col
}
