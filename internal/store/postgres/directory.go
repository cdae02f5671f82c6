package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Users and teams have the same shape; these helpers serve both tables.
// table is one of two constants, never caller input.

type party struct {
	id, name string
	created  time.Time
}

func scanParty(row pgx.Row) (party, error) {
	var p party
	if err := row.Scan(&p.id, &p.name, &p.created); err != nil {
		return party{}, err
	}
	p.created = p.created.UTC()
	return p, nil
}

func (s *Store) upsertParty(ctx context.Context, table, what string, p party) (party, error) {
	if err := store.CheckName(what+" id", p.id); err != nil {
		return party{}, fmt.Errorf("upsert %s: %w", what, err)
	}
	if p.created.IsZero() {
		p.created = now()
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	out, err := scanParty(s.pool.QueryRow(ctx, `INSERT INTO `+table+` (id, name, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name
		RETURNING id, name, created_at`, p.id, p.name, ms(p.created)))
	if err != nil {
		return party{}, fmt.Errorf("upsert %s %q: %w", what, p.id, classify(err))
	}
	return out, nil
}

func (s *Store) getParty(ctx context.Context, table, what, id string) (party, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	p, err := scanParty(s.pool.QueryRow(ctx, `SELECT id, name, created_at FROM `+table+` WHERE id = $1`, id))
	if err != nil {
		return party{}, fmt.Errorf("get %s %q: %w", what, id, notFound(err))
	}
	return p, nil
}

func (s *Store) listParties(ctx context.Context, table, what string) ([]party, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT id, name, created_at FROM `+table+` ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", what, err)
	}
	out, err := collect(rows, scanParty)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", what, err)
	}
	return out, nil
}

func (s *Store) deleteParty(ctx context.Context, table, what, id string) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	if err := changed(s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE id = $1`, id)); err != nil {
		return fmt.Errorf("delete %s %q: %w", what, id, err)
	}
	return nil
}

func (s *Store) UpsertUser(ctx context.Context, u store.User) (store.User, error) {
	p, err := s.upsertParty(ctx, "users", "user", party{u.ID, u.Name, u.CreatedAt})
	return store.User{ID: p.id, Name: p.name, CreatedAt: p.created}, err
}

func (s *Store) GetUser(ctx context.Context, id string) (store.User, error) {
	p, err := s.getParty(ctx, "users", "user", id)
	return store.User{ID: p.id, Name: p.name, CreatedAt: p.created}, err
}

func (s *Store) ListUsers(ctx context.Context) ([]store.User, error) {
	ps, err := s.listParties(ctx, "users", "user")
	var out []store.User
	for _, p := range ps {
		out = append(out, store.User{ID: p.id, Name: p.name, CreatedAt: p.created})
	}
	return out, err
}

func (s *Store) DeleteUser(ctx context.Context, id string) error {
	return s.deleteParty(ctx, "users", "user", id)
}

func (s *Store) UpsertTeam(ctx context.Context, t store.Team) (store.Team, error) {
	p, err := s.upsertParty(ctx, "teams", "team", party{t.ID, t.Name, t.CreatedAt})
	return store.Team{ID: p.id, Name: p.name, CreatedAt: p.created}, err
}

func (s *Store) GetTeam(ctx context.Context, id string) (store.Team, error) {
	p, err := s.getParty(ctx, "teams", "team", id)
	return store.Team{ID: p.id, Name: p.name, CreatedAt: p.created}, err
}

func (s *Store) ListTeams(ctx context.Context) ([]store.Team, error) {
	ps, err := s.listParties(ctx, "teams", "team")
	var out []store.Team
	for _, p := range ps {
		out = append(out, store.Team{ID: p.id, Name: p.name, CreatedAt: p.created})
	}
	return out, err
}

func (s *Store) DeleteTeam(ctx context.Context, id string) error {
	return s.deleteParty(ctx, "teams", "team", id)
}
