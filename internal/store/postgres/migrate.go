package postgres

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// migrateLock is the advisory lock migrations hold, one per schema of a
// database (a database may hold several gateways' schemas).
const migrateLock = `SELECT pg_advisory_xact_lock(hashtextextended('mcpgate.migrate:' || coalesce(current_schema(), ''), 0))`

// migrate brings the database to the newest schema version this binary
// knows (len(migrations)) in one transaction, and refuses a database that
// is already past it. The transaction first takes an advisory lock, so
// replicas that start at once queue: the first applies the steps, the
// others find them applied. PostgreSQL DDL is transactional, so a failed
// step leaves the database at its old version.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, migrateLock); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	const create = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer     NOT NULL PRIMARY KEY,
		applied_at timestamptz NOT NULL
	)`
	if _, err := tx.Exec(ctx, create); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	current, err := schemaVersion(ctx, tx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if current > len(migrations) {
		return &store.SchemaVersionError{Database: current, Supported: len(migrations)}
	}
	if current == len(migrations) {
		return nil // nothing to do; the rollback only releases the lock
	}
	for v := current + 1; v <= len(migrations); v++ {
		if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, v, now()); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", v, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

func schemaVersion(ctx context.Context, tx pgx.Tx) (int, error) {
	var v int
	err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}
