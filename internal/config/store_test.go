package config

import (
	"strings"
	"testing"
)

func TestParseStore(t *testing.T) {
	const dsn = "postgres://mcpgate:s3cret-pa55@db.internal:5432/mcpgate?sslmode=verify-full"
	for _, tc := range []struct {
		name, doc  string
		env        map[string]string
		wantDriver string
		wantDSN    string
	}{
		{"absent", "servers: {}\n", nil, StoreSQLite, ""},
		{"empty section", "store: {}\n", nil, StoreSQLite, ""},
		{"null section", "store:\n", nil, StoreSQLite, ""},
		{"sqlite", "store: {driver: sqlite}\n", nil, StoreSQLite, ""},
		{"postgres from the environment", `store: {driver: postgres, dsn: "${MCPGATE_PG_DSN}"}` + "\n",
			map[string]string{"MCPGATE_PG_DSN": dsn}, StorePostgres, dsn},
		{"postgres, trimmed", "store: {driver: postgres, dsn: ' host=/run/pg dbname=mcpgate '}\n", nil, StorePostgres, "host=/run/pg dbname=mcpgate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc), "", envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.Store.Driver != tc.wantDriver || c.Store.DSN != tc.wantDSN {
				t.Errorf("store = %+v, want driver %q dsn %q", c.Store, tc.wantDriver, tc.wantDSN)
			}
		})
	}
}

func TestParseStoreErrors(t *testing.T) {
	const secret = "postgres://u:hunter2-distinctive@db/x"
	env := map[string]string{"DSN": secret, "EMPTY": ""}
	for _, tc := range []struct{ name, doc, want string }{
		{"postgres without dsn", "store: {driver: postgres}\n", "store.dsn: required for driver postgres"},
		{"dsn empty after expansion", "store: {driver: postgres, dsn: '${EMPTY}'}\n", "store.dsn: required for driver postgres"},
		{"dsn with sqlite", "store: {driver: sqlite, dsn: '${DSN}'}\n", "store.dsn: not allowed for driver sqlite"},
		{"dsn without driver", "store: {dsn: '${DSN}'}\n", "store.dsn: not allowed for driver sqlite"},
		{"unknown driver", "store: {driver: mysql, dsn: '${DSN}'}\n", "store.driver: must be one of sqlite, postgres"},
		{"unknown key", "store: {driver: postgres, dsn: '${DSN}', pool: 3}\n", "store.pool"},
		{"dsn not a string", "store: {driver: postgres, dsn: ['" + secret + "']}\n", "store.dsn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "", envOf(env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the DSN is echoed: %v", err)
			}
		})
	}
}

// audit.durable defaults to on for a fleet's PostgreSQL store (S15: a
// killed replica loses no acknowledged record) and off for SQLite; set,
// it is what it says.
func TestAuditDurableDefault(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want bool
	}{
		{"store: {driver: postgres, dsn: 'postgres://h/db'}\n", true},
		{"store: {driver: postgres, dsn: 'postgres://h/db'}\naudit: {durable: false}\n", false},
		{"{}\n", false},
		{"audit: {durable: true}\n", true},
	} {
		cfg, err := Parse([]byte(tc.doc), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Audit.DurableFor(cfg.Store.Driver); got != tc.want {
			t.Errorf("%q: durable %v, want %v", tc.doc, got, tc.want)
		}
	}
}
