package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
)

// Issue 14 §3, as wired: two replicas built from one config (PostgreSQL
// store, Redis state) follow each other's admin changes. A key revoked
// with the CLI through A is refused by B within a second, though B had
// cached it; a server added through B is served by A.
func TestBuildFleetAdminChanges(t *testing.T) {
	clearAdminEnv(t)
	const master = "master-key-0123456789"
	dsn, rds := pgtest.DSN(t), redistest.New(t)
	replica := func() string {
		cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__",
			Auth:  &config.CallerAuth{MasterKey: master},
			Store: config.Store{Driver: "postgres", DSN: dsn},
			State: config.State{Driver: config.StateRedis, URL: rds.URL()}}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(stk.handler)
		t.Cleanup(func() {
			hs.CloseClientConnections()
			hs.Close()
			stk.close(context.Background())
		})
		return hs.URL
	}
	a, b := replica(), replica()
	do := func(method, url, key, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(callers.HeaderAPIKey, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	within := func(what string, cond func() bool) {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > time.Second {
				t.Fatalf("%s: not within 1s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s: %s", what, time.Since(start).Round(100*time.Microsecond))
	}
	const list = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`

	t.Setenv("MCPGATE_URL", a)
	t.Setenv("MCPGATE_MASTER_KEY", master)
	code, secret, stderr := cli(t, "keys", "create", "--alias", "doomed")
	secret = strings.TrimSpace(secret)
	if code != 0 {
		t.Fatalf("keys create: exit %d: %s", code, stderr)
	}
	if code, body := do("POST", b+"/mcp", secret, list); code != 200 {
		t.Fatalf("the new key on B: %d %s", code, body)
	}
	// B cached the key for longer than a second (callers.DefaultCacheTTL);
	// only A's announcement makes it forget in time. (Had B's follower not
	// subscribed yet, its first resync would flush the cache instead.)
	if code, _, stderr := cli(t, "keys", "revoke", "doomed"); code != 0 {
		t.Fatalf("keys revoke: exit %d: %s", code, stderr)
	}
	within("key revoked with the CLI on A refused on B", func() bool {
		code, _ := do("POST", b+"/mcp", secret, list)
		return code == http.StatusUnauthorized
	})

	if code, body := do("POST", b+"/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"http://127.0.0.1:1/mcp","timeout":"1s"}`); code != http.StatusCreated {
		t.Fatalf("add on B: %d %s", code, body)
	}
	within("server added on B listed on A", func() bool {
		_, body := do("GET", a+"/admin/v1/servers", master, "")
		return strings.Contains(body, `"name":"extra"`)
	})
}
