package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// ObjectTables is what SQLObjects asks of a backend: the statements on its
// objects table, handed checked kinds, names and documents. GetObject and
// DeleteObject return ErrNotFound for a missing object.
type ObjectTables interface {
	// PutObject inserts the document (version 1, created and updated at
	// at) or replaces it (version + 1, updated at at) and returns it as
	// stored.
	PutObject(ctx context.Context, kind, name string, doc json.RawMessage, at time.Time) (Object, error)
	GetObject(ctx context.Context, kind, name string) (Object, error)
	ListObjects(ctx context.Context, kind string) ([]Object, error) // ordered by name
	DeleteObject(ctx context.Context, kind, name string) error
}

// SQLObjects is the Objects of a SQL backend: the checks and messages
// here, the statements in Tables. A backend embeds it.
type SQLObjects struct {
	Tables ObjectTables
}

var _ Objects = SQLObjects{}

func (o SQLObjects) PutObject(ctx context.Context, kind, name string, doc json.RawMessage) (Object, error) {
	if err := CheckKind(kind); err != nil {
		return Object{}, fmt.Errorf("put object: %w", err)
	}
	if err := CheckName(kind+" name", name); err != nil {
		return Object{}, fmt.Errorf("put object: %w", err)
	}
	if !json.Valid(doc) {
		return Object{}, fmt.Errorf("put %s %q: document is not valid JSON: %w", kind, name, ErrInvalid)
	}
	got, err := o.Tables.PutObject(ctx, kind, name, doc, now())
	if err != nil {
		return Object{}, fmt.Errorf("put %s %q: %w", kind, name, err)
	}
	return got, nil
}

func (o SQLObjects) GetObject(ctx context.Context, kind, name string) (Object, error) {
	got, err := o.Tables.GetObject(ctx, kind, name)
	if err != nil {
		return Object{}, fmt.Errorf("get %s %q: %w", kind, name, err)
	}
	return got, nil
}

func (o SQLObjects) ListObjects(ctx context.Context, kind string) ([]Object, error) {
	out, err := o.Tables.ListObjects(ctx, kind)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", kind, err)
	}
	return out, nil
}

func (o SQLObjects) DeleteObject(ctx context.Context, kind, name string) error {
	if err := o.Tables.DeleteObject(ctx, kind, name); err != nil {
		return fmt.Errorf("delete %s %q: %w", kind, name, err)
	}
	return nil
}

// SQLSessions is the TerminatedSessions of a SQL backend: the digest
// checks and messages here (which never name the hash: it identifies a
// session), the statements in Tables. A backend embeds it.
type SQLSessions struct {
	// Tables runs the statements on the terminated_sessions table,
	// trusting that it is handed digests, and returns bare errors.
	Tables TerminatedSessions
}

var _ TerminatedSessions = SQLSessions{}

func (s SQLSessions) MarkTerminated(ctx context.Context, hash string, until time.Time) error {
	err := CheckDigest(hash)
	if err == nil {
		err = s.Tables.MarkTerminated(ctx, hash, until)
	}
	if err != nil {
		return fmt.Errorf("mark session terminated: %w", err)
	}
	return nil
}

func (s SQLSessions) IsTerminated(ctx context.Context, hash string, now time.Time) (bool, error) {
	if err := CheckDigest(hash); err != nil {
		return false, fmt.Errorf("check session terminated: %w", err)
	}
	ok, err := s.Tables.IsTerminated(ctx, hash, now)
	if err != nil {
		return false, fmt.Errorf("check session terminated: %w", err)
	}
	return ok, nil
}

func (s SQLSessions) TouchTerminated(ctx context.Context, hash string, until time.Time) error {
	err := CheckDigest(hash)
	if err == nil {
		err = s.Tables.TouchTerminated(ctx, hash, until)
	}
	if err != nil {
		return fmt.Errorf("touch terminated session: %w", err)
	}
	return nil
}

func (s SQLSessions) PurgeTerminated(ctx context.Context, now time.Time) (int64, error) {
	n, err := s.Tables.PurgeTerminated(ctx, now)
	if err != nil {
		return 0, fmt.Errorf("purge terminated sessions: %w", err)
	}
	return n, nil
}
