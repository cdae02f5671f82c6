package storetest

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/store"
)

var syncTests = []test{
	{"AddUpdateRemove", testSyncAddUpdateRemove},
	{"LeavesAPIKeys", testSyncLeavesAPIKeys},
	{"RefusesAPIAlias", testSyncRefusesAPIAlias},
	{"RefusesDuplicateAlias", testSyncRefusesDuplicateAlias},
	{"InvalidChangesNothing", testSyncInvalidChangesNothing},
	{"SwapSecrets", testSyncSwapSecrets},
	{"EachSetting", testSyncEachSetting},
	{"Empty", testSyncEmpty},
}

func configKey(alias string) store.Key {
	k := newKey(alias)
	k.Source = store.SourceConfig
	return k
}

func mustSync(t *testing.T, s store.Store, keys []store.Key, want store.SyncResult) {
	t.Helper()
	got, err := s.SyncConfigKeys(t.Context(), keys)
	if err != nil {
		t.Fatalf("SyncConfigKeys: %v", err)
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("SyncConfigKeys result (-got +want):\n%s", diff)
	}
}

func keysByAlias(t *testing.T, s store.Store) map[string]store.Key {
	t.Helper()
	list, err := s.ListKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]store.Key{}
	for _, k := range list {
		m[k.Alias] = k
	}
	return m
}

func testSyncAddUpdateRemove(t *testing.T, s store.Store) {
	ctx := t.Context()
	keep, change, drop := configKey("keep"), configKey("change"), configKey("drop")
	keep.Servers = []string{"github"}
	keep.Source = "" // forced to config
	mustSync(t, s, []store.Key{keep, change, drop}, store.SyncResult{Added: []string{"change", "drop", "keep"}})
	first := keysByAlias(t, s)
	for alias, k := range first {
		if k.Source != store.SourceConfig {
			t.Errorf("%s: Source = %q, want config", alias, k.Source)
		}
	}
	if err := s.TouchKey(ctx, "change", at(42)); err != nil {
		t.Fatal(err)
	}

	change.Servers = []string{}
	change.RateLimitRPM = 60
	change.BudgetAmount, change.BudgetPeriod = 3, store.BudgetDay
	added := configKey("added")
	mustSync(t, s, []store.Key{added, change, keep}, store.SyncResult{Added: []string{"added"}, Updated: []string{"change"}, Removed: []string{"drop"}})
	second := keysByAlias(t, s)

	if diff := cmp.Diff(second["keep"], first["keep"]); diff != "" {
		t.Errorf("unchanged key was rewritten (-got +want):\n%s", diff)
	}
	got := second["change"]
	want := first["change"]
	want.Servers, want.RateLimitRPM, want.LastUsedAt = []string{}, 60, at(42)
	want.BudgetAmount, want.BudgetPeriod = 3, store.BudgetDay
	want.UpdatedAt = got.UpdatedAt
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("updated key (-got +want):\n%s", diff)
	}
	if got.UpdatedAt.Before(first["change"].UpdatedAt) {
		t.Errorf("UpdatedAt went backwards: %v -> %v", first["change"].UpdatedAt, got.UpdatedAt)
	}
	if _, ok := second["drop"]; ok {
		t.Error("unlisted config key was not removed")
	}
	if _, err := s.GetKeyByHash(ctx, drop.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("removed key still found by hash: err = %v", err)
	}
	if _, ok := second["added"]; !ok {
		t.Error("new config key was not added")
	}

	// The same list again changes nothing.
	mustSync(t, s, []store.Key{added, change, keep}, store.SyncResult{})
	if diff := cmp.Diff(keysByAlias(t, s), second); diff != "" {
		t.Errorf("idempotent sync changed keys (-got +want):\n%s", diff)
	}
}

func testSyncLeavesAPIKeys(t *testing.T, s store.Store) {
	api := mustCreateKey(t, s, fullKey("api"))
	mustSync(t, s, []store.Key{configKey("cfg")}, store.SyncResult{Added: []string{"cfg"}})
	mustSync(t, s, nil, store.SyncResult{Removed: []string{"cfg"}})
	got := keysByAlias(t, s)
	if diff := cmp.Diff(got, map[string]store.Key{"api": api}); diff != "" {
		t.Errorf("keys after syncs (-got +want):\n%s", diff)
	}
}

func testSyncRefusesAPIAlias(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustSync(t, s, []store.Key{configKey("cfg")}, store.SyncResult{Added: []string{"cfg"}})
	mustCreateKey(t, s, newKey("api"))
	before := keysByAlias(t, s)

	clash := configKey("api")
	clash.KeyHash = store.HashKey("another secret for the api alias")
	_, err := s.SyncConfigKeys(ctx, []store.Key{configKey("new"), clash})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("sync over an api alias: err = %v, want ErrConflict", err)
	}
	// A listed hash used by an api key under another alias.
	sameSecret := newKey("api")
	sameSecret.Alias = "cfg-2"
	_, err = s.SyncConfigKeys(ctx, []store.Key{configKey("new"), sameSecret})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("sync with an api key's secret: err = %v, want ErrConflict", err)
	}
	assertNoSecret(t, err, "api")
	if diff := cmp.Diff(keysByAlias(t, s), before); diff != "" {
		t.Errorf("failed sync changed keys (-got +want):\n%s", diff)
	}
}

func testSyncRefusesDuplicateAlias(t *testing.T, s store.Store) {
	twice := configKey("twice")
	twice.KeyHash = store.HashKey("other secret")
	_, err := s.SyncConfigKeys(t.Context(), []store.Key{configKey("twice"), twice})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("alias listed twice: err = %v, want ErrConflict", err)
	}
	if n := len(keysByAlias(t, s)); n != 0 {
		t.Errorf("failed sync stored %d keys", n)
	}
}

func testSyncInvalidChangesNothing(t *testing.T, s store.Store) {
	mustSync(t, s, []store.Key{configKey("a")}, store.SyncResult{Added: []string{"a"}})
	before := keysByAlias(t, s)
	bad := configKey("bad")
	bad.KeyHash = secretFor("bad")
	_, err := s.SyncConfigKeys(t.Context(), []store.Key{configKey("b"), bad})
	if !errors.Is(err, store.ErrInvalid) {
		t.Errorf("invalid key: err = %v, want ErrInvalid", err)
	}
	assertNoSecret(t, err, "bad")
	if diff := cmp.Diff(keysByAlias(t, s), before); diff != "" {
		t.Errorf("failed sync changed keys (-got +want):\n%s", diff)
	}
}

// An operator may swap two keys' secrets in one config edit; the sync must
// not trip over the uniqueness of hashes halfway through.
func testSyncSwapSecrets(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := configKey("a"), configKey("b")
	mustSync(t, s, []store.Key{a, b}, store.SyncResult{Added: []string{"a", "b"}})
	a.KeyHash, b.KeyHash = b.KeyHash, a.KeyHash
	a.KeyPrefix, b.KeyPrefix = b.KeyPrefix, a.KeyPrefix
	mustSync(t, s, []store.Key{a, b}, store.SyncResult{Updated: []string{"a", "b"}})
	got, err := s.GetKeyByHash(ctx, store.HashKey(secretFor("a")))
	if err != nil {
		t.Fatal(err)
	}
	if got.Alias != "b" {
		t.Errorf("secret of a now opens %q, want b", got.Alias)
	}
}

func testSyncEmpty(t *testing.T, s store.Store) {
	mustSync(t, s, nil, store.SyncResult{})
	mustSync(t, s, []store.Key{configKey("a"), configKey("b")}, store.SyncResult{Added: []string{"a", "b"}})
	mustSync(t, s, []store.Key{}, store.SyncResult{Removed: []string{"a", "b"}})
	if n := len(keysByAlias(t, s)); n != 0 {
		t.Errorf("%d keys left after syncing an empty list", n)
	}
}

// A change to any one setting alone is an update, and the same list again
// is none (the PostgreSQL backend once missed a budget-only change).
func testSyncEachSetting(t *testing.T, s store.Store) {
	base := configKey("k")
	mustSync(t, s, []store.Key{base}, store.SyncResult{Added: []string{"k"}})
	for _, tc := range []struct {
		name   string
		change func(k *store.Key)
	}{
		{"servers", func(k *store.Key) { k.Servers = []string{"github"} }},
		{"no servers", func(k *store.Key) { k.Servers = []string{} }},
		{"tools", func(k *store.Key) { k.Tools = map[string][]string{"github": {"search"}} }},
		{"deny tools", func(k *store.Key) { k.DenyTools = map[string][]string{"github": {"delete"}} }},
		{"toolsets", func(k *store.Key) { k.Toolsets = []string{"read"} }},
		{"access groups", func(k *store.Key) { k.AccessGroups = []string{"eng"} }},
		{"cidrs", func(k *store.Key) { k.AllowedCIDRs = []string{"10.0.0.0/8"} }},
		{"user", func(k *store.Key) { k.User = "alice" }},
		{"team", func(k *store.Key) { k.Team = "eng" }},
		{"prefix", func(k *store.Key) { k.KeyPrefix = "" }},
		{"rate limit", func(k *store.Key) { k.RateLimitRPM = 60 }},
		{"budget", func(k *store.Key) { k.BudgetAmount, k.BudgetPeriod = 3, store.BudgetDay }},
		{"budget period", func(k *store.Key) { k.BudgetPeriod = store.BudgetWeek }},
		{"expiry", func(k *store.Key) { k.ExpiresAt = at(5000) }},
		{"admin", func(k *store.Key) { k.Admin = true }},
		{"no mcp", func(k *store.Key) { k.NoMCP = true }},
		{"disabled", func(k *store.Key) { k.Disabled = true }},
	} {
		k := base
		tc.change(&k)
		t.Run(tc.name, func(t *testing.T) {
			mustSync(t, s, []store.Key{k}, store.SyncResult{Updated: []string{"k"}})
			mustSync(t, s, []store.Key{k}, store.SyncResult{})
			mustSync(t, s, []store.Key{base}, store.SyncResult{Updated: []string{"k"}})
		})
	}
}
