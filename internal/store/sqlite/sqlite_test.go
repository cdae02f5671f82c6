package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t, t.TempDir()) })
}

func openTemp(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// closeNow closes s before the end of the test (Cleanup will close it again,
// which database/sql allows).
func closeNow(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestFilePermissions(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "data", "mcpgate")
	s := openTemp(t, dir)
	if _, err := s.CreateKey(t.Context(), key("ci", "mcpg_ci_0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]fs.FileMode{
		filepath.Join(parent, "data"):    0o700,
		dir:                              0o700,
		s.Path():                         0o600,
		s.Path() + "-wal":                0o600,
		s.Path() + "-shm":                0o600,
		filepath.Join(dir, "mcpgate.db"): 0o600,
	} {
		if got := mode(t, path); got != want {
			t.Errorf("%s: mode %o, want %o", path, got, want)
		}
	}

	// An existing directory and database keep the modes the operator chose.
	closeNow(t, s)
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	openTemp(t, dir)
	if got := mode(t, dir); got != 0o750 {
		t.Errorf("existing dir: mode %o, want 0750 kept", got)
	}
}

func key(alias, secret string) store.Key {
	return store.Key{Alias: alias, KeyHash: store.HashKey(secret), KeyPrefix: store.KeyPrefix(secret)}
}

// The store is handed hashes; this checks nothing on disk holds the secret
// (or, for sessions, the raw id), in the database or its WAL.
func TestSecretNotInFile(t *testing.T) {
	dir := t.TempDir()
	s := openTemp(t, dir)
	ctx := t.Context()
	const secret = "mcpg_ZQX-distinctive-secret-7f3e9a41c2d8b650"
	const sessionID = "sess-distinctive-4b1d9e77-0a2c-4f6e-8d3b"
	if _, err := s.CreateKey(ctx, key("ci", secret)); err != nil {
		t.Fatal(err)
	}
	rotated := secret + "-rotated"
	if _, err := s.UpdateKey(ctx, key("ci", rotated)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SyncConfigKeys(ctx, []store.Key{key("cfg", secret+"-cfg")}); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkTerminated(ctx, store.HashSessionID(sessionID), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	raw := func() []byte {
		var all []byte
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		return all
	}
	check := func(when string) {
		b := raw()
		for _, s := range []string{secret, rotated, secret + "-cfg", secret[len(store.KeyPrefix(secret)):], sessionID} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s: %q found in the database files", when, s)
			}
		}
		// Sanity: the files are readable and hold what we wrote.
		if !bytes.Contains(b, []byte(store.HashKey(rotated))) {
			t.Errorf("%s: the key hash is not in the files; is the check reading them?", when)
		}
	}
	check("while open")
	closeNow(t, s)
	check("after close")
	if _, err := os.Stat(filepath.Join(dir, FileName+"-wal")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("WAL left after Close: %v", err)
	}
}

func TestPersistence(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openTemp(t, dir)
	k, err := s.CreateKey(ctx, store.Key{
		Alias: "ci", KeyHash: store.HashKey("secret-0123456789"), Servers: []string{},
		Tools: map[string][]string{"github": {"search"}}, ExpiresAt: time.Date(2027, 1, 2, 3, 4, 5, 6e6, time.UTC),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TouchKey(ctx, "ci", time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	k.LastUsedAt = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	u, err := s.UpsertUser(ctx, store.User{ID: "alice", Name: "Alice"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.PutObject(ctx, store.KindToolset, "triage", json.RawMessage(`{"tools":["github__search"]}`))
	if err != nil {
		t.Fatal(err)
	}
	hash := store.HashSessionID("s1")
	until := time.Now().Add(time.Hour)
	if err := s.MarkTerminated(ctx, hash, until); err != nil {
		t.Fatal(err)
	}
	id, err := s.AppendAudit(ctx, store.AuditEntry{Actor: "master", Action: "key.create", Target: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	closeNow(t, s)

	s = openTemp(t, dir)
	gotK, err := s.GetKeyByHash(ctx, k.KeyHash)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gotK, k); diff != "" {
		t.Errorf("key after reopen (-got +want):\n%s", diff)
	}
	if gotU, err := s.GetUser(ctx, "alice"); err != nil || gotU != u {
		t.Errorf("user after reopen = %+v, %v; want %+v", gotU, err, u)
	}
	if gotO, err := s.GetObject(ctx, store.KindToolset, "triage"); err != nil || cmp.Diff(gotO, o) != "" {
		t.Errorf("object after reopen = %+v, %v; want %+v", gotO, err, o)
	}
	if ok, err := s.IsTerminated(ctx, hash, time.Now()); err != nil || !ok {
		t.Errorf("terminated session after reopen: %v, %v", ok, err)
	}
	entries, _, err := s.ListAudit(ctx, store.AuditFilter{})
	if err != nil || len(entries) != 1 || entries[0].ID != id {
		t.Errorf("audit after reopen = %+v, %v", entries, err)
	}
	// New ids continue after the old ones.
	id2, err := s.AppendAudit(ctx, store.AuditEntry{Actor: "master", Action: "key.delete"})
	if err != nil || id2 <= id {
		t.Errorf("audit id after reopen = %d, %v; want > %d", id2, err, id)
	}
}

func versions(t *testing.T, db *sql.DB) []int {
	t.Helper()
	rows, err := db.Query("SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

func allVersions() []int {
	var vs []int
	for v := range len(migrations) {
		vs = append(vs, v+1)
	}
	return vs
}

func TestMigrationsIdempotent(t *testing.T) {
	dir := t.TempDir()
	closeNow(t, openTemp(t, dir))
	s := openTemp(t, dir)
	for range 2 {
		if err := migrate(t.Context(), s.w); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(versions(t, s.w), allVersions()); diff != "" {
		t.Errorf("schema_migrations (-got +want):\n%s", diff)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTemp(t, dir)
	newer := len(migrations) + 1
	if _, err := s.w.Exec("INSERT INTO schema_migrations (version, applied_at) VALUES (?, 0)", newer); err != nil {
		t.Fatal(err)
	}
	closeNow(t, s)

	_, err := Open(t.Context(), dir)
	var sv *store.SchemaVersionError
	if !errors.As(err, &sv) {
		t.Fatalf("Open on a newer schema: err = %v, want a *store.SchemaVersionError", err)
	}
	if *sv != (store.SchemaVersionError{Database: newer, Supported: len(migrations)}) {
		t.Errorf("error = %+v", *sv)
	}
	want := fmt.Sprintf("database schema version %d is newer than this mcpgate supports (%d); upgrade mcpgate", newer, len(migrations))
	if sv.Error() != want {
		t.Errorf("message = %q, want %q", sv.Error(), want)
	}
	// Refusing left the database alone.
	db, err := sql.Open("sqlite", filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if diff := cmp.Diff(versions(t, db), append(allVersions(), newer)); diff != "" {
		t.Errorf("schema_migrations after refusal (-got +want):\n%s", diff)
	}
}

// Settings the design relies on actually hold on every connection.
func TestConnectionSettings(t *testing.T) {
	s := openTemp(t, t.TempDir())
	for _, tt := range []struct {
		pool   string
		db     *sql.DB
		pragma string
		want   string
	}{
		{"writer", s.w, "journal_mode", "wal"},
		{"writer", s.w, "busy_timeout", "5000"},
		{"writer", s.w, "foreign_keys", "1"},
		{"writer", s.w, "synchronous", "1"}, // NORMAL
		{"writer", s.w, "query_only", "0"},
		{"writer", s.w, "cache_size", "-256"},
		{"writer", s.w, "temp_store", "2"}, // MEMORY
		{"reader", s.r, "cache_size", "-256"},
		{"reader", s.r, "journal_mode", "wal"},
		{"reader", s.r, "busy_timeout", "5000"},
		{"reader", s.r, "foreign_keys", "1"},
		{"reader", s.r, "query_only", "1"},
	} {
		var got string
		if err := tt.db.QueryRow("PRAGMA " + tt.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("%s: %s = %s, want %s", tt.pool, tt.pragma, got, tt.want)
		}
	}
	if n := s.w.Stats().MaxOpenConnections; n != 1 {
		t.Errorf("writer pool allows %d connections, want 1", n)
	}
	if _, err := s.r.Exec("DELETE FROM keys"); err == nil {
		t.Error("the read pool accepted a write")
	}
}

// A data directory whose path holds URI metacharacters still opens the
// right file.
func TestPathNeedsEscaping(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a b?c#d%20e&f")
	s := openTemp(t, dir)
	if _, err := s.CreateKey(t.Context(), key("ci", "mcpg_ci_0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff(names, []string{FileName, FileName + "-shm", FileName + "-wal"}); diff != "" {
		t.Errorf("files in %s (-got +want):\n%s", dir, diff)
	}
}

// Two Stores on one directory, as when the CLI runs beside the gateway:
// opening races and concurrent writes from both must succeed.
func TestTwoStoresOneFile(t *testing.T) {
	dir := t.TempDir()
	var stores [2]*Store
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), dir) })
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		t.Cleanup(func() { s.Close() })
	}
	if diff := cmp.Diff(versions(t, stores[0].w), allVersions()); diff != "" {
		t.Errorf("schema_migrations (-got +want):\n%s", diff)
	}
	wg = sync.WaitGroup{}
	werrs := make(chan error, 200)
	for i, s := range stores {
		wg.Go(func() {
			for j := range 100 {
				alias := fmt.Sprintf("s%d-%d", i, j)
				if _, err := s.CreateKey(t.Context(), key(alias, "mcpg_"+alias+"_0123456789abcdef")); err != nil {
					werrs <- err
				}
			}
		})
	}
	wg.Wait()
	close(werrs)
	for err := range werrs {
		t.Error(err)
	}
	keys, err := stores[1].ListKeys(t.Context())
	if err != nil || len(keys) != 200 {
		t.Errorf("ListKeys = %d keys, %v; want 200", len(keys), err)
	}
}

func benchStore(b *testing.B, n int) (*Store, []string) {
	s := openTemp(b, b.TempDir())
	hashes := make([]string, n)
	for i := range n {
		secret := fmt.Sprintf("mcpg_bench_%06d_0123456789abcdef", i)
		k := key(fmt.Sprintf("key-%06d", i), secret)
		k.Servers = []string{"github", "jira"}
		k.Tools = map[string][]string{"github": {"search", "create_issue"}}
		if _, err := s.CreateKey(context.Background(), k); err != nil {
			b.Fatal(err)
		}
		hashes[i] = k.KeyHash
	}
	return s, hashes
}

func BenchmarkGetKeyByHash(b *testing.B) {
	s, hashes := benchStore(b, 1000)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := s.GetKeyByHash(ctx, hashes[i%len(hashes)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := s.GetKeyByHash(ctx, hashes[i%len(hashes)]); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
	b.Run("miss", func(b *testing.B) {
		h := store.HashKey("no such key")
		for b.Loop() {
			if _, err := s.GetKeyByHash(ctx, h); !errors.Is(err, store.ErrNotFound) {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkTouchKey(b *testing.B) {
	s, _ := benchStore(b, 1000)
	ctx := context.Background()
	t := time.Now()
	i := 0
	for b.Loop() {
		t = t.Add(time.Millisecond)
		if err := s.TouchKey(ctx, fmt.Sprintf("key-%06d", i%1000), t); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkAppendToolCall(b *testing.B) {
	s, _ := benchStore(b, 0)
	ctx := context.Background()
	c := store.ToolCall{KeyAlias: "ci", Server: "github", Tool: "search", Outcome: "ok", DurationMs: 12, SessionIDPrefix: "3f2a9c1b"}
	for b.Loop() {
		if _, err := s.AppendToolCall(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendToolCalls reports the cost per row of a batch, to set
// against BenchmarkAppendToolCall (one transaction, so one commit, per row).
func BenchmarkAppendToolCalls(b *testing.B) {
	for _, n := range []int{1, 10, 100, 256, 512} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, _ := benchStore(b, 0)
			ctx := context.Background()
			c := store.ToolCall{KeyAlias: "ci", Server: "github", Tool: "search", Outcome: "ok", DurationMs: 12, SessionIDPrefix: "3f2a9c1b"}
			batch := make([]store.ToolCall, n)
			for i := range batch {
				batch[i] = c
			}
			cpu0 := cpuTime(b)
			for b.Loop() {
				if err := s.AppendToolCalls(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
			// The process's CPU time per row: on a shared machine the
			// wall time above also counts the other processes' turns.
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/row")
		})
	}
}

// A synced batch (store.SyncAuditLog) is written, and leaves the writer
// connection at synchronous=NORMAL for the batches after it, also when its
// context ends before it could run.
func TestSyncBatchRestoresNormal(t *testing.T) {
	s := openTemp(t, t.TempDir())
	c := store.ToolCall{Server: "github", Tool: "search", Outcome: "ok"}
	if err := s.AppendToolCallsSync(t.Context(), []store.ToolCall{c, c, c}); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.AppendToolCallsSync(cancelled, []store.ToolCall{c}); err == nil {
		t.Error("a synced batch with an ended context was written")
	}
	var sync string
	if err := s.w.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if sync != "1" {
		t.Errorf("after synced batches the writer's synchronous = %s, want 1 (NORMAL)", sync)
	}
	calls, _, err := s.ListToolCalls(t.Context(), store.ToolCallFilter{})
	if err != nil || len(calls) != 3 {
		t.Errorf("ListToolCalls = %d calls, %v; want the 3 of the synced batch", len(calls), err)
	}
}

// BenchmarkAppendToolCallsSync is BenchmarkAppendToolCalls for the
// batches an answer waits for (audit.durable): synchronous=FULL, one
// fsync of the WAL per batch. Its wall time is the disk's.
func BenchmarkAppendToolCallsSync(b *testing.B) {
	for _, sync := range []bool{false, true} {
		for _, n := range []int{1, 64} {
			b.Run(fmt.Sprintf("sync=%v/%d", sync, n), func(b *testing.B) {
				s, _ := benchStore(b, 0)
				ctx := context.Background()
				c := store.ToolCall{KeyAlias: "ci", Server: "github", Tool: "search", Outcome: "ok", DurationMs: 12, SessionIDPrefix: "3f2a9c1b"}
				batch := make([]store.ToolCall, n)
				for i := range batch {
					batch[i] = c
				}
				write := s.AppendToolCalls
				if sync {
					write = s.AppendToolCallsSync
				}
				cpu0 := cpuTime(b)
				for b.Loop() {
					if err := write(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/batch")
				b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/batch")
			})
		}
	}
}
