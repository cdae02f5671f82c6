package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// keyRow is a Key as stored, its times as unix milliseconds.
type keyRow = store.KeyRow[int64]

var keyTimes = store.TimeCodec[int64]{Encode: ms, Decode: fromMS}

const keyCols = store.KeyColumns

// keySet assigns every column a key's owner may change; the arguments are
// keyRow.SetArgs.
var keySet = store.KeySet(dialect)

func encodeKey(k *store.Key) (keyRow, error) { return store.EncodeKeyRow(k, keyTimes) }

func scanKey(sc scanner) (store.Key, error) {
	var r keyRow
	if err := sc.Scan(r.Dest()...); err != nil {
		return store.Key{}, err
	}
	return r.Decode(keyTimes)
}

// keyConflict turns a uniqueness violation on the keys table into
// ErrConflict with a message that says what clashed, never the hash; the
// caller names the operation and the alias.
func keyConflict(err error) error {
	msg, ok := uniqueViolation(err)
	if !ok {
		return err
	}
	what := "alias already in use"
	if strings.Contains(msg, "key_hash") {
		what = "another key has the same secret"
	}
	return fmt.Errorf("%s: %w", what, store.ErrConflict)
}

// keyTables runs store.SQLKeys's statements on the keys table.
type keyTables struct{ s *Store }

func (t keyTables) InsertKey(ctx context.Context, k store.Key) (store.Key, error) {
	r, err := encodeKey(&k)
	if err != nil {
		return store.Key{}, err
	}
	if err := insertKey(ctx, t.s.w, &r); err != nil {
		return store.Key{}, keyConflict(err)
	}
	return r.Decode(keyTimes)
}

func insertKey(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, r *keyRow) error {
	_, err := db.ExecContext(ctx, `INSERT INTO keys (`+keyCols+`)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, r.Args()...)
	return err
}

func (t keyTables) KeyByAlias(ctx context.Context, alias string) (store.Key, error) {
	return oneKey(scanKey(t.s.r.QueryRowContext(ctx, `SELECT `+keyCols+` FROM keys WHERE alias = ?`, alias)))
}

const selectKeyByHash = `SELECT ` + keyCols + ` FROM keys WHERE key_hash = ?`

func (t keyTables) KeyByHash(ctx context.Context, hash string) (store.Key, error) {
	return oneKey(scanKey(t.s.keyByHash.QueryRowContext(ctx, hash)))
}

// oneKey maps no row to store.ErrNotFound.
func oneKey(k store.Key, err error) (store.Key, error) {
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	return k, err
}

func (t keyTables) ListKeys(ctx context.Context) ([]store.Key, error) {
	return selectRows(ctx, t.s.r, `SELECT `+keyCols+` FROM keys ORDER BY alias`, nil, scanKey)
}

func (t keyTables) UpdateKeyByAlias(ctx context.Context, k store.Key) (store.Key, error) {
	r, err := encodeKey(&k)
	if err != nil {
		return store.Key{}, err
	}
	got, err := scanKey(t.s.w.QueryRowContext(ctx,
		`UPDATE keys SET `+keySet+` WHERE alias = ? RETURNING `+keyCols, r.SetArgs(r.Alias)...))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Key{}, store.ErrNotFound
	}
	if err != nil {
		return store.Key{}, keyConflict(err)
	}
	return got, nil
}

func (t keyTables) DeleteKeyByAlias(ctx context.Context, alias string) error {
	res, err := t.s.w.ExecContext(ctx, `DELETE FROM keys WHERE alias = ?`, alias)
	if err != nil {
		return err
	}
	return rowsChanged(res)
}

const updateLastUsed = `UPDATE keys SET last_used_at = ?1
	WHERE alias = ?2 AND (last_used_at IS NULL OR last_used_at < ?1)`

func (t keyTables) TouchKey(ctx context.Context, alias string, at time.Time) (bool, error) {
	res, err := t.s.touchKey.ExecContext(ctx, ms(at), alias)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (t keyTables) KeyExists(ctx context.Context, alias string) (bool, error) {
	var one int
	err := t.s.r.QueryRowContext(ctx, `SELECT 1 FROM keys WHERE alias = ?`, alias).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t keyTables) InSyncTx(ctx context.Context, fn func(context.Context, store.KeySyncTx) error) error {
	tx, err := t.s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(ctx, syncTx{tx}); err != nil {
		return err
	}
	return tx.Commit()
}

// syncTx runs SyncConfigKeys's queries in its transaction.
type syncTx struct{ tx *sql.Tx }

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
		_, err = t.tx.ExecContext(ctx, `UPDATE keys SET `+keySet+` WHERE id = ?`, r.SetArgs(r.ID)...)
		err = keyConflict(err)
	}
	return err
}

func (t syncTx) ParkKeyHash(ctx context.Context, id string) error {
	_, err := t.tx.ExecContext(ctx, `UPDATE keys SET key_hash = id WHERE id = ?`, id)
	return err
}

func (t syncTx) DeleteKeyByID(ctx context.Context, id string) error {
	_, err := t.tx.ExecContext(ctx, `DELETE FROM keys WHERE id = ?`, id)
	return err
}
