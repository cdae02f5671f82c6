package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
)

const objectCols = `kind, name, doc, version, created_at, updated_at`

func scanObject(row pgx.Row) (store.Object, error) {
	var o store.Object
	var doc string
	var created, updated time.Time
	if err := row.Scan(&o.Kind, &o.Name, &doc, &o.Version, &created, &updated); err != nil {
		return store.Object{}, err
	}
	o.Doc = json.RawMessage(doc)
	o.CreatedAt, o.UpdatedAt = created.UTC(), updated.UTC()
	return o, nil
}

func checkObject(kind, name string) error {
	if err := store.CheckKind(kind); err != nil {
		return err
	}
	return store.CheckName(kind+" name", name)
}

func (s *Store) PutObject(ctx context.Context, kind, name string, doc json.RawMessage) (store.Object, error) {
	if err := checkObject(kind, name); err != nil {
		return store.Object{}, fmt.Errorf("put object: %w", err)
	}
	if !json.Valid(doc) {
		return store.Object{}, fmt.Errorf("put %s %q: document is not valid JSON: %w", kind, name, store.ErrInvalid)
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	t := now()
	o, err := scanObject(s.pool.QueryRow(ctx, `INSERT INTO objects (`+objectCols+`)
		VALUES ($1, $2, $3, 1, $4, $4)
		ON CONFLICT (kind, name) DO UPDATE SET
			doc = excluded.doc, version = objects.version + 1, updated_at = excluded.updated_at
		RETURNING `+objectCols, kind, name, string(doc), t))
	if err != nil {
		return store.Object{}, fmt.Errorf("put %s %q: %w", kind, name, classify(err))
	}
	return o, nil
}

func (s *Store) GetObject(ctx context.Context, kind, name string) (store.Object, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	o, err := scanObject(s.pool.QueryRow(ctx, `SELECT `+objectCols+` FROM objects WHERE kind = $1 AND name = $2`, kind, name))
	if err != nil {
		return store.Object{}, fmt.Errorf("get %s %q: %w", kind, name, notFound(err))
	}
	return o, nil
}

func (s *Store) ListObjects(ctx context.Context, kind string) ([]store.Object, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	out, err := selectRows(ctx, s.pool, `SELECT `+objectCols+` FROM objects WHERE kind = $1 ORDER BY name`, []any{kind}, scanObject)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", kind, err)
	}
	return out, nil
}

func (s *Store) DeleteObject(ctx context.Context, kind, name string) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	if err := changed(s.pool.Exec(ctx, `DELETE FROM objects WHERE kind = $1 AND name = $2`, kind, name)); err != nil {
		return fmt.Errorf("delete %s %q: %w", kind, name, err)
	}
	return nil
}
