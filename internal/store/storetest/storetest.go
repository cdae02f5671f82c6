// Package storetest is the conformance suite for store backends: one set of
// tests that every store.Store implementation must pass, so the SQLite and
// Postgres backends behave the same. It owns the behaviour the store
// package documents and nothing backend-specific (files, pools, DSNs):
// each backend adds its own tests for those next to its call to [Run].
package storetest

import (
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Run runs the suite against the backend that open creates. open must
// return a new, empty store on every call and close it with t.Cleanup; it
// is called from parallel subtests.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	groups := []struct {
		name  string
		tests []test
	}{
		{"Keys", keyTests},
		{"Sync", syncTests},
		{"Directory", directoryTests},
		{"Objects", objectTests},
		{"TerminatedSessions", sessionTests},
		{"Audit", auditTests},
		{"ToolCalls", toolCallTests},
		{"Concurrency", concurrencyTests},
		{"Pins", pinTests},
		{"Tasks", taskTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, open(t))
				})
			}
		})
	}
}

type test struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

// t0 is the suite's reference time, at the store's millisecond precision.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at returns t0 plus n milliseconds.
func at(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// secretFor returns a distinctive, deterministic secret for alias.
func secretFor(alias string) string { return "mcpg_" + alias + "_s3cr3t-0123456789abcdef" }

// newKey returns an api key for alias with its secret's hash and prefix.
func newKey(alias string) store.Key {
	secret := secretFor(alias)
	return store.Key{
		Alias:     alias,
		KeyHash:   store.HashKey(secret),
		KeyPrefix: store.KeyPrefix(secret),
		Source:    store.SourceAPI,
	}
}

func mustCreateKey(t testing.TB, s store.Store, k store.Key) store.Key {
	t.Helper()
	got, err := s.CreateKey(t.Context(), k)
	if err != nil {
		t.Fatalf("CreateKey(%q): %v", k.Alias, err)
	}
	return got
}

func aliases(keys []store.Key) []string {
	out := []string{}
	for _, k := range keys {
		out = append(out, k.Alias)
	}
	return out
}
