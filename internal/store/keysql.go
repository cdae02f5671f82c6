package store

import (
	"context"
	"fmt"
	"time"
)

// KeyTables is what SQLKeys asks of a backend: the statements on its keys
// table. Writes return a uniqueness violation as ErrConflict with what
// clashed ("alias already in use", ...), never the hash; SQLKeys prefixes
// the operation and the alias.
type KeyTables interface {
	// InsertKey writes k as it is (ID, Source and times set) and returns
	// it as stored.
	InsertKey(ctx context.Context, k Key) (Key, error)
	KeyByAlias(ctx context.Context, alias string) (Key, error) // ErrNotFound
	KeyByHash(ctx context.Context, hash string) (Key, error)   // ErrNotFound
	ListKeys(ctx context.Context) ([]Key, error)               // ordered by alias
	// UpdateKeyByAlias writes the settings of k (the columns UpdateKey
	// changes, UpdatedAt among them) into the row whose alias is k.Alias
	// and returns the row as stored. ErrNotFound when there is none.
	UpdateKeyByAlias(ctx context.Context, k Key) (Key, error)
	DeleteKeyByAlias(ctx context.Context, alias string) error // ErrNotFound
	// TouchKey sets the last use of alias to at if that is later, and
	// reports whether it changed a row.
	TouchKey(ctx context.Context, alias string, at time.Time) (bool, error)
	// KeyExists reports whether there is a key named alias.
	KeyExists(ctx context.Context, alias string) (bool, error)
	// InSyncTx runs fn in the one transaction of a SyncConfigKeys.
	InSyncTx(ctx context.Context, fn func(ctx context.Context, tx KeySyncTx) error) error
}

// SQLKeys is the Keys of a SQL backend: the fields the store owns, the
// validation, the config key sync and the messages here, the statements in
// Tables. A backend embeds it.
type SQLKeys struct {
	Tables KeyTables
}

var _ Keys = SQLKeys{}

func (s SQLKeys) CreateKey(ctx context.Context, k Key) (Key, error) {
	if err := k.PrepareNew(now()); err != nil {
		return Key{}, fmt.Errorf("create key: %w", err)
	}
	got, err := s.Tables.InsertKey(ctx, k)
	if err != nil {
		return Key{}, fmt.Errorf("create key %q: %w", k.Alias, err)
	}
	return got, nil
}

func (s SQLKeys) GetKeyByAlias(ctx context.Context, alias string) (Key, error) {
	k, err := s.Tables.KeyByAlias(ctx, alias)
	if err != nil {
		return Key{}, fmt.Errorf("get key %q: %w", alias, err)
	}
	return k, nil
}

func (s SQLKeys) GetKeyByHash(ctx context.Context, hash string) (Key, error) {
	k, err := s.Tables.KeyByHash(ctx, hash)
	if err != nil {
		return Key{}, fmt.Errorf("get key by hash: %w", err)
	}
	return k, nil
}

func (s SQLKeys) ListKeys(ctx context.Context) ([]Key, error) {
	keys, err := s.Tables.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return keys, nil
}

func (s SQLKeys) UpdateKey(ctx context.Context, k Key) (Key, error) {
	v := k
	v.Source = SourceAPI // kept from the stored key; only validated here
	if err := v.Validate(); err != nil {
		return Key{}, fmt.Errorf("update key: %w", err)
	}
	k.UpdatedAt = now()
	got, err := s.Tables.UpdateKeyByAlias(ctx, k)
	if err != nil {
		return Key{}, fmt.Errorf("update key %q: %w", k.Alias, err)
	}
	return got, nil
}

func (s SQLKeys) DeleteKey(ctx context.Context, alias string) error {
	if err := s.Tables.DeleteKeyByAlias(ctx, alias); err != nil {
		return fmt.Errorf("delete key %q: %w", alias, err)
	}
	return nil
}

func (s SQLKeys) TouchKey(ctx context.Context, alias string, at time.Time) error {
	changed, err := s.Tables.TouchKey(ctx, alias, at)
	if err == nil && !changed {
		// Either no such key or it was already used later: tell them apart
		// (rare, so the common path stays one statement).
		var ok bool
		if ok, err = s.Tables.KeyExists(ctx, alias); err == nil && !ok {
			err = ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("touch key %q: %w", alias, err)
	}
	return nil
}

func (s SQLKeys) SyncConfigKeys(ctx context.Context, keys []Key) (SyncResult, error) {
	res, err := syncConfigKeys(ctx, keys, s.Tables.InSyncTx)
	if err != nil {
		return SyncResult{}, fmt.Errorf("sync config keys: %w", err)
	}
	return res, nil
}
