package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Pin kinds: what a pinned definition is (Pin.Kind).
const (
	PinTool     = "tool"
	PinPrompt   = "prompt"
	PinTemplate = "template"
)

// MaxPinName bounds Pin.Name (a tool or prompt name, a URI template).
const MaxPinName = 1024

// Pin is the reviewed definition of one tool, prompt or resource template
// of a server (issue 27, internal/integrity): the fingerprint and
// canonical definition an administrator (or first sight) approved, and
// the one awaiting review, if any. The store keeps what integrity
// decided; it does not fingerprint or compare anything itself.
type Pin struct {
	Server string
	Kind   string // PinTool, PinPrompt or PinTemplate
	Name   string
	// Fingerprint is the sha256 (hex) of the approved canonical
	// definition; "" when none was ever approved (a tool held on first
	// sight, or added later).
	Fingerprint string
	Definition  json.RawMessage // the approved canonical definition; nil with Fingerprint ""
	// Pending is the fingerprint of a definition seen since and awaiting
	// review ("" none), PendingDefinition its canonical definition.
	Pending           string
	PendingDefinition json.RawMessage
	// Rejected is the fingerprint an administrator refused; the
	// definition stays held while the server offers it.
	Rejected string
	// Findings are the scanner's findings on the pending definition (or,
	// with no pending one, on the approved one): a JSON array.
	Findings json.RawMessage
	// Source and Version say where the server came from (a registry or
	// an import) when that is known; "" otherwise.
	Source, Version string
	// ApprovedBy names who approved the current Fingerprint: an admin
	// key alias, ActorMaster, or "first-sight".
	ApprovedBy string
	// SeenAt is when Pending (or, with none, Fingerprint) was first seen;
	// UpdatedAt when the row last changed. Both set by the caller.
	SeenAt    time.Time
	UpdatedAt time.Time
}

// Pins stores the pins of every server, one row per (server, kind,
// name).
type Pins interface {
	// PutPins creates or replaces each pin, in one transaction: one
	// invalid pin -> ErrInvalid and nothing is written.
	PutPins(ctx context.Context, pins []Pin) error
	// ListPins returns the pins of server ("": every server), ordered by
	// server, kind and name.
	ListPins(ctx context.Context, server string) ([]Pin, error)
	// DeletePins forgets every pin of server and returns how many.
	DeletePins(ctx context.Context, server string) (int64, error)
}

// PinTables is what SQLPins asks of a backend: the statements on its
// pins table, handed checked pins.
type PinTables interface {
	PutPins(ctx context.Context, pins []Pin) error
	ListPins(ctx context.Context, server string) ([]Pin, error)
	DeletePins(ctx context.Context, server string) (int64, error)
}

// SQLPins is the Pins of a SQL backend: checks here, statements in
// Tables. A backend embeds it.
type SQLPins struct {
	Tables PinTables
}

var _ Pins = SQLPins{}

// CheckPin returns ErrInvalid when p cannot be stored.
func CheckPin(p Pin) error {
	if err := CheckName("server name", p.Server); err != nil {
		return err
	}
	switch p.Kind {
	case PinTool, PinPrompt, PinTemplate:
	default:
		return fmt.Errorf("pin kind %q: want tool, prompt or template: %w", p.Kind, ErrInvalid)
	}
	if p.Name == "" || len(p.Name) > MaxPinName {
		return fmt.Errorf("pin name must be 1 to %d bytes: %w", MaxPinName, ErrInvalid)
	}
	for _, fp := range []string{p.Fingerprint, p.Pending, p.Rejected} {
		if fp != "" && !isDigest(fp) {
			return fmt.Errorf("pin fingerprint is not a sha256 hex digest: %w", ErrInvalid)
		}
	}
	if p.Fingerprint == "" && p.Pending == "" && p.Rejected == "" {
		return fmt.Errorf("pin %s %q has no fingerprint: %w", p.Kind, p.Name, ErrInvalid)
	}
	for _, doc := range []json.RawMessage{p.Definition, p.PendingDefinition, p.Findings} {
		if len(doc) > 0 && !json.Valid(doc) {
			return fmt.Errorf("pin %s %q: a document is not valid JSON: %w", p.Kind, p.Name, ErrInvalid)
		}
	}
	return nil
}

func (s SQLPins) PutPins(ctx context.Context, pins []Pin) error {
	if len(pins) == 0 {
		return nil
	}
	for i := range pins {
		if err := CheckPin(pins[i]); err != nil {
			return fmt.Errorf("put pins: %w", err)
		}
		if pins[i].UpdatedAt.IsZero() {
			pins[i].UpdatedAt = now()
		}
		if pins[i].SeenAt.IsZero() {
			pins[i].SeenAt = pins[i].UpdatedAt
		}
	}
	if err := s.Tables.PutPins(ctx, pins); err != nil {
		return fmt.Errorf("put pins of %q: %w", pins[0].Server, err)
	}
	return nil
}

func (s SQLPins) ListPins(ctx context.Context, server string) ([]Pin, error) {
	out, err := s.Tables.ListPins(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("list pins: %w", err)
	}
	return out, nil
}

func (s SQLPins) DeletePins(ctx context.Context, server string) (int64, error) {
	n, err := s.Tables.DeletePins(ctx, server)
	if err != nil {
		return 0, fmt.Errorf("delete pins of %q: %w", server, err)
	}
	return n, nil
}
