package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"time"
)

// KeySyncTx is what SQLKeys.SyncConfigKeys asks of a backend: the queries
// it runs on the keys table, all inside the one transaction the backend
// holds for it (KeyTables.InSyncTx). Errors from the writes name no hash;
// a uniqueness violation is ErrConflict with what clashed ("alias already
// in use", ...), which SyncConfigKeys prefixes with the operation and the
// alias.
type KeySyncTx interface {
	// AllKeys returns every key, config and api alike, in any order.
	AllKeys(ctx context.Context) ([]Key, error)
	// InsertKey writes k as it is (ID, Source and times set).
	InsertKey(ctx context.Context, k Key) error
	// UpdateKeyByID writes the settings of k (the columns UpdateKey
	// changes, UpdatedAt among them) into the row whose id is k.ID.
	UpdateKeyByID(ctx context.Context, k Key) error
	// ParkKeyHash sets the key hash of the row whose id is id to that id:
	// unique, and never a digest, so it clashes with no key's hash.
	ParkKeyHash(ctx context.Context, id string) error
	// DeleteKeyByID deletes the row whose id is id.
	DeleteKeyByID(ctx context.Context, id string) error
}

// syncConfigKeys decides what SyncConfigKeys adds, updates and deletes
// and runs it through the backend's queries, in the transaction of inTx.
func syncConfigKeys(ctx context.Context, keys []Key, inTx func(context.Context, func(context.Context, KeySyncTx) error) error) (SyncResult, error) {
	stamp := now()
	want := make(map[string]Key, len(keys))
	for _, k := range keys {
		k.ID, k.Source, k.CreatedAt, k.UpdatedAt, k.LastUsedAt = "", SourceConfig, stamp, stamp, time.Time{}
		if err := k.Validate(); err != nil {
			return SyncResult{}, err
		}
		if _, dup := want[k.Alias]; dup {
			return SyncResult{}, fmt.Errorf("key %q listed twice: %w", k.Alias, ErrConflict)
		}
		want[k.Alias] = k
	}

	var res SyncResult
	err := inTx(ctx, func(ctx context.Context, tx KeySyncTx) error {
		res = SyncResult{}
		all, err := tx.AllKeys(ctx)
		if err != nil {
			return err
		}
		have := make(map[string]Key, len(all))
		for _, k := range all {
			have[k.Alias] = k
		}

		var add, update []Key
		for alias, w := range want {
			h, ok := have[alias]
			switch {
			case !ok:
				w.ID = rand.Text()
				add = append(add, w)
			case h.Source != SourceConfig:
				return fmt.Errorf("key %q: alias belongs to a key created through the API: %w", alias, ErrConflict)
			case !sameSettings(w, h):
				w.ID, w.CreatedAt, w.LastUsedAt = h.ID, h.CreatedAt, h.LastUsedAt
				update = append(update, w)
			}
		}
		for alias, h := range have {
			if _, ok := want[alias]; !ok && h.Source == SourceConfig {
				if err := tx.DeleteKeyByID(ctx, h.ID); err != nil {
					return fmt.Errorf("remove key %q: %w", alias, err)
				}
				res.Removed = append(res.Removed, alias)
			}
		}
		// Park changed hashes on the (unique, non-digest) id first, so
		// secrets that move between listed keys do not collide halfway
		// through.
		for _, k := range update {
			if k.KeyHash != have[k.Alias].KeyHash {
				if err := tx.ParkKeyHash(ctx, k.ID); err != nil {
					return fmt.Errorf("update key %q: %w", k.Alias, err)
				}
			}
		}
		for _, k := range update {
			if err := tx.UpdateKeyByID(ctx, k); err != nil {
				return fmt.Errorf("update key %q: %w", k.Alias, err)
			}
			res.Updated = append(res.Updated, k.Alias)
		}
		for _, k := range add {
			if err := tx.InsertKey(ctx, k); err != nil {
				return fmt.Errorf("add key %q: %w", k.Alias, err)
			}
			res.Added = append(res.Added, k.Alias)
		}
		return nil
	})
	if err != nil {
		return SyncResult{}, err
	}
	slices.Sort(res.Added)
	slices.Sort(res.Updated)
	slices.Sort(res.Removed)
	return res, nil
}

// sameSettings reports whether a config key w (as listed) and a stored key
// h differ only in bookkeeping (id, source, creation, update and use
// times), comparing them as the SQL backends store them: lists and maps as
// their KeyLists (so nil and empty compare alike where they read back
// alike) and times to the millisecond.
func sameSettings(w, h Key) bool {
	wl, err1 := EncodeKeyLists(&w)
	hl, err2 := EncodeKeyLists(&h)
	if err1 != nil || err2 != nil {
		return false
	}
	if (wl.Servers == nil) != (hl.Servers == nil) || wl.Servers != nil && *wl.Servers != *hl.Servers {
		return false
	}
	wl.Servers, hl.Servers = nil, nil
	ms := func(t time.Time) time.Time { return t.Truncate(time.Millisecond) }
	return wl == hl &&
		w.Alias == h.Alias && w.KeyHash == h.KeyHash && w.KeyPrefix == h.KeyPrefix &&
		w.User == h.User && w.Team == h.Team &&
		w.RateLimitRPM == h.RateLimitRPM &&
		w.BudgetAmount == h.BudgetAmount && w.BudgetPeriod == h.BudgetPeriod &&
		ms(w.ExpiresAt).Equal(ms(h.ExpiresAt)) &&
		w.Admin == h.Admin && w.NoMCP == h.NoMCP && w.Disabled == h.Disabled
}
