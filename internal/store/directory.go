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
)

// Object is a runtime-managed document (a server or toolset definition).
type Object struct {
	Kind      string
	Name      string
	Doc       json.RawMessage
	Version   int64 // 1 on creation, +1 on every put
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CheckKind returns ErrInvalid unless kind is KindServer or KindToolset, so
// a typo cannot create a collection nobody reads.
func CheckKind(kind string) error {
	if kind != KindServer && kind != KindToolset {
		return fmt.Errorf("unknown object kind %q: %w", kind, ErrInvalid)
	}
	return nil
}
