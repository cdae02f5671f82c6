package state_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// flakyBus is a PubSub whose subscriptions a test can end, and whose
// Subscribe fails while down is set.
type flakyBus struct {
	state.PubSub
	mu      sync.Mutex
	down    bool
	refused int // Subscribe calls refused while down
	subs    []state.Subscription
}

func (b *flakyBus) Subscribe(ctx context.Context, topics ...string) (state.Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		b.refused++
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

// Follow resyncs after subscribing (again Retry later when that fails),
// hands over messages in order, subscribes again (every Retry while the
// bus fails, and resyncs) after the subscription ended, and returns when
// its context ends. The clock is synctest's: the pauses are exact.
func TestFollow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const retry = 10 * time.Millisecond
		mem := state.NewMemory(state.MemoryOptions{})
		defer mem.Close()
		bus := &flakyBus{PubSub: mem}
		got := make(chan string, 16)
		var resyncAt []time.Time
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			state.Follow(ctx, bus, state.FollowOptions{
				Topics: []string{"t"}, What: "test", Retry: retry,
				Handle: func(_ context.Context, m state.Message) { got <- string(m.Data) },
				Resync: func(context.Context) error {
					resyncAt = append(resyncAt, time.Now())
					got <- "resync"
					if len(resyncAt) == 1 {
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
		if d := resyncAt[1].Sub(resyncAt[0]); d != retry {
			t.Errorf("a failed resync was retried after %v, want Retry (%v)", d, retry)
		}
		for _, m := range []string{"a", "b"} {
			if _, err := mem.Publish(ctx, "t", []byte(m)); err != nil {
				t.Fatal(err)
			}
		}
		want("a")
		want("b")
		bus.drop()
		time.Sleep(4*retry + retry/2) // failed subscriptions at 0, 1, 2, 3 and 4 Retry
		bus.mu.Lock()
		refused := bus.refused
		bus.mu.Unlock()
		if refused != 5 {
			t.Errorf("%d subscriptions tried in 4.5 Retry while the bus was down, want 5 (one at once, then one every Retry)", refused)
		}
		upAt := time.Now()
		bus.up()
		want("resync")
		if d := resyncAt[2].Sub(upAt); d != retry/2 {
			t.Errorf("subscribed again %v after the bus came back, want the rest of the Retry pause (%v)", d, retry/2)
		}
		if _, err := mem.Publish(ctx, "t", []byte("c")); err != nil {
			t.Fatal(err)
		}
		want("c")
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Follow outlived its context")
		}
	})
}

// Heard is trusted only while every follower resynchronised after the
// last time it could have missed a message: not before the first
// resynchronisation, not from a Doubt until a resynchronisation that
// began after it (the backend recovered, and the follower subscribed
// afresh), not while a subscription is broken, nor while a resync fails.
func TestHeard(t *testing.T) {
	synctest.Test(t, testHeard)
}

func testHeard(t *testing.T) {
	var nilHeard *state.Heard
	if !nilHeard.Trusted() {
		t.Error("a nil Heard (no bus) is not trusted")
	}
	if h := state.NewHeard(); !h.Trusted() {
		t.Error("a Heard without followers is not trusted")
	}
	mem := state.NewMemory(state.MemoryOptions{})
	defer mem.Close()
	bus := &flakyBus{PubSub: mem}
	h := state.NewHeard()
	h.Track("test")
	if h.Trusted() {
		t.Fatal("trusted before the follower's first resync")
	}
	var (
		mu      sync.Mutex
		fail    bool
		block   chan struct{} // a resync in progress waits on it
		resyncs = make(chan struct{}, 64)
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		state.Follow(ctx, bus, state.FollowOptions{
			Topics: []string{"t"}, What: "test", Retry: 10 * time.Millisecond, Heard: h,
			Handle: func(context.Context, state.Message) {},
			Resync: func(context.Context) error {
				mu.Lock()
				f, b := fail, block
				mu.Unlock()
				if b != nil {
					<-b
				}
				resyncs <- struct{}{}
				if f {
					return errors.New("store down")
				}
				return nil
			},
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	// waitTrusted lets every goroutine of the bubble run until it blocks,
	// then reads Trusted: no pause of Follow's is waited for, so a
	// change that needs one (a Retry) is not trusted here.
	waitTrusted := func(want bool, what string) {
		t.Helper()
		synctest.Wait()
		if h.Trusted() != want {
			t.Fatalf("%s: Trusted stayed %v", what, !want)
		}
	}
	waitTrusted(true, "after the first resync")
	if h.Since().IsZero() {
		t.Error("trusted, but Since is zero")
	}

	// The backend stops answering: doubted at once, and the
	// subscription (alive, as a Redis one through a reconnect) is not
	// enough to trust again until the backend recovered and the
	// follower resynchronised on a new subscription.
	h.Doubt()
	if h.Trusted() || !h.Since().IsZero() {
		t.Fatal("trusted after Doubt")
	}
	time.Sleep(30 * time.Millisecond) // three Retry pauses
	if h.Trusted() {
		t.Fatal("trusted again without recovering")
	}
	n := len(resyncs)
	h.Recovered()
	waitTrusted(true, "after Recovered and a resync")
	if len(resyncs) <= n {
		t.Error("trusted again without a resync")
	}

	// A resync that began before a Doubt does not restore trust.
	gate := make(chan struct{})
	mu.Lock()
	block = gate
	mu.Unlock()
	h.Recovered() // a new subscription, whose resync waits on gate
	synctest.Wait()
	h.Doubt()
	close(gate)
	synctest.Wait()
	if h.Trusted() {
		t.Fatal("a resync that began before Doubt restored trust")
	}
	mu.Lock()
	block = nil
	mu.Unlock()
	h.Recovered()
	waitTrusted(true, "after the next resync")

	// A broken subscription: not trusted until it subscribed again and
	// resynchronised; a failing resync keeps it untrusted.
	mu.Lock()
	fail = true
	mu.Unlock()
	bus.drop()
	waitTrusted(false, "after the subscription ended")
	bus.up()
	n = len(resyncs)
	time.Sleep(50 * time.Millisecond) // failing resyncs, retried
	if h.Trusted() {
		t.Fatal("trusted while the resync fails")
	}
	if len(resyncs) <= n+1 {
		t.Errorf("%d resyncs in five Retry pauses after the bus came back, want them retried", len(resyncs)-n)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	time.Sleep(10 * time.Millisecond) // the next retry
	waitTrusted(true, "after a resync worked")
}
