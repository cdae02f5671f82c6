package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/store"
)

var keyTests = []test{
	{"RoundTrip", testKeyRoundTrip},
	{"NilVersusEmpty", testKeyNilVersusEmpty},
	{"Defaults", testKeyDefaults},
	{"Conflict", testKeyConflict},
	{"NotFound", testKeyNotFound},
	{"Invalid", testKeyInvalid},
	{"Update", testKeyUpdate},
	{"UpdateConflict", testKeyUpdateConflict},
	{"Delete", testKeyDelete},
	{"Touch", testKeyTouch},
	{"ListOrder", testKeyListOrder},
	{"CanceledContext", testCanceledContext},
}

// fullKey sets every field a caller may set.
func fullKey(alias string) store.Key {
	k := newKey(alias)
	k.ID = "id-" + alias
	k.User = "u-alice"
	k.Team = "t-platform"
	k.Servers = []string{"github", "jira"}
	k.Tools = map[string][]string{"github": {"create_issue", "search"}, "jira": {"get"}}
	k.DenyTools = map[string][]string{"github": {"delete_repo"}}
	k.Toolsets = []string{"triage"}
	k.AccessGroups = []string{"eng", "oncall"}
	k.AllowedCIDRs = []string{"10.0.0.0/8", "2001:db8::/32"}
	k.RateLimitRPM = 600
	k.BudgetAmount, k.BudgetPeriod = 12.5, store.BudgetWeek
	k.ExpiresAt = at(86_400_000)
	k.Admin = true
	k.NoMCP = true
	k.Disabled = true
	k.CreatedAt = at(5)
	return k
}

func testKeyRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := fullKey("ci")
	want := in
	want.UpdatedAt = in.CreatedAt

	got := mustCreateKey(t, s, in)
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("CreateKey returned (-got +want):\n%s", diff)
	}
	byAlias, err := s.GetKeyByAlias(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(byAlias, want); diff != "" {
		t.Errorf("GetKeyByAlias (-got +want):\n%s", diff)
	}
	byHash, err := s.GetKeyByHash(ctx, store.HashKey(secretFor("ci")))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(byHash, want); diff != "" {
		t.Errorf("GetKeyByHash (-got +want):\n%s", diff)
	}
	list, err := s.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(list, []store.Key{want}); diff != "" {
		t.Errorf("ListKeys (-got +want):\n%s", diff)
	}
	for name, tm := range map[string]time.Time{"ExpiresAt": byHash.ExpiresAt, "CreatedAt": byHash.CreatedAt, "UpdatedAt": byHash.UpdatedAt} {
		if tm.Location() != time.UTC {
			t.Errorf("%s location = %v, want UTC", name, tm.Location())
		}
	}
}

func testKeyNilVersusEmpty(t *testing.T, s store.Store) {
	ctx := t.Context()
	all := newKey("all")
	all.Servers = nil
	none := newKey("none")
	none.Servers = []string{}
	// Inside a map, a server with no allowed tools is not a server without
	// a list.
	none.Tools = map[string][]string{"github": {}, "jira": nil}
	// Empty lists and maps outside Servers read back as nil.
	none.Toolsets = []string{}
	none.AccessGroups = []string{}
	none.AllowedCIDRs = []string{}
	none.DenyTools = map[string][]string{}
	mustCreateKey(t, s, all)
	mustCreateKey(t, s, none)

	got, err := s.GetKeyByAlias(ctx, "all")
	if err != nil {
		t.Fatal(err)
	}
	if got.Servers != nil {
		t.Errorf("Servers = %#v, want nil (all servers)", got.Servers)
	}
	got, err = s.GetKeyByAlias(ctx, "none")
	if err != nil {
		t.Fatal(err)
	}
	if got.Servers == nil || len(got.Servers) != 0 {
		t.Errorf("Servers = %#v, want empty non-nil (no server)", got.Servers)
	}
	if diff := cmp.Diff(got.Tools, map[string][]string{"github": {}, "jira": nil}); diff != "" {
		t.Errorf("Tools (-got +want):\n%s", diff)
	}
	if got.Toolsets != nil || got.AccessGroups != nil || got.AllowedCIDRs != nil || got.DenyTools != nil {
		t.Errorf("empty lists and maps = %#v %#v %#v %#v, want nil", got.Toolsets, got.AccessGroups, got.AllowedCIDRs, got.DenyTools)
	}
}

func testKeyDefaults(t *testing.T, s store.Store) {
	ctx := t.Context()
	before := time.Now().Add(-time.Second)
	k := newKey("plain")
	k.Source = ""
	k.LastUsedAt = at(1) // not the caller's to set on create
	got := mustCreateKey(t, s, k)
	after := time.Now().Add(time.Second)

	if got.ID == "" {
		t.Error("ID not assigned")
	}
	if got.Source != store.SourceAPI {
		t.Errorf("Source = %q, want %q", got.Source, store.SourceAPI)
	}
	if got.CreatedAt.Before(before) || got.CreatedAt.After(after) {
		t.Errorf("CreatedAt = %v, want about now", got.CreatedAt)
	}
	if !got.UpdatedAt.Equal(got.CreatedAt) {
		t.Errorf("UpdatedAt = %v, want CreatedAt %v", got.UpdatedAt, got.CreatedAt)
	}
	read, err := s.GetKeyByAlias(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if !read.ExpiresAt.IsZero() || !read.LastUsedAt.IsZero() {
		t.Errorf("ExpiresAt, LastUsedAt = %v, %v, want zero (never)", read.ExpiresAt, read.LastUsedAt)
	}
	if diff := cmp.Diff(read, got); diff != "" {
		t.Errorf("read back (-got +want):\n%s", diff)
	}
	other := mustCreateKey(t, s, newKey("other"))
	if other.ID == got.ID {
		t.Errorf("two keys got the same ID %q", got.ID)
	}
}

func testKeyConflict(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreateKey(t, s, newKey("ci"))

	sameAlias := newKey("other")
	sameAlias.Alias = "ci"
	_, err := s.CreateKey(ctx, sameAlias)
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("duplicate alias: err = %v, want ErrConflict", err)
	}

	sameSecret := newKey("ci")
	sameSecret.Alias = "ci-2"
	_, err = s.CreateKey(ctx, sameSecret)
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("duplicate hash: err = %v, want ErrConflict", err)
	}
	assertNoSecret(t, err, "ci")

	list, err := s.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(aliases(list), []string{"ci"}); diff != "" {
		t.Errorf("keys after conflicts (-got +want):\n%s", diff)
	}
}

// assertNoSecret fails if err's message holds the secret or hash of alias.
func assertNoSecret(t *testing.T, err error, alias string) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	secret := secretFor(alias)
	if strings.Contains(msg, secret) || strings.Contains(msg, store.HashKey(secret)) {
		t.Errorf("error message %q reveals the secret or its hash", msg)
	}
}

func testKeyNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreateKey(t, s, newKey("present"))
	missing := newKey("missing")
	_, errAlias := s.GetKeyByAlias(ctx, "missing")
	_, errHash := s.GetKeyByHash(ctx, missing.KeyHash)
	_, errUpdate := s.UpdateKey(ctx, missing)
	errDelete := s.DeleteKey(ctx, "missing")
	errTouch := s.TouchKey(ctx, "missing", at(1))
	for name, err := range map[string]error{
		"GetKeyByAlias": errAlias, "GetKeyByHash": errHash, "UpdateKey": errUpdate,
		"DeleteKey": errDelete, "TouchKey": errTouch,
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrNotFound", name, err)
		}
		assertNoSecret(t, err, "missing")
	}
}

func testKeyInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	tests := []struct {
		name   string
		mutate func(*store.Key)
	}{
		{"empty alias", func(k *store.Key) { k.Alias = "" }},
		{"control character in alias", func(k *store.Key) { k.Alias = "a\nb" }},
		{"secret instead of hash", func(k *store.Key) { k.KeyHash = secretFor("bad") }},
		{"uppercase hash", func(k *store.Key) { k.KeyHash = strings.ToUpper(k.KeyHash) }},
		{"short hash", func(k *store.Key) { k.KeyHash = k.KeyHash[:63] }},
		{"long prefix", func(k *store.Key) { k.KeyPrefix = secretFor("bad")[:9] }},
		{"unknown source", func(k *store.Key) { k.Source = "file" }},
		{"negative rate limit", func(k *store.Key) { k.RateLimitRPM = -1 }},
		{"negative budget", func(k *store.Key) { k.BudgetAmount, k.BudgetPeriod = -1, store.BudgetDay }},
		{"budget without a period", func(k *store.Key) { k.BudgetAmount = 5 }},
		{"unknown budget period", func(k *store.Key) { k.BudgetAmount, k.BudgetPeriod = 5, "year" }},
	}
	for _, tt := range tests {
		k := newKey("bad")
		tt.mutate(&k)
		_, err := s.CreateKey(ctx, k)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: CreateKey err = %v, want ErrInvalid", tt.name, err)
		}
		assertNoSecret(t, err, "bad")
	}
	list, err := s.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("invalid keys were stored: %v", aliases(list))
	}
}

func testKeyUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	orig := mustCreateKey(t, s, fullKey("ci"))
	if err := s.TouchKey(ctx, "ci", at(100)); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)

	rotated := secretFor("ci-rotated")
	upd := store.Key{
		Alias:     "ci",
		KeyHash:   store.HashKey(rotated),
		KeyPrefix: store.KeyPrefix(rotated),
		Servers:   []string{},
		Tools:     map[string][]string{"jira": {"get"}},
		// Fields the store keeps whatever the caller says:
		ID:         "ignored",
		Source:     store.SourceConfig,
		CreatedAt:  at(999),
		LastUsedAt: at(999),
	}
	got, err := s.UpdateKey(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	want := upd
	want.ID, want.Source, want.CreatedAt, want.LastUsedAt = orig.ID, orig.Source, orig.CreatedAt, at(100)
	want.UpdatedAt = got.UpdatedAt
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("UpdateKey returned (-got +want):\n%s", diff)
	}
	if got.UpdatedAt.Before(before) {
		t.Errorf("UpdatedAt = %v, want about now", got.UpdatedAt)
	}
	if _, err := s.GetKeyByHash(ctx, orig.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("old hash after rotation: err = %v, want ErrNotFound", err)
	}
	read, err := s.GetKeyByHash(ctx, store.HashKey(rotated))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(read, got); diff != "" {
		t.Errorf("read back (-got +want):\n%s", diff)
	}

	bad := upd
	bad.KeyHash = rotated
	if _, err := s.UpdateKey(ctx, bad); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("update with a secret as hash: err = %v, want ErrInvalid", err)
	}
}

func testKeyUpdateConflict(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreateKey(t, s, newKey("a"))
	mustCreateKey(t, s, newKey("b"))
	k := newKey("b")
	k.Alias = "a"
	_, err := s.UpdateKey(ctx, k)
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("UpdateKey to a used hash: err = %v, want ErrConflict", err)
	}
	assertNoSecret(t, err, "b")
	got, err := s.GetKeyByAlias(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.KeyHash != newKey("a").KeyHash {
		t.Error("failed update changed the key")
	}
}

func testKeyDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreateKey(t, s, newKey("a"))
	mustCreateKey(t, s, newKey("b"))
	if err := s.DeleteKey(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteKey(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteKey: err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetKeyByHash(ctx, newKey("a").KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetKeyByHash after delete: err = %v, want ErrNotFound", err)
	}
	list, err := s.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(aliases(list), []string{"b"}); diff != "" {
		t.Errorf("ListKeys (-got +want):\n%s", diff)
	}
	// The alias and secret are free again.
	mustCreateKey(t, s, newKey("a"))
}

func testKeyTouch(t *testing.T, s store.Store) {
	ctx := t.Context()
	created := mustCreateKey(t, s, newKey("ci"))
	lastUsed := func() time.Time {
		t.Helper()
		k, err := s.GetKeyByAlias(ctx, "ci")
		if err != nil {
			t.Fatal(err)
		}
		if !k.UpdatedAt.Equal(created.UpdatedAt) {
			t.Errorf("TouchKey changed UpdatedAt to %v", k.UpdatedAt)
		}
		return k.LastUsedAt
	}
	for _, tt := range []struct {
		touch, want time.Time
	}{
		{at(1000), at(1000)},
		{at(2000), at(2000)},
		{at(1500), at(2000)}, // never backwards
		{at(2000), at(2000)}, // same time: no error
	} {
		if err := s.TouchKey(ctx, "ci", tt.touch); err != nil {
			t.Fatalf("TouchKey(%v): %v", tt.touch, err)
		}
		if got := lastUsed(); !got.Equal(tt.want) {
			t.Errorf("after TouchKey(%v): LastUsedAt = %v, want %v", tt.touch, got, tt.want)
		}
	}
}

func testKeyListOrder(t *testing.T, s store.Store) {
	ctx := t.Context()
	want := []string{"A-upper", "alpha", "beta", "beta-2", "zeta"}
	order := slices.Clone(want)
	slices.Reverse(order)
	order[0], order[2] = order[2], order[0]
	for _, a := range order {
		mustCreateKey(t, s, newKey(a))
	}
	list, err := s.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(aliases(list), want); diff != "" {
		t.Errorf("ListKeys order (-got +want):\n%s", diff)
	}
}

func testCanceledContext(t *testing.T, s store.Store) {
	mustCreateKey(t, s, newKey("ci"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.GetKeyByHash(ctx, newKey("ci").KeyHash); !errors.Is(err, context.Canceled) {
		t.Errorf("GetKeyByHash with a canceled context: err = %v, want context.Canceled", err)
	}
	if _, err := s.CreateKey(ctx, newKey("other")); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateKey with a canceled context: err = %v, want context.Canceled", err)
	}
	if _, err := s.GetKeyByAlias(t.Context(), "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("key written despite a canceled context: err = %v", err)
	}
}
