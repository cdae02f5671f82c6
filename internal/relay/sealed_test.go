package relay

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

func TestCapsBits(t *testing.T) {
	for _, raw := range []string{`{}`, `{"sampling":{}}`, `{"elicitation":{}}`, `{"elicitation":{"url":{}}}`, `{"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true},"sampling":{}}`, `{"roots":{}}`, `{"extensions":{"io.modelcontextprotocol/ui":{"mimeTypes":["text/html;profile=mcp-app"]}}}`} {
		c := mcpwire.ParseClientCaps(json.RawMessage(raw))
		c.Raw, c.UISettings = nil, nil // the bit is carried, not the settings
		if diff := cmp.Diff(CapsOf(CapsBits(c)), c); diff != "" {
			t.Errorf("%s (-got +want):\n%s", raw, diff)
		}
	}
}

// A session id sealed by one replica opens on another of the fleet, and
// nowhere else; a local id opens nowhere.
func TestOpenSessionID(t *testing.T) {
	ring, other := testRing(t, 1), testRing(t, 2)
	var id [fleet.IDLen]byte
	id[0] = 0xab
	sid, err := ring.SealSession(fleet.Session{ID: id, Owner: fleet.OwnerHash("alice"), Revision: mcpwire.Rev20250618, Route: "/mcp", Issued: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	fs, local, ok := OpenSessionID(testRing(t, 1), sid)
	if !ok || local != "ab"+strings.Repeat("00", fleet.IDLen-1) || fs.Route != "/mcp" {
		t.Errorf("OpenSessionID = %+v %q %v", fs, local, ok)
	}
	for name, c := range map[string]struct {
		r   *fleet.Ring
		sid string
	}{"other keys": {other, sid}, "no ring": {nil, sid}, "a local id": {ring, strings.Repeat("ab", 16)}, "tampered": {ring, sid[:len(sid)-2] + "AA"}} {
		if _, _, ok := OpenSessionID(c.r, c.sid); ok {
			t.Errorf("%s: opened", name)
		}
	}
}

// A requestState sealed for one owner opens for that owner on any
// replica of the fleet, says where its call runs, and is refused to
// another owner; a state of another form is not judged here.
func TestSealedState(t *testing.T) {
	ring := testRing(t, 1)
	st, ok := SealState(ring, "ex1", 2, "http://a:1", "alice")
	if !ok || !strings.HasPrefix(st, SealedStatePrefix) {
		t.Fatalf("SealState = %q %v", st, ok)
	}
	got, sealed, ok := OpenState(testRing(t, 1), st, "alice")
	if !sealed || !ok || got.Exchange != "ex1" || got.Round != 2 || got.Origin != "http://a:1" {
		t.Errorf("OpenState = %+v sealed=%v ok=%v", got, sealed, ok)
	}
	if _, sealed, ok := OpenState(ring, st, "bob"); !sealed || ok {
		t.Errorf("another owner: sealed=%v ok=%v, want sealed and refused", sealed, ok)
	}
	if _, sealed, ok := OpenState(ring, "mcpg1.x.1.y", "alice"); sealed || ok {
		t.Errorf("a local state: sealed=%v ok=%v", sealed, ok)
	}
	if _, sealed, ok := OpenState(nil, st, "alice"); !sealed || ok {
		t.Errorf("no ring: sealed=%v ok=%v", sealed, ok)
	}
}
