package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

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

// objectTables runs store.SQLObjects's statements on the objects table.
type objectTables struct{ s *Store }

func (t objectTables) PutObject(ctx context.Context, kind, name string, doc json.RawMessage, at time.Time) (store.Object, error) {
	return scanObject(t.s.w.QueryRowContext(ctx, `INSERT INTO objects (`+objectCols+`)
		VALUES (?, ?, ?, 1, ?, ?)
		ON CONFLICT (kind, name) DO UPDATE SET
			doc = excluded.doc, version = objects.version + 1, updated_at = excluded.updated_at
		RETURNING `+objectCols, kind, name, string(doc), ms(at), ms(at)))
}

func (t objectTables) GetObject(ctx context.Context, kind, name string) (store.Object, error) {
	o, err := scanObject(t.s.r.QueryRowContext(ctx, `SELECT `+objectCols+` FROM objects WHERE kind = ? AND name = ?`, kind, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	return o, err
}

func (t objectTables) ListObjects(ctx context.Context, kind string) ([]store.Object, error) {
	return selectRows(ctx, t.s.r, `SELECT `+objectCols+` FROM objects WHERE kind = ? ORDER BY name`, []any{kind}, scanObject)
}

func (t objectTables) DeleteObject(ctx context.Context, kind, name string) error {
	res, err := t.s.w.ExecContext(ctx, `DELETE FROM objects WHERE kind = ? AND name = ?`, kind, name)
	if err != nil {
		return err
	}
	return rowsChanged(res)
}
