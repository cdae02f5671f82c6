package state_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// flakyBus is a PubSub whose subscriptions a test can end, and whose
// Subscribe fails while down is set.
type flakyBus struct {
	state.PubSub
	mu   sync.Mutex
	down bool
	subs []state.Subscription
}

func (b *flakyBus) Subscribe(ctx context.Context, topics ...string) (state.Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return nil, errors.New("down")
	}
	s, err := b.PubSub.Subscribe(ctx, topics...)
	if err == nil {
		b.subs = append(b.subs, s)
	}
	return s, err
}

// drop ends every subscription and refuses new ones until up.
func (b *flakyBus) drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = true
	for _, s := range b.subs {
		s.Close()
	}
	b.subs = nil
}

func (b *flakyBus) up() {
	b.mu.Lock()
	b.down = false
	b.mu.Unlock()
}

// Follow resyncs after subscribing (again after a pause when that fails),
// hands over messages in order, subscribes again (and resyncs) after the
// subscription ended and the bus failed for a while, and returns when its
// context ends.
func TestFollow(t *testing.T) {
	mem := state.NewMemory(state.MemoryOptions{})
	defer mem.Close()
	bus := &flakyBus{PubSub: mem}
	got := make(chan string, 16)
	resyncs := 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		state.Follow(ctx, bus, state.FollowOptions{
			Topics: []string{"t"}, What: "test", Retry: 10 * time.Millisecond,
			Handle: func(_ context.Context, m state.Message) { got <- string(m.Data) },
			Resync: func(context.Context) error {
				got <- "resync"
				if resyncs++; resyncs == 1 {
					return errors.New("store down") // retried after Retry
				}
				return nil
			},
		})
	}()
	want := func(w string) {
		t.Helper()
		select {
		case g := <-got:
			if g != w {
				t.Fatalf("got %q, want %q", g, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing, want %q", w)
		}
	}
	want("resync")
	want("resync") // the first failed
	for _, m := range []string{"a", "b"} {
		if err := mem.Publish(ctx, "t", []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	want("a")
	want("b")
	bus.drop()
	time.Sleep(50 * time.Millisecond) // a few failed subscriptions
	bus.up()
	want("resync")
	if err := mem.Publish(ctx, "t", []byte("c")); err != nil {
		t.Fatal(err)
	}
	want("c")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Follow outlived its context")
	}
}
