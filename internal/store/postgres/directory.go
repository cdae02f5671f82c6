package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
)

// parties runs store.SQLDirectory's queries on the users and teams
// tables.
type parties struct{ s *Store }

func scanParty(row pgx.Row) (store.Party, error) {
	var p store.Party
	if err := row.Scan(&p.ID, &p.Name, &p.CreatedAt); err != nil {
		return store.Party{}, err
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return p, nil
}

func (q parties) UpsertParty(ctx context.Context, table string, p store.Party) (store.Party, error) {
	ctx, cancel := q.s.op(ctx)
	defer cancel()
	out, err := scanParty(q.s.pool.QueryRow(ctx, `INSERT INTO `+table+` (id, name, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name
		RETURNING id, name, created_at`, p.ID, p.Name, ms(p.CreatedAt)))
	return out, classify(err)
}

func (q parties) GetParty(ctx context.Context, table, id string) (store.Party, error) {
	ctx, cancel := q.s.op(ctx)
	defer cancel()
	p, err := scanParty(q.s.pool.QueryRow(ctx, `SELECT id, name, created_at FROM `+table+` WHERE id = $1`, id))
	return p, notFound(err)
}

func (q parties) ListParties(ctx context.Context, table string) ([]store.Party, error) {
	ctx, cancel := q.s.op(ctx)
	defer cancel()
	return selectRows(ctx, q.s.pool, `SELECT id, name, created_at FROM `+table+` ORDER BY id`, nil, scanParty)
}

func (q parties) DeleteParty(ctx context.Context, table, id string) error {
	ctx, cancel := q.s.op(ctx)
	defer cancel()
	return changed(q.s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE id = $1`, id))
}
