// Package postgres is the store backend for fleets (DESIGN decision 5,
// SPEC S15): every replica of the gateway shares one PostgreSQL database
// for keys, users and teams, runtime objects, terminated sessions and the
// audit logs. It owns its tables (in the schema the connection's
// search_path names first), their migrations and a pgx connection pool, and
// nothing else; store/storetest holds it to the same contract as the
// SQLite backend.
//
// It is its own package so that the store package and an SQLite-only
// deployment do not link pgx: main imports the backend the config names
// (STYLE.md 4).
//
// It keeps only its statements, driver calls and row encoding: Store
// embeds the store.SQL* types, which decide what to read and write (the
// validation, the config key sync, the audit paging).
//
// Concurrency: a pgxpool.Pool serves any number of goroutines; statements
// are prepared once per connection (pgx's statement cache), so the lookups
// on the request path (GetKeyByHash, IsTerminated) are one round trip.
// Replicas coordinate through the database: schema migrations and
// SyncConfigKeys take a transaction-scoped advisory lock, so a fleet that
// starts at once migrates once and syncs its config keys one replica at a
// time instead of failing on each other's inserts.
//
// Secrets: a DSN usually carries a password. No error or String of this
// package contains the DSN; they name the server as user@host:port/database.
// Behind PgBouncer in transaction mode, add
// default_query_exec_mode=simple_protocol (or exec) to the DSN.
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Defaults for the zero fields of Options.
const (
	// DefaultConnectTimeout bounds dialling and authenticating one
	// connection, when the DSN sets no connect_timeout.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultStatementTimeout bounds every call of the Store (one statement
	// or one transaction), on top of the caller's context.
	DefaultStatementTimeout = 10 * time.Second
	// DefaultMigrateTimeout bounds Open's migration, which may wait for
	// another replica's.
	DefaultMigrateTimeout = 2 * time.Minute
	// DefaultMinMaxConns is the least pool size when the DSN sets no
	// pool_max_conns: the pool holds max(this, 2*GOMAXPROCS) connections.
	DefaultMinMaxConns = 8
)

// Options tune the pool. The zero value means the documented defaults;
// pool settings in the DSN (pool_max_conns, pool_max_conn_lifetime, ...)
// win over them.
type Options struct {
	MaxConns         int32         // default max(DefaultMinMaxConns, 2*GOMAXPROCS)
	ConnectTimeout   time.Duration // default DefaultConnectTimeout
	StatementTimeout time.Duration // default DefaultStatementTimeout
	MigrateTimeout   time.Duration // default DefaultMigrateTimeout
}

// Store is a store.Store on a PostgreSQL database. Its methods are safe for
// concurrent use; Close must be called once, after the last call returned.
type Store struct {
	store.SQLKeys      // keys, through keyTables
	store.SQLDirectory // users and teams, through parties
	store.SQLObjects   // objects, through objectTables
	store.SQLSessions  // terminated_sessions, through sessionTables
	store.SQLAudit     // audit_log and tool_calls, through auditTables
	store.SQLPins      // pins, through pinTables
	store.SQLTasks     // tasks, through taskTables

	pool    *pgxpool.Pool
	where   string // user@host:port/database, for messages
	timeout time.Duration
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.UsageLog     = (*Store)(nil)
	_ store.SyncAuditLog = (*Store)(nil) // the audit writer's durable batches
)

// Open connects to the database dsn names (a postgres:// URL or key=value
// pairs, as libpq takes them) and migrates it to the newest schema this
// binary knows. It fails with a *store.SchemaVersionError when the database
// was migrated by a newer mcpgate. The error never contains the DSN.
func Open(ctx context.Context, dsn string, o Options) (*Store, error) {
	cfg, where, err := poolConfig(dsn, o)
	if err != nil {
		return nil, fmt.Errorf("open store postgres: %w", err)
	}
	s, err := open(ctx, cfg, where, o)
	if err != nil {
		return nil, fmt.Errorf("open store postgres %s: %w", where, scrub(err, cfg.ConnConfig.Password))
	}
	return s, nil
}

// poolConfig parses dsn and applies o. A parse error says what is wrong
// with the DSN in general terms only: pgx's own message quotes the DSN
// with the password masked on a best-effort basis, which is not enough.
func poolConfig(dsn string, o Options) (*pgxpool.Config, string, error) {
	bad := errors.New("store.dsn is not a valid PostgreSQL connection string " +
		"(postgres://user:password@host:port/database?param=value, or host=... user=... key=value pairs)")
	raw, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, "", bad
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, "", bad
	}
	if _, set := raw.RuntimeParams["pool_max_conns"]; !set {
		cfg.MaxConns = max(DefaultMinMaxConns, 2*int32(runtime.GOMAXPROCS(0)))
		if o.MaxConns > 0 {
			cfg.MaxConns = o.MaxConns
		}
	}
	if _, set := raw.RuntimeParams["pool_max_conn_idle_time"]; !set {
		cfg.MaxConnIdleTime = 5 * time.Minute
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = cmp.Or(o.ConnectTimeout, DefaultConnectTimeout)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
		cfg.ConnConfig.RuntimeParams["application_name"] = "mcpgate"
	}
	return cfg, describe(cfg.ConnConfig), nil
}

// describe names the server without the password: user@host:port/database.
func describe(c *pgx.ConnConfig) string {
	host := c.Host
	if !strings.HasPrefix(host, "/") {
		host = net.JoinHostPort(host, strconv.Itoa(int(c.Port)))
	} else {
		host = host + ":" + strconv.Itoa(int(c.Port)) // a unix socket directory
	}
	return c.User + "@" + host + "/" + c.Database
}

func open(ctx context.Context, cfg *pgxpool.Config, where string, o Options) (*Store, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil { // the pool dials lazily: fail here, not in migrate
		pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	s := &Store{pool: pool, where: where, timeout: cmp.Or(o.StatementTimeout, DefaultStatementTimeout)}
	s.SQLKeys = store.SQLKeys{Tables: keyTables{s}}
	s.SQLDirectory = store.SQLDirectory{Tables: parties{s}}
	s.SQLObjects = store.SQLObjects{Tables: objectTables{s}}
	s.SQLSessions = store.SQLSessions{Tables: sessionTables{s}}
	s.SQLPins = store.SQLPins{Tables: pinTables{s}}
	s.SQLTasks = store.SQLTasks{Tables: taskTables{s}}
	s.SQLAudit = store.SQLAudit{Dialect: dialect, Tables: auditTables{s}}
	mctx, cancel := context.WithTimeout(ctx, cmp.Or(o.MigrateTimeout, DefaultMigrateTimeout))
	defer cancel()
	if err := migrate(mctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// scrub replaces an error whose message holds the password (a server or
// driver quoting the DSN) by one that does not. It keeps the error's
// identity when it is safe: the chain of such an error is dropped, since
// its links would print the password too.
func scrub(err error, password string) error {
	if password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), password, "xxxxx")
	for _, target := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, target) {
			return fmt.Errorf("%s: %w", msg, target)
		}
	}
	return errors.New(msg)
}

// String names the database as user@host:port/database, without the
// password.
func (s *Store) String() string { return s.where }

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// op bounds one call by the statement timeout. pgx cancels the statement
// on the server when the context ends.
func (s *Store) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	_ querier = (*pgxpool.Pool)(nil)
	_ querier = (pgx.Tx)(nil)
)

// dialect numbers the parameters ($1, $2, ...) and passes times as
// timestamptz at the store's precision.
var dialect = store.Dialect{
	Param: func(n int) string { return "$" + strconv.Itoa(n) },
	Time:  func(t time.Time) any { return ms(t) },
}

// now is the current time at the store's precision.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// ms brings t to the store's precision, in UTC.
func ms(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// pgError returns the server's error in err, if any.
func pgError(err error) (*pgconn.PgError, bool) {
	var pe *pgconn.PgError
	ok := errors.As(err, &pe)
	return pe, ok
}

// SQLSTATE codes the store turns into its own errors.
const (
	codeUniqueViolation  = "23505"
	codeBadEncoding      = "22021" // character_not_in_repertoire: a NUL or invalid UTF-8
	codeUntranslatable   = "22P05"
	codeStringTooLong    = "22001"
	codeNumericRange     = "22003"
	codeProgramLimitExcd = "54000" // e.g. an index row too large
)

// classify turns the server's refusals of a value into store.ErrInvalid
// (PostgreSQL text cannot hold a NUL byte or invalid UTF-8, which SQLite
// stores), with the server's message, which never quotes the value.
// Other errors pass as they are.
func classify(err error) error {
	pe, ok := pgError(err)
	if !ok {
		return err
	}
	switch pe.Code {
	case codeBadEncoding, codeUntranslatable, codeStringTooLong, codeNumericRange, codeProgramLimitExcd:
		return fmt.Errorf("%s: %w", pe.Message, store.ErrInvalid)
	}
	return err
}

// notFound maps pgx.ErrNoRows to store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return classify(err)
}

// changed returns ErrNotFound when tag changed no row.
func changed(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return classify(err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

// selectRows runs query on q and scans every row with scan; nil when there
// is none.
func selectRows[T any](ctx context.Context, q querier, query string, args []any, scan func(pgx.Row) (T, error)) ([]T, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, v)
	}
	return out, classify(rows.Err())
}
