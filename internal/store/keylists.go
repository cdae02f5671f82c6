package store

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
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
