package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/mcpgate/mcpgate/internal/store"
)

// A database at schema version 6 with a task in it: opening it migrates
// to 7, and the task reads as it was, with no input, and takes answers.
func TestTaskInputMigration(t *testing.T) {
	dir := t.TempDir()
	db := databaseAt(t, dir, 6)
	owner := store.HashKey("alice")
	if _, err := db.Exec(`INSERT INTO tasks (id, owner, route, server, status, status_message, created_at, updated_at, expires_at, ttl_ms, replica, result, error)
		VALUES ('00ff', ?, '/mcp', 'docs', 'completed', '', 1000, 2000, 3601000, 3600000, 'r1', '{"content":[]}', '')`, owner); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTemp(t, dir)
	got, err := s.GetTask(t.Context(), "00ff")
	if err != nil || got.Status != store.TaskCompleted || string(got.Result) != `{"content":[]}` || got.Input != nil || got.Owner != owner {
		t.Fatalf("task after the migration = %+v, %v", got, err)
	}
	if err := s.PutTaskAnswers(t.Context(), "00ff", map[string][]byte{"q": []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SweepTasks(t.Context(), fromMS(3601000)); n != 1 || err != nil {
		t.Fatalf("SweepTasks = %d, %v", n, err)
	}
	var left int
	if err := s.w.QueryRow(`SELECT count(*) FROM task_answers`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d answers left after their task was swept (%v)", left, err)
	}
}

// databaseAt creates the store's database file in dir at schema version
// (the migrations up to it applied, as migrate records them), for a test
// to fill before Open migrates it the rest of the way. The caller closes
// it.
func databaseAt(t *testing.T, dir string, version int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= version; v++ {
		if _, err := db.Exec(migrations[v-1]); err != nil {
			t.Fatalf("schema version %d: %v", v, err)
		}
		if _, err := db.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, 0)`, v); err != nil {
			t.Fatal(err)
		}
	}
	return db
}
