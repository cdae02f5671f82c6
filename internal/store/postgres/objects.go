package postgres

import (
	"context"
	"encoding/json"
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

// objectTables runs store.SQLObjects's statements on the objects table,
// each bounded by the statement timeout.
type objectTables struct{ s *Store }

func (t objectTables) PutObject(ctx context.Context, kind, name string, doc json.RawMessage, at time.Time) (store.Object, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	o, err := scanObject(t.s.pool.QueryRow(ctx, `INSERT INTO objects (`+objectCols+`)
		VALUES ($1, $2, $3, 1, $4, $4)
		ON CONFLICT (kind, name) DO UPDATE SET
			doc = excluded.doc, version = objects.version + 1, updated_at = excluded.updated_at
		RETURNING `+objectCols, kind, name, string(doc), ms(at)))
	return o, classify(err)
}

func (t objectTables) GetObject(ctx context.Context, kind, name string) (store.Object, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	o, err := scanObject(t.s.pool.QueryRow(ctx, `SELECT `+objectCols+` FROM objects WHERE kind = $1 AND name = $2`, kind, name))
	return o, notFound(err)
}

func (t objectTables) ListObjects(ctx context.Context, kind string) ([]store.Object, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	return selectRows(ctx, t.s.pool, `SELECT `+objectCols+` FROM objects WHERE kind = $1 ORDER BY name`, []any{kind}, scanObject)
}

func (t objectTables) DeleteObject(ctx context.Context, kind, name string) error {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	return changed(t.s.pool.Exec(ctx, `DELETE FROM objects WHERE kind = $1 AND name = $2`, kind, name))
}
