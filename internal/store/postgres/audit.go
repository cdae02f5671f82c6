package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
)

func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (int64, error) {
	if err := e.Validate(); err != nil {
		return 0, fmt.Errorf("append audit: %w", err)
	}
	if e.Time.IsZero() {
		e.Time = now()
	}
	var detail *string
	if len(e.Detail) > 0 {
		d := string(e.Detail)
		detail = &d
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	var id int64
	err := s.pool.QueryRow(ctx, `INSERT INTO audit_log (ts, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		ms(e.Time), e.Actor, e.Action, e.Target, detail).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("append audit %s: %w", e.Action, classify(err))
	}
	return id, nil
}

func scanAudit(row pgx.Row) (store.AuditEntry, error) {
	var e store.AuditEntry
	var detail *string
	if err := row.Scan(&e.ID, &e.Time, &e.Actor, &e.Action, &e.Target, &detail); err != nil {
		return store.AuditEntry{}, err
	}
	e.Time = e.Time.UTC()
	if detail != nil {
		e.Detail = json.RawMessage(*detail)
	}
	return e, nil
}

func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, *store.Cursor, error) {
	var q page
	q.where("actor", f.Actor)
	q.where("action", f.Action)
	q.window(f.Since, f.Until, f.Before)
	limit := store.PageSize(f.Limit)
	ctx, cancel := s.op(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT id, ts, actor, action, target, detail FROM audit_log`+q.sql(limit), q.args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list audit: %w", classify(err))
	}
	out, err := collect(rows, scanAudit)
	if err != nil {
		return nil, nil, fmt.Errorf("list audit: %w", classify(err))
	}
	out, next := cut(out, limit, func(e store.AuditEntry) store.Cursor { return store.Cursor{Time: e.Time, ID: e.ID} })
	return out, next, nil
}

const toolCallCols = `id, ts, key_alias, user_id, team_id, server, tool, duration_ms,
	outcome, error_class, session_id_prefix, request_bytes, response_bytes, guardrail, cost`

const insertToolCall = `INSERT INTO tool_calls (ts, key_alias, user_id, team_id, server, tool, duration_ms,
	outcome, error_class, session_id_prefix, request_bytes, response_bytes, guardrail, cost)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`

func toolCallArgs(c *store.ToolCall, ts time.Time) []any {
	return []any{ms(ts), c.KeyAlias, c.User, c.Team, c.Server, c.Tool, c.DurationMs,
		c.Outcome, c.ErrorClass, c.SessionIDPrefix, c.RequestBytes, c.ResponseBytes, c.Guardrail, c.Cost}
}

func (s *Store) AppendToolCall(ctx context.Context, c store.ToolCall) (int64, error) {
	if err := c.Validate(); err != nil {
		return 0, fmt.Errorf("append tool call: %w", err)
	}
	if c.Time.IsZero() {
		c.Time = now()
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	var id int64
	if err := s.pool.QueryRow(ctx, insertToolCall+` RETURNING id`, toolCallArgs(&c, c.Time)...).Scan(&id); err != nil {
		return 0, fmt.Errorf("append tool call: %w", classify(err))
	}
	return id, nil
}

// AppendToolCalls sends the batch's inserts in one round trip, inside one
// transaction: they run in slice order on one connection, so their ids
// increase in slice order.
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
	var b pgx.Batch
	for i := range calls {
		c := &calls[i]
		ts := stamp
		if !c.Time.IsZero() {
			ts = c.Time
		}
		b.Queue(insertToolCall, toolCallArgs(c, ts)...)
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	// One round trip, atomic without BEGIN and COMMIT: the batch's
	// statements go before a single Sync, which PostgreSQL runs as one
	// implicit transaction (every row or none). An explicit transaction
	// would cost two more round trips, paid on the reply's path with
	// audit.durable.
	err := s.pool.SendBatch(ctx, &b).Close()
	if err != nil {
		return fmt.Errorf("append tool calls: %w", classify(err))
	}
	return nil
}

func scanToolCall(row pgx.Row) (store.ToolCall, error) {
	var c store.ToolCall
	if err := row.Scan(&c.ID, &c.Time, &c.KeyAlias, &c.User, &c.Team, &c.Server, &c.Tool, &c.DurationMs,
		&c.Outcome, &c.ErrorClass, &c.SessionIDPrefix, &c.RequestBytes, &c.ResponseBytes, &c.Guardrail, &c.Cost); err != nil {
		return store.ToolCall{}, err
	}
	c.Time = c.Time.UTC()
	return c, nil
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
	ctx, cancel := s.op(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+toolCallCols+` FROM tool_calls`+q.sql(limit), q.args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list tool calls: %w", classify(err))
	}
	out, err := collect(rows, scanToolCall)
	if err != nil {
		return nil, nil, fmt.Errorf("list tool calls: %w", classify(err))
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
	ctx, cancel := s.op(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+col+`, COUNT(*), COALESCE(SUM(cost), 0) FROM tool_calls`+where+
		` GROUP BY `+col+` ORDER BY COALESCE(SUM(cost), 0) DESC, `+col+` COLLATE "C"`, q.args...)
	if err != nil {
		return nil, fmt.Errorf("sum usage: %w", classify(err))
	}
	out, err := collect(rows, func(row pgx.Row) (store.Usage, error) {
		var u store.Usage
		err := row.Scan(&u.Group, &u.Calls, &u.Cost)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("sum usage: %w", classify(err))
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

func (p *page) arg(v any) string {
	p.args = append(p.args, v)
	return fmt.Sprintf("$%d", len(p.args))
}

func (p *page) where(col, v string) {
	if v != "" {
		p.conds = append(p.conds, col+" = "+p.arg(v))
	}
}

func (p *page) window(since, until time.Time, before *store.Cursor) {
	if !since.IsZero() {
		p.conds = append(p.conds, "ts >= "+p.arg(ms(since)))
	}
	if !until.IsZero() {
		p.conds = append(p.conds, "ts < "+p.arg(ms(until)))
	}
	if before != nil {
		p.conds = append(p.conds, "(ts, id) < ("+p.arg(ms(before.Time))+", "+p.arg(before.ID)+")")
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
