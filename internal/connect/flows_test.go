package connect

import (
	"context"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state"
)

// A call waiting in a fleet for a connect polls the shared store in a
// goroutine of the flows: Close ends it and waits for it, even while the
// call still waits; a wait begun after Close hears this process only.
func TestCloseEndsTheWaits(t *testing.T) {
	f := New(Options{Config: func() *config.Config { return &config.Config{} }, Tickets: state.NewMemory(state.MemoryOptions{})})
	tk, err := f.NewTicket("key:alice", "linear", nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := f.Await(context.Background(), tk)
	closed := make(chan struct{})
	go func() {
		f.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait's goroutine")
	}
	select {
	case <-waiting:
		t.Error("the wait reported a connect nobody made")
	default:
	}
	if got := f.Await(context.Background(), tk); got != tk.t.done {
		t.Error("a wait begun after Close started a goroutine")
	}
}
