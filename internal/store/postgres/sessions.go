package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// sessionTables runs store.SQLSessions's statements on
// terminated_sessions, each bounded by the statement timeout.
type sessionTables struct{ s *Store }

func (t sessionTables) MarkTerminated(ctx context.Context, hash string, until time.Time) error {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	_, err := t.s.pool.Exec(ctx, `INSERT INTO terminated_sessions (id_hash, expires_at) VALUES ($1, $2)
		ON CONFLICT (id_hash) DO UPDATE SET expires_at = excluded.expires_at`, hash, ms(until))
	return err
}

func (t sessionTables) IsTerminated(ctx context.Context, hash string, now time.Time) (bool, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	var one int
	err := t.s.pool.QueryRow(ctx, `SELECT 1 FROM terminated_sessions WHERE id_hash = $1 AND expires_at > $2`, hash, ms(now)).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t sessionTables) TouchTerminated(ctx context.Context, hash string, until time.Time) error {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	_, err := t.s.pool.Exec(ctx, `UPDATE terminated_sessions SET expires_at = $1 WHERE id_hash = $2 AND expires_at < $1`, ms(until), hash)
	return err
}

func (t sessionTables) PurgeTerminated(ctx context.Context, now time.Time) (int64, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	tag, err := t.s.pool.Exec(ctx, `DELETE FROM terminated_sessions WHERE expires_at <= $1`, ms(now))
	return tag.RowsAffected(), err
}
