package connect

import (
	"context"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state"
)

// A connect page that fails ends the call waiting on its ticket with the
// page's words, whether the call waits on this replica or, in a fleet, on
// another (the shared done marker carries them); a completed connect
// reports no failure.
func TestFailedConnectEndsItsWait(t *testing.T) {
	conf := func() *config.Config { return &config.Config{} }
	for _, fleet := range []bool{false, true} {
		var shared state.Tickets
		if fleet {
			shared = state.NewMemory(state.MemoryOptions{})
		}
		asker := New(Options{Config: conf, Tickets: shared})
		other := asker // the page is served where the call waits
		if fleet {
			other = New(Options{Config: conf, Tickets: shared})
		}
		for _, why := range []string{"its metadata names another resource", ""} {
			tk, err := asker.NewTicket("key:alice", "linear", nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			waiting := asker.Await(ctx, tk)
			if why != "" {
				other.pending.failTicket(tk.ID(), why)
			} else {
				other.pending.completeTicket(tk.ID())
			}
			select {
			case <-waiting:
				if got := tk.Failure(); got != why {
					t.Errorf("fleet %v: Failure() = %q, want %q", fleet, got, why)
				}
			case <-ctx.Done():
				t.Errorf("fleet %v: the wait did not end (failure %q)", fleet, why)
			}
			cancel()
			asker.DropTicket(tk)
		}
		asker.Close()
		if fleet {
			other.Close()
		}
	}
}
