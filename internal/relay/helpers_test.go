package relay

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/mcpgate/mcpgate/internal/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memState is a fresh in-memory shared state, closed at the test's end.
func memState(t testing.TB) *state.Memory {
	m := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { _ = m.Close() })
	return m
}
