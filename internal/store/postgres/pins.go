package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
)

const pinCols = `server, kind, name, fingerprint, definition, pending, pending_definition,
	rejected, findings, source, version, approved_by, seen_at, updated_at`

func scanPin(row pgx.Row) (store.Pin, error) {
	var p store.Pin
	var def, pdef, findings string
	var seen, updated time.Time
	if err := row.Scan(&p.Server, &p.Kind, &p.Name, &p.Fingerprint, &def, &p.Pending, &pdef,
		&p.Rejected, &findings, &p.Source, &p.Version, &p.ApprovedBy, &seen, &updated); err != nil {
		return store.Pin{}, err
	}
	p.Definition, p.PendingDefinition, p.Findings = rawOrNil(def), rawOrNil(pdef), rawOrNil(findings)
	p.SeenAt, p.UpdatedAt = seen.UTC(), updated.UTC()
	return p, nil
}

func rawOrNil(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// pinTables runs store.SQLPins's statements on the pins table, each
// bounded by the statement timeout.
type pinTables struct{ s *Store }

func (t pinTables) PutPins(ctx context.Context, pins []store.Pin) error {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	return classify(t.s.inTx(ctx, func(tx pgx.Tx) error {
		for _, p := range pins {
			if _, err := tx.Exec(ctx, `INSERT INTO pins (`+pinCols+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
				ON CONFLICT (server, kind, name) DO UPDATE SET
					fingerprint = excluded.fingerprint, definition = excluded.definition,
					pending = excluded.pending, pending_definition = excluded.pending_definition,
					rejected = excluded.rejected, findings = excluded.findings,
					source = excluded.source, version = excluded.version,
					approved_by = excluded.approved_by, seen_at = excluded.seen_at,
					updated_at = excluded.updated_at`,
				p.Server, p.Kind, p.Name, p.Fingerprint, string(p.Definition), p.Pending, string(p.PendingDefinition),
				p.Rejected, string(p.Findings), p.Source, p.Version, p.ApprovedBy, ms(p.SeenAt), ms(p.UpdatedAt)); err != nil {
				return err
			}
		}
		return nil
	}))
}

func (t pinTables) ListPins(ctx context.Context, server string) ([]store.Pin, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	if server == "" {
		out, err := selectRows(ctx, t.s.pool, `SELECT `+pinCols+` FROM pins ORDER BY server, kind, name`, nil, scanPin)
		return out, classify(err)
	}
	out, err := selectRows(ctx, t.s.pool, `SELECT `+pinCols+` FROM pins WHERE server = $1 ORDER BY kind, name`, []any{server}, scanPin)
	return out, classify(err)
}

func (t pinTables) DeletePins(ctx context.Context, server string) (int64, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	tag, err := t.s.pool.Exec(ctx, `DELETE FROM pins WHERE server = $1`, server)
	if err != nil {
		return 0, classify(err)
	}
	return tag.RowsAffected(), nil
}
