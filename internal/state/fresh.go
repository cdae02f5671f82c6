package state

import (
	"context"
	"sync"
	"time"
)

// FreshReads runs reads of a source of truth for uses that must see every
// change acknowledged before they arrived: while a replica cannot trust
// that it heard the bus (Heard), it re-reads what a missed message could
// have changed (a key, a session's end, a runtime server) instead of
// relying on what it holds.
//
// A use that arrives while a read of its key runs waits for the next one,
// which starts when that one ends; every use arriving meanwhile shares
// it. So one read of a key runs at a time, and none began before the use
// it answers: a change acknowledged before a use arrived is seen by it,
// and a burst of uses costs two reads, not one each.
//
// The zero value is ready to use, without a timeout. Its methods are safe
// for concurrent use.
type FreshReads[V any] struct {
	// Timeout bounds one read, which runs detached from the uses waiting
	// for it (others may share it); 0: none.
	Timeout time.Duration

	mu sync.Mutex
	m  map[string]*freshKey[V]
}

type freshKey[V any] struct {
	running bool
	next    *freshRound[V] // the round uses arriving now share; nil: none yet
}

type freshRound[V any] struct {
	fn   func(context.Context) (V, error) // the first sharer's
	done chan struct{}
	val  V
	err  error
}

// Read returns fn's answer from a read of key that began after this call
// (fn itself, or another use's fn for the same key: they must read the
// same thing). ctx only bounds the wait.
func (f *FreshReads[V]) Read(ctx context.Context, key string, fn func(context.Context) (V, error)) (V, error) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[string]*freshKey[V]{}
	}
	k := f.m[key]
	if k == nil {
		k = &freshKey[V]{}
		f.m[key] = k
	}
	if k.next == nil {
		k.next = &freshRound[V]{fn: fn, done: make(chan struct{})}
	}
	r := k.next
	if !k.running {
		f.startLocked(key, k)
	}
	f.mu.Unlock()
	select {
	case <-r.done:
		return r.val, r.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// startLocked runs k's next round; f.mu is held.
func (f *FreshReads[V]) startLocked(key string, k *freshKey[V]) {
	r := k.next
	k.next, k.running = nil, true
	go func() {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if f.Timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, f.Timeout)
		}
		r.val, r.err = r.fn(ctx)
		cancel()
		close(r.done)
		f.mu.Lock()
		defer f.mu.Unlock()
		k.running = false
		if k.next != nil {
			f.startLocked(key, k)
		} else {
			delete(f.m, key)
		}
	}()
}
