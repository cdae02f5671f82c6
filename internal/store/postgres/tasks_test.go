package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
)

// A database at schema version 6 with a task in it: opening it migrates
// to 7, and the task reads as it was, with no input, and takes answers
// that go with it when it is swept.
func TestTaskInputMigration(t *testing.T) {
	dsn := pgtest.DSN(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE schema_migrations (version integer NOT NULL PRIMARY KEY, applied_at timestamptz NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 6; v++ {
		if _, err := conn.Exec(t.Context(), migrations[v-1]); err != nil {
			t.Fatalf("schema version %d: %v", v, err)
		}
		if _, err := conn.Exec(t.Context(), `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, now())`, v); err != nil {
			t.Fatal(err)
		}
	}
	owner := store.HashKey("alice")
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if _, err := conn.Exec(t.Context(), `INSERT INTO tasks (id, owner, route, server, status, status_message, created_at, updated_at, expires_at, ttl_ms, replica, result, error)
		VALUES ('00ff', $1, '/mcp', 'docs', 'completed', '', $2, $2, $3, 3600000, 'r1', '{"content":[]}', '')`, owner, created, created.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	s := openTemp(t, dsn)
	got, err := s.GetTask(t.Context(), "00ff")
	if err != nil || got.Status != store.TaskCompleted || string(got.Result) != `{"content":[]}` || got.Input != nil || got.Owner != owner {
		t.Fatalf("task after the migration = %+v, %v", got, err)
	}
	if err := s.PutTaskAnswers(t.Context(), "00ff", map[string][]byte{"q": []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SweepTasks(t.Context(), created.Add(time.Hour)); n != 1 || err != nil {
		t.Fatalf("SweepTasks = %d, %v", n, err)
	}
	var left int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM task_answers`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d answers left after their task was swept (%v)", left, err)
	}
}
