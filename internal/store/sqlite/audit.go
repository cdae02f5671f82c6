package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"

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

const insertToolCall = `INSERT INTO tool_calls (` + toolCallCols + `)
	VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func toolCallArgs(c *store.ToolCall) []any {
	return []any{ms(c.Time), c.KeyAlias, c.User, c.Team, c.Server, c.Tool, c.DurationMs,
		c.Outcome, c.ErrorClass, c.SessionIDPrefix, c.RequestBytes, c.ResponseBytes, c.Guardrail, c.Cost}
}

func (a auditTables) InsertToolCall(ctx context.Context, c store.ToolCall) (int64, error) {
	res, err := a.s.addToolCall.ExecContext(ctx, toolCallArgs(&c)...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

func (a auditTables) InsertToolCalls(ctx context.Context, calls []store.ToolCall) error {
	tx, err := a.s.w.BeginTx(ctx, nil) // IMMEDIATE: see the package doc
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// The writer pool has one connection, on which addToolCall is already
	// prepared: the transaction reuses it rather than parsing again.
	st := tx.StmtContext(ctx, a.s.addToolCall)
	for i := range calls {
		if _, err := st.ExecContext(ctx, toolCallArgs(&calls[i])...); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (a auditTables) SelectToolCalls(ctx context.Context, page string, args []any) ([]store.ToolCall, error) {
	return selectRows(ctx, a.s.r, `SELECT `+toolCallCols+` FROM tool_calls`+page, args,
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
	return selectRows(ctx, a.s.r, `SELECT `+col+`, COUNT(*), TOTAL(cost) FROM tool_calls`+where+
		` GROUP BY `+col+` ORDER BY TOTAL(cost) DESC, `+col, args,
		func(sc scanner) (store.Usage, error) {
			var u store.Usage
			err := sc.Scan(&u.Group, &u.Calls, &u.Cost)
			return u, err
		})
}
