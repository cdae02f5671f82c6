package state_test

import (
	"os"
	"testing"

	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/statetest"
)

// TestMain fails the run if a subscription's goroutine outlived it.
func TestMain(m *testing.M) { os.Exit(statetest.Main(m)) }

func TestMemory(t *testing.T) {
	statetest.Run(t, statetest.Harness{
		Open: func(t *testing.T) state.Backend {
			b := state.NewMemory(state.MemoryOptions{})
			t.Cleanup(func() { b.Close() })
			return b
		},
	})
}
