package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

const taskCols = `id, owner, route, server, status, status_message, created_at, updated_at,
	expires_at, ttl_ms, replica, result, error, input`

func scanTask(sc scanner) (store.TaskRecord, error) {
	var t store.TaskRecord
	var created, updated, expires, ttl int64
	var res, rpcErr string
	var input []byte
	if err := sc.Scan(&t.ID, &t.Owner, &t.Route, &t.Server, &t.Status, &t.StatusMessage, &created, &updated,
		&expires, &ttl, &t.Replica, &res, &rpcErr, &input); err != nil {
		return store.TaskRecord{}, err
	}
	if len(input) > 0 {
		t.Input = input
	}
	t.CreatedAt, t.UpdatedAt, t.ExpiresAt = fromMS(created), fromMS(updated), fromMS(expires)
	t.TTL = time.Duration(ttl) * time.Millisecond
	t.Result, t.Error = rawOrNil(res), rawOrNil(rpcErr)
	return t, nil
}

// taskTables runs store.SQLTasks's statements on the tasks table.
type taskTables struct{ s *Store }

// CreateTask is one INSERT ... SELECT whose WHERE counts the owner's
// tasks: a single statement on the one writer connection, so no other
// write comes between the count and the insert.
func (t taskTables) CreateTask(ctx context.Context, r store.TaskRecord, limit int) error {
	res, err := t.s.w.ExecContext(ctx, `INSERT INTO tasks (`+taskCols+`)
		SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
		WHERE ? <= 0 OR (SELECT count(*) FROM tasks
			WHERE owner = ? AND route = ? AND server = ? AND expires_at > ?) < ?`,
		r.ID, r.Owner, r.Route, r.Server, r.Status, r.StatusMessage, ms(r.CreatedAt), ms(r.UpdatedAt),
		ms(r.ExpiresAt), r.TTL.Milliseconds(), r.Replica, string(r.Result), string(r.Error), inputOf(r),
		limit, r.Owner, r.Route, r.Server, ms(r.CreatedAt), limit)
	if msg, ok := uniqueViolation(err); ok {
		return fmt.Errorf("%s: %w", msg, store.ErrConflict)
	}
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return store.ErrTaskLimit
	}
	return nil
}

func (t taskTables) GetTask(ctx context.Context, id string) (store.TaskRecord, error) {
	r, err := scanTask(t.s.r.QueryRowContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.TaskRecord{}, store.ErrNotFound
	}
	return r, err
}

func (t taskTables) ListTasks(ctx context.Context, owner string) ([]store.TaskRecord, error) {
	return selectRows(ctx, t.s.r, `SELECT `+taskCols+` FROM tasks WHERE owner = ? ORDER BY created_at, id`, []any{owner}, scanTask)
}

// inputOf is what the input column is to hold of r: never NULL.
func inputOf(r store.TaskRecord) []byte {
	if r.Input == nil || store.TaskTerminal(r.Status) {
		return []byte{}
	}
	return r.Input
}

func (t taskTables) UpdateTask(ctx context.Context, r store.TaskRecord) (bool, error) {
	// The input is written when given, and cleared with a terminal status.
	writeInput := r.Input != nil || store.TaskTerminal(r.Status)
	res, err := t.s.w.ExecContext(ctx, `UPDATE tasks SET status = ?, status_message = ?, updated_at = ?, result = ?, error = ?,
		input = CASE WHEN ? THEN ? ELSE input END
		WHERE id = ? AND status NOT IN ('completed', 'failed', 'cancelled')`,
		r.Status, r.StatusMessage, ms(r.UpdatedAt), string(r.Result), string(r.Error), writeInput, inputOf(r), r.ID)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (t taskTables) SweepTasks(ctx context.Context, now time.Time) (int64, error) {
	res, err := t.s.w.ExecContext(ctx, `DELETE FROM tasks WHERE expires_at <= ?`, ms(now))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// PutTaskAnswers checks the task and inserts the answers in one
// transaction on the writer; the foreign key holds them to their task.
func (t taskTables) PutTaskAnswers(ctx context.Context, taskID string, answers map[string][]byte) error {
	tx, err := t.s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var one int
	if err := tx.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE id = ?`, taskID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	} else if err != nil {
		return err
	}
	created := ms(now())
	for k, body := range answers {
		if _, err := tx.ExecContext(ctx, `INSERT INTO task_answers (task_id, key, body, created) VALUES (?, ?, ?, ?)
			ON CONFLICT (task_id, key) DO NOTHING`, taskID, k, body, created); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// TakeTaskAnswers is one DELETE ... RETURNING on the writer.
func (t taskTables) TakeTaskAnswers(ctx context.Context, taskID string) (map[string][]byte, error) {
	type answer struct {
		key  string
		body []byte
	}
	rows, err := selectRows(ctx, t.s.w, `DELETE FROM task_answers WHERE task_id = ? RETURNING key, body`, []any{taskID},
		func(sc scanner) (answer, error) {
			var a answer
			err := sc.Scan(&a.key, &a.body)
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
