package vault

// Helpers shared by several of this package's test files.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

func openStore(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func newVault(t *testing.T, st store.Objects, c *clock, keys ...config.VaultKey) *Vault {
	t.Helper()
	var now func() time.Time
	if c != nil {
		now = c.now
	}
	v, err := New(st, keys, now)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func oauthEntry(person, server string) Entry {
	return Entry{
		Issuer: "https://github.com/login/oauth", Person: person, Server: server, Kind: KindOAuth,
		AccessToken: "gho_access_" + person + "_" + server, RefreshToken: "ghr_refresh_" + person + "_" + server,
		Expiry: time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC), Scopes: []string{"repo", "read:org"},
	}
}
