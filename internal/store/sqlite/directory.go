package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/mcpgate/mcpgate/internal/store"
)

// parties runs store.SQLDirectory's queries on the users and teams
// tables.
type parties struct{ s *Store }

func (q parties) UpsertParty(ctx context.Context, table string, p store.Party) (store.Party, error) {
	var created int64
	err := q.s.w.QueryRowContext(ctx, `INSERT INTO `+table+` (id, name, created_at) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name
		RETURNING id, name, created_at`, p.ID, p.Name, ms(p.CreatedAt)).Scan(&p.ID, &p.Name, &created)
	if err != nil {
		return store.Party{}, err
	}
	p.CreatedAt = fromMS(created)
	return p, nil
}

func (q parties) GetParty(ctx context.Context, table, id string) (store.Party, error) {
	p, err := scanParty(q.s.r.QueryRowContext(ctx, `SELECT id, name, created_at FROM `+table+` WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	return p, err
}

func (q parties) ListParties(ctx context.Context, table string) ([]store.Party, error) {
	return selectRows(ctx, q.s.r, `SELECT id, name, created_at FROM `+table+` ORDER BY id`, nil, scanParty)
}

func (q parties) DeleteParty(ctx context.Context, table, id string) error {
	res, err := q.s.w.ExecContext(ctx, `DELETE FROM `+table+` WHERE id = ?`, id)
	if err != nil {
		return err
	}
	return rowsChanged(res)
}

func scanParty(sc scanner) (store.Party, error) {
	var p store.Party
	var created int64
	if err := sc.Scan(&p.ID, &p.Name, &created); err != nil {
		return store.Party{}, err
	}
	p.CreatedAt = fromMS(created)
	return p, nil
}
