package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/store"
)

// KeyAttributes are the attributes of a virtual key as the API takes them
// (POST creates, PATCH changes the fields present). Servers: absent or
// null = every server, [] = none. The Clearable fields tell null from
// absent: in a PATCH, null clears the field (no expiry; any network;
// every tool, none denied; no toolsets or access groups), absent leaves
// it as it is.
type KeyAttributes struct {
	Alias        *string                        `json:"alias,omitempty"`
	User         *string                        `json:"user,omitempty"`
	Team         *string                        `json:"team,omitempty"`
	Servers      *[]string                      `json:"servers,omitempty"`
	Tools        Clearable[map[string][]string] `json:"tools,omitzero"`
	DenyTools    Clearable[map[string][]string] `json:"deny_tools,omitzero"`
	Toolsets     Clearable[[]string]            `json:"toolsets,omitzero"`
	AccessGroups Clearable[[]string]            `json:"access_groups,omitzero"`
	AllowedCIDRs Clearable[[]string]            `json:"allowed_cidrs,omitzero"`
	RateLimitRPM *int                           `json:"rate_limit_rpm,omitempty"`
	Budget       *BudgetView                    `json:"budget,omitempty"` // amount 0: no budget
	Expires      Clearable[time.Time]           `json:"expires,omitzero"`
	Admin        *bool                          `json:"admin,omitempty"`
	NoMCP        *bool                          `json:"no_mcp,omitempty"`
	Disabled     *bool                          `json:"disabled,omitempty"`
	// AllServers resets Servers to "every server" in a PATCH.
	AllServers *bool `json:"all_servers,omitempty"`
}

// Clearable is a field of a PATCH body with three states: absent (Set
// false: leave it), null (Set, Null: clear it) and a value (Set, V). A
// pointer field cannot tell null from absent (encoding/json leaves it nil
// for both), so an expiry, once set, could never be removed.
type Clearable[T any] struct {
	Set  bool // present in the body
	Null bool // present as null
	V    T    // the value; T's zero value when null
}

// Value is a Clearable set to v.
func Value[T any](v T) Clearable[T] { return Clearable[T]{Set: true, V: v} }

// IsZero makes an absent Clearable left out by omitzero.
func (c Clearable[T]) IsZero() bool { return !c.Set }

// MarshalJSON writes null or the value.
func (c Clearable[T]) MarshalJSON() ([]byte, error) {
	if c.Null {
		return []byte("null"), nil
	}
	return json.Marshal(c.V)
}

// UnmarshalJSON runs only for a field present in the body, null included
// (encoding/json calls it with null for a non-pointer field).
func (c *Clearable[T]) UnmarshalJSON(b []byte) error {
	var zero T
	*c = Clearable[T]{Set: true}
	if string(bytes.TrimSpace(b)) == "null" {
		c.Null, c.V = true, zero
		return nil
	}
	return json.Unmarshal(b, &c.V)
}

// BudgetView is a key's budget: the most its tool calls may cost per
// period (day, week or month, UTC).
type BudgetView struct {
	Amount float64 `json:"amount"`
	Period string  `json:"period"`
}

// KeyView is a key as the API shows it: never the secret nor its hash.
type KeyView struct {
	Alias        string              `json:"alias"`
	KeyPrefix    string              `json:"key_prefix,omitempty"`
	User         string              `json:"user,omitempty"`
	Team         string              `json:"team,omitempty"`
	Servers      []string            `json:"servers"` // null = every server
	Tools        map[string][]string `json:"tools,omitempty"`
	DenyTools    map[string][]string `json:"deny_tools,omitempty"`
	Toolsets     []string            `json:"toolsets,omitempty"`
	AccessGroups []string            `json:"access_groups,omitempty"`
	AllowedCIDRs []string            `json:"allowed_cidrs,omitempty"`
	RateLimitRPM int                 `json:"rate_limit_rpm"`
	Budget       *BudgetView         `json:"budget,omitempty"`
	Expires      string              `json:"expires,omitempty"`
	Admin        bool                `json:"admin"`
	NoMCP        bool                `json:"no_mcp"`
	Disabled     bool                `json:"disabled"`
	Source       string              `json:"source"`
	CreatedAt    string              `json:"created_at"`
	UpdatedAt    string              `json:"updated_at"`
	LastUsedAt   string              `json:"last_used_at,omitempty"`
}

// CreatedKey is the answer to POST /admin/v1/keys: the only time the
// secret is shown.
type CreatedKey struct {
	Alias string `json:"alias"`
	Key   string `json:"key"`
}

func viewOf(k store.Key) KeyView {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	var budget *BudgetView
	if k.BudgetAmount > 0 {
		budget = &BudgetView{Amount: k.BudgetAmount, Period: k.BudgetPeriod}
	}
	return KeyView{Budget: budget, Alias: k.Alias, KeyPrefix: k.KeyPrefix, User: k.User, Team: k.Team, Servers: k.Servers,
		Tools: k.Tools, DenyTools: k.DenyTools, Toolsets: k.Toolsets, AccessGroups: k.AccessGroups,
		AllowedCIDRs: k.AllowedCIDRs, RateLimitRPM: k.RateLimitRPM, Expires: ts(k.ExpiresAt), Admin: k.Admin,
		NoMCP: k.NoMCP, Disabled: k.Disabled, Source: k.Source, CreatedAt: ts(k.CreatedAt), UpdatedAt: ts(k.UpdatedAt),
		LastUsedAt: ts(k.LastUsedAt)}
}

// validAlias reports whether alias matches [A-Za-z0-9][A-Za-z0-9_.@-]{0,127},
// whole. Not a regexp: compiled, the bounded repetition was ~100 KB of
// heap held from init in every gateway (FuzzValidAlias checks the two
// agree).
func validAlias(alias string) bool {
	if alias == "" || len(alias) > 128 {
		return false
	}
	for i := 0; i < len(alias); i++ {
		c := alias[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '@' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// apply copies the attributes present in in onto k, validating each; the
// error names the field.
func (a *API) apply(k *store.Key, in *KeyAttributes) error {
	if in.Alias != nil {
		if !validAlias(*in.Alias) {
			return errors.New(`alias: must match [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}`)
		}
		k.Alias = *in.Alias
	}
	if in.User != nil {
		k.User = *in.User
	}
	if in.Team != nil {
		k.Team = *in.Team
	}
	servers := a.o.Servers()
	if in.AllServers != nil && *in.AllServers {
		k.Servers = nil
	}
	if in.Servers != nil {
		for i, s := range *in.Servers {
			if !contains(servers, s) {
				return fmt.Errorf("servers[%d]: unknown server %q", i, s)
			}
		}
		k.Servers = append([]string{}, *in.Servers...)
	}
	checkMap := func(field string, m map[string][]string) error {
		for s, tools := range m {
			if !contains(servers, s) {
				return fmt.Errorf("%s: unknown server %q", field, s)
			}
			for i, t := range tools {
				if strings.TrimSpace(t) == "" {
					return fmt.Errorf("%s.%s[%d]: empty tool name", field, s, i)
				}
			}
		}
		return nil
	}
	// A null list is cleared like an empty one.
	if in.Tools.Set {
		if err := checkMap("tools", in.Tools.V); err != nil {
			return err
		}
		k.Tools = in.Tools.V
	}
	if in.DenyTools.Set {
		if err := checkMap("deny_tools", in.DenyTools.V); err != nil {
			return err
		}
		k.DenyTools = in.DenyTools.V
	}
	if in.Toolsets.Set {
		known := a.o.Toolsets()
		for i, t := range in.Toolsets.V {
			if !contains(known, t) {
				return fmt.Errorf("toolsets[%d]: unknown toolset %q", i, t)
			}
		}
		k.Toolsets = in.Toolsets.V
	}
	if in.AccessGroups.Set {
		known := a.o.AccessGroups()
		for i, g := range in.AccessGroups.V {
			if !contains(known, g) {
				return fmt.Errorf("access_groups[%d]: unknown access group %q", i, g)
			}
		}
		k.AccessGroups = in.AccessGroups.V
	}
	if in.AllowedCIDRs.Set {
		out := make([]string, 0, len(in.AllowedCIDRs.V))
		for i, c := range in.AllowedCIDRs.V {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				addr, aerr := netip.ParseAddr(c)
				if aerr != nil {
					return fmt.Errorf("allowed_cidrs[%d]: invalid CIDR %q", i, c)
				}
				p = netip.PrefixFrom(addr, addr.BitLen())
			}
			out = append(out, p.Masked().String())
		}
		k.AllowedCIDRs = out
	}
	if in.RateLimitRPM != nil {
		if *in.RateLimitRPM < 0 {
			return errors.New("rate_limit_rpm: must be >= 0")
		}
		k.RateLimitRPM = *in.RateLimitRPM
	}
	if b := in.Budget; b != nil {
		if b.Amount < 0 || math.IsNaN(b.Amount) || math.IsInf(b.Amount, 0) {
			return errors.New("budget.amount: must be a number >= 0")
		}
		period := b.Period
		if period == "" {
			period = store.BudgetMonth
		}
		if period != store.BudgetDay && period != store.BudgetWeek && period != store.BudgetMonth {
			return errors.New("budget.period: must be day, week or month")
		}
		k.BudgetAmount, k.BudgetPeriod = b.Amount, period
		if b.Amount == 0 {
			k.BudgetPeriod = "" // no budget
		}
	}
	if in.Expires.Set {
		// null: never expires (the zero time); a value: that instant.
		k.ExpiresAt = in.Expires.V.UTC()
		if in.Expires.Null {
			k.ExpiresAt = time.Time{}
		}
	}
	if in.Admin != nil {
		k.Admin = *in.Admin
	}
	if in.NoMCP != nil {
		k.NoMCP = *in.NoMCP
	}
	if in.Disabled != nil {
		k.Disabled = *in.Disabled
	}
	return nil
}

func (a *API) createKey(w http.ResponseWriter, r *http.Request) error {
	var in KeyAttributes
	if err := decode(r, &in); err != nil {
		return err
	}
	if in.Alias == nil {
		return badRequest("alias: required")
	}
	k := store.Key{Source: store.SourceAPI}
	if err := a.apply(&k, &in); err != nil {
		return badRequest(err.Error())
	}
	secret, err := callers.NewSecret()
	if err != nil {
		return refusal(http.StatusInternalServerError, "could not generate a key").
			logged(slog.LevelError, "generate a key", err)
	}
	k.KeyHash, k.KeyPrefix = store.HashKey(secret), store.KeyPrefix(secret)
	if _, err := a.o.Store.CreateKey(r.Context(), k); err != nil {
		return storeError(err, k.Alias)
	}
	a.changed(r.Context(), k.Alias)
	a.audit(r.Context(), "key.create", k.Alias, nil)
	writeJSON(w, http.StatusCreated, CreatedKey{Alias: k.Alias, Key: secret})
	return nil
}

func (a *API) listKeys(w http.ResponseWriter, r *http.Request) error {
	keys, err := a.o.Store.ListKeys(r.Context())
	if err != nil {
		return storeError(err, "")
	}
	out := struct {
		Keys []KeyView `json:"keys"`
	}{Keys: make([]KeyView, 0, len(keys))}
	for _, k := range keys {
		out.Keys = append(out.Keys, viewOf(k))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) getKey(w http.ResponseWriter, r *http.Request) error {
	k, err := a.o.Store.GetKeyByAlias(r.Context(), r.PathValue("alias"))
	if err != nil {
		return storeError(err, r.PathValue("alias"))
	}
	writeJSON(w, http.StatusOK, viewOf(k))
	return nil
}

func (a *API) updateKey(w http.ResponseWriter, r *http.Request) error {
	alias := r.PathValue("alias")
	var in KeyAttributes
	if err := decode(r, &in); err != nil {
		return err
	}
	k, err := a.o.Store.GetKeyByAlias(r.Context(), alias)
	if err != nil {
		return storeError(err, alias)
	}
	if k.Source == store.SourceConfig {
		return conflict(fmt.Sprintf("key %q is defined in the config file; change it there", alias))
	}
	if in.Alias != nil && *in.Alias != alias {
		return badRequest("alias: cannot be changed; create a new key")
	}
	if err := a.apply(&k, &in); err != nil {
		return badRequest(err.Error())
	}
	k, err = a.o.Store.UpdateKey(r.Context(), k)
	if err != nil {
		return storeError(err, alias)
	}
	a.changed(r.Context(), alias)
	a.audit(r.Context(), "key.update", alias, changedFields(&in))
	writeJSON(w, http.StatusOK, viewOf(k))
	return nil
}

func (a *API) deleteKey(w http.ResponseWriter, r *http.Request) error {
	alias := r.PathValue("alias")
	k, err := a.o.Store.GetKeyByAlias(r.Context(), alias)
	if err != nil {
		return storeError(err, alias)
	}
	if k.Source == store.SourceConfig {
		return conflict(fmt.Sprintf("key %q is defined in the config file; remove it there", alias))
	}
	if err := a.o.Store.DeleteKey(r.Context(), alias); err != nil {
		return storeError(err, alias)
	}
	a.changed(r.Context(), alias)
	a.audit(r.Context(), "key.revoke", alias, nil)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// changed applies a committed key change here and announces it to the
// other replicas.
func (a *API) changed(ctx context.Context, alias string) {
	a.keyChanged(alias)
	a.announce(ctx, changeKey, alias)
}

// changedFields names the fields a PATCH set (never their values).
func changedFields(in *KeyAttributes) map[string]any {
	var f []string
	add := func(name string, set bool) {
		if set {
			f = append(f, name)
		}
	}
	add("user", in.User != nil)
	add("team", in.Team != nil)
	add("servers", in.Servers != nil || in.AllServers != nil)
	add("tools", in.Tools.Set)
	add("deny_tools", in.DenyTools.Set)
	add("toolsets", in.Toolsets.Set)
	add("access_groups", in.AccessGroups.Set)
	add("allowed_cidrs", in.AllowedCIDRs.Set)
	add("rate_limit_rpm", in.RateLimitRPM != nil)
	add("budget", in.Budget != nil)
	add("expires", in.Expires.Set)
	add("admin", in.Admin != nil)
	add("no_mcp", in.NoMCP != nil)
	add("disabled", in.Disabled != nil)
	slices.Sort(f)
	return map[string]any{"fields": f}
}
