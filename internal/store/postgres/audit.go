package postgres

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
)

// auditTables runs store.SQLAudit's statements on audit_log and
// tool_calls.
type auditTables struct{ s *Store }

func (a auditTables) InsertAudit(ctx context.Context, e store.AuditEntry) (int64, error) {
	var detail *string
	if len(e.Detail) > 0 {
		d := string(e.Detail)
		detail = &d
	}
	ctx, cancel := a.s.op(ctx)
	defer cancel()
	var id int64
	err := a.s.pool.QueryRow(ctx, `INSERT INTO audit_log (ts, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		ms(e.Time), e.Actor, e.Action, e.Target, detail).Scan(&id)
	return id, classify(err)
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

func (a auditTables) SelectAudit(ctx context.Context, page string, args []any) ([]store.AuditEntry, error) {
	ctx, cancel := a.s.op(ctx)
	defer cancel()
	return selectRows(ctx, a.s.pool, `SELECT id, ts, actor, action, target, detail FROM audit_log`+page, args, scanAudit)
}

const toolCallCols = `id, ts, key_alias, user_id, team_id, server, tool, duration_ms,
	outcome, error_class, session_id_prefix, request_bytes, response_bytes, guardrail, cost`

const insertToolCall = `INSERT INTO tool_calls (ts, key_alias, user_id, team_id, server, tool, duration_ms,
	outcome, error_class, session_id_prefix, request_bytes, response_bytes, guardrail, cost)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`

func toolCallArgs(c *store.ToolCall) []any {
	return []any{ms(c.Time), c.KeyAlias, c.User, c.Team, c.Server, c.Tool, c.DurationMs,
		c.Outcome, c.ErrorClass, c.SessionIDPrefix, c.RequestBytes, c.ResponseBytes, c.Guardrail, c.Cost}
}

func (a auditTables) InsertToolCall(ctx context.Context, c store.ToolCall) (int64, error) {
	ctx, cancel := a.s.op(ctx)
	defer cancel()
	var id int64
	err := a.s.pool.QueryRow(ctx, insertToolCall+` RETURNING id`, toolCallArgs(&c)...).Scan(&id)
	return id, classify(err)
}

// toolCallParams is how many parameters one row takes.
const toolCallParams = 14

// insertChunks are the row counts of the multi-row inserts, the largest
// first: a batch is cut into chunks of insertChunks[0] rows, and the rest
// written with the powers of two that sum to it. So a batch of any size
// takes few statements, and the texts are at most len(insertChunks)
// distinct ones, which pgx prepares once per connection and caches.
// 4096*toolCallParams (57344) is under PostgreSQL's limit on a
// statement's parameters (65535).
var insertChunks = [...]int{4096, 2048, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1}

// insertToolCallsSQL[i] returns the INSERT of insertChunks[i] rows,
// built on first use: the texts of the large chunks are hundreds of
// kilobytes (the 4096-row one ~400 KB), and built at package init they
// cost every gateway, Postgres or not, ~1 MB of live heap (about 3 MB of
// peak RSS at GOGC 200) and 5 MB of garbage at startup. sync.OnceValue
// costs one atomic load per batch once built.
var insertToolCallsSQL = func() (out [len(insertChunks)]func() string) {
	for i, n := range insertChunks {
		out[i] = sync.OnceValue(func() string { return insertToolCalls(n) })
	}
	return out
}()

// insertToolCalls is the INSERT of n rows: one statement for many rows
// is parsed, planned and executed once instead of once per row.
func insertToolCalls(n int) string {
	var b strings.Builder
	// Each row's text is at most toolCallParams "$57344, " and "()".
	b.Grow(200 + n*(toolCallParams*8+4))
	b.WriteString(`INSERT INTO tool_calls (ts, key_alias, user_id, team_id, server, tool, duration_ms,
	outcome, error_class, session_id_prefix, request_bytes, response_bytes, guardrail, cost) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j := range toolCallParams {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(i*toolCallParams + j + 1))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// InsertToolCalls sends the batch as multi-row inserts (insertChunks), in
// one round trip, inside one transaction: the statements run in order on
// one connection, and a multi-row INSERT takes its VALUES in order, so
// ids increase in slice order.
//
// sync changes nothing: a PostgreSQL commit returns once its WAL record is
// flushed (synchronous_commit on, the server's default); a server set
// otherwise has made its own choice, for every table alike.
func (a auditTables) InsertToolCalls(ctx context.Context, calls []store.ToolCall, _ bool) error {
	var b pgx.Batch
	for i, rest := 0, calls; len(rest) > 0; i++ {
		n := insertChunks[i]
		for ; len(rest) >= n; rest = rest[n:] {
			args := make([]any, 0, n*toolCallParams)
			for j := range n {
				args = append(args, toolCallArgs(&rest[j])...)
			}
			b.Queue(insertToolCallsSQL[i](), args...)
		}
	}
	ctx, cancel := a.s.op(ctx)
	defer cancel()
	// One round trip, atomic without BEGIN and COMMIT: the batch's
	// statements go before a single Sync, which PostgreSQL runs as one
	// implicit transaction (every row or none). An explicit transaction
	// would cost two more round trips, paid on the reply's path with
	// audit.durable.
	return classify(a.s.pool.SendBatch(ctx, &b).Close())
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

func (a auditTables) SelectToolCalls(ctx context.Context, page string, args []any) ([]store.ToolCall, error) {
	ctx, cancel := a.s.op(ctx)
	defer cancel()
	return selectRows(ctx, a.s.pool, `SELECT `+toolCallCols+` FROM tool_calls`+page, args, scanToolCall)
}

func (a auditTables) SumToolCalls(ctx context.Context, col, where string, args []any) ([]store.Usage, error) {
	ctx, cancel := a.s.op(ctx)
	defer cancel()
	return selectRows(ctx, a.s.pool, `SELECT `+col+`, COUNT(*), COALESCE(SUM(cost), 0) FROM tool_calls`+where+
		` GROUP BY `+col+` ORDER BY COALESCE(SUM(cost), 0) DESC, `+col+` COLLATE "C"`, args,
		func(row pgx.Row) (store.Usage, error) {
			var u store.Usage
			err := row.Scan(&u.Group, &u.Calls, &u.Cost)
			return u, err
		})
}
