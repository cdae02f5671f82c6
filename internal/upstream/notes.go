package upstream

import (
	"context"
	"time"
)

// Notes hears, for one downstream request, what the Manager did on its
// behalf: which session each upstream call ran on and how long it took
// (the gateway's x-mcpgate-debug diagnostics, SPEC S16.4). Its methods
// are called from the goroutines of the request's upstream calls, so they
// must be safe for concurrent use; they must not block.
type Notes interface {
	// SessionUsed: an operation of server got a session that was already
	// pooled (created false) or that had to be established for it, or
	// for a concurrent caller it waited with (created true). Per-call
	// sessions are always created.
	SessionUsed(server string, created bool)
	// Called: a request to server ran from start for d.
	Called(server, method string, start time.Time, d time.Duration)
}

type notesKey struct{}

// WithNotes attaches n to ctx; nil n detaches.
func WithNotes(ctx context.Context, n Notes) context.Context {
	return context.WithValue(ctx, notesKey{}, n)
}

// notesFrom is ctx's Notes, nil without any (the common case: one
// context lookup, no allocation).
func notesFrom(ctx context.Context) Notes {
	n, _ := ctx.Value(notesKey{}).(Notes)
	return n
}
