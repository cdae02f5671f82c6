package store

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// KeyLists are a key's list and map fields as the JSON text the SQL
// backends keep in their columns: Servers is nil when the key may use
// every server (Key.Servers nil); the others are never NULL, "[]" or "{}"
// when empty, which read back as nil.
type KeyLists struct {
	Servers                                                *string
	Tools, DenyTools, Toolsets, AccessGroups, AllowedCIDRs string
}

// EncodeKeyLists is k's KeyLists.
func EncodeKeyLists(k *Key) (KeyLists, error) {
	var l KeyLists
	if k.Servers != nil {
		b, err := json.Marshal(k.Servers)
		if err != nil {
			return l, err
		}
		s := string(b)
		l.Servers = &s
	}
	for _, f := range []struct {
		dst *string
		v   any
		n   int
	}{
		{&l.Tools, k.Tools, len(k.Tools)},
		{&l.DenyTools, k.DenyTools, len(k.DenyTools)},
		{&l.Toolsets, k.Toolsets, len(k.Toolsets)},
		{&l.AccessGroups, k.AccessGroups, len(k.AccessGroups)},
		{&l.AllowedCIDRs, k.AllowedCIDRs, len(k.AllowedCIDRs)},
	} {
		var err error
		if *f.dst, err = encodeJSON(f.v, f.n); err != nil {
			return l, err
		}
	}
	return l, nil
}

// encodeJSON encodes a list or map; empty ones are "[]" or "{}".
func encodeJSON(v any, n int) (string, error) {
	if n == 0 {
		if _, isMap := v.(map[string][]string); isMap {
			return "{}", nil
		}
		return "[]", nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// DecodeInto sets k's list and map fields from l; an error names the
// column, never its content.
func (l KeyLists) DecodeInto(k *Key) error {
	if l.Servers != nil {
		k.Servers = []string{}
		if err := json.Unmarshal([]byte(*l.Servers), &k.Servers); err != nil {
			return fmt.Errorf("servers column: %w", err)
		}
	}
	for _, f := range []struct {
		name string
		src  string
		dst  any
	}{
		{"tools", l.Tools, &k.Tools},
		{"deny_tools", l.DenyTools, &k.DenyTools},
		{"toolsets", l.Toolsets, &k.Toolsets},
		{"access_groups", l.AccessGroups, &k.AccessGroups},
		{"allowed_cidrs", l.AllowedCIDRs, &k.AllowedCIDRs},
	} {
		if f.src == "[]" || f.src == "{}" {
			continue // empty reads back as nil
		}
		if err := json.Unmarshal([]byte(f.src), f.dst); err != nil {
			return fmt.Errorf("%s column: %w", f.name, err)
		}
	}
	return nil
}

// PrepareNew fills the store-owned fields of a key about to be created
// (a random id when it has none, source api, creation time now, never
// used) and validates it: what every backend does before CreateKey
// writes.
func (k *Key) PrepareNew(now time.Time) error {
	if k.ID == "" {
		k.ID = rand.Text()
	}
	if k.Source == "" {
		k.Source = SourceAPI
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now.UTC().Truncate(time.Millisecond)
	}
	k.UpdatedAt = k.CreatedAt
	k.LastUsedAt = time.Time{}
	return k.Validate()
}

// KeyColumns are the keys table's columns, in the order of KeyRow.Args and
// KeyRow.Dest.
const KeyColumns = `id, alias, key_hash, key_prefix, user_id, team_id, servers, tools,
	deny_tools, toolsets, access_groups, allowed_cidrs, rate_limit_rpm,
	expires_at, admin, no_mcp, disabled, source, created_at, updated_at,
	last_used_at, budget_amount, budget_period`

// TimeCodec converts times to and from T, what a backend's time columns
// hold, at the store's precision.
type TimeCodec[T any] struct {
	Encode func(time.Time) T
	Decode func(T) time.Time
}

// KeyRow is a Key as the SQL backends store it: its lists and maps as
// KeyLists, its times as T and the optional ones as *T, nil for none.
type KeyRow[T any] struct {
	ID, Alias, Hash, Prefix, User, Team string
	KeyLists
	RPM                    int64
	Expires                *T
	Admin, NoMCP, Disabled bool
	Source                 string
	Created, Updated       T
	LastUsed               *T
	Budget                 float64
	BudgetPeriod           string
}

// EncodeKeyRow is k's KeyRow.
func EncodeKeyRow[T any](k *Key, c TimeCodec[T]) (KeyRow[T], error) {
	opt := func(t time.Time) *T {
		if t.IsZero() {
			return nil
		}
		v := c.Encode(t)
		return &v
	}
	r := KeyRow[T]{
		ID: k.ID, Alias: k.Alias, Hash: k.KeyHash, Prefix: k.KeyPrefix,
		User: k.User, Team: k.Team,
		RPM:     int64(k.RateLimitRPM),
		Expires: opt(k.ExpiresAt),
		Admin:   k.Admin, NoMCP: k.NoMCP, Disabled: k.Disabled,
		Source:   k.Source,
		Created:  c.Encode(k.CreatedAt),
		Updated:  c.Encode(k.UpdatedAt),
		LastUsed: opt(k.LastUsedAt),
		Budget:   k.BudgetAmount, BudgetPeriod: k.BudgetPeriod,
	}
	var err error
	r.KeyLists, err = EncodeKeyLists(k)
	return r, err
}

// Decode is the Key r stores; an error names the column, never its
// content.
func (r *KeyRow[T]) Decode(c TimeCodec[T]) (Key, error) {
	opt := func(v *T) time.Time {
		if v == nil {
			return time.Time{}
		}
		return c.Decode(*v)
	}
	k := Key{
		ID: r.ID, Alias: r.Alias, KeyHash: r.Hash, KeyPrefix: r.Prefix,
		User: r.User, Team: r.Team,
		RateLimitRPM: int(r.RPM),
		ExpiresAt:    opt(r.Expires),
		Admin:        r.Admin, NoMCP: r.NoMCP, Disabled: r.Disabled,
		Source:       r.Source,
		CreatedAt:    c.Decode(r.Created),
		UpdatedAt:    c.Decode(r.Updated),
		LastUsedAt:   opt(r.LastUsed),
		BudgetAmount: r.Budget, BudgetPeriod: r.BudgetPeriod,
	}
	if err := r.KeyLists.DecodeInto(&k); err != nil {
		return k, err
	}
	return k, nil
}

// Args are r's values in KeyColumns order.
func (r *KeyRow[T]) Args() []any {
	return []any{r.ID, r.Alias, r.Hash, r.Prefix, r.User, r.Team, r.Servers, r.Tools,
		r.DenyTools, r.Toolsets, r.AccessGroups, r.AllowedCIDRs, r.RPM,
		r.Expires, r.Admin, r.NoMCP, r.Disabled, r.Source, r.Created, r.Updated,
		r.LastUsed, r.Budget, r.BudgetPeriod}
}

// Dest are pointers to r's fields in KeyColumns order, to scan a row into.
func (r *KeyRow[T]) Dest() []any {
	return []any{&r.ID, &r.Alias, &r.Hash, &r.Prefix, &r.User, &r.Team, &r.Servers, &r.Tools,
		&r.DenyTools, &r.Toolsets, &r.AccessGroups, &r.AllowedCIDRs, &r.RPM,
		&r.Expires, &r.Admin, &r.NoMCP, &r.Disabled, &r.Source, &r.Created, &r.Updated,
		&r.LastUsed, &r.Budget, &r.BudgetPeriod}
}

// KeySet assigns every column a key's owner may change, the arguments
// KeyRow.SetArgs, in d's placeholders; the WHERE value is parameter 19.
func KeySet(d Dialect) string {
	cols := []string{"key_hash", "key_prefix", "user_id", "team_id", "servers",
		"tools", "deny_tools", "toolsets", "access_groups",
		"allowed_cidrs", "rate_limit_rpm", "expires_at", "admin",
		"no_mcp", "disabled", "updated_at", "budget_amount", "budget_period"}
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = " + d.Param(i+1)
	}
	return strings.Join(set, ", ")
}

// SetArgs are the arguments of KeySet, then where.
func (r *KeyRow[T]) SetArgs(where any) []any {
	return []any{r.Hash, r.Prefix, r.User, r.Team, r.Servers,
		r.Tools, r.DenyTools, r.Toolsets, r.AccessGroups,
		r.AllowedCIDRs, r.RPM, r.Expires, r.Admin,
		r.NoMCP, r.Disabled, r.Updated, r.Budget, r.BudgetPeriod, where}
}
