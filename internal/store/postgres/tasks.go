package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
)

const taskCols = `id, owner, route, server, status, status_message, created_at, updated_at,
	expires_at, ttl_ms, replica, result, error, input`

func scanTask(row pgx.Row) (store.TaskRecord, error) {
	var t store.TaskRecord
	var created, updated, expires time.Time
	var ttl int64
	var res, rpcErr string
	var input []byte
	if err := row.Scan(&t.ID, &t.Owner, &t.Route, &t.Server, &t.Status, &t.StatusMessage, &created, &updated,
		&expires, &ttl, &t.Replica, &res, &rpcErr, &input); err != nil {
		return store.TaskRecord{}, err
	}
	if len(input) > 0 {
		t.Input = input
	}
	t.CreatedAt, t.UpdatedAt, t.ExpiresAt = created.UTC(), updated.UTC(), expires.UTC()
	t.TTL = time.Duration(ttl) * time.Millisecond
	t.Result, t.Error = rawOrNil(res), rawOrNil(rpcErr)
	return t, nil
}

// taskTables runs store.SQLTasks's statements on the tasks table, each
// bounded by the statement timeout.
type taskTables struct{ s *Store }

// CreateTask with a limit runs in a transaction that first takes an
// advisory lock of the owner, route and server: the creates of one owner's
// tasks of one server queue, and each INSERT ... SELECT counts (in a
// snapshot taken once the lock is held, READ COMMITTED) every row the
// ones before it committed.
func (t taskTables) CreateTask(ctx context.Context, r store.TaskRecord, limit int) error {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	args := []any{r.ID, r.Owner, r.Route, r.Server, r.Status, r.StatusMessage, ms(r.CreatedAt), ms(r.UpdatedAt),
		ms(r.ExpiresAt), r.TTL.Milliseconds(), r.Replica, string(r.Result), string(r.Error), inputOf(r)}
	var err error
	if limit <= 0 {
		_, err = t.s.pool.Exec(ctx, `INSERT INTO tasks (`+taskCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, args...)
	} else {
		err = t.s.inTx(ctx, func(tx pgx.Tx) error {
			// The lock's key is a hash: two owners whose keys collide
			// only queue behind each other.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
				"mcpgate.task-limit:"+r.Owner+":"+r.Server+":"+r.Route); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO tasks (`+taskCols+`)
				SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::timestamptz,
					$8::timestamptz, $9::timestamptz, $10::bigint, $11::text, $12::text, $13::text, $14::bytea
				WHERE (SELECT count(*) FROM tasks
					WHERE owner = $2 AND route = $3 AND server = $4 AND expires_at > $7) < $15`,
				append(args, limit)...)
			if err == nil && tag.RowsAffected() == 0 {
				return store.ErrTaskLimit
			}
			return err
		})
	}
	if pe, ok := pgError(err); ok && pe.Code == codeUniqueViolation {
		return fmt.Errorf("%s: %w", pe.Message, store.ErrConflict)
	}
	return classify(err)
}

func (t taskTables) GetTask(ctx context.Context, id string) (store.TaskRecord, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	r, err := scanTask(t.s.pool.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1`, id))
	return r, notFound(err)
}

func (t taskTables) ListTasks(ctx context.Context, owner string) ([]store.TaskRecord, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	return selectRows(ctx, t.s.pool, `SELECT `+taskCols+` FROM tasks WHERE owner = $1 ORDER BY created_at, id`, []any{owner}, scanTask)
}

// inputOf is what the input column is to hold of r: never NULL.
func inputOf(r store.TaskRecord) []byte {
	if r.Input == nil || store.TaskTerminal(r.Status) {
		return []byte{}
	}
	return r.Input
}

func (t taskTables) UpdateTask(ctx context.Context, r store.TaskRecord) (bool, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	// The input is written when given, and cleared with a terminal status.
	writeInput := r.Input != nil || store.TaskTerminal(r.Status)
	tag, err := t.s.pool.Exec(ctx, `UPDATE tasks SET status = $1, status_message = $2, updated_at = $3, result = $4, error = $5,
		input = CASE WHEN $7::boolean THEN $8::bytea ELSE input END
		WHERE id = $6 AND status NOT IN ('completed', 'failed', 'cancelled')`,
		r.Status, r.StatusMessage, ms(r.UpdatedAt), string(r.Result), string(r.Error), r.ID, writeInput, inputOf(r))
	if err != nil {
		return false, classify(err)
	}
	return tag.RowsAffected() > 0, nil
}

func (t taskTables) SweepTasks(ctx context.Context, now time.Time) (int64, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	tag, err := t.s.pool.Exec(ctx, `DELETE FROM tasks WHERE expires_at <= $1`, ms(now))
	if err != nil {
		return 0, classify(err)
	}
	return tag.RowsAffected(), nil
}

// codeForeignKeyViolation: an answer's task was swept between the check
// and the insert.
const codeForeignKeyViolation = "23503"

// PutTaskAnswers checks the task and inserts the answers in one
// transaction; the foreign key holds them to their task, even against a
// sweep that runs meanwhile.
func (t taskTables) PutTaskAnswers(ctx context.Context, taskID string, answers map[string][]byte) error {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	err := t.s.inTx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM tasks WHERE id = $1`, taskID).Scan(&one); err != nil {
			return notFound(err)
		}
		created := now()
		batch := &pgx.Batch{}
		for k, body := range answers {
			batch.Queue(`INSERT INTO task_answers (task_id, key, body, created) VALUES ($1, $2, $3, $4)
				ON CONFLICT (task_id, key) DO NOTHING`, taskID, k, body, created)
		}
		return tx.SendBatch(ctx, batch).Close()
	})
	if pe, ok := pgError(err); ok && pe.Code == codeForeignKeyViolation {
		return store.ErrNotFound
	}
	return classify(err)
}

// TakeTaskAnswers is one DELETE ... RETURNING.
func (t taskTables) TakeTaskAnswers(ctx context.Context, taskID string) (map[string][]byte, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	type answer struct {
		key  string
		body []byte
	}
	rows, err := selectRows(ctx, t.s.pool, `DELETE FROM task_answers WHERE task_id = $1 RETURNING key, body`, []any{taskID},
		func(row pgx.Row) (answer, error) {
			var a answer
			err := row.Scan(&a.key, &a.body)
			return a, err
		})
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(rows))
	for _, a := range rows {
		if a.body == nil {
			a.body = []byte{}
		}
		out[a.key] = a.body
	}
	return out, nil
}
