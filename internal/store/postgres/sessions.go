package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Errors here never name the hash: it identifies a session.

func (s *Store) MarkTerminated(ctx context.Context, hash string, until time.Time) error {
	if err := store.CheckDigest(hash); err != nil {
		return fmt.Errorf("mark session terminated: %w", err)
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, `INSERT INTO terminated_sessions (id_hash, expires_at) VALUES ($1, $2)
		ON CONFLICT (id_hash) DO UPDATE SET expires_at = excluded.expires_at`, hash, ms(until))
	if err != nil {
		return fmt.Errorf("mark session terminated: %w", err)
	}
	return nil
}

func (s *Store) IsTerminated(ctx context.Context, hash string, now time.Time) (bool, error) {
	if err := store.CheckDigest(hash); err != nil {
		return false, fmt.Errorf("check session terminated: %w", err)
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	var one int
	err := s.pool.QueryRow(ctx, `SELECT 1 FROM terminated_sessions WHERE id_hash = $1 AND expires_at > $2`, hash, ms(now)).Scan(&one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
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
	ctx, cancel := s.op(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, `UPDATE terminated_sessions SET expires_at = $1 WHERE id_hash = $2 AND expires_at < $1`, ms(until), hash)
	if err != nil {
		return fmt.Errorf("touch terminated session: %w", err)
	}
	return nil
}

func (s *Store) PurgeTerminated(ctx context.Context, now time.Time) (int64, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, `DELETE FROM terminated_sessions WHERE expires_at <= $1`, ms(now))
	if err != nil {
		return 0, fmt.Errorf("purge terminated sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}
