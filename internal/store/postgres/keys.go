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

const keyCols = `id, alias, key_hash, key_prefix, user_id, team_id, servers, tools,
	deny_tools, toolsets, access_groups, allowed_cidrs, rate_limit_rpm,
	expires_at, admin, no_mcp, disabled, source, created_at, updated_at,
	last_used_at, budget_amount, budget_period`

// keyRow is a Key as stored: lists and maps as JSON text, times at the
// store's precision in UTC, NULL as nil.
type keyRow struct {
	id, alias, hash, prefix, user, team string
	servers                             *string
	tools, denyTools                    string
	toolsets, accessGroups, cidrs       string
	rpm                                 int64
	expires                             *time.Time
	admin, noMCP, disabled              bool
	source                              string
	created, updated                    time.Time
	lastUsed                            *time.Time
	budget                              float64
	budgetPeriod                        string
}

func (r *keyRow) args() []any {
	return []any{r.id, r.alias, r.hash, r.prefix, r.user, r.team, r.servers, r.tools,
		r.denyTools, r.toolsets, r.accessGroups, r.cidrs, r.rpm,
		r.expires, r.admin, r.noMCP, r.disabled, r.source, r.created, r.updated,
		r.lastUsed, r.budget, r.budgetPeriod}
}

func (r *keyRow) dest() []any {
	return []any{&r.id, &r.alias, &r.hash, &r.prefix, &r.user, &r.team, &r.servers, &r.tools,
		&r.denyTools, &r.toolsets, &r.accessGroups, &r.cidrs, &r.rpm,
		&r.expires, &r.admin, &r.noMCP, &r.disabled, &r.source, &r.created, &r.updated,
		&r.lastUsed, &r.budget, &r.budgetPeriod}
}

// keySet assigns every column a key's owner may change; the arguments are
// keyRow.setArgs, then the WHERE value as $19.
const keySet = `key_hash = $1, key_prefix = $2, user_id = $3, team_id = $4, servers = $5,
	tools = $6, deny_tools = $7, toolsets = $8, access_groups = $9,
	allowed_cidrs = $10, rate_limit_rpm = $11, expires_at = $12, admin = $13,
	no_mcp = $14, disabled = $15, updated_at = $16, budget_amount = $17, budget_period = $18`

func (r *keyRow) setArgs(where any) []any {
	return []any{r.hash, r.prefix, r.user, r.team, r.servers,
		r.tools, r.denyTools, r.toolsets, r.accessGroups,
		r.cidrs, r.rpm, r.expires, r.admin,
		r.noMCP, r.disabled, r.updated, r.budget, r.budgetPeriod, where}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = ms(t)
	return &t
}

func encodeKey(k *store.Key) (keyRow, error) {
	r := keyRow{
		id: k.ID, alias: k.Alias, hash: k.KeyHash, prefix: k.KeyPrefix,
		user: k.User, team: k.Team,
		rpm:     int64(k.RateLimitRPM),
		expires: timePtr(k.ExpiresAt),
		admin:   k.Admin, noMCP: k.NoMCP, disabled: k.Disabled,
		source:   k.Source,
		created:  ms(k.CreatedAt),
		updated:  ms(k.UpdatedAt),
		lastUsed: timePtr(k.LastUsedAt),
		budget:   k.BudgetAmount, budgetPeriod: k.BudgetPeriod,
	}
	l, err := store.EncodeKeyLists(k)
	if err != nil {
		return r, err
	}
	r.servers = l.Servers
	r.tools, r.denyTools, r.toolsets, r.accessGroups, r.cidrs = l.Tools, l.DenyTools, l.Toolsets, l.AccessGroups, l.AllowedCIDRs
	return r, nil
}

func (r *keyRow) decode() (store.Key, error) {
	k := store.Key{
		ID: r.id, Alias: r.alias, KeyHash: r.hash, KeyPrefix: r.prefix,
		User: r.user, Team: r.team,
		RateLimitRPM: int(r.rpm),
		ExpiresAt:    fromNull(r.expires),
		Admin:        r.admin, NoMCP: r.noMCP, Disabled: r.disabled,
		Source:       r.source,
		CreatedAt:    r.created.UTC(),
		UpdatedAt:    r.updated.UTC(),
		LastUsedAt:   fromNull(r.lastUsed),
		BudgetAmount: r.budget, BudgetPeriod: r.budgetPeriod,
	}
	servers := r.servers
	l := store.KeyLists{Servers: servers, Tools: r.tools, DenyTools: r.denyTools, Toolsets: r.toolsets, AccessGroups: r.accessGroups, AllowedCIDRs: r.cidrs}
	if err := l.DecodeInto(&k); err != nil {
		return k, err
	}
	return k, nil
}

func scanKey(row pgx.Row) (store.Key, error) {
	var r keyRow
	if err := row.Scan(r.dest()...); err != nil {
		return store.Key{}, err
	}
	return r.decode()
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
	return r.decode()
}

func insertKey(ctx context.Context, q querier, r *keyRow) error {
	_, err := q.Exec(ctx, `INSERT INTO keys (`+keyCols+`)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23)`, r.args()...)
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
		`UPDATE keys SET `+keySet+` WHERE alias = $19 RETURNING `+keyCols, r.setArgs(r.alias)...))
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
		_, err = t.tx.Exec(ctx, `UPDATE keys SET `+keySet+` WHERE id = $19`, r.setArgs(r.id)...)
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
