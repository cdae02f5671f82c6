package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (int64, error) {
	if err := e.Validate(); err != nil {
		return 0, fmt.Errorf("append audit: %w", err)
	}
	if e.Time.IsZero() {
		e.Time = now()
	}
	var detail sql.NullString
	if len(e.Detail) > 0 {
		detail = sql.NullString{String: string(e.Detail), Valid: true}
	}
	res, err := s.w.ExecContext(ctx, `INSERT INTO audit_log (ts, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)`,
		ms(e.Time), e.Actor, e.Action, e.Target, detail)
	if err != nil {
		return 0, fmt.Errorf("append audit %s: %w", e.Action, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("append audit %s: %w", e.Action, err)
	}
	return id, nil
}

func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, *store.Cursor, error) {
	var q page
	q.where("actor", f.Actor)
	q.where("action", f.Action)
	q.window(f.Since, f.Until, f.Before)
	limit := store.PageSize(f.Limit)
	rows, err := s.r.QueryContext(ctx, `SELECT id, ts, actor, action, target, detail FROM audit_log`+q.sql(limit), q.args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list audit: %w", err)
	}
	defer rows.Close()
	var out []store.AuditEntry
	for rows.Next() {
		var e store.AuditEntry
		var ts int64
		var detail sql.NullString
		if err := rows.Scan(&e.ID, &ts, &e.Actor, &e.Action, &e.Target, &detail); err != nil {
			return nil, nil, fmt.Errorf("list audit: %w", err)
		}
		e.Time = fromMS(ts)
		if detail.Valid {
			e.Detail = json.RawMessage(detail.String)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("list audit: %w", err)
	}
	out, next := cut(out, limit, func(e store.AuditEntry) store.Cursor { return store.Cursor{Time: e.Time, ID: e.ID} })
	return out, next, nil
}

const toolCallCols = `id, ts, key_alias, user_id, team_id, server, tool, duration_ms,
	outcome, error_class, session_id_prefix, request_bytes, response_bytes, guardrail, cost`

const insertToolCall = `INSERT INTO tool_calls (` + toolCallCols + `)
	VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func (s *Store) AppendToolCall(ctx context.Context, c store.ToolCall) (int64, error) {
	if err := c.Validate(); err != nil {
		return 0, fmt.Errorf("append tool call: %w", err)
	}
	if c.Time.IsZero() {
		c.Time = now()
	}
	res, err := s.addToolCall.ExecContext(ctx,
		ms(c.Time), c.KeyAlias, c.User, c.Team, c.Server, c.Tool, c.DurationMs,
		c.Outcome, c.ErrorClass, c.SessionIDPrefix, c.RequestBytes, c.ResponseBytes, c.Guardrail, c.Cost)
	if err != nil {
		return 0, fmt.Errorf("append tool call: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("append tool call: %w", err)
	}
	return id, nil
}

func (s *Store) AppendToolCalls(ctx context.Context, calls []store.ToolCall) error {
	if len(calls) == 0 {
		return nil
	}
	for i := range calls {
		if err := calls[i].Validate(); err != nil {
			return fmt.Errorf("append tool calls: call %d: %w", i, err)
		}
	}
	stamp := now()
	tx, err := s.w.BeginTx(ctx, nil) // IMMEDIATE: see the package doc
	if err != nil {
		return fmt.Errorf("append tool calls: %w", err)
	}
	defer tx.Rollback()
	// The writer pool has one connection, on which addToolCall is already
	// prepared: the transaction reuses it rather than parsing again.
	st := tx.StmtContext(ctx, s.addToolCall)
	for i := range calls {
		c := &calls[i]
		ts := stamp
		if !c.Time.IsZero() {
			ts = c.Time
		}
		if _, err := st.ExecContext(ctx,
			ms(ts), c.KeyAlias, c.User, c.Team, c.Server, c.Tool, c.DurationMs,
			c.Outcome, c.ErrorClass, c.SessionIDPrefix, c.RequestBytes, c.ResponseBytes, c.Guardrail, c.Cost); err != nil {
			return fmt.Errorf("append tool calls: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("append tool calls: %w", err)
	}
	return nil
}

func (s *Store) ListToolCalls(ctx context.Context, f store.ToolCallFilter) ([]store.ToolCall, *store.Cursor, error) {
	var q page
	q.where("key_alias", f.KeyAlias)
	q.where("user_id", f.User)
	q.where("team_id", f.Team)
	q.where("server", f.Server)
	q.where("tool", f.Tool)
	q.where("outcome", f.Outcome)
	q.window(f.Since, f.Until, f.Before)
	limit := store.PageSize(f.Limit)
	rows, err := s.r.QueryContext(ctx, `SELECT `+toolCallCols+` FROM tool_calls`+q.sql(limit), q.args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list tool calls: %w", err)
	}
	defer rows.Close()
	var out []store.ToolCall
	for rows.Next() {
		var c store.ToolCall
		var ts int64
		if err := rows.Scan(&c.ID, &ts, &c.KeyAlias, &c.User, &c.Team, &c.Server, &c.Tool, &c.DurationMs,
			&c.Outcome, &c.ErrorClass, &c.SessionIDPrefix, &c.RequestBytes, &c.ResponseBytes, &c.Guardrail, &c.Cost); err != nil {
			return nil, nil, fmt.Errorf("list tool calls: %w", err)
		}
		c.Time = fromMS(ts)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("list tool calls: %w", err)
	}
	out, next := cut(out, limit, func(c store.ToolCall) store.Cursor { return store.Cursor{Time: c.Time, ID: c.ID} })
	return out, next, nil
}

var _ store.UsageLog = (*Store)(nil)

func (s *Store) SumUsage(ctx context.Context, f store.UsageFilter) ([]store.Usage, error) {
	col, ok := store.UsageColumn(f.By)
	if !ok {
		return nil, fmt.Errorf("sum usage: by %q: %w", f.By, store.ErrInvalid)
	}
	var q page
	q.where("key_alias", f.Key)
	q.window(f.Since, f.Until, nil)
	where := ""
	if len(q.conds) > 0 {
		where = " WHERE " + strings.Join(q.conds, " AND ")
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+col+`, COUNT(*), TOTAL(cost) FROM tool_calls`+where+
		` GROUP BY `+col+` ORDER BY TOTAL(cost) DESC, `+col, q.args...)
	if err != nil {
		return nil, fmt.Errorf("sum usage: %w", err)
	}
	defer rows.Close()
	var out []store.Usage
	for rows.Next() {
		var u store.Usage
		if err := rows.Scan(&u.Group, &u.Calls, &u.Cost); err != nil {
			return nil, fmt.Errorf("sum usage: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sum usage: %w", err)
	}
	return out, nil
}

// page builds the WHERE, ORDER BY and LIMIT of a newest-first keyset
// listing over a table with ts and id columns. Column names come from the
// code, never from the caller.
type page struct {
	conds []string
	args  []any
}

func (p *page) where(col, v string) {
	if v != "" {
		p.conds = append(p.conds, col+" = ?")
		p.args = append(p.args, v)
	}
}

func (p *page) window(since, until time.Time, before *store.Cursor) {
	if !since.IsZero() {
		p.conds = append(p.conds, "ts >= ?")
		p.args = append(p.args, ms(since))
	}
	if !until.IsZero() {
		p.conds = append(p.conds, "ts < ?")
		p.args = append(p.args, ms(until))
	}
	if before != nil {
		p.conds = append(p.conds, "(ts, id) < (?, ?)")
		p.args = append(p.args, ms(before.Time), before.ID)
	}
}

// sql asks for one row more than the page, to learn whether there is a next
// page without a second query.
func (p *page) sql(limit int) string {
	var b strings.Builder
	if len(p.conds) > 0 {
		b.WriteString(" WHERE ")
		b.WriteString(strings.Join(p.conds, " AND "))
	}
	fmt.Fprintf(&b, " ORDER BY ts DESC, id DESC LIMIT %d", limit+1)
	return b.String()
}

// cut trims the extra row sql asked for and returns the cursor of the last
// row kept, or nil when there is no next page.
func cut[T any](rows []T, limit int, cursor func(T) store.Cursor) ([]T, *store.Cursor) {
	if len(rows) <= limit {
		return rows, nil
	}
	rows = rows[:limit]
	c := cursor(rows[limit-1])
	return rows, &c
}
