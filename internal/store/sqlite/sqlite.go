// Package sqlite is the default store backend: one SQLite database file,
// mcpgate.db, in the gateway's data directory, through the pure-Go
// modernc.org/sqlite driver (no cgo). It owns that file, its schema and the
// migrations that build it, and nothing outside it.
//
// It is its own package, not store.OpenSQLite, so that the store package
// stays free of drivers: main imports the one backend it runs, and a
// Postgres build does not link SQLite (STYLE.md 4).
//
// Concurrency: the database runs in WAL mode, where any number of readers
// proceed alongside one writer. The Store keeps two database/sql pools on
// the same file: a writer pool of exactly one connection, so writes from
// this process queue in Go instead of failing with SQLITE_BUSY, whose
// transactions begin IMMEDIATE (they take the write lock up front, so a
// read-then-write transaction never has to upgrade and lose); and a
// read-only pool for the lookups on the request path (GetKeyByHash,
// IsTerminated), which never wait for writes. busy_timeout covers other
// processes on the same file (the CLI while the gateway runs). The
// writer's connection owns the audit batches' prepared inserts, which run
// on the driver's connection, past database/sql (writer.go).
//
// It keeps only its statements, driver calls and row encoding: Store
// embeds the store.SQL* types, which decide what to read and write (the
// validation, the config key sync, the audit paging).
//
// Files: the directory is created 0700 and the database 0600 (SQLite gives
// its -wal and -shm files the database file's mode). Existing files keep
// their modes.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mcpgate/mcpgate/internal/store"
)

// FileName is the database file inside the data directory.
const FileName = "mcpgate.db"

// pragmas are applied to every connection. The driver runs busy_timeout
// (milliseconds) first, so that switching to WAL, which needs the file to
// itself, waits for a concurrent opener instead of failing, and the rest
// in the lexicographic order of their text, whatever their order here: a
// pragma that must come before journal_mode (page_size, which a new
// database takes from its first write) cannot be set through the DSN.
const pragmas = "_pragma=busy_timeout(5000)" +
	"&_pragma=journal_mode(WAL)" +
	"&_pragma=foreign_keys(1)" +
	"&_pragma=synchronous(NORMAL)"

// connPragmas are applied to every connection after pragmas: small page
// caches, as the reads are point lookups (keys) and pages of listings,
// and the writes appends. The default 2 MiB per connection only costs
// RSS; a 2 MiB cache on the writer, tried for the audit batches, saved no
// CPU per record and cost 2-3 MiB of RSS (docs/benchmarks.md "Audit and
// memory").
const connPragmas = "&_pragma=cache_size(-256)"

// readerPragmas are applied to the read-only connections.
const readerPragmas = connPragmas + "&_pragma=query_only(1)"

// writerPragmas are applied to the writer's connection. Temporary
// b-trees and journals stay in memory: a statement that may abort inside
// a transaction keeps a statement journal (to undo that statement alone),
// which SQLite would otherwise spill to a temporary file past 64 KiB
// (the tool-call inserts keep none: insertToolCalls).
// synchronous stays NORMAL, which in WAL mode syncs at checkpoints, not
// at each commit: a commit survives a crash of the process (the WAL is
// in the OS's page cache), not a power loss. SyncAuditLog asks FULL of
// its transactions only. wal_autocheckpoint stays at SQLite's 1000 pages:
// the writer checkpoints (and syncs) after the commit that passes about
// 4 MiB of WAL, every few thousand audit records, and the WAL file keeps
// its size for reuse instead of growing and shrinking (4000 pages saved
// nothing measurable per record in BenchmarkAuditBatch, 2026-12-04).
const writerPragmas = connPragmas + "&_pragma=temp_store(MEMORY)"

// Store is a store.Store on a SQLite file. Its methods are safe for
// concurrent use; Close must be called once, after the last call returned.
type Store struct {
	store.SQLKeys      // keys, through keyTables
	store.SQLDirectory // users and teams, through parties
	store.SQLObjects   // objects, through objectTables
	store.SQLSessions  // terminated_sessions, through sessionTables
	store.SQLAudit     // audit_log and tool_calls, through auditTables
	store.SQLPins      // pins, through pinTables
	store.SQLTasks     // tasks, through taskTables

	path string
	w    *sql.DB // exactly one connection: all writes
	r    *sql.DB // read-only connections: lookups and listings

	// Statements on the request path, prepared once: parsing the SQL
	// would otherwise be about half the cost of a key lookup.
	keyByHash    *sql.Stmt // r
	isTerminated *sql.Stmt // r
	touchKey     *sql.Stmt // w
	// The tool_calls inserts belong to the writer's connection
	// (writerConn), which prepares them.
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.UsageLog     = (*Store)(nil)
	_ store.SyncAuditLog = (*Store)(nil) // the audit writer's durable batches
)

// Open opens (creating if needed) dir/mcpgate.db and migrates it to the
// newest schema this binary knows. It fails with a *store.SchemaVersionError
// when the database was migrated by a newer mcpgate.
func Open(ctx context.Context, dir string) (*Store, error) {
	s, err := open(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	return s, nil
}

func open(ctx context.Context, dir string) (*Store, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	// Create the file ourselves so it is born 0600; SQLite would use 0644.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		if err := f.Close(); err != nil {
			return nil, err
		}
	case !errors.Is(err, os.ErrExist):
		return nil, err
	}

	s := &Store{path: path}
	s.SQLKeys = store.SQLKeys{Tables: keyTables{s}}
	s.SQLDirectory = store.SQLDirectory{Tables: parties{s}}
	s.SQLObjects = store.SQLObjects{Tables: objectTables{s}}
	s.SQLSessions = store.SQLSessions{Tables: sessionTables{s}}
	s.SQLPins = store.SQLPins{Tables: pinTables{s}}
	s.SQLTasks = store.SQLTasks{Tables: taskTables{s}}
	s.SQLAudit = store.SQLAudit{Dialect: dialect, Tables: auditTables{s}}
	if s.w, err = openWriter(dsn(path, "&_txlock=immediate"+writerPragmas)); err != nil {
		return nil, err
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxIdleTime(0)
	s.w.SetConnMaxLifetime(0)
	if err := s.initRetry(ctx); err != nil {
		s.w.Close()
		return nil, err
	}

	n := max(4, runtime.GOMAXPROCS(0))
	if s.r, err = sql.Open("sqlite", dsn(path, readerPragmas)); err != nil {
		s.w.Close()
		return nil, err
	}
	s.r.SetMaxOpenConns(n)
	s.r.SetMaxIdleConns(n)
	s.r.SetConnMaxIdleTime(0)
	s.r.SetConnMaxLifetime(0)
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) prepare(ctx context.Context) error {
	for _, p := range []struct {
		dst   **sql.Stmt
		db    *sql.DB
		query string
	}{
		{&s.keyByHash, s.r, selectKeyByHash},
		{&s.isTerminated, s.r, selectTerminated},
		{&s.touchKey, s.w, updateLastUsed},
	} {
		var err error
		if *p.dst, err = p.db.PrepareContext(ctx, p.query); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
	}
	err := s.withWriter(ctx, func(w *writerConn) (bool, error) { return false, w.calls.prepare(ctx, w) })
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	return nil
}

// initRetry runs init, retrying while the file is busy. Two processes that
// open a new database at once both try to switch it to WAL; SQLite detects
// the deadlock and fails one of them at once with SQLITE_BUSY instead of
// waiting for busy_timeout. A second try finds the file in WAL already.
func (s *Store) initRetry(ctx context.Context) error {
	deadline := time.Now().Add(busyTimeout)
	for wait := 5 * time.Millisecond; ; wait *= 2 {
		err := s.init(ctx)
		if err == nil || !isBusy(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// busyTimeout matches the busy_timeout pragma.
const busyTimeout = 5 * time.Second

func isBusy(err error) bool {
	var se *msqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// init checks the journal mode took (WAL needs shared memory, which some
// network filesystems lack) and migrates.
func (s *Store) init(ctx context.Context) error {
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want wal (is the data directory on a local filesystem?)", mode)
	}
	return migrate(ctx, s.w)
}

// dsn builds a file: URI, so a path holding '?', '#' or '%' reaches SQLite
// intact (the driver would cut a plain path at its first '?').
func dsn(path, extra string) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path)}
	return u.String() + "?" + pragmas + extra
}

// Close closes both pools. The last connection to close checkpoints the WAL
// into the database file and removes the -wal and -shm files.
func (s *Store) Close() error {
	var errs []error
	for _, st := range []*sql.Stmt{s.keyByHash, s.isTerminated, s.touchKey} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(append(errs, s.r.Close(), s.w.Close())...)
}

// Path is the database file's path.
func (s *Store) Path() string { return s.path }

// Times are stored as unix milliseconds; NULL stands for the zero time.

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// dialect writes every parameter as "?" and passes times as unix
// milliseconds.
var dialect = store.Dialect{
	Param: func(int) string { return "?" },
	Time:  func(t time.Time) any { return ms(t) },
}

// now is the current time at the store's precision.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// uniqueViolation reports whether err is a UNIQUE or PRIMARY KEY violation,
// and the driver's message, which names the column (never the value).
func uniqueViolation(err error) (string, bool) {
	var se *msqlite.Error
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return se.Error(), true
	}
	return "", false
}

// rowsChanged returns ErrNotFound when res changed no row.
func rowsChanged(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// selectRows runs query on db and scans every row with scan; nil when
// there is none.
func selectRows[T any](ctx context.Context, db queryer, query string, args []any, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
