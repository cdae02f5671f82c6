package upstream

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// listed is the deadline list from its head, checked against the pending
// table: the same calls, linked both ways, deadlines in order.
func listed(t *testing.T, c *conn) []int64 {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []int64
	var prev *call
	for cl := c.dl.head; cl != nil; cl = cl.next {
		if cl.prev != prev || !c.onListLocked(cl) {
			t.Fatalf("call %d: badly linked", cl.id)
		}
		if prev != nil && cl.deadline.Before(prev.deadline) {
			t.Fatalf("call %d's deadline is before call %d's", cl.id, prev.id)
		}
		if c.calls[cl.id] != cl {
			t.Fatalf("call %d is listed but not pending", cl.id)
		}
		ids = append(ids, cl.id)
		prev = cl
	}
	if c.dl.tail != prev {
		t.Fatal("the tail is not the last call")
	}
	if len(ids) != len(c.calls) {
		t.Fatalf("%d calls listed, %d pending", len(ids), len(c.calls))
	}
	return ids
}

// The read timeouts of a connection's calls share one timer: each call
// times out at its own deadline (its budget after it was sent, or after
// its last progress), in that order; an answered call does not; and
// nothing is left on the list or the table.
func TestDeadlinesShareOneTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &conn{calls: map[int64]*call{}, servedCh: make(chan struct{})}
		const budget = 100 * time.Millisecond
		start := time.Now()
		calls := map[int64]*call{}
		for id := int64(1); id <= 5; id++ {
			cl := &call{id: id, budget: budget, done: make(chan struct{}, 1), token: `"p` + string(rune('0'+id)) + `"`}
			calls[id] = cl
			c.mu.Lock()
			c.calls[id] = cl
			c.linkLocked(cl, time.Now())
			c.mu.Unlock()
			time.Sleep(10 * time.Millisecond) // sent at 0, 10, ... 40 ms
		}
		if got := listed(t, c); len(got) != 5 {
			t.Fatalf("listed %v", got)
		}
		time.Sleep(start.Add(50 * time.Millisecond).Sub(time.Now()))
		c.finish(2, callResult{msg: jsonrpc.NewResult(jsonrpc.Int64ID(2), []byte(`{}`))})
		time.Sleep(10 * time.Millisecond) // 60 ms: progress for call 3
		if c.progressCall([]byte(`{"progressToken":"p3","progress":1}`)) != calls[3] {
			t.Fatal("progress did not find call 3")
		}
		if got := listed(t, c); len(got) != 4 || got[3] != 3 {
			t.Fatalf("after progress, listed %v: call 3 should be last", got)
		}
		want := map[int64]time.Duration{1: 100 * time.Millisecond, 4: 130 * time.Millisecond, 5: 140 * time.Millisecond, 3: 160 * time.Millisecond}
		for _, id := range []int64{1, 4, 5, 3} {
			<-calls[id].done
			if got := time.Since(start); got != want[id] {
				t.Errorf("call %d timed out at %v, want %v", id, got, want[id])
			}
			if calls[id].res.err != errReadTimeout || !calls[id].timedOut.Load() {
				t.Errorf("call %d: %v, want the read timeout", id, calls[id].res.err)
			}
		}
		select {
		case <-calls[2].done:
			if calls[2].res.err != nil || calls[2].timedOut.Load() {
				t.Errorf("the answered call: %v", calls[2].res.err)
			}
		default:
			t.Error("the answered call got nothing")
		}
		if got := listed(t, c); len(got) != 0 {
			t.Errorf("left on the list: %v", got)
		}
		for _, cl := range calls {
			if c.onListLocked(cl) || cl.prev != nil || cl.next != nil {
				t.Errorf("call %d still linked", cl.id)
			}
		}
	})
}

// A table emptied at once (the session ended) empties the list and stops
// the timer: no call times out after it, and a new call starts the list
// and the timer again.
func TestDeadlinesEmptiedWithTheTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &conn{calls: map[int64]*call{}, done: make(chan struct{}), drained: make(chan struct{}), cancel: func() {}}
		cl := &call{id: 1, budget: time.Second, done: make(chan struct{}, 1)}
		c.mu.Lock()
		c.calls[1] = cl
		c.linkLocked(cl, time.Now())
		c.mu.Unlock()
		c.shutdown(ErrClosed)
		<-cl.done
		if cl.res.err != ErrClosed || c.onListLocked(cl) {
			t.Fatalf("shut down: %v, listed %v", cl.res.err, c.onListLocked(cl))
		}
		time.Sleep(2 * time.Second)
		if cl.timedOut.Load() {
			t.Error("a call of an ended session timed out")
		}
		c2 := &conn{calls: map[int64]*call{}, servedCh: make(chan struct{})}
		later := &call{id: 2, budget: time.Second, done: make(chan struct{}, 1)}
		c2.mu.Lock()
		c2.calls[2] = later
		c2.linkLocked(later, time.Now())
		c2.mu.Unlock()
		c2.mu.Lock()
		c2.unlinkAllLocked() // as an undecodable message's failure of every call
		delete(c2.calls, 2)
		c2.mu.Unlock()
		again := &call{id: 3, budget: time.Second, done: make(chan struct{}, 1)}
		start := time.Now()
		c2.mu.Lock()
		c2.calls[3] = again
		c2.linkLocked(again, time.Now())
		c2.mu.Unlock()
		<-again.done
		if d := time.Since(start); d != time.Second || again.res.err != errReadTimeout {
			t.Errorf("after the list was emptied, a new call: %v after %v", again.res.err, d)
		}
	})
}
