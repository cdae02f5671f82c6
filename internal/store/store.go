// Package store owns the gateway's persistent state: virtual keys (as
// hashes), users and teams, runtime-managed servers and toolsets (as opaque
// JSON documents), the ids of sessions an administrator ended (as hashes),
// and the audit and tool-call logs. It defines the records, the [Store]
// contract every backend satisfies, the errors callers branch on, and the
// validation every backend applies before writing.
//
// Backends live in their own packages (store/sqlite, the default, and
// store/postgres, for fleets) and are wired by main; nothing else imports
// them. Every backend must pass the conformance suite in store/storetest.
// What the SQL backends would otherwise each repeat lives here, over
// narrow interfaces of their statements: [SQLKeys] (with the config key
// sync), [SQLDirectory], [SQLObjects], [SQLSessions], [SQLPins], [SQLTasks] and [SQLAudit] (its
// filters and keyset paging) decide what to read and write, and a backend
// embeds them and keeps only its SQL, its driver calls and its row
// encoding ([KeyRow], [Dialect]).
//
// The store must never see a secret: it is handed [HashKey] digests and
// display prefixes, refuses a key whose hash is not a sha256 hex digest, and
// its error messages name aliases and operations, never hashes. It does not
// decide who may do what (policy and admin do), does not know the shape of
// server and toolset documents (the gateway does), and never records tool
// arguments. It keeps the tool-integrity pins (pins.go) as integrity
// decided them, without fingerprinting or comparing anything.
//
// Times are UTC with millisecond precision: a backend truncates what it is
// given to the millisecond and returns it in UTC. A zero time.Time means
// "none" wherever a field is documented as optional.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Errors callers branch on. Backends wrap them with the operation name, so
// test with errors.Is.
var (
	// ErrNotFound: the record named by the call does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the write would break uniqueness (a key alias or key hash
	// already in use) or would overwrite a record the caller does not own
	// (an api key in SyncConfigKeys).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the record is malformed (empty alias, a key hash that is
	// not a sha256 digest, invalid JSON, ...). Nothing was written.
	ErrInvalid = errors.New("invalid")
)

// SchemaVersionError is returned by a backend's Open when the database was
// migrated by a newer mcpgate than this one. The backend refuses to run
// rather than misread data whose meaning it does not know.
type SchemaVersionError struct {
	Database  int // the schema version recorded in the database
	Supported int // the newest schema version this binary knows
}

func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this mcpgate supports (%d); upgrade mcpgate", e.Database, e.Supported)
}

// Store is everything the gateway persists. Implementations are safe for
// concurrent use by many goroutines; Close must be called once, after every
// other call has returned. Every method honours ctx cancellation.
//
// Consumers should depend on the narrowest of the embedded interfaces they
// need (authn on [Keys], the tool-call writer on [AuditLog]).
type Store interface {
	Keys
	Directory
	Objects
	TerminatedSessions
	AuditLog
	Pins
	Tasks
	Close() error
}

// Keys stores virtual keys.
type Keys interface {
	// CreateKey stores a new key and returns it as stored: ID assigned when
	// empty, CreatedAt set to now when zero, UpdatedAt = CreatedAt,
	// LastUsedAt cleared. A used alias or key hash -> ErrConflict.
	CreateKey(ctx context.Context, k Key) (Key, error)
	// GetKeyByAlias -> ErrNotFound when there is no such alias.
	GetKeyByAlias(ctx context.Context, alias string) (Key, error)
	// GetKeyByHash finds the key whose KeyHash is hash (see HashKey). It is
	// the authentication hot path and is served from an index.
	// -> ErrNotFound when no key has that hash.
	GetKeyByHash(ctx context.Context, hash string) (Key, error)
	// ListKeys returns every key, ordered by alias (byte order).
	ListKeys(ctx context.Context) ([]Key, error)
	// UpdateKey replaces the key whose alias is k.Alias with k, keeping its
	// ID, Source, CreatedAt and LastUsedAt, and setting UpdatedAt to now.
	// It may change KeyHash and KeyPrefix (rotation). -> ErrNotFound when
	// there is no such alias, ErrConflict when the new hash is in use.
	UpdateKey(ctx context.Context, k Key) (Key, error)
	// DeleteKey -> ErrNotFound when there is no such alias.
	DeleteKey(ctx context.Context, alias string) error
	// TouchKey records that the key was used at at. It only moves
	// LastUsedAt forward. It is one indexed write; callers on the request
	// path should still coalesce (at most one touch per key every few
	// seconds), because an embedded backend has a single writer.
	// -> ErrNotFound when there is no such alias.
	TouchKey(ctx context.Context, alias string, at time.Time) error
	// SyncConfigKeys makes the config-sourced keys equal keys, in one
	// transaction: it adds the missing ones, updates the changed ones
	// (keeping ID, CreatedAt and LastUsedAt), leaves unchanged ones alone
	// (UpdatedAt stays) and deletes config keys no longer listed. Source is
	// forced to SourceConfig. Keys created through the API are never
	// touched: a listed alias that belongs to an api key, an alias listed
	// twice, or a hash already used by an api key -> ErrConflict, and
	// nothing changes.
	SyncConfigKeys(ctx context.Context, keys []Key) (SyncResult, error)
}

// Directory stores users and teams.
type Directory interface {
	// UpsertUser creates or renames a user; CreatedAt is set on creation
	// (to now when zero) and kept afterwards. Returns the user as stored.
	UpsertUser(ctx context.Context, u User) (User, error)
	GetUser(ctx context.Context, id string) (User, error) // ErrNotFound
	ListUsers(ctx context.Context) ([]User, error)        // ordered by ID
	DeleteUser(ctx context.Context, id string) error      // ErrNotFound

	UpsertTeam(ctx context.Context, t Team) (Team, error)
	GetTeam(ctx context.Context, id string) (Team, error) // ErrNotFound
	ListTeams(ctx context.Context) ([]Team, error)        // ordered by ID
	DeleteTeam(ctx context.Context, id string) error      // ErrNotFound
}

// Objects stores runtime-managed objects (servers, toolsets, the OAuth
// authorization server's records) as JSON documents whose shape their
// owner defines. Names are unique per kind.
type Objects interface {
	// PutObject creates or replaces a document and returns it as stored;
	// Version starts at 1 and grows by one on every put, so it can serve as
	// an ETag. doc must be valid JSON (ErrInvalid otherwise).
	PutObject(ctx context.Context, kind, name string, doc json.RawMessage) (Object, error)
	GetObject(ctx context.Context, kind, name string) (Object, error) // ErrNotFound
	ListObjects(ctx context.Context, kind string) ([]Object, error)   // ordered by name
	DeleteObject(ctx context.Context, kind, name string) error        // ErrNotFound
}

// TerminatedSessions remembers the ids of sessions an administrator ended
// (SPEC S8.2), as HashSessionID digests, until they expire.
type TerminatedSessions interface {
	// MarkTerminated remembers hash until until (replacing any earlier
	// expiry).
	MarkTerminated(ctx context.Context, hash string, until time.Time) error
	// IsTerminated reports whether hash is remembered and now is before its
	// expiry.
	IsTerminated(ctx context.Context, hash string, now time.Time) (bool, error)
	// TouchTerminated moves the expiry of a remembered hash to until if that
	// is later; an unknown hash is left unknown. Call it after IsTerminated
	// said true, while the client keeps using the id.
	TouchTerminated(ctx context.Context, hash string, until time.Time) error
	// PurgeTerminated forgets every hash whose expiry is at or before now
	// and returns how many it forgot.
	PurgeTerminated(ctx context.Context, now time.Time) (int64, error)
}

// AuditLog is the append-only record of administrative actions and tool
// calls. Lists are newest first and paginated by keyset: pass the returned
// next cursor as Before to get the following page; next is nil on the last
// page.
type AuditLog interface {
	// AppendAudit stores e (Time set to now when zero) and returns its ID.
	AppendAudit(ctx context.Context, e AuditEntry) (int64, error)
	ListAudit(ctx context.Context, f AuditFilter) (entries []AuditEntry, next *Cursor, err error)
	// AppendToolCall stores c (Time set to now when zero) and returns its ID.
	AppendToolCall(ctx context.Context, c ToolCall) (int64, error)
	// AppendToolCalls stores calls in one transaction, as AppendToolCall
	// would one by one (same validation, Time set to now when zero, IDs
	// increasing in slice order), without returning the IDs: it is how the
	// audit writer flushes a batch at the cost of one commit. One invalid
	// call -> ErrInvalid and nothing is written. An empty slice is a no-op.
	AppendToolCalls(ctx context.Context, calls []ToolCall) error
	ListToolCalls(ctx context.Context, f ToolCallFilter) (calls []ToolCall, next *Cursor, err error)
}

// SyncAuditLog is the optional capability of an AuditLog to commit a batch
// of tool calls so that it survives a power loss or an OS crash, not only
// a crash of the process: the audit writer uses it for the batches an
// answer waits for (audit.durable), and AppendToolCalls for the others.
// Both built-in stores have it. Safe for concurrent use.
type SyncAuditLog interface {
	// AppendToolCallsSync is AppendToolCalls, returning once the
	// batch's commit is on stable storage.
	AppendToolCallsSync(ctx context.Context, calls []ToolCall) error
}

// now is the current time at the store's precision.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// HashKey returns the digest a virtual key is stored and looked up by: the
// lowercase hex sha256 of the secret.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// HashSessionID returns the digest a terminated session id is remembered
// by. It is the same function as HashKey, named for its use.
func HashSessionID(id string) string { return HashKey(id) }

// isDigest reports whether s looks like a HashKey result, so a backend can
// refuse to store what may be a raw secret.
func isDigest(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// CheckDigest returns ErrInvalid (without echoing s) unless s is a
// HashKey / HashSessionID digest.
func CheckDigest(s string) error {
	if !isDigest(s) {
		return fmt.Errorf("not a sha256 hex digest: %w", ErrInvalid)
	}
	return nil
}
