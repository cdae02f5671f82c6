package upstream

import (
	"context"
	"slices"
	"sync"
	"time"
)

// exchange is the context of one call's HTTP exchange on a streamable
// transport (streamable.roundTrip): the POST, any GET that resumes its
// stream, and the drain after the reply. It ends
//
//   - when the call ends unanswered (its context ends or times out),
//   - when the transport closes (streamable.close cancels every exchange
//     it tracks), and
//   - when the exchange is over (roundTrip returns, or the drain ends).
//
// It does what a context.WithCancel of the call's context.WithoutCancel
// did, with an AfterFunc on the transport's context and one on the request
// context in the HTTP/1.1 connection (h1Conn.roundTrip), but it lives in
// the call (no allocation of its own) and takes no lock shared by the
// other calls to the upstream but the transport's own mu, which the send
// takes anyway.
//
// The connection of the pending request registers itself (setAbort) and
// is aborted directly on cancel; anything else (net/http's transport for
// https, the dialer) uses the generic AfterFunc, which context.AfterFunc
// and context.WithCancel find through the afterFuncer interface.
type exchange struct {
	// vals is the call's context: the exchange carries its values (trace
	// context, credentials), as a context.WithoutCancel of it would (see
	// Value).
	vals context.Context

	mu    sync.Mutex
	done  chan struct{} // made by the first Done, or closedChan
	err   error
	conn  *h1Conn  // the connection whose I/O cancel aborts, if any
	after []*after // AfterFunc registrations not yet run or stopped
}

type after struct{ f func() }

var _ context.Context = (*exchange)(nil)

// closedChan is the Done of an exchange that ended before anyone asked.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Deadline implements context.Context: an exchange has none (the call's
// read timeout ends it).
func (*exchange) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context.
func (x *exchange) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done == nil {
		if x.err != nil {
			x.done = closedChan
		} else {
			x.done = make(chan struct{})
		}
	}
	return x.done
}

// Err implements context.Context.
func (x *exchange) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

// Value implements context.Context. It answers as context.WithoutCancel
// of the call's context would: that one hides the context package's own
// key (an *int), by which context.Cause would find the call's
// cancellation and report its cause (nil while the call lives) for the
// exchange's. WithoutCancel's Value allocates on every lookup, so it is
// asked only for *int keys (Cause, WithCancel), which no other code uses.
func (x *exchange) Value(key any) any {
	if _, ok := key.(*int); ok {
		return context.WithoutCancel(x.vals).Value(key)
	}
	return x.vals.Value(key)
}

// AfterFunc arranges for f to run in its own goroutine once x ends, as
// context.AfterFunc does; stop reports whether it stopped f from running.
// (context.AfterFunc and context.WithCancel use this method instead of a
// goroutine per registration.)
func (x *exchange) AfterFunc(f func()) (stop func() bool) {
	a := &after{f: f}
	x.mu.Lock()
	if x.err != nil {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	x.after = append(x.after, a)
	x.mu.Unlock()
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		i := slices.Index(x.after, a)
		if i < 0 {
			return false
		}
		x.after = slices.Delete(x.after, i, i+1)
		return true
	}
}

// cancel ends x: Done closes, Err is context.Canceled, the registered
// connection's I/O is aborted and the AfterFunc functions start. Later
// calls do nothing.
func (x *exchange) cancel() {
	x.mu.Lock()
	if x.err != nil {
		x.mu.Unlock()
		return
	}
	x.err = context.Canceled
	if x.done == nil {
		x.done = closedChan
	} else {
		close(x.done)
	}
	pc, fns := x.conn, x.after
	x.conn, x.after = nil, nil
	x.mu.Unlock()
	if pc != nil {
		pc.abort()
	}
	for _, a := range fns {
		go a.f()
	}
}

// setAbort registers pc, whose response is pending: cancel aborts its I/O
// (at once, when x has already ended).
func (x *exchange) setAbort(pc *h1Conn) {
	x.mu.Lock()
	if x.err == nil {
		x.conn = pc
		x.mu.Unlock()
		return
	}
	x.mu.Unlock()
	pc.abort()
}

// clearAbort withdraws pc's registration; it reports false when cancel
// aborted pc first (the connection is then not reused).
func (x *exchange) clearAbort(pc *h1Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.conn != pc {
		return false
	}
	x.conn = nil
	return true
}
