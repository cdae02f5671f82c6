package store

import (
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
