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
	expires_at, ttl_ms, replica, result, error`

func scanTask(sc scanner) (store.TaskRecord, error) {
	var t store.TaskRecord
	var created, updated, expires, ttl int64
	var res, rpcErr string
	if err := sc.Scan(&t.ID, &t.Owner, &t.Route, &t.Server, &t.Status, &t.StatusMessage, &created, &updated,
		&expires, &ttl, &t.Replica, &res, &rpcErr); err != nil {
		return store.TaskRecord{}, err
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
		SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
		WHERE ? <= 0 OR (SELECT count(*) FROM tasks
			WHERE owner = ? AND route = ? AND server = ? AND expires_at > ?) < ?`,
		r.ID, r.Owner, r.Route, r.Server, r.Status, r.StatusMessage, ms(r.CreatedAt), ms(r.UpdatedAt),
		ms(r.ExpiresAt), r.TTL.Milliseconds(), r.Replica, string(r.Result), string(r.Error),
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

func (t taskTables) UpdateTask(ctx context.Context, r store.TaskRecord) (bool, error) {
	res, err := t.s.w.ExecContext(ctx, `UPDATE tasks SET status = ?, status_message = ?, updated_at = ?, result = ?, error = ?
		WHERE id = ? AND status NOT IN ('completed', 'failed', 'cancelled')`,
		r.Status, r.StatusMessage, ms(r.UpdatedAt), string(r.Result), string(r.Error), r.ID)
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
