package relay

import (
	"encoding/hex"
	"strings"

	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// Sealed session ids and requestState (SPEC S15, S8.3). With
// fleet.session_keys, the id a streamable-HTTP client holds is a token
// sealed under the fleet's ring that carries the session's record (route,
// owner, revision, client capabilities), and a 2026-07-28 requestState
// names the replica running its call: any replica opens either. What the
// gateway does with an opened one (re-create the session, forward the
// retry) is the gateway's.

// SealedStatePrefix marks a requestState sealed under the ring: any
// replica of the fleet opens it (the call itself runs on the replica
// named in it).
const SealedStatePrefix = "mcpg2."

// OpenSessionID opens a sealed session id: its fields and the local id
// they name. ok is false without a ring, or for anything that is not a
// token the ring sealed (a local id, a forged or tampered one, one of a
// removed key).
func OpenSessionID(ring *fleet.Ring, sid string) (fs fleet.Session, local string, ok bool) {
	if ring == nil {
		return fs, "", false
	}
	fs, err := ring.OpenSession(sid)
	if err != nil {
		return fs, "", false
	}
	return fs, hex.EncodeToString(fs.ID[:]), true
}

// SealState is the requestState of round of an exchange run on the
// replica at origin, for owner: false when it cannot be sealed (the
// caller falls back to its local form).
func SealState(ring *fleet.Ring, exchange string, round int64, origin, owner string) (string, bool) {
	tok, err := ring.SealState(fleet.State{Exchange: exchange, Round: round, Origin: origin}, owner)
	if err != nil {
		return "", false
	}
	return SealedStatePrefix + tok, true
}

// OpenState opens a sealed requestState for owner. sealed is false for
// one of another form (the caller's to judge); ok false for a sealed one
// that does not open (forged, tampered, another owner's, a removed key).
func OpenState(ring *fleet.Ring, state, owner string) (st fleet.State, sealed, ok bool) {
	tok, sealed := strings.CutPrefix(state, SealedStatePrefix)
	if !sealed || ring == nil {
		return st, sealed, false
	}
	st, err := ring.OpenState(tok, owner)
	return st, true, err == nil
}

// Client capabilities as a sealed id carries them.
const (
	capSampling uint8 = 1 << iota
	capElicitation
	capElicitationForm
	capElicitationURL
	capRoots
	capRootsListChanged
	capUI // MCP Apps: its settings are not carried, only that it runs views
)

// CapsBits is c as a sealed id carries it.
func CapsBits(c mcpwire.ClientCaps) uint8 {
	var b uint8
	for _, f := range []struct {
		on  bool
		bit uint8
	}{{c.Sampling, capSampling}, {c.Elicitation, capElicitation}, {c.ElicitationForm, capElicitationForm},
		{c.ElicitationURL, capElicitationURL}, {c.Roots, capRoots}, {c.RootsListChanged, capRootsListChanged}, {c.UI, capUI}} {
		if f.on {
			b |= f.bit
		}
	}
	return b
}

// CapsOf is the capabilities CapsBits made b of.
func CapsOf(b uint8) mcpwire.ClientCaps {
	return mcpwire.ClientCaps{
		Sampling:         b&capSampling != 0,
		Elicitation:      b&capElicitation != 0,
		ElicitationForm:  b&capElicitationForm != 0,
		ElicitationURL:   b&capElicitationURL != 0,
		Roots:            b&capRoots != 0,
		RootsListChanged: b&capRootsListChanged != 0,
		UI:               b&capUI != 0,
	}
}
