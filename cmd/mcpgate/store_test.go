package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/postgres"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
)

// TestMain stops the throwaway PostgreSQL server if a test started one and
// removes the binaries buildBinary built. With importServerEnv set, the
// test binary is a stdio MCP server instead (TestImportRoundTrip's
// upstreams).
func TestMain(m *testing.M) {
	if name := os.Getenv(importServerEnv); name != "" {
		os.Exit(runImportServer(name))
	}
	code := pgtest.Main(m)
	if built.dir != "" && !built.shared {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// TestServePostgres runs the real binary on a PostgreSQL store reached
// with a password: a key created through the admin API still works after
// a restart, nothing went to data_dir, and the password is in no log line.
func TestServePostgres(t *testing.T) {
	srv := pgtest.Get(t)
	db := srv.NewDatabase(t)
	srv.Exec(t, "postgres", "ALTER DATABASE "+db+" OWNER TO "+pgtest.PasswordUser)
	dsn := srv.DSN(db, pgtest.PasswordUser, srv.Password())

	gw, notes := buildBinary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gw.yaml")
	cfg := fmt.Sprintf(`
data_dir: ./state
store: {driver: postgres, dsn: "${MCPGATE_PG_DSN}"}
auth:
  master_key: ${MK}
servers:
  notes: {transport: stdio, command: %s}
`, notes)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	const mk = "master-0123456789-abcdef"
	env := []string{"MK=" + mk, "MCPGATE_PG_DSN=" + dsn}
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`

	stop := func(p *gatewayProc) {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-p.done:
			if err != nil {
				t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Log())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no exit after SIGTERM")
		}
		if log := p.Log(); strings.Contains(log, srv.Password()) || strings.Contains(log, dsn) {
			t.Errorf("the log holds the DSN's password:\n%s", log)
		}
	}

	p := startGateway(t, gw, cfgPath, env...)
	req, _ := http.NewRequest(http.MethodPost, p.url+"/admin/v1/keys", strings.NewReader(`{"alias":"runtime","servers":["notes"]}`))
	req.Header.Set("X-Mcpgate-Api-Key", mk)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ Key string }
	json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != 201 || !strings.HasPrefix(created.Key, "mcpg_") {
		t.Fatalf("admin create: %d %+v", resp.StatusCode, created)
	}
	if code, _, body := post(t, p.url+"/mcp", created.Key, list); code != 200 || !strings.Contains(body, "notes__list_notes") {
		t.Fatalf("runtime key before the restart: %d %s", code, body)
	}
	if !strings.Contains(p.Log(), `"database":"`+pgtest.PasswordUser+`@`) {
		t.Errorf("no store line naming the database:\n%s", p.Log())
	}
	stop(p)

	p = startGateway(t, gw, cfgPath, env...)
	if code, _, body := post(t, p.url+"/mcp", created.Key, list); code != 200 || !strings.Contains(body, "notes__list_notes") {
		t.Errorf("runtime key after the restart: %d %s", code, body)
	}
	if code, _, _ := post(t, p.url+"/mcp", "mcpg_not-a-key-0123456789abcdef", list); code != 401 {
		t.Errorf("unknown key after the restart: %d", code)
	}
	stop(p)

	if _, err := os.Stat(filepath.Join(dir, "state", "mcpgate.db")); err == nil {
		t.Error("an SQLite store was created in data_dir")
	}
	// The key and its audit record are in PostgreSQL.
	st, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k, err := st.GetKeyByHash(context.Background(), store.HashKey(created.Key))
	if err != nil || k.Alias != "runtime" {
		t.Errorf("key in PostgreSQL: %+v, %v", k, err)
	}
	entries, _, err := st.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil || len(entries) == 0 {
		t.Errorf("audit in PostgreSQL: %+v, %v", entries, err)
	}
}

// A postgres store that cannot be reached fails the start with an error
// that names the server, not the DSN.
func TestServePostgresUnreachable(t *testing.T) {
	dir := t.TempDir()
	const password = "distinctive-pa55word"
	p := writeFile(t, dir, "gw.yaml", "store: {driver: postgres, dsn: \"${DSN}\"}\nservers: {}\n")
	t.Setenv("DSN", "postgres://mcpgate:"+password+"@127.0.0.1:1/mcpgate?connect_timeout=2")
	var out, errb strings.Builder
	code := run([]string{"serve", "--config", p}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "open store postgres mcpgate@127.0.0.1:1/mcpgate") {
		t.Errorf("exit %d: %s", code, errb.String())
	}
	if strings.Contains(errb.String()+out.String(), password) {
		t.Errorf("the password is in the output: %s", errb.String())
	}
}
