package gateway

import (
	"encoding/json"
	"testing"

	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// The capabilities relayed to a stateless upstream are the same from the
// precomputed table as built afresh, for every combination a client can
// declare, and a table entry cannot be appended to in place.
func TestRelayableCapsTable(t *testing.T) {
	for bits := range 1 << 8 {
		c := mcpwire.ClientCaps{
			Sampling: bits&1 != 0, Elicitation: bits&2 != 0, ElicitationForm: bits&4 != 0, ElicitationURL: bits&8 != 0,
			Roots: bits&16 != 0, RootsListChanged: bits&32 != 0, UI: bits&64 != 0,
		}
		tasks := bits&128 != 0
		got := relayableCapsWith(&scope{caps: c}, tasks)
		want := buildRelayableCaps(c, tasks)
		if string(got) != string(want) || !json.Valid(got) {
			t.Fatalf("caps %+v tasks %v: %s, want %s", c, tasks, got, want)
		}
		if !c.UI && cap(got) != len(got) {
			t.Fatalf("a shared entry has room to append: %d > %d", cap(got), len(got))
		}
	}
	sc := &scope{caps: mcpwire.ClientCaps{Sampling: true, Roots: true}}
	if got := string(relayableCapsWith(sc, true)); got != `{"sampling":{},"roots":{},"extensions":{"`+mcpwire.ExtensionTasks+`":{}}}` {
		t.Errorf("got %s", got)
	}
}
