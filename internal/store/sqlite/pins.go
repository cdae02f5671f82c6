package sqlite

import (
	"context"
	"encoding/json"

	"github.com/mcpgate/mcpgate/internal/store"
)

const pinCols = `server, kind, name, fingerprint, definition, pending, pending_definition,
	rejected, findings, source, version, approved_by, seen_at, updated_at`

func scanPin(sc scanner) (store.Pin, error) {
	var p store.Pin
	var def, pdef, findings string
	var seen, updated int64
	if err := sc.Scan(&p.Server, &p.Kind, &p.Name, &p.Fingerprint, &def, &p.Pending, &pdef,
		&p.Rejected, &findings, &p.Source, &p.Version, &p.ApprovedBy, &seen, &updated); err != nil {
		return store.Pin{}, err
	}
	p.Definition, p.PendingDefinition, p.Findings = rawOrNil(def), rawOrNil(pdef), rawOrNil(findings)
	p.SeenAt, p.UpdatedAt = fromMS(seen), fromMS(updated)
	return p, nil
}

func rawOrNil(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// pinTables runs store.SQLPins's statements on the pins table.
type pinTables struct{ s *Store }

func (t pinTables) PutPins(ctx context.Context, pins []store.Pin) error {
	tx, err := t.s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, p := range pins {
		if _, err := tx.ExecContext(ctx, `INSERT INTO pins (`+pinCols+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
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
	return tx.Commit()
}

func (t pinTables) ListPins(ctx context.Context, server string) ([]store.Pin, error) {
	if server == "" {
		return selectRows(ctx, t.s.r, `SELECT `+pinCols+` FROM pins ORDER BY server, kind, name`, nil, scanPin)
	}
	return selectRows(ctx, t.s.r, `SELECT `+pinCols+` FROM pins WHERE server = ? ORDER BY kind, name`, []any{server}, scanPin)
}

func (t pinTables) DeletePins(ctx context.Context, server string) (int64, error) {
	res, err := t.s.w.ExecContext(ctx, `DELETE FROM pins WHERE server = ?`, server)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
