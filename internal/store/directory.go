package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// User is a person or service a key or token can belong to.
type User struct {
	ID        string // required, unique
	Name      string
	CreatedAt time.Time
}

// Team groups users and keys.
type Team struct {
	ID        string // required, unique
	Name      string
	CreatedAt time.Time
}

// Object kinds the gateway manages at runtime.
const (
	KindServer  = "server"
	KindToolset = "toolset"
	// KindGrant is a runtime grant for JWT callers (admin API), named
	// "<user|team|role>:<value>".
	KindGrant = "grant"

	// The built-in OAuth authorization server's records
	// (internal/oauth/authserver): signing keys (sealed), registered
	// clients, refresh token families, refresh token digests and
	// remembered consents. None of them holds a secret in the clear.
	KindOAuthKey     = "oauth_key"
	KindOAuthClient  = "oauth_client"
	KindOAuthFamily  = "oauth_family"
	KindOAuthRefresh = "oauth_refresh"
	KindOAuthConsent = "oauth_consent"

	// KindVault is a per-person upstream credential (internal/vault),
	// sealed with AES-256-GCM and named by a keyed hash of (person,
	// server): neither the credential nor the person is in the clear.
	KindVault = "vault"
)

// kinds are the object kinds CheckKind accepts.
var kinds = map[string]bool{
	KindServer: true, KindToolset: true, KindGrant: true,
	KindOAuthKey: true, KindOAuthClient: true, KindOAuthFamily: true,
	KindOAuthRefresh: true, KindOAuthConsent: true,
	KindVault: true,
}

// Object is a runtime-managed document (a server or toolset definition).
type Object struct {
	Kind      string
	Name      string
	Doc       json.RawMessage
	Version   int64 // 1 on creation, +1 on every put
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CheckKind returns ErrInvalid unless kind is one of the Kind constants,
// so a typo cannot create a collection nobody reads.
func CheckKind(kind string) error {
	if !kinds[kind] {
		return fmt.Errorf("unknown object kind %q: %w", kind, ErrInvalid)
	}
	return nil
}

// Party is a row of the users or the teams table, which have the same
// shape; User and Team convert to and from it.
type Party struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// PartyTables is what SQLDirectory asks of a backend: the queries on its
// users and teams tables. table is "users" or "teams", a constant, never
// caller input. GetParty and DeleteParty return ErrNotFound for an unknown
// id; errors need not name the table or the id (SQLDirectory does).
type PartyTables interface {
	// UpsertParty creates p or renames it, keeping CreatedAt of an
	// existing row, and returns the row as stored.
	UpsertParty(ctx context.Context, table string, p Party) (Party, error)
	GetParty(ctx context.Context, table, id string) (Party, error)
	ListParties(ctx context.Context, table string) ([]Party, error) // ordered by id
	DeleteParty(ctx context.Context, table, id string) error
}

// SQLDirectory is the Directory of a backend with users and teams
// tables: the validation, defaults and messages here, the queries in
// Tables. A backend embeds it.
type SQLDirectory struct {
	Tables PartyTables
}

func (d SQLDirectory) upsert(ctx context.Context, table, what string, p Party) (Party, error) {
	if err := CheckName(what+" id", p.ID); err != nil {
		return Party{}, fmt.Errorf("upsert %s: %w", what, err)
	}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = now()
	}
	out, err := d.Tables.UpsertParty(ctx, table, p)
	if err != nil {
		return Party{}, fmt.Errorf("upsert %s %q: %w", what, p.ID, err)
	}
	return out, nil
}

func (d SQLDirectory) get(ctx context.Context, table, what, id string) (Party, error) {
	p, err := d.Tables.GetParty(ctx, table, id)
	if err != nil {
		return Party{}, fmt.Errorf("get %s %q: %w", what, id, err)
	}
	return p, nil
}

func (d SQLDirectory) list(ctx context.Context, table, what string) ([]Party, error) {
	ps, err := d.Tables.ListParties(ctx, table)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", what, err)
	}
	return ps, nil
}

func (d SQLDirectory) delete(ctx context.Context, table, what, id string) error {
	if err := d.Tables.DeleteParty(ctx, table, id); err != nil {
		return fmt.Errorf("delete %s %q: %w", what, id, err)
	}
	return nil
}

func (d SQLDirectory) UpsertUser(ctx context.Context, u User) (User, error) {
	p, err := d.upsert(ctx, "users", "user", Party(u))
	return User(p), err
}

func (d SQLDirectory) GetUser(ctx context.Context, id string) (User, error) {
	p, err := d.get(ctx, "users", "user", id)
	return User(p), err
}

func (d SQLDirectory) ListUsers(ctx context.Context) ([]User, error) {
	ps, err := d.list(ctx, "users", "user")
	return convertParties[User](ps), err
}

func (d SQLDirectory) DeleteUser(ctx context.Context, id string) error {
	return d.delete(ctx, "users", "user", id)
}

func (d SQLDirectory) UpsertTeam(ctx context.Context, t Team) (Team, error) {
	p, err := d.upsert(ctx, "teams", "team", Party(t))
	return Team(p), err
}

func (d SQLDirectory) GetTeam(ctx context.Context, id string) (Team, error) {
	p, err := d.get(ctx, "teams", "team", id)
	return Team(p), err
}

func (d SQLDirectory) ListTeams(ctx context.Context) ([]Team, error) {
	ps, err := d.list(ctx, "teams", "team")
	return convertParties[Team](ps), err
}

func (d SQLDirectory) DeleteTeam(ctx context.Context, id string) error {
	return d.delete(ctx, "teams", "team", id)
}

// convertParties converts rows to users or teams; nil stays nil.
func convertParties[T User | Team](ps []Party) []T {
	var out []T
	for _, p := range ps {
		out = append(out, T(p))
	}
	return out
}

var _ Directory = SQLDirectory{}
