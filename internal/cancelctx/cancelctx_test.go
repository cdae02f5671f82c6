package cancelctx

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// counted counts the ContextEnded calls it is told.
type counted struct{ n atomic.Int32 }

func (w *counted) ContextEnded() { w.n.Add(1) }

type key struct{}

// A Context ends as context.WithCancel's does: by its parent or its own
// Cancel, with Done closed, the parent's error (its Cause too), what the
// standard library derived from it cancelled (no goroutine left), its
// AfterFunc functions run (a stopped one not), its dependents told once
// (an unwatched one not), and its parent's values and deadline its own.
func TestContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	deadline := time.Now().Add(time.Hour)
	for _, byParent := range []bool{true, false} {
		parent, cancelParent := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), deadline)
		var c Context
		c.Start(parent)
		if c.Value(key{}) != "v" || WatcherOf(&c) != &c || WatcherOf(parent) != nil {
			t.Fatalf("values: %v, %v", c.Value(key{}), WatcherOf(&c))
		}
		if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
			t.Errorf("deadline %v %v, want the parent's", d, ok)
		}
		var one, two, gone counted
		if !c.Watch(&one) || !c.Watch(&two) || !c.Watch(&gone) {
			t.Fatal("Watch on a live context")
		}
		c.Unwatch(&gone)
		child, stopChild := context.WithCancel(&c)
		defer stopChild()
		after := make(chan struct{})
		context.AfterFunc(&c, func() { close(after) })
		stopped := context.AfterFunc(&c, func() { t.Error("a stopped AfterFunc ran") })
		if !stopped() {
			t.Error("AfterFunc's stop")
		}
		done := c.Done()
		select {
		case <-done:
			t.Fatal("done before the end")
		default:
		}
		if byParent {
			cancelParent()
		} else {
			c.Cancel()
			c.Cancel()
			if parent.Err() != nil {
				t.Fatal("Cancel reached the parent")
			}
			cancelParent()
		}
		<-done
		<-child.Done()
		<-after
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(&c), context.Canceled) || !errors.Is(context.Cause(child), context.Canceled) {
			t.Errorf("err %v, cause %v, child's cause %v", c.Err(), context.Cause(&c), context.Cause(child))
		}
		time.Sleep(10 * time.Millisecond) // a second ContextEnded would come now
		if one.n.Load() != 1 || two.n.Load() != 1 || gone.n.Load() != 0 {
			t.Errorf("ContextEnded: %d, %d, unwatched %d; want 1, 1, 0", one.n.Load(), two.n.Load(), gone.n.Load())
		}
		if c.Watch(&gone) {
			t.Error("Watch on an ended context")
		}
	}

	// A parent that never ends costs no registration; ended before
	// anyone asked, Done is closed at once.
	var c Context
	c.Start(context.Background())
	if c.stop != nil || c.pw != nil {
		t.Error("a registration on a parent that never ends")
	}
	c.Cancel()
	select {
	case <-c.Done():
	default:
		t.Error("Done of an ended context is open")
	}

	// Told that its parent ended while the parent has no Err: it ends
	// all the same, never done with a nil Err.
	var told Context
	told.Start(context.Background())
	told.ContextEnded()
	if !errors.Is(told.Err(), context.Canceled) {
		t.Errorf("ContextEnded without the parent's Err: %v", told.Err())
	}
}

// A Context started on a Context (through values) watches it: the
// parent's end ends it at once, on the parent's goroutine; its own Cancel
// withdraws the watch and leaves the parent alone. Through a context that
// can end sooner (WithTimeout) it registers with context.AfterFunc
// instead. On a watcher, Start and Cancel allocate nothing.
func TestWatchedParent(t *testing.T) {
	defer goleak.VerifyNone(t)
	var p Context
	p.Start(context.Background())
	defer p.Cancel()
	var c Context
	c.Start(context.WithValue(&p, key{}, "v"))
	if c.pw != &p || c.stop != nil || p.watched != &c || c.Value(key{}) != "v" {
		t.Fatalf("not watching its parent: pw %v, stop %v", c.pw, c.stop != nil)
	}
	c.Cancel()
	if p.watched != nil || p.Err() != nil {
		t.Errorf("after the child's Cancel: watched %v, parent's err %v", p.watched, p.Err())
	}

	var d Context
	d.Start(&p)
	p.Cancel()
	if !errors.Is(d.Err(), context.Canceled) { // told on p's goroutine: no wait
		t.Errorf("the parent's end: child's err %v", d.Err())
	}
	var late Context
	late.Start(&p)
	if !errors.Is(late.Err(), context.Canceled) || late.pw != nil {
		t.Errorf("started on an ended parent: err %v, watching %v", late.Err(), late.pw)
	}

	var q Context
	q.Start(context.Background())
	defer q.Cancel()
	tctx, stop := context.WithTimeout(&q, time.Hour)
	defer stop()
	var e Context
	e.Start(tctx)
	if e.pw != nil || e.stop == nil {
		t.Error("watching through a deadline")
	}
	e.Cancel()

	q.Done() // made once, as the first dependent's Start makes it
	children := make([]Context, 200)
	i := 0
	if n := testing.AllocsPerRun(100, func() {
		c := &children[i]
		i++
		c.Start(&q)
		c.Cancel()
	}); n != 0 {
		t.Errorf("Start and Cancel on a watcher: %v allocations, want 0", n)
	}
}

// valueOnly adds one value to its parent, and says so.
type valueOnly struct {
	context.Context
	v string
}

func (c *valueOnly) ValueParent() context.Context { return c.Context }

func (c *valueOnly) Value(k any) any {
	if k == (key{}) {
		return c.v
	}
	return c.Context.Value(k)
}

// WatcherOf looks through contexts that only add values (ValueOnly)
// without making the Watcher's Done channel; anything else between
// (context.WithValue, WithCancel, WithoutCancel) is judged by comparing
// the Done channels, as before: a WithValue ends with the watcher, a
// WithCancel or WithoutCancel does not.
func TestWatcherOfThroughValues(t *testing.T) {
	defer goleak.VerifyNone(t)
	var w Context
	w.Start(context.Background())
	defer w.Cancel()
	through := &valueOnly{Context: &valueOnly{Context: &w, v: "inner"}, v: "outer"}
	if got := WatcherOf(through); got != &w {
		t.Fatalf("WatcherOf through values = %v, want the watcher", got)
	}
	if w.done != nil {
		t.Error("WatcherOf made the watcher's Done channel to look through values")
	}
	if n := testing.AllocsPerRun(100, func() { WatcherOf(through) }); n != 0 {
		t.Errorf("WatcherOf through values: %v allocations, want 0", n)
	}
	if WatcherOf(&valueOnly{Context: context.WithValue(&w, key{}, "std")}) != &w {
		t.Error("a standard WithValue between: not found")
	}
	cctx, cancel := context.WithCancel(&w)
	defer cancel()
	if WatcherOf(&valueOnly{Context: cctx}) != nil {
		t.Error("a WithCancel between: found, though it can end sooner")
	}
	if WatcherOf(&valueOnly{Context: context.WithoutCancel(&w)}) != nil {
		t.Error("a WithoutCancel between: found, though it never ends")
	}
}
