package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
)

// An open stream re-checks its key every Gateway.recheck (auth.go). That
// bounds how long a revoked key keeps one open when nobody says so; when
// the admin API knows a key changed (here, or on another replica through
// its bus), it says so, and every stream re-checks at once.
//
// One loop of the gateway's re-checks every stream (streamWatchers): a
// goroutine and a timer per stream would cost each idle stream several
// KiB (issue 25) to do what one pass over a list does.

// recheckSignal wakes the re-checker. The zero value is ready.
type recheckSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (s *recheckSignal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *recheckSignal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// RecheckStreams makes every open stream re-check the key it was opened
// with now rather than at its next periodic check, so that a revoked or
// disabled key's streams end within the time of a store read. The admin
// API calls it after a key changed; the authenticator must have forgotten
// its cached copy of the key first.
func (g *Gateway) RecheckStreams() { g.rechecks.fire() }

// streamWatch is one open stream whose key is re-checked.
type streamWatch struct {
	ctx    context.Context // the stream's request's values, never cancelled
	caller *callers.Caller
	check  callerChecker   // the authenticator that accepted it
	done   <-chan struct{} // closed when the stream ended: no more checks
	end    func()          // ends the stream, once its key is no longer valid
}

// streamWatchers are the open streams whose keys the gateway re-checks,
// and the one loop that does (recheckLoop). The zero value is ready.
type streamWatchers struct {
	// mu guards the fields below.
	mu sync.Mutex
	// all is every stream watched; a stream that ended is dropped at the
	// next pass (or sooner, when they pile up: add).
	all map[*streamWatch]struct{}
	// fresh were added since the last pass: each is checked at once, so
	// that a key revoked between a stream's authentication and its
	// watch (its RecheckStreams already fired) ends it too.
	fresh []*streamWatch
	// wake (capacity 1) tells the loop that fresh is not empty.
	wake chan struct{}
	// running: the loop is running; it starts with the first watch.
	running bool
	// pruneAt is the size of all above which add drops ended streams.
	pruneAt int
}

// add watches w, starting the loop if need be (start runs it as a task of
// the gateway); false: the gateway is closing and nothing watches.
func (ws *streamWatchers) add(w *streamWatch, start func(func()) bool, loop func()) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.all == nil {
		ws.all = map[*streamWatch]struct{}{}
		ws.wake = make(chan struct{}, 1)
	}
	if !ws.running {
		if !start(loop) {
			return false
		}
		ws.running = true
	}
	ws.all[w] = struct{}{}
	ws.fresh = append(ws.fresh, w)
	if len(ws.all) > ws.pruneAt {
		ws.pruneLocked()
	}
	select {
	case ws.wake <- struct{}{}:
	default:
	}
	return true
}

// pruneLocked drops the streams that ended; ends the next add that finds
// twice as many watched.
func (ws *streamWatchers) pruneLocked() {
	for w := range ws.all {
		if closed(w.done) {
			delete(ws.all, w)
		}
	}
	ws.pruneAt = 2*len(ws.all) + 64
}

// take is what a pass checks: everything (all), or what was added since
// the last pass.
func (ws *streamWatchers) take(all bool) []*streamWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if !all {
		f := ws.fresh
		ws.fresh = nil
		return f
	}
	ws.fresh = nil
	ws.pruneLocked()
	list := make([]*streamWatch, 0, len(ws.all))
	for w := range ws.all {
		list = append(list, w)
	}
	return list
}

// drop forgets w.
func (ws *streamWatchers) drop(w *streamWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.all, w)
}

// stopped records that the loop returned: the next add starts another.
func (ws *streamWatchers) stopped() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.running = false
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// recheckLoop re-checks the watched streams' keys: each new one at once,
// all of them every g.recheck and at each RecheckStreams, until the
// gateway shuts down.
func (g *Gateway) recheckLoop() {
	ctx := g.bgCtx
	defer g.watchers.stopped()
	t := time.NewTicker(g.recheck)
	defer t.Stop()
	kick := g.rechecks.wait()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-g.watchers.wake:
		case <-t.C:
			all = true
		case <-kick:
			kick = g.rechecks.wait()
			all = true
		}
		for _, w := range g.watchers.take(all) {
			if closed(w.done) {
				g.watchers.drop(w)
				continue
			}
			if !w.check.StillValid(w.ctx, w.caller) {
				g.log.Info("closed a stream whose key is no longer valid", "alias", w.caller.Alias)
				g.watchers.drop(w)
				w.end()
			}
		}
	}
}
