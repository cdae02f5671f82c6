// Package integrity owns tool integrity (issue 27): the fingerprint of
// each tool, prompt and resource template definition an upstream offers,
// the pins that record which definition was approved, the decision to
// serve or hold each definition a list brings (Keeper), the scanner that
// looks for instructions and hidden text aimed at the model (Scanner),
// and the readable diff an administrator reviews.
//
//	catalog fetch --Review--> Keeper: fingerprint, compare with the pins
//	   (store), scan what is new or changed -> serve / hold, record
//	   pending changes, audit + export + count each change
//	admin approve/reject --> Keeper -> store -> the catalog re-reads the
//	   server's lists (and the bus tells the other replicas)
//
// It decides what is served, never how: the catalog asks it (a hook on
// each list that arrives), the gateway refuses a call to a held
// definition, the admin API and console show and settle the reviews. It
// never rewrites a definition, never sees tool arguments, and logs names,
// never description text (a description may itself be the attack).
package integrity

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Modes (integrity.mode).
const (
	// ModePin holds a changed or new definition until it is approved.
	ModePin = "pin"
	// ModeWarn serves a changed definition and reports it (the default).
	ModeWarn = "warn"
	// ModeOff neither pins nor scans.
	ModeOff = "off"
)

// Approvals (integrity.approve).
const (
	// ApproveAuto pins what a server offers on first sight.
	ApproveAuto = "auto"
	// ApproveManual holds first sight too, until an administrator approves.
	ApproveManual = "manual"
)

// fields are the members of each kind's definition that go into its
// fingerprint: what reaches the model, nothing else (a tool's _meta or
// icons do not).
var fields = map[string][]string{
	store.PinTool:     {"name", "title", "description", "inputSchema", "outputSchema", "annotations"},
	store.PinPrompt:   {"name", "title", "description", "arguments"},
	store.PinTemplate: {"uriTemplate", "name", "title", "description", "mimeType"},
}

// Canonical returns the canonical JSON of one definition of kind (a
// store.Pin* kind): the fingerprinted members only, object keys sorted at
// every depth, numbers as written, no insignificant space. Two
// definitions that mean the same to a model have the same canonical form.
func Canonical(kind string, raw []byte) ([]byte, error) {
	keep, ok := fields[kind]
	if !ok {
		return nil, fmt.Errorf("integrity: unknown kind %q", kind)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, errors.New("integrity: definition is not a JSON object")
	}
	out := make(map[string]any, len(keep))
	for _, f := range keep {
		if v, ok := m[f]; ok && v != nil {
			out[f] = v
		}
	}
	// encoding/json sorts map keys; SetEscapeHTML(false) keeps < > &
	// as written so the diff reads as the upstream wrote it.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("integrity: %w", err)
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// Fingerprint is the lowercase hex sha256 of a canonical definition.
func Fingerprint(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// Pretty indents a canonical definition for review; "" for none.
func Pretty(canonical []byte) string {
	if len(canonical) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, canonical, "", "  "); err != nil {
		return string(canonical)
	}
	return b.String()
}
