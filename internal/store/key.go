package store

import (
	"fmt"
	"math"
	"time"
)

// Where a key was defined.
const (
	SourceConfig = "config" // the YAML config file; managed by SyncConfigKeys
	SourceAPI    = "api"    // the admin API or CLI
)

// KeyPrefixLen is the length of Key.KeyPrefix, the part of a secret that may
// be shown to operators.
const KeyPrefixLen = 8

// MaxAliasLen bounds Key.Alias, user and team ids, and object names.
const MaxAliasLen = 256

// Key is a virtual key. The secret itself is never stored: KeyHash is
// HashKey(secret) and KeyPrefix its first KeyPrefixLen characters.
//
// Servers distinguishes nil (every server) from empty (no server). For the
// other lists and maps nil and empty mean the same and read back as nil; a
// map's per-server list keeps nil vs empty.
type Key struct {
	ID        string // assigned by the store when empty
	Alias     string // unique, required
	KeyHash   string // HashKey(secret), unique, required
	KeyPrefix string // KeyPrefix(secret), for display

	User string // owning user id, "" for none
	Team string // owning team id, "" for none

	Servers      []string            // nil = all servers, empty = none
	Tools        map[string][]string // server -> allowed tools
	DenyTools    map[string][]string // server -> denied tools
	Toolsets     []string
	AccessGroups []string
	AllowedCIDRs []string

	RateLimitRPM int // requests per minute, 0 = unlimited
	// BudgetAmount caps the cost of the key's tool calls per BudgetPeriod
	// (day, week or month, UTC); 0 = no budget.
	BudgetAmount float64
	BudgetPeriod string
	ExpiresAt    time.Time // zero = never
	Admin        bool
	NoMCP        bool // may use no MCP server on any route (SPEC S5.2)
	Disabled     bool

	Source     string // SourceConfig or SourceAPI
	CreatedAt  time.Time
	UpdatedAt  time.Time
	LastUsedAt time.Time // zero = never used
}

// KeyPrefix returns the display prefix of a secret: its first KeyPrefixLen
// bytes, or "" when the secret is shorter than twice that, since showing
// half of a short secret would weaken it.
func KeyPrefix(secret string) string {
	if len(secret) < 2*KeyPrefixLen {
		return ""
	}
	return secret[:KeyPrefixLen]
}

// Validate checks what the store itself relies on; the meaning of servers,
// tools and CIDRs is checked by the config and admin layers. The error names
// the field, never the hash.
func (k *Key) Validate() error {
	if err := CheckName("alias", k.Alias); err != nil {
		return err
	}
	if !isDigest(k.KeyHash) {
		return fmt.Errorf("key %q: key hash is not a sha256 hex digest: %w", k.Alias, ErrInvalid)
	}
	if len(k.KeyPrefix) > KeyPrefixLen {
		return fmt.Errorf("key %q: key prefix longer than %d characters: %w", k.Alias, KeyPrefixLen, ErrInvalid)
	}
	if k.Source != SourceConfig && k.Source != SourceAPI {
		return fmt.Errorf("key %q: source must be %q or %q: %w", k.Alias, SourceConfig, SourceAPI, ErrInvalid)
	}
	if k.RateLimitRPM < 0 {
		return fmt.Errorf("key %q: negative rate limit: %w", k.Alias, ErrInvalid)
	}
	if k.BudgetAmount < 0 || math.IsNaN(k.BudgetAmount) || math.IsInf(k.BudgetAmount, 0) {
		return fmt.Errorf("key %q: budget must be a number >= 0: %w", k.Alias, ErrInvalid)
	}
	switch k.BudgetPeriod {
	case "", BudgetDay, BudgetWeek, BudgetMonth:
	default:
		return fmt.Errorf("key %q: budget period must be day, week or month: %w", k.Alias, ErrInvalid)
	}
	if k.BudgetAmount > 0 && k.BudgetPeriod == "" {
		return fmt.Errorf("key %q: a budget needs its period: %w", k.Alias, ErrInvalid)
	}
	return nil
}

// Budget periods (Key.BudgetPeriod), in UTC.
const (
	BudgetDay   = "day"
	BudgetWeek  = "week" // from Monday
	BudgetMonth = "month"
)

// PeriodStart is the start of the budget period holding t (UTC): its day,
// its week from Monday, or its month; zero for an unknown period.
func PeriodStart(period string, t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch period {
	case BudgetDay:
		return day
	case BudgetWeek:
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	case BudgetMonth:
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// PeriodEnd is the end of the budget period that starts at start.
func PeriodEnd(period string, start time.Time) time.Time {
	switch period {
	case BudgetDay:
		return start.AddDate(0, 0, 1)
	case BudgetWeek:
		return start.AddDate(0, 0, 7)
	case BudgetMonth:
		return start.AddDate(0, 1, 0)
	}
	return start
}

// SyncResult reports what SyncConfigKeys changed, as sorted alias lists.
type SyncResult struct {
	Added, Updated, Removed []string
}

// CheckName validates an alias, a user or team id, an object kind or an
// object name: non-empty, bounded, and free of control characters (they
// would corrupt logs and listings). field names it in the error.
func CheckName(field, s string) error {
	if s == "" {
		return fmt.Errorf("empty %s: %w", field, ErrInvalid)
	}
	if len(s) > MaxAliasLen {
		return fmt.Errorf("%s longer than %d bytes: %w", field, MaxAliasLen, ErrInvalid)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s contains a control character: %w", field, ErrInvalid)
		}
	}
	return nil
}
