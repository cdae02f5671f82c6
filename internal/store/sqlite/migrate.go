package sqlite

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"

	"github.com/mcpgate/mcpgate/internal/store"
)

// migrations are the schema steps in order: migrations[i] takes the schema
// from version i to version i+1. Append only; never edit a released step.
var migrations = []string{
	schemaV1,
	schemaV2,
	schemaV3,
	schemaV4,
	schemaV5,
	schemaV6,
	schemaV7,
	schemaV8,
}

//go:embed migrations/0001_init.sql
var schemaV1 string

//go:embed migrations/0002_guardrail.sql
var schemaV2 string

//go:embed migrations/0003_cost.sql
var schemaV3 string

//go:embed migrations/0004_budget.sql
var schemaV4 string

//go:embed migrations/0005_pins.sql
var schemaV5 string

//go:embed migrations/0006_tasks.sql
var schemaV6 string

//go:embed migrations/0007_task_input.sql
var schemaV7 string

//go:embed migrations/0008_key_index.sql
var schemaV8 string

// migrate brings the database to the newest schema version this binary
// knows (len(migrations)), one transaction per step,
// and refuses a database that is already past it. Each step re-checks its
// version inside its transaction (which holds the write lock), so two
// processes opening the same file at once apply every step exactly once.
func migrate(ctx context.Context, db *sql.DB) error {
	const create = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER NOT NULL PRIMARY KEY,
		applied_at INTEGER NOT NULL
	) STRICT`
	if _, err := db.ExecContext(ctx, create); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	current, err := schemaVersion(ctx, db)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if current > len(migrations) {
		return &store.SchemaVersionError{Database: current, Supported: len(migrations)}
	}
	for v := current + 1; v <= len(migrations); v++ {
		if err := step(ctx, db, v); err != nil {
			var sv *store.SchemaVersionError
			if errors.As(err, &sv) {
				return err
			}
			return fmt.Errorf("migrate to schema version %d: %w", v, err)
		}
	}
	return nil
}

func schemaVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&v)
	return v, err
}

func step(ctx context.Context, db *sql.DB, v int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	current, err := schemaVersion(ctx, tx)
	if err != nil {
		return err
	}
	if current > len(migrations) {
		return &store.SchemaVersionError{Database: current, Supported: len(migrations)}
	}
	if current >= v {
		return nil // another process got here first
	}
	if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", v, ms(now())); err != nil {
		return err
	}
	return tx.Commit()
}
