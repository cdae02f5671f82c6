// Package cancelctx provides the cancellable context of a request that
// costs no allocation of its own on the usual call (issue 25): a Context
// kept in a struct its owner allocates anyway (h1server's response, the
// gateway's request), with a Done channel made only when asked for, whose
// dependents do not register on it but are told that it ended (Watch).
//
// Why: a request's contexts were context.WithCancel's, each one the
// context, its cancel func, its Done channel and, made by its first
// child, its children map; an upstream call registered on the gateway's
// with context.AfterFunc, three allocations more. A listener's request
// context, the gateway's request context and the upstream call under it
// were a chain of four such registrations per tools/call.
//
// The flow: the listener's request context (never ended by a parent)
// is watched by the gateway's request context (Start finds it with
// WatcherOf), which is watched by each upstream call made under it; each
// end is passed on by ContextEnded, on the goroutine that ended the
// context, without a goroutine or an allocation. A parent that is not a
// Watcher (net/http's request context) is registered on with
// context.AfterFunc, as context.WithCancel registers.
//
// What it must not do: end a dependent that does not end with it (a
// WithTimeout or WithoutCancel between a Watcher and a dependent: WatcherOf
// finds no Watcher then), block in ContextEnded, or leave a goroutine
// behind (contexts the standard library derives from a Context register
// through its AfterFunc method, as on a context.WithCancel, without a
// goroutine each).
package cancelctx

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Watched is told that a context it watches ended. ContextEnded runs on
// the goroutine that ended the context, at most once per Watch, with the
// context's Err already set, and must not block.
type Watched interface{ ContextEnded() }

// Watcher is a context that tells its dependents itself that it ended.
// *Context implements it.
type Watcher interface {
	context.Context
	// Watch arranges for w.ContextEnded to be called once the context
	// ends, and reports whether it did: false when it has ended already
	// (ContextEnded is then not called).
	Watch(w Watched) bool
	// Unwatch withdraws w; a ContextEnded under way may still run.
	Unwatch(w Watched)
}

type watcherKey struct{}

// WatcherOf returns the Watcher ctx ends with, nil when there is none or
// something between them can end ctx sooner (ctx's Done is not the
// Watcher's). Contexts that only add values (ValueOnly) are looked
// through; past anything else the two Done channels are compared, which
// makes them (a Context makes its channel only when asked).
func WatcherOf(ctx context.Context) Watcher {
	w, _ := ctx.Value(watcherKey{}).(Watcher)
	if w == nil {
		return nil
	}
	for c := ctx; ; {
		if c == context.Context(w) {
			return w
		}
		v, ok := c.(ValueOnly)
		if !ok {
			break
		}
		c = v.ValueParent()
	}
	if d := ctx.Done(); d == nil || d != w.Done() {
		return nil
	}
	return w
}

// InPlace is a context that takes a few values in place, as
// context.WithValue would give them, without a context of its own: the
// request context of mcpgate's listener (h1server), whose request then
// need not be copied (http.Request.WithContext) to carry them. Only the
// goroutine serving the request sets them, before any other goroutine
// can see the context, and a value set is never replaced.
type InPlace interface {
	context.Context
	SetValue(key, val any) bool
}

// SetInPlace gives ctx the value val for key in place, and reports
// whether it could: ctx is InPlace, has room and holds no value for key
// yet. false: wrap ctx (context.WithValue) instead.
func SetInPlace(ctx context.Context, key, val any) bool {
	s, ok := ctx.(InPlace)
	return ok && s.SetValue(key, val)
}

// ValueOnly is a context that only adds values to the one ValueParent
// returns: its Done, Err and Deadline are that context's, always.
// WatcherOf looks through it without asking either for Done (issue 25:
// the two channels a tools/call made only to be compared). A context
// that can end sooner, or never, must not implement it.
type ValueOnly interface {
	context.Context
	ValueParent() context.Context
}

// Context is a cancellable context, as context.WithCancel makes, to be
// kept in a struct: Start it once with its parent, before sharing it; it
// ends when the parent does or when Cancel is called, whichever is first.
// The zero Context is not started and must not be used.
type Context struct {
	parent context.Context
	// How Start registered on the parent, if it did: withdrawn by Cancel.
	pw   Watcher
	stop func() bool

	mu      sync.Mutex
	done    chan struct{} // made by the first Done, or closedDone
	err     error
	watched Watched   // the one dependent watching, the usual case
	more    []Watched // any others (a fan-out's concurrent calls)
	after   []*after  // AfterFunc registrations not yet run or stopped
}

type after struct{ f func() }

var (
	_ Watcher = (*Context)(nil)
	_ Watched = (*Context)(nil)
)

// closedDone is the Done of a Context that ended before anyone asked.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Start makes c a child of parent: a Watcher parent is watched (no
// allocation), any other that can end is registered on with
// context.AfterFunc.
func (c *Context) Start(parent context.Context) {
	c.parent = parent
	if w := WatcherOf(parent); w != nil {
		if w.Watch(c) {
			c.pw = w
		} else {
			c.ContextEnded()
		}
		return
	}
	if parent.Done() == nil {
		return // parent never ends
	}
	c.stop = context.AfterFunc(parent, c.ContextEnded)
}

// Cancel ends c with context.Canceled and withdraws its registration on
// its parent. Later calls do nothing.
func (c *Context) Cancel() {
	c.end(context.Canceled)
	if c.pw != nil {
		c.pw.Unwatch(c)
	}
	if c.stop != nil {
		c.stop()
	}
}

// ContextEnded implements Watched: c's parent ended, and so does c, with
// the parent's Err (context.Canceled if the parent has none: c must not
// end with a nil Err).
func (c *Context) ContextEnded() {
	err := c.parent.Err()
	if err == nil {
		err = context.Canceled
	}
	c.end(err)
}

// Deadline implements context.Context: the parent's.
func (c *Context) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done implements context.Context.
func (c *Context) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			c.done = closedDone
		} else {
			c.done = make(chan struct{})
		}
	}
	return c.done
}

// Err implements context.Context.
func (c *Context) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value implements context.Context: the parent's values, and c itself
// for WatcherOf. The context package's own key (an *int), by which
// context.Cause and context.WithCancel would take the parent's
// cancellation for c's, is answered as context.WithoutCancel(parent)
// answers it (nothing: c's Cause is then its Err); that one allocates on
// every lookup, so it is asked for *int keys only, which no other code
// uses.
func (c *Context) Value(key any) any {
	switch key.(type) {
	case watcherKey:
		return c
	case *int:
		return context.WithoutCancel(c.parent).Value(key)
	}
	return c.parent.Value(key)
}

// AfterFunc arranges for f to run in its own goroutine once c ends, as
// context.AfterFunc does; stop reports whether it stopped f from running.
// (context.AfterFunc and context.WithCancel use this method rather than a
// goroutine per registration.)
func (c *Context) AfterFunc(f func()) (stop func() bool) {
	a := &after{f: f}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.after = append(c.after, a)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.after, a)
		if i < 0 {
			return false
		}
		c.after = slices.Delete(c.after, i, i+1)
		return true
	}
}

// Watch implements Watcher.
func (c *Context) Watch(w Watched) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	if c.watched == nil {
		c.watched = w
	} else {
		c.more = append(c.more, w)
	}
	return true
}

// Unwatch implements Watcher.
func (c *Context) Unwatch(w Watched) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watched == w {
		c.watched = nil
		return
	}
	if i := slices.Index(c.more, w); i >= 0 {
		c.more = slices.Delete(c.more, i, i+1)
	}
}

// end ends c with err: Err is set, Done closes, the dependents watching
// are told and the AfterFunc functions start. Later calls do nothing.
func (c *Context) end(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done == nil {
		c.done = closedDone
	} else {
		close(c.done)
	}
	w, more, after := c.watched, c.more, c.after
	c.watched, c.more, c.after = nil, nil, nil
	c.mu.Unlock()
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
