package statetest

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

var errorTests = []test{
	{"Invalid", testInvalid},
	{"Closed", testClosed},
}

// Arguments out of their documented bounds are ErrInvalid, the same on
// every backend, and the message never quotes a key.
func testInvalid(t *testing.T, b state.Backend) {
	ctx := t.Context()
	secret := "mcp-session-" + strings.Repeat("s3cr3t", 100) // too long a key
	ok := map[string]string{"f": "v"}
	good := state.Limit{Events: 1, Per: time.Second}
	calls := map[string]error{
		"Terminate empty id":          b.Terminate(ctx, "", long),
		"Terminate long id":           b.Terminate(ctx, secret, long),
		"Terminate zero ttl":          b.Terminate(ctx, "s", 0),
		"Terminate sub-ms ttl":        b.Terminate(ctx, "s", time.Microsecond),
		"SetSessionFields no field":   b.SetSessionFields(ctx, "s", nil, long),
		"SetSessionFields empty name": b.SetSessionFields(ctx, "s", map[string]string{"": "v"}, long),
		"SetSessionFields long value": b.SetSessionFields(ctx, "s", map[string]string{"f": strings.Repeat("v", state.MaxFieldLen+1)}, long),
		"SetSessionFields zero ttl":   b.SetSessionFields(ctx, "s", ok, 0),
		"TouchSession negative ttl":   func() error { _, err := b.TouchSession(ctx, "s", -time.Second); return err }(),
		"Allow zero events":           func() error { _, err := b.Allow(ctx, "k", state.Limit{Per: time.Second}); return err }(),
		"Allow zero per":              func() error { _, err := b.Allow(ctx, "k", state.Limit{Events: 1}); return err }(),
		"Allow negative burst": func() error {
			_, err := b.Allow(ctx, "k", state.Limit{Events: 1, Per: time.Second, Burst: -1})
			return err
		}(),
		"Allow empty key":           func() error { _, err := b.Allow(ctx, "", good); return err }(),
		"Heartbeat empty url":       b.Heartbeat(ctx, state.Replica{ID: "r"}, long),
		"Heartbeat empty id":        b.Heartbeat(ctx, state.Replica{URL: "http://x"}, long),
		"ClaimStream empty replica": func() error { _, _, err := b.ClaimStream(ctx, "s", state.StreamOwner{}, long); return err }(),
		"AppendEvent zero maxLen":   func() error { _, err := b.AppendEvent(ctx, "s", nil, 0, long); return err }(),
		"AppendEvent huge maxLen":   func() error { _, err := b.AppendEvent(ctx, "s", nil, state.MaxEventsPerStream+1, long); return err }(),
		"AppendEvent long stream":   func() error { _, err := b.AppendEvent(ctx, secret, nil, 1, long); return err }(),
		"EventsAfter empty stream":  func() error { _, _, err := b.EventsAfter(ctx, "", 0); return err }(),
		"Publish empty topic":       func() error { _, err := b.Publish(ctx, "", nil); return err }(),
		"ListSessions zero limit":   func() error { _, _, err := b.ListSessions(ctx, 0); return err }(),
		"ListSessions huge limit":   func() error { _, _, err := b.ListSessions(ctx, state.MaxListSessions+1); return err }(),
		"Subscribe no topic":        func() error { _, err := b.Subscribe(ctx); return err }(),
		"Subscribe empty topic":     func() error { _, err := b.Subscribe(ctx, "a", ""); return err }(),
	}
	for what, err := range calls {
		wantErr(t, what, err, state.ErrInvalid)
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error quotes the key: %v", what, err)
		}
	}
	// Nothing was written by the refused calls.
	if got, _ := b.SessionFields(ctx, "s"); len(got) != 0 {
		t.Errorf("refused writes left state: %v", got)
	}
}

// After Close every call fails with ErrClosed, and Close again is fine.
func testClosed(t *testing.T, b state.Backend) {
	ctx := t.Context()
	mustNot(t, "Ping", b.Ping(ctx))
	mustNot(t, "Close", b.Close())
	mustNot(t, "Close again", b.Close())
	calls := map[string]error{
		"Ping":      b.Ping(ctx),
		"Terminate": b.Terminate(ctx, "s", long),
		"Allow":     func() error { _, err := b.Allow(ctx, "k", hourly); return err }(),
		"Publish":   func() error { _, err := b.Publish(ctx, "t", nil); return err }(),
		"Subscribe": func() error { _, err := b.Subscribe(ctx, "t"); return err }(),
		"ListSessions": func() error {
			_, _, err := b.ListSessions(ctx, 1)
			return err
		}(),
		"AppendEvent": func() error {
			_, err := b.AppendEvent(ctx, "s", nil, 1, long)
			return err
		}(),
	}
	for what, err := range calls {
		wantErr(t, what, err, state.ErrClosed)
	}
}
