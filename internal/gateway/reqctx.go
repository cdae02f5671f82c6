package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/upstream"
)

// reqContext is the context serve runs one JSON-RPC request under: its
// parent's values, deadline and end, and an end of its own (cancel: the
// client's notifications/cancelled, the session's end, serve's return).
// It is what context.WithCancel made before, without that one's
// allocations on the usual call (issue 25): a single request's is kept in
// its POST's ownRequest; its Done channel is made only when asked for;
// an upstream call under it does not register on it (context.AfterFunc,
// three allocations, and the children map the first one made) but is told
// that it ended (upstream.CallWatcher). On a parent that can end it costs
// one context.AfterFunc, as the WithCancel's registration did.
//
// Contexts the standard library derives from it (WithCancel, WithTimeout,
// AfterFunc) find its AfterFunc method and register there: they are
// cancelled as a child of a cancelCtx is, without a goroutine each.
type reqContext struct {
	parent context.Context
	// stop withdraws the registration on parent (nil: parent never
	// ends); set by start, before the context is shared.
	stop func() bool

	mu      sync.Mutex
	done    chan struct{} // made by the first Done, or closedDone
	err     error
	watched upstream.Watched   // the one upstream call watching, the usual case
	more    []upstream.Watched // any others (concurrent calls: a fan-out)
	after   []*reqAfter        // AfterFunc registrations not yet run or stopped
}

type reqAfter struct{ f func() }

var (
	_ context.Context      = (*reqContext)(nil)
	_ upstream.CallWatcher = (*reqContext)(nil)
)

// closedDone is the Done of a reqContext that ended before anyone asked.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

type reqContextKey struct{}

// start makes rc a child of parent. It must be called once, before rc is
// shared.
func (rc *reqContext) start(parent context.Context) {
	rc.parent = parent
	if parent.Done() == nil {
		return // parent never ends: nothing to watch
	}
	rc.stop = context.AfterFunc(parent, rc.parentEnded)
}

// reqContextOf returns the reqContext ctx was derived from, nil if none.
func reqContextOf(ctx context.Context) *reqContext {
	rc, _ := ctx.Value(reqContextKey{}).(*reqContext)
	return rc
}

// Deadline implements context.Context: the parent's.
func (rc *reqContext) Deadline() (time.Time, bool) { return rc.parent.Deadline() }

// Done implements context.Context.
func (rc *reqContext) Done() <-chan struct{} {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.done == nil {
		if rc.err != nil {
			rc.done = closedDone
		} else {
			rc.done = make(chan struct{})
		}
	}
	return rc.done
}

// Err implements context.Context.
func (rc *reqContext) Err() error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.err
}

// Value implements context.Context: the parent's values, and rc itself
// for reqContextOf. The context package's own key (an *int), by which
// context.Cause and WithCancel would find the parent's cancellation as
// this one's, is answered as context.WithoutCancel(parent) answers it
// (nothing: Cause is then Err); that one allocates on every lookup, so it
// is asked for *int keys only, which no other code uses.
func (rc *reqContext) Value(key any) any {
	switch key.(type) {
	case reqContextKey:
		return rc
	case *int:
		return context.WithoutCancel(rc.parent).Value(key)
	}
	return rc.parent.Value(key)
}

// AfterFunc arranges for f to run in its own goroutine once rc ends, as
// context.AfterFunc does; stop reports whether it stopped f from
// running. (context.AfterFunc and context.WithCancel use this method
// rather than a goroutine per registration.)
func (rc *reqContext) AfterFunc(f func()) (stop func() bool) {
	a := &reqAfter{f: f}
	rc.mu.Lock()
	if rc.err != nil {
		rc.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	rc.after = append(rc.after, a)
	rc.mu.Unlock()
	return func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		i := slices.Index(rc.after, a)
		if i < 0 {
			return false
		}
		rc.after = slices.Delete(rc.after, i, i+1)
		return true
	}
}

// Watch implements upstream.CallWatcher.
func (rc *reqContext) Watch(w upstream.Watched) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.err != nil {
		return false
	}
	if rc.watched == nil {
		rc.watched = w
	} else {
		rc.more = append(rc.more, w)
	}
	return true
}

// Unwatch implements upstream.CallWatcher.
func (rc *reqContext) Unwatch(w upstream.Watched) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.watched == w {
		rc.watched = nil
		return
	}
	if i := slices.Index(rc.more, w); i >= 0 {
		rc.more = slices.Delete(rc.more, i, i+1)
	}
}

// cancel ends rc with context.Canceled and withdraws its registration on
// the parent. Later calls do nothing. It is the request's cancel func.
func (rc *reqContext) cancel() {
	rc.end(context.Canceled)
	if rc.stop != nil {
		rc.stop()
	}
}

// parentEnded ends rc as its parent did (context.AfterFunc runs it).
func (rc *reqContext) parentEnded() { rc.end(rc.parent.Err()) }

// end ends rc with err: Err is set, Done closes, the upstream calls
// watching are told (here: ContextEnded does not block) and the
// AfterFunc functions start.
func (rc *reqContext) end(err error) {
	rc.mu.Lock()
	if rc.err != nil {
		rc.mu.Unlock()
		return
	}
	rc.err = err
	if rc.done == nil {
		rc.done = closedDone
	} else {
		close(rc.done)
	}
	w, more, after := rc.watched, rc.more, rc.after
	rc.watched, rc.more, rc.after = nil, nil, nil
	rc.mu.Unlock()
	if w != nil {
		w.ContextEnded()
	}
	for _, w := range more {
		w.ContextEnded()
	}
	for _, a := range after {
		go a.f()
	}
}
