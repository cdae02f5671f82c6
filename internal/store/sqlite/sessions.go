package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// sessionTables runs store.SQLSessions's statements on
// terminated_sessions.
type sessionTables struct{ s *Store }

func (t sessionTables) MarkTerminated(ctx context.Context, hash string, until time.Time) error {
	_, err := t.s.w.ExecContext(ctx, `INSERT INTO terminated_sessions (id_hash, expires_at) VALUES (?, ?)
		ON CONFLICT (id_hash) DO UPDATE SET expires_at = excluded.expires_at`, hash, ms(until))
	return err
}

const selectTerminated = `SELECT 1 FROM terminated_sessions WHERE id_hash = ? AND expires_at > ?`

func (t sessionTables) IsTerminated(ctx context.Context, hash string, now time.Time) (bool, error) {
	var one int
	err := t.s.isTerminated.QueryRowContext(ctx, hash, ms(now)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t sessionTables) TouchTerminated(ctx context.Context, hash string, until time.Time) error {
	_, err := t.s.w.ExecContext(ctx, `UPDATE terminated_sessions SET expires_at = ?1 WHERE id_hash = ?2 AND expires_at < ?1`, ms(until), hash)
	return err
}

func (t sessionTables) PurgeTerminated(ctx context.Context, now time.Time) (int64, error) {
	res, err := t.s.w.ExecContext(ctx, `DELETE FROM terminated_sessions WHERE expires_at <= ?`, ms(now))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
