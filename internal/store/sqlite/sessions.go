package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Errors here never name the hash: it identifies a session.

func (s *Store) MarkTerminated(ctx context.Context, hash string, until time.Time) error {
	if err := store.CheckDigest(hash); err != nil {
		return fmt.Errorf("mark session terminated: %w", err)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO terminated_sessions (id_hash, expires_at) VALUES (?, ?)
		ON CONFLICT (id_hash) DO UPDATE SET expires_at = excluded.expires_at`, hash, ms(until))
	if err != nil {
		return fmt.Errorf("mark session terminated: %w", err)
	}
	return nil
}

const selectTerminated = `SELECT 1 FROM terminated_sessions WHERE id_hash = ? AND expires_at > ?`

func (s *Store) IsTerminated(ctx context.Context, hash string, now time.Time) (bool, error) {
	if err := store.CheckDigest(hash); err != nil {
		return false, fmt.Errorf("check session terminated: %w", err)
	}
	var one int
	err := s.isTerminated.QueryRowContext(ctx, hash, ms(now)).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("check session terminated: %w", err)
	}
	return true, nil
}

func (s *Store) TouchTerminated(ctx context.Context, hash string, until time.Time) error {
	if err := store.CheckDigest(hash); err != nil {
		return fmt.Errorf("touch terminated session: %w", err)
	}
	_, err := s.w.ExecContext(ctx, `UPDATE terminated_sessions SET expires_at = ?1 WHERE id_hash = ?2 AND expires_at < ?1`, ms(until), hash)
	if err != nil {
		return fmt.Errorf("touch terminated session: %w", err)
	}
	return nil
}

func (s *Store) PurgeTerminated(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM terminated_sessions WHERE expires_at <= ?`, ms(now))
	if err != nil {
		return 0, fmt.Errorf("purge terminated sessions: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("purge terminated sessions: %w", err)
	}
	return n, nil
}
