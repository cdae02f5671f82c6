package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/store"
)

// keyRow is a Key as stored, its times as timestamptz.
type keyRow = store.KeyRow[time.Time]

var keyTimes = store.TimeCodec[time.Time]{Encode: ms, Decode: time.Time.UTC}

const keyCols = store.KeyColumns

// keySet assigns every column a key's owner may change; the arguments are
// keyRow.SetArgs, then the WHERE value as $19.
var keySet = store.KeySet(dialect)

func encodeKey(k *store.Key) (keyRow, error) { return store.EncodeKeyRow(k, keyTimes) }

func scanKey(row pgx.Row) (store.Key, error) {
	var r keyRow
	if err := row.Scan(r.Dest()...); err != nil {
		return store.Key{}, err
	}
	return r.Decode(keyTimes)
}

// keyConflict turns a uniqueness violation on the keys table into
// ErrConflict with a message that says what clashed, never the hash (the
// server's detail, which quotes the value, is dropped); the caller names
// the operation and the alias.
func keyConflict(err error) error {
	pe, ok := pgError(err)
	if !ok || pe.Code != codeUniqueViolation {
		return classify(err)
	}
	what := "alias already in use"
	switch {
	case strings.Contains(pe.ConstraintName, "key_hash"):
		what = "another key has the same secret"
	case strings.Contains(pe.ConstraintName, "pkey"):
		what = "id already in use"
	}
	return fmt.Errorf("%s: %w", what, store.ErrConflict)
}

// keyTables runs store.SQLKeys's statements on the keys table, each
// bounded by the statement timeout.
type keyTables struct{ s *Store }

func (t keyTables) InsertKey(ctx context.Context, k store.Key) (store.Key, error) {
	r, err := encodeKey(&k)
	if err != nil {
		return store.Key{}, err
	}
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	if err := insertKey(ctx, t.s.pool, &r); err != nil {
		return store.Key{}, keyConflict(err)
	}
	return r.Decode(keyTimes)
}

func insertKey(ctx context.Context, q querier, r *keyRow) error {
	_, err := q.Exec(ctx, `INSERT INTO keys (`+keyCols+`)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23)`, r.Args()...)
	return err
}

func (t keyTables) KeyByAlias(ctx context.Context, alias string) (store.Key, error) {
	return t.oneKey(ctx, `SELECT `+keyCols+` FROM keys WHERE alias = $1`, alias)
}

func (t keyTables) KeyByHash(ctx context.Context, hash string) (store.Key, error) {
	return t.oneKey(ctx, `SELECT `+keyCols+` FROM keys WHERE key_hash = $1`, hash)
}

// oneKey reads the key query selects; no row is store.ErrNotFound.
func (t keyTables) oneKey(ctx context.Context, query string, arg string) (store.Key, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	k, err := scanKey(t.s.pool.QueryRow(ctx, query, arg))
	return k, notFound(err)
}

func (t keyTables) ListKeys(ctx context.Context) ([]store.Key, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	return selectRows(ctx, t.s.pool, `SELECT `+keyCols+` FROM keys ORDER BY alias`, nil, scanKey)
}

func (t keyTables) UpdateKeyByAlias(ctx context.Context, k store.Key) (store.Key, error) {
	r, err := encodeKey(&k)
	if err != nil {
		return store.Key{}, err
	}
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	got, err := scanKey(t.s.pool.QueryRow(ctx,
		`UPDATE keys SET `+keySet+` WHERE alias = $19 RETURNING `+keyCols, r.SetArgs(r.Alias)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Key{}, store.ErrNotFound
	}
	if err != nil {
		return store.Key{}, keyConflict(err)
	}
	return got, nil
}

func (t keyTables) DeleteKeyByAlias(ctx context.Context, alias string) error {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	return changed(t.s.pool.Exec(ctx, `DELETE FROM keys WHERE alias = $1`, alias))
}

func (t keyTables) TouchKey(ctx context.Context, alias string, at time.Time) (bool, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	tag, err := t.s.pool.Exec(ctx, `UPDATE keys SET last_used_at = $1
		WHERE alias = $2 AND (last_used_at IS NULL OR last_used_at < $1)`, ms(at), alias)
	return tag.RowsAffected() > 0, classify(err)
}

func (t keyTables) KeyExists(ctx context.Context, alias string) (bool, error) {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	var one int
	err := t.s.pool.QueryRow(ctx, `SELECT 1 FROM keys WHERE alias = $1`, alias).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, classify(err)
}

// syncLock serialises SyncConfigKeys across replicas: every replica syncs
// the same config keys at start, and two syncs that both saw a key missing
// would both insert it, and one would fail.
const syncLock = `SELECT pg_advisory_xact_lock(hashtextextended('mcpgate.sync_config_keys:' || coalesce(current_schema(), ''), 0))`

func (t keyTables) InSyncTx(ctx context.Context, fn func(context.Context, store.KeySyncTx) error) error {
	ctx, cancel := t.s.op(ctx)
	defer cancel()
	return t.s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, syncLock); err != nil {
			return err
		}
		return fn(ctx, syncTx{tx})
	})
}

// syncTx runs SyncConfigKeys's queries in its transaction.
type syncTx struct{ tx pgx.Tx }

func (t syncTx) AllKeys(ctx context.Context) ([]store.Key, error) {
	return selectRows(ctx, t.tx, `SELECT `+keyCols+` FROM keys`, nil, scanKey)
}

func (t syncTx) InsertKey(ctx context.Context, k store.Key) error {
	r, err := encodeKey(&k)
	if err == nil {
		err = keyConflict(insertKey(ctx, t.tx, &r))
	}
	return err
}

func (t syncTx) UpdateKeyByID(ctx context.Context, k store.Key) error {
	r, err := encodeKey(&k)
	if err == nil {
		_, err = t.tx.Exec(ctx, `UPDATE keys SET `+keySet+` WHERE id = $19`, r.SetArgs(r.ID)...)
		err = keyConflict(err)
	}
	return err
}

func (t syncTx) ParkKeyHash(ctx context.Context, id string) error {
	_, err := t.tx.Exec(ctx, `UPDATE keys SET key_hash = id WHERE id = $1`, id)
	return err
}

func (t syncTx) DeleteKeyByID(ctx context.Context, id string) error {
	_, err := t.tx.Exec(ctx, `DELETE FROM keys WHERE id = $1`, id)
	return err
}
