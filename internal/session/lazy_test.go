package session

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// An idle session holds nothing its past requests needed: no map of calls
// or subscriptions, nothing to wait on (issue 25).
func TestIdleSessionKeepsNothing(t *testing.T) {
	s := New(Params{MaxInflight: 2})
	s.MarkReady()
	for i := range 3 {
		if ok, _ := s.Acquire(nil); !ok {
			t.Fatal("not admitted")
		}
		_, c1 := context.WithCancel(context.Background())
		_, c2 := context.WithCancel(context.Background())
		end1 := s.Begin(jsonrpc.Int64ID(int64(i)), c1)
		end2 := s.Begin(jsonrpc.Int64ID(int64(i+100)), c2) // a second at once: the map
		end2()
		end1()
		s.Release()
	}
	s.AddSub("mem://a", "srv")
	s.RemoveSub("mem://a")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.call != nil || s.calls != nil || s.subs != nil || s.waits != nil || s.used != 0 {
		t.Errorf("idle session holds call %v calls %v subs %v waits %v used %d", s.call, s.calls, s.subs, s.waits, s.used)
	}
}

// Cancelling by id finds a call whether it is the first in flight or one
// of those after it, and the latest of a reused id.
func TestCancelCallSecondInFlight(t *testing.T) {
	s := New(Params{MaxInflight: 4})
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer s.Begin(jsonrpc.Int64ID(1), cancel1)()
	ctx2, cancel2 := context.WithCancel(context.Background())
	end2 := s.Begin(jsonrpc.Int64ID(2), cancel2)
	ctx3, cancel3 := context.WithCancel(context.Background())
	end3 := s.Begin(jsonrpc.Int64ID(2), cancel3) // id 2 reused: the latest is kept
	s.CancelCall(jsonrpc.Int64ID(2).Raw())
	if ctx3.Err() == nil || ctx2.Err() != nil || ctx1.Err() != nil {
		t.Errorf("cancel id 2: first %v second %v third %v, want only the third", ctx1.Err(), ctx2.Err(), ctx3.Err())
	}
	end3()
	end2()
	s.CancelCall(jsonrpc.Int64ID(1).Raw())
	if ctx1.Err() == nil {
		t.Error("the first call was not cancelled")
	}
}

// A request that comes before initialize completed waits for it; one over
// the slots waits for a Release and gets the slot handed over, first come
// first served; one whose client went away gives up its place.
func TestAcquireWaitsForReadyAndSlots(t *testing.T) {
	s := New(Params{MaxInflight: 1})
	got := make(chan int, 3)
	go func() {
		ok, _ := s.Acquire(nil)
		if ok {
			got <- 0
		}
	}()
	select {
	case <-got:
		t.Fatal("admitted before ready")
	case <-time.After(50 * time.Millisecond):
	}
	s.MarkReady()
	if <-got != 0 {
		t.Fatal("not admitted once ready")
	}
	gone := make(chan struct{})
	goneRes := make(chan bool)
	go func() { ok, ended := s.Acquire(gone); goneRes <- ok || ended }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.waits != nil && len(s.waits.slots) == 1 })
	go func() {
		if ok, _ := s.Acquire(nil); ok {
			got <- 1
		}
	}()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.waits.slots) == 2 })
	close(gone) // the first waiter's client went away
	if <-goneRes {
		t.Error("a request whose client went away was admitted")
	}
	s.Release()
	if <-got != 1 {
		t.Error("the slot was not handed to the waiter")
	}
	s.Release()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used != 0 || len(s.waits.slots) != 0 {
		t.Errorf("used %d, waiting %d after all released", s.used, len(s.waits.slots))
	}
}

// Ended is closed by End whether it was asked for before or after.
func TestEndedBeforeAndAfter(t *testing.T) {
	s := New(Params{MaxInflight: 1})
	before := s.Ended()
	s.End()
	for name, ch := range map[string]<-chan struct{}{"before": before, "after": s.Ended()} {
		select {
		case <-ch:
		default:
			t.Errorf("Ended asked %s the end is not closed", name)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// StartIn fills the caller's InFlight rather than allocating one, and the
// call it marks is cancelled by id and finished as Start's.
func TestStartInUsesTheCallersInFlight(t *testing.T) {
	s := New(Params{MaxInflight: 4})
	ctx, cancel := context.WithCancel(context.Background())
	var own InFlight
	c := s.StartIn(&own, jsonrpc.Int64ID(7), CancelFunc(cancel))
	if c != &own {
		t.Fatalf("StartIn returned %p, want the caller's %p", c, &own)
	}
	s.CancelCall(jsonrpc.Int64ID(7).Raw())
	if ctx.Err() == nil {
		t.Error("the call was not cancelled by its id")
	}
	s.Finish(c)
	if n := testing.AllocsPerRun(50, func() { s.Finish(s.StartIn(&own, jsonrpc.Int64ID(7), CancelFunc(cancel))) }); n != 0 {
		t.Errorf("StartIn and Finish: %v allocations, want none", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.call != nil || len(s.calls) != 0 {
		t.Errorf("finished session holds call %v calls %v", s.call, s.calls)
	}
}

// doneCounter is a context that counts the calls to its Done.
type doneCounter struct {
	context.Context
	calls atomic.Int32
}

func (d *doneCounter) Done() <-chan struct{} { d.calls.Add(1); return d.Context.Done() }

// AcquireFor asks its context for Done only when it waits: a free slot
// takes none (a request's context makes its channel only when asked),
// and a request waiting for a slot gives up when its context ends.
func TestAcquireForAsksDoneOnlyToWait(t *testing.T) {
	s := New(Params{MaxInflight: 1})
	s.MarkReady()
	free := &doneCounter{Context: context.Background()}
	if ok, _ := s.AcquireFor(free); !ok || free.calls.Load() != 0 {
		t.Fatalf("a free slot: ok %v, Done asked %d times", ok, free.calls.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	waiting := &doneCounter{Context: ctx}
	res := make(chan bool)
	go func() { ok, ended := s.AcquireFor(waiting); res <- ok || ended }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.waits != nil && len(s.waits.slots) == 1 })
	cancel()
	if <-res {
		t.Error("a request whose context ended was admitted")
	}
	if waiting.calls.Load() != 1 {
		t.Errorf("Done asked %d times while waiting, want 1", waiting.calls.Load())
	}
	s.Release()
	if ok, _ := s.AcquireFor(free); !ok {
		t.Error("the slot given up was not free again")
	}
}
