package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcpgate/mcpgate/internal/store"
)

const objectCols = `kind, name, doc, version, created_at, updated_at`

func scanObject(sc scanner) (store.Object, error) {
	var o store.Object
	var doc string
	var created, updated int64
	if err := sc.Scan(&o.Kind, &o.Name, &doc, &o.Version, &created, &updated); err != nil {
		return store.Object{}, err
	}
	o.Doc = json.RawMessage(doc)
	o.CreatedAt, o.UpdatedAt = fromMS(created), fromMS(updated)
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
	t := ms(now())
	o, err := scanObject(s.w.QueryRowContext(ctx, `INSERT INTO objects (`+objectCols+`)
		VALUES (?, ?, ?, 1, ?, ?)
		ON CONFLICT (kind, name) DO UPDATE SET
			doc = excluded.doc, version = objects.version + 1, updated_at = excluded.updated_at
		RETURNING `+objectCols, kind, name, string(doc), t, t))
	if err != nil {
		return store.Object{}, fmt.Errorf("put %s %q: %w", kind, name, err)
	}
	return o, nil
}

func (s *Store) GetObject(ctx context.Context, kind, name string) (store.Object, error) {
	o, err := scanObject(s.r.QueryRowContext(ctx, `SELECT `+objectCols+` FROM objects WHERE kind = ? AND name = ?`, kind, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("get %s %q: %w", kind, name, err)
	}
	return o, nil
}

func (s *Store) ListObjects(ctx context.Context, kind string) ([]store.Object, error) {
	out, err := selectRows(ctx, s.r, `SELECT `+objectCols+` FROM objects WHERE kind = ? ORDER BY name`, []any{kind}, scanObject)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", kind, err)
	}
	return out, nil
}

func (s *Store) DeleteObject(ctx context.Context, kind, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM objects WHERE kind = ? AND name = ?`, kind, name)
	if err == nil {
		err = rowsChanged(res)
	}
	if err != nil {
		return fmt.Errorf("delete %s %q: %w", kind, name, err)
	}
	return nil
}
