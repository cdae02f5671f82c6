package statetest

import (
	"errors"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// testOutage: with the server down every call fails fast with an error
// matching ErrUnavailable (the callers' cue to fall back); back up, the
// backend serves again without being rebuilt, and a subscription that
// lived through it is told messages may have been lost, then delivers.
func testOutage(t *testing.T, h Harness) {
	b, stop, start := h.Outage(t)
	ctx := t.Context()
	sub := subscribe(t, b, "t")
	publish(t, b, "t", "before")
	if m := next(t, sub); string(m.Data) != "before" {
		t.Fatalf("got %+v, want before", m)
	}
	mustNot(t, "Terminate", b.Terminate(ctx, "s", long))

	stop()
	begin := time.Now()
	calls := map[string]func() error{
		"Ping":             func() error { return b.Ping(ctx) },
		"Terminate":        func() error { return b.Terminate(ctx, "s", long) },
		"Terminated":       func() error { _, err := b.Terminated(ctx, "s"); return err },
		"SetSessionFields": func() error { return b.SetSessionFields(ctx, "s", map[string]string{"a": "b"}, long) },
		"SessionFields":    func() error { _, err := b.SessionFields(ctx, "s"); return err },
		"ListSessions":     func() error { _, _, err := b.ListSessions(ctx, 10); return err },
		"Allow":            func() error { _, err := b.Allow(ctx, "k", hourly); return err },
		"Heartbeat":        func() error { return b.Heartbeat(ctx, state.Replica{ID: "r", URL: "http://r"}, long) },
		"LiveReplicas":     func() error { _, err := b.LiveReplicas(ctx); return err },
		"ClaimStream":      func() error { _, _, err := b.ClaimStream(ctx, "s", state.StreamOwner{Replica: "r"}, long); return err },
		"AppendEvent":      func() error { _, err := b.AppendEvent(ctx, "s", nil, 1, long); return err },
		"EventsAfter":      func() error { _, _, err := b.EventsAfter(ctx, "s", 0); return err },
		"Publish":          func() error { _, err := b.Publish(ctx, "t", nil); return err },
		"Subscribe":        func() error { _, err := b.Subscribe(ctx, "u"); return err },
		"AcquireLease":     func() error { _, err := b.AcquireLease(ctx, "l", "h", long); return err },
		"ReleaseLease":     func() error { return b.ReleaseLease(ctx, "l", "h") },
		"PutTicket":        func() error { return b.PutTicket(ctx, "t", nil, long) },
		"TakeTicket":       func() error { _, _, err := b.TakeTicket(ctx, "t"); return err },
		"Reserve":          func() error { _, err := b.Reserve(ctx, "s", state.Reservation{Limit: 1, TTL: long}); return err },
		"Spend":            func() error { return b.Spend(ctx, "s", 1, long) },
	}
	for what, call := range calls {
		err := call()
		wantErr(t, what+" while down", err, state.ErrUnavailable)
		var ue *state.UnavailableError
		if !errors.As(err, &ue) || ue.Op == "" {
			t.Errorf("%s while down: %v is not an *UnavailableError naming its operation", what, err)
		}
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("the calls while down took %s: a caller waits that long before falling back", d)
	}

	start()
	eventually(t, "the backend serves again", func() (bool, error) {
		return b.Ping(ctx) == nil, nil
	})
	mustNot(t, "Terminate after restart", b.Terminate(ctx, "s2", long))
	if d, err := b.Allow(ctx, "k", hourly); err != nil || !d.Allowed {
		t.Errorf("Allow after restart: %+v, %v", d, err)
	}
	// The subscription learns of the gap, then delivers again.
	var m state.Message
	eventually(t, "the subscription reports the gap", func() (bool, error) {
		select {
		case m = <-sub.C():
			return true, nil
		default:
			return false, nil
		}
	})
	if !m.Lost {
		t.Fatalf("first message after the outage: %+v, want a lost marker", m)
	}
	// It resubscribed: a publish now arrives (retrying until the
	// resubscription is in place, as the marker may come first).
	got := make(chan state.Message, 1)
	go func() {
		for m := range sub.C() {
			if string(m.Data) == "after" {
				got <- m
				return
			}
		}
	}()
	eventually(t, "a message published after the outage arrives", func() (bool, error) {
		if _, err := b.Publish(ctx, "t", []byte("after")); err != nil {
			return false, err
		}
		select {
		case <-got:
			return true, nil
		case <-time.After(100 * time.Millisecond):
			return false, nil
		}
	})
}
