package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
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
func insertToolCalls(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO tool_calls (` + insertCols + `) VALUES `)
	const row = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

// insertChunks are the row counts of the prepared multi-row inserts, the
// largest first: a batch is cut into chunks of maxInsertRows rows, and the
// rest written with the powers of two that sum to it, so any batch takes
// at most log2(maxInsertRows)+1 statements beyond its full chunks, all
// prepared at Open. maxInsertRows*toolCallParams (1792) is far under
// SQLite's limit on a statement's parameters (32766).
var insertChunks = [...]int{128, 64, 32, 16, 8, 4, 2, 1}

// maxInsertRows is insertChunks[0].
const maxInsertRows = 128

func toolCallArgs(c *store.ToolCall) []any {
	return appendToolCallArgs(make([]any, 0, toolCallParams), c)
}

func appendToolCallArgs(args []any, c *store.ToolCall) []any {
	return append(args, ms(c.Time), c.KeyAlias, c.User, c.Team, c.Server, c.Tool, c.DurationMs,
		c.Outcome, c.ErrorClass, c.SessionIDPrefix, c.RequestBytes, c.ResponseBytes, c.Guardrail, c.Cost)
}

func (a auditTables) InsertToolCall(ctx context.Context, c store.ToolCall) (int64, error) {
	res, err := a.s.addToolCalls[len(insertChunks)-1].ExecContext(ctx, toolCallArgs(&c)...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// InsertToolCalls writes calls in one transaction with the prepared
// multi-row inserts (insertChunks), in slice order, so their ids increase
// in slice order. The writer pool has one connection, on which the
// statements are already prepared: the transaction reuses them rather than
// parsing again.
//
// With sync, the transaction runs with synchronous=FULL, which syncs the
// WAL at its commit: the batch survives a power loss, not only a crash of
// the process (NORMAL, the connection's setting, syncs at checkpoints).
// The connection goes back to NORMAL after it.
func (a auditTables) InsertToolCalls(ctx context.Context, calls []store.ToolCall, sync bool) error {
	conn, err := a.s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if sync {
		if _, err := conn.ExecContext(ctx, "PRAGMA synchronous = FULL"); err != nil {
			return err
		}
		defer func() {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous = NORMAL"); err != nil {
				// Not back to NORMAL: drop the connection, so the
				// pool's next one opens with the DSN's settings.
				conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
	}
	tx, err := conn.BeginTx(ctx, nil) // IMMEDIATE: see the package doc
	if err != nil {
		return err
	}
	defer tx.Rollback()
	args := make([]any, 0, min(len(calls), maxInsertRows)*toolCallParams)
	for i, rest := 0, calls; len(rest) > 0; i++ {
		n := insertChunks[i]
		if len(rest) < n {
			continue
		}
		st := tx.StmtContext(ctx, a.s.addToolCalls[i])
		for ; len(rest) >= n; rest = rest[n:] {
			args = args[:0]
			for j := range n {
				args = appendToolCallArgs(args, &rest[j])
			}
			if _, err := st.ExecContext(ctx, args...); err != nil {
				return err
			}
		}
	}
	clear(args) // don't keep the batch's strings alive
	return tx.Commit()
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
