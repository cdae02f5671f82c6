package config

// Where the gateway keeps its state (DESIGN decision 5): the embedded
// SQLite store in data_dir, or a PostgreSQL database that every replica
// of a fleet shares (SPEC S15). cmd/mcpgate opens the backend this names.

// Store drivers.
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// Store selects the store backend. The zero value means SQLite in
// Config.DataDir.
type Store struct {
	Driver string `config:"driver,default=sqlite,enum=sqlite|postgres,disc=driver" doc:"The store backend: sqlite (embedded, a file in data_dir; one gateway) or postgres (a PostgreSQL database shared by every replica of a fleet: keys, runtime objects, terminated sessions, audit)."`
	// DSN carries a password as a rule: no message quotes it, and the
	// store names the server as user@host:port/database.
	DSN string `config:"dsn,required,when=postgres,expand,trim,secret" doc:"The PostgreSQL connection string, a URL (postgres://user:password@host:5432/mcpgate?sslmode=verify-full) or libpq key=value pairs, usually from the environment: ${MCPGATE_PG_DSN}. It carries the password, so no message echoes it. pgx pool settings (pool_max_conns, pool_max_conn_lifetime, ...) and connect_timeout are accepted; the default pool holds max(8, 2 x GOMAXPROCS) connections and a connection attempt times out after 5s. The gateway migrates the database's schema at start (the first schema of its search_path), one replica at a time."`
}
