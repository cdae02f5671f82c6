package statetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

var pubsubTests = []test{
	{"Deliver", testPubSub},
	{"SlowReaderLoses", testPubSubSlow},
	{"CloseEnds", testPubSubClose},
	{"ConcurrentPublish", testPubSubConcurrent},
}

// subscribe subscribes and closes the subscription at the end of the test.
func subscribe(t *testing.T, b state.Backend, topics ...string) state.Subscription {
	t.Helper()
	sub, err := b.Subscribe(t.Context(), topics...)
	mustNot(t, "Subscribe", err)
	t.Cleanup(func() { sub.Close() })
	return sub
}

// next returns the next message of sub, failing after 5s.
func next(t testing.TB, sub state.Subscription) state.Message {
	t.Helper()
	select {
	case m, ok := <-sub.C():
		if !ok {
			t.Fatal("subscription channel closed")
		}
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message after 5s")
	}
	panic("unreachable")
}

// quiet fails if sub delivers something within 100ms.
func quiet(t testing.TB, sub state.Subscription) {
	t.Helper()
	select {
	case m := <-sub.C():
		t.Errorf("unexpected message %+v", m)
	case <-time.After(100 * time.Millisecond):
	}
}

// publish publishes and returns how many subscriptions it reached.
func publish(t testing.TB, b state.Backend, topic, data string) int {
	t.Helper()
	n, err := b.Publish(t.Context(), topic, []byte(data))
	mustNot(t, "Publish", err)
	return n
}

func testPubSub(t *testing.T, b state.Backend) {
	ab := subscribe(t, b, "a", "b")
	a := subscribe(t, b, "a")
	// Each publish counts the subscriptions it reached (a waiter for
	// their answers relies on it); no subscriber is not an error.
	for _, p := range []struct {
		topic, data string
		want        int
	}{{"nobody", "x", 0}, {"a", "1", 2}, {"b", "2", 1}, {"a", "3", 2}} {
		if n := publish(t, b, p.topic, p.data); n != p.want {
			t.Errorf("publish to %s reached %d subscriptions, want %d", p.topic, n, p.want)
		}
	}
	for _, want := range []state.Message{{Topic: "a", Data: []byte("1")}, {Topic: "b", Data: []byte("2")}, {Topic: "a", Data: []byte("3")}} {
		if m := next(t, ab); m.Topic != want.Topic || string(m.Data) != string(want.Data) || m.Lost {
			t.Errorf("ab got %+v, want %+v", m, want)
		}
	}
	for _, want := range []string{"1", "3"} {
		if m := next(t, a); m.Topic != "a" || string(m.Data) != want || m.Lost {
			t.Errorf("a got %+v, want a %s", m, want)
		}
	}
	quiet(t, a)
	quiet(t, ab)
}

// A reader that falls SubscriptionBuffer messages behind loses the rest
// and is told so, after what it did get; later messages arrive again.
func testPubSubSlow(t *testing.T, b state.Backend) {
	sub := subscribe(t, b, "t")
	sent := state.SubscriptionBuffer + 100
	for i := range sent {
		publish(t, b, "t", fmt.Sprint(i))
	}
	// Let a shared backend's receiver catch up with what was published
	// before reading anything: the reader is slow.
	time.Sleep(300 * time.Millisecond)
	got, lostAt := 0, -1
	for lostAt < 0 {
		m := next(t, sub)
		if m.Lost {
			if m.Topic != "" || m.Data != nil {
				t.Errorf("lost marker %+v carries a message", m)
			}
			lostAt = got
			break
		}
		if want := fmt.Sprint(got); string(m.Data) != want {
			t.Fatalf("message %d is %q, want %q (in order, none skipped before the marker)", got, m.Data, want)
		}
		got++
	}
	if lostAt > state.SubscriptionBuffer || lostAt == 0 {
		t.Errorf("lost marker after %d messages, want it after at most %d", lostAt, state.SubscriptionBuffer)
	}
	publish(t, b, "t", "after")
	// What is left of the burst may come first; then "after", and no
	// second marker.
	for {
		m := next(t, sub)
		if m.Lost {
			t.Fatal("a second lost marker for one gap")
		}
		if string(m.Data) == "after" {
			break
		}
	}
}

func testPubSubClose(t *testing.T, b state.Backend) {
	sub, err := b.Subscribe(t.Context(), "t")
	mustNot(t, "Subscribe", err)
	publish(t, b, "t", "unread")
	time.Sleep(50 * time.Millisecond)
	mustNot(t, "Close", sub.Close())
	mustNot(t, "Close again", sub.Close())
	// C ends, whatever was left unread.
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-sub.C():
		case <-deadline:
			t.Fatal("C not closed 5s after Close")
		}
	}
	if n := publish(t, b, "t", "after close"); n != 0 { // no subscriber left: fine
		t.Errorf("a publish after the only subscription closed reached %d", n)
	}

	// Closing the backend ends the subscriptions still open.
	other := subscribe(t, b, "u")
	mustNot(t, "Close backend", b.Close())
	select {
	case _, open := <-other.C():
		if open {
			t.Error("a message after the backend closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("C not closed 5s after the backend closed")
	}
}

// Publishers on several goroutines while a reader reads: every message
// arrives once, each publisher's in its order.
func testPubSubConcurrent(t *testing.T, b state.Backend) {
	const pubs, each = 4, 40 // fewer than the buffer: nothing may be lost
	sub := subscribe(t, b, "t")
	var wg sync.WaitGroup
	for p := range pubs {
		wg.Go(func() {
			for i := range each {
				if _, err := b.Publish(t.Context(), "t", fmt.Appendf(nil, "%d:%d", p, i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	last := map[int]int{}
	for range pubs * each {
		m := next(t, sub)
		var p, i int
		if _, err := fmt.Sscanf(string(m.Data), "%d:%d", &p, &i); err != nil || m.Lost {
			t.Fatalf("message %+v: %v", m, err)
		}
		if prev, ok := last[p]; ok && i != prev+1 || !ok && i != 0 {
			t.Errorf("publisher %d: %d after %d", p, i, prev)
		}
		last[p] = i
	}
	wg.Wait()
	quiet(t, sub)
}
