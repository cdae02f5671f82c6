package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t, pgtest.DSN(t)) })
}

func openTemp(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func key(alias, secret string) store.Key {
	return store.Key{Alias: alias, KeyHash: store.HashKey(secret), KeyPrefix: store.KeyPrefix(secret)}
}

func versions(t *testing.T, dsn string) []int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(t.Context(), "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
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
	dsn := pgtest.DSN(t)
	openTemp(t, dsn).Close()
	s := openTemp(t, dsn)
	for range 2 {
		if err := migrate(t.Context(), s.pool); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(versions(t, dsn), allVersions()); diff != "" {
		t.Errorf("schema_migrations (-got +want):\n%s", diff)
	}
}

// Replicas that start at once: each Open succeeds, the steps run once, and
// the stores work.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	const n = 3
	var stores [n]*Store
	var errs [n]error
	var start sync.WaitGroup
	start.Add(1)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start.Wait()
			stores[i], errs[i] = Open(t.Context(), dsn, Options{})
		})
	}
	start.Done()
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		t.Cleanup(func() { s.Close() })
	}
	if diff := cmp.Diff(versions(t, dsn), allVersions()); diff != "" {
		t.Errorf("schema_migrations (-got +want):\n%s", diff)
	}
	// A step that ran twice would have failed (CREATE TABLE keys exists);
	// check the tables are there once and usable from every replica.
	for i, s := range stores {
		if _, err := s.CreateKey(t.Context(), key(fmt.Sprint("r", i), fmt.Sprintf("mcpg_replica_%d_0123456789abcdef", i))); err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	keys, err := stores[0].ListKeys(t.Context())
	if err != nil || len(keys) != n {
		t.Errorf("ListKeys = %d keys, %v; want %d", len(keys), err, n)
	}
}

// Replicas that sync the same config keys at once all succeed, and the
// keys are added once.
func TestConcurrentSyncConfigKeys(t *testing.T) {
	dsn := pgtest.DSN(t)
	const n = 3
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = openTemp(t, dsn)
	}
	cfg := []store.Key{key("a", "mcpg_config_a_0123456789abcdef"), key("b", "mcpg_config_b_0123456789abcdef")}
	var wg sync.WaitGroup
	results := make([]store.SyncResult, n)
	errs := make([]error, n)
	for i, s := range stores {
		wg.Go(func() { results[i], errs[i] = s.SyncConfigKeys(t.Context(), cfg) })
	}
	wg.Wait()
	added := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("sync %d: %v", i, errs[i])
		}
		added += len(results[i].Added)
	}
	if added != len(cfg) {
		t.Errorf("keys added %d times in all, want %d: %+v", added, len(cfg), results)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := openTemp(t, dsn)
	newer := len(migrations) + 1
	if _, err := s.pool.Exec(t.Context(), "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, now())", newer); err != nil {
		t.Fatal(err)
	}
	s.Close()

	_, err := Open(t.Context(), dsn, Options{})
	var sv *store.SchemaVersionError
	if !errors.As(err, &sv) {
		t.Fatalf("Open on a newer schema: err = %v, want a *store.SchemaVersionError", err)
	}
	if *sv != (store.SchemaVersionError{Database: newer, Supported: len(migrations)}) {
		t.Errorf("error = %+v", *sv)
	}
	if diff := cmp.Diff(versions(t, dsn), append(allVersions(), newer)); diff != "" {
		t.Errorf("schema_migrations after refusal (-got +want):\n%s", diff)
	}
}

// A DSN's password appears in no error: not a wrong one the server
// refuses, not a right one with a missing database, not one in a DSN that
// does not parse.
func TestPasswordNotInErrors(t *testing.T) {
	srv := pgtest.Get(t)
	db := srv.NewDatabase(t)
	srv.Exec(t, "postgres", "ALTER DATABASE "+db+" OWNER TO "+pgtest.PasswordUser) // may create tables in public
	const wrong = "Wr0ng-distinctive-pa55word"
	right := srv.Password()
	host := strings.Fields(srv.DSN(db, "x", ""))[0] // host='<socket dir>'
	for _, tc := range []struct {
		name, dsn, secret string
	}{
		{"wrong password", srv.DSN(db, pgtest.PasswordUser, wrong), wrong},
		{"right password, no such database", srv.DSN("missing", pgtest.PasswordUser, right), right},
		{"URL, wrong password", "postgres://" + pgtest.PasswordUser + ":" + wrong + "@localhost:1/" + db + "?connect_timeout=2", wrong},
		{"URL that does not parse", "postgres://" + pgtest.PasswordUser + ":" + wrong + "@[::1/db", wrong},
		{"key=value that does not parse", host + " password='" + wrong + " user=x", wrong},
		{"unknown parameter", "postgres://u:" + wrong + "@h/db?sslmode=bogus", wrong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			s, err := Open(ctx, tc.dsn, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("error reveals the password: %v", err)
			}
			t.Log(err)
		})
	}

	// The password does work, and the store names the server without it.
	s, err := Open(t.Context(), srv.DSN(db, pgtest.PasswordUser, right), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if strings.Contains(s.String(), right) || !strings.Contains(s.String(), pgtest.PasswordUser+"@") {
		t.Errorf("String() = %q", s.String())
	}
}

// What PostgreSQL text cannot hold (a NUL) is refused as invalid, not
// passed up as a driver error.
func TestNULIsInvalid(t *testing.T) {
	s := openTemp(t, pgtest.DSN(t))
	_, err := s.UpsertUser(t.Context(), store.User{ID: "alice", Name: "a\x00b"})
	if !errors.Is(err, store.ErrInvalid) {
		t.Errorf("NUL in a name: err = %v, want ErrInvalid", err)
	}
}

// The statement timeout bounds a call whose context has no deadline.
func TestStatementTimeout(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := Open(t.Context(), dsn, Options{StatementTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Hold the key row's lock from another connection: TouchKey waits.
	if _, err := s.CreateKey(t.Context(), key("ci", "mcpg_ci_0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), "SELECT 1 FROM keys WHERE alias = 'ci' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.TouchKey(context.Background(), "ci", time.Now())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TouchKey on a locked row: err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("TouchKey took %v with a 100ms statement timeout", d)
	}
}

func TestPoolDefaults(t *testing.T) {
	cfg, where, err := poolConfig("postgres://u:secret@db.example.com:5433/mcpgate", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if where != "u@db.example.com:5433/mcpgate" {
		t.Errorf("where = %q", where)
	}
	if cfg.MaxConns < DefaultMinMaxConns || cfg.ConnConfig.ConnectTimeout != DefaultConnectTimeout {
		t.Errorf("MaxConns %d, ConnectTimeout %v", cfg.MaxConns, cfg.ConnConfig.ConnectTimeout)
	}
	cfg, _, err = poolConfig("postgres://u@h/db?pool_max_conns=3&connect_timeout=9", Options{MaxConns: 20})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConns != 3 || cfg.ConnConfig.ConnectTimeout != 9*time.Second {
		t.Errorf("the DSN's settings lost: MaxConns %d, ConnectTimeout %v", cfg.MaxConns, cfg.ConnConfig.ConnectTimeout)
	}
}
