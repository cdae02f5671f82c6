package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Dialect is how a SQL backend writes a query's parameters.
type Dialect struct {
	// Param is the placeholder of the n-th argument, from 1: "?" for
	// SQLite, "$n" for PostgreSQL.
	Param func(n int) string
	// Time is the argument a time is passed as, at the store's precision
	// (unix milliseconds, or a UTC time truncated to the millisecond).
	Time func(time.Time) any
}

// AuditTables is what SQLAudit asks of a backend: the statements on its
// audit_log and tool_calls tables, each with columns ts and id. The
// records it is handed are validated and timed. where is "" or a WHERE
// clause, page a WHERE (maybe empty), ORDER BY and LIMIT clause, both
// built by SQLAudit from column names it owns, with args for their
// parameters.
type AuditTables interface {
	InsertAudit(ctx context.Context, e AuditEntry) (int64, error)
	// SelectAudit returns the audit_log rows page selects, in its order.
	SelectAudit(ctx context.Context, page string, args []any) ([]AuditEntry, error)
	InsertToolCall(ctx context.Context, c ToolCall) (int64, error)
	// InsertToolCalls inserts calls in one transaction, in slice order;
	// with sync, the commit returns once it is on stable storage
	// (SyncAuditLog), else once the backend's default says so.
	InsertToolCalls(ctx context.Context, calls []ToolCall, sync bool) error
	// SelectToolCalls returns the tool_calls rows page selects, in its
	// order.
	SelectToolCalls(ctx context.Context, page string, args []any) ([]ToolCall, error)
	// SumToolCalls groups the tool_calls rows where selects by col and
	// returns one Usage per group, costliest first, then by group in byte
	// order.
	SumToolCalls(ctx context.Context, col, where string, args []any) ([]Usage, error)
}

// SQLAudit is the AuditLog and UsageLog of a SQL backend: validation,
// default times, filters and keyset paging here, the statements in Tables.
// A backend embeds it.
type SQLAudit struct {
	Dialect Dialect
	Tables  AuditTables
}

var (
	_ AuditLog     = SQLAudit{}
	_ UsageLog     = SQLAudit{}
	_ SyncAuditLog = SQLAudit{}
)

func (a SQLAudit) AppendAudit(ctx context.Context, e AuditEntry) (int64, error) {
	if err := e.Validate(); err != nil {
		return 0, fmt.Errorf("append audit: %w", err)
	}
	if e.Time.IsZero() {
		e.Time = now()
	}
	id, err := a.Tables.InsertAudit(ctx, e)
	if err != nil {
		return 0, fmt.Errorf("append audit %s: %w", e.Action, err)
	}
	return id, nil
}

func (a SQLAudit) ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, *Cursor, error) {
	w := a.where()
	w.eq("actor", f.Actor)
	w.eq("action", f.Action)
	w.window(f.Since, f.Until, f.Before)
	limit := PageSize(f.Limit)
	out, err := a.Tables.SelectAudit(ctx, w.page(limit), w.args)
	if err != nil {
		return nil, nil, fmt.Errorf("list audit: %w", err)
	}
	out, next := cut(out, limit, func(e AuditEntry) Cursor { return Cursor{Time: e.Time, ID: e.ID} })
	return out, next, nil
}

func (a SQLAudit) AppendToolCall(ctx context.Context, c ToolCall) (int64, error) {
	if err := c.Validate(); err != nil {
		return 0, fmt.Errorf("append tool call: %w", err)
	}
	if c.Time.IsZero() {
		c.Time = now()
	}
	id, err := a.Tables.InsertToolCall(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("append tool call: %w", err)
	}
	return id, nil
}

func (a SQLAudit) AppendToolCalls(ctx context.Context, calls []ToolCall) error {
	return a.appendToolCalls(ctx, calls, false)
}

func (a SQLAudit) AppendToolCallsSync(ctx context.Context, calls []ToolCall) error {
	return a.appendToolCalls(ctx, calls, true)
}

func (a SQLAudit) appendToolCalls(ctx context.Context, calls []ToolCall, sync bool) error {
	if len(calls) == 0 {
		return nil
	}
	untimed := false
	for i := range calls {
		if err := calls[i].Validate(); err != nil {
			return fmt.Errorf("append tool calls: call %d: %w", i, err)
		}
		untimed = untimed || calls[i].Time.IsZero()
	}
	if untimed {
		calls = timed(calls)
	}
	if err := a.Tables.InsertToolCalls(ctx, calls, sync); err != nil {
		return fmt.Errorf("append tool calls: %w", err)
	}
	return nil
}

// timed returns a copy of calls with the zero times set to now: the
// caller's slice is not ours to change. The audit writer times every
// record it queues, so its batches skip the copy (a batch's size in
// garbage, 208 bytes a record).
func timed(calls []ToolCall) []ToolCall {
	stamp := now()
	out := make([]ToolCall, len(calls))
	for i, c := range calls {
		if c.Time.IsZero() {
			c.Time = stamp
		}
		out[i] = c
	}
	return out
}

func (a SQLAudit) ListToolCalls(ctx context.Context, f ToolCallFilter) ([]ToolCall, *Cursor, error) {
	w := a.where()
	w.key(f.KeyAlias)
	w.eq("user_id", f.User)
	w.eq("team_id", f.Team)
	w.eq("server", f.Server)
	w.eq("tool", f.Tool)
	w.eq("outcome", f.Outcome)
	w.window(f.Since, f.Until, f.Before)
	limit := PageSize(f.Limit)
	out, err := a.Tables.SelectToolCalls(ctx, w.page(limit), w.args)
	if err != nil {
		return nil, nil, fmt.Errorf("list tool calls: %w", err)
	}
	out, next := cut(out, limit, func(c ToolCall) Cursor { return Cursor{Time: c.Time, ID: c.ID} })
	return out, next, nil
}

func (a SQLAudit) SumUsage(ctx context.Context, f UsageFilter) ([]Usage, error) {
	col, ok := UsageColumn(f.By)
	if !ok {
		return nil, fmt.Errorf("sum usage: by %q: %w", f.By, ErrInvalid)
	}
	w := a.where()
	w.key(f.Key)
	w.window(f.Since, f.Until, nil)
	out, err := a.Tables.SumToolCalls(ctx, col, w.clause(), w.args)
	if err != nil {
		return nil, fmt.Errorf("sum usage: %w", err)
	}
	return out, nil
}

func (a SQLAudit) where() *where { return &where{d: a.Dialect} }

// where builds the WHERE, ORDER BY and LIMIT of a newest-first keyset
// listing over a table with ts and id columns. Column names come from the
// code, never from the caller; values go in args.
type where struct {
	d     Dialect
	conds []string
	args  []any
}

// arg adds v to the arguments and returns its placeholder.
func (w *where) arg(v any) string {
	w.args = append(w.args, v)
	return w.d.Param(len(w.args))
}

func (w *where) eq(col, v string) {
	if v != "" {
		w.conds = append(w.conds, col+" = "+w.arg(v))
	}
}

// key filters tool_calls by a key alias, with one term more than the
// equality:
//
//	key_alias <> ''
//
// It says nothing the equality does not, but it is the WHERE of SQLite's
// partial index tool_calls_key (schema version 8), which the planner uses
// only for a query that carries that very term: the value of a bound
// parameter is not known when the statement is planned.
func (w *where) key(alias string) {
	if alias != "" {
		w.conds = append(w.conds, "key_alias <> ''")
		w.eq("key_alias", alias)
	}
}

func (w *where) window(since, until time.Time, before *Cursor) {
	if !since.IsZero() {
		w.conds = append(w.conds, "ts >= "+w.arg(w.d.Time(since)))
	}
	if !until.IsZero() {
		w.conds = append(w.conds, "ts < "+w.arg(w.d.Time(until)))
	}
	if before != nil {
		ts := w.arg(w.d.Time(before.Time))
		w.conds = append(w.conds, "(ts, id) < ("+ts+", "+w.arg(before.ID)+")")
	}
}

// clause is " WHERE ..." or "".
func (w *where) clause() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// page asks for one row more than the page, to learn whether there is a
// next page without a second query.
func (w *where) page(limit int) string {
	return fmt.Sprintf("%s ORDER BY ts DESC, id DESC LIMIT %d", w.clause(), limit+1)
}

// cut trims the extra row page asked for and returns the cursor of the
// last row kept, or nil when there is no next page.
func cut[T any](rows []T, limit int, cursor func(T) Cursor) ([]T, *Cursor) {
	if len(rows) <= limit {
		return rows, nil
	}
	rows = rows[:limit]
	c := cursor(rows[limit-1])
	return rows, &c
}
