package audit

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// popAll drains q in batches of batch records, returning their DurationMs
// (the tests' sequence numbers).
func popAll(q *recordQueue, batch int) []int64 {
	var out []int64
	for {
		b := &pending{}
		q.popInto(b, batch)
		if len(b.calls) == 0 {
			return out
		}
		for _, c := range b.calls {
			out = append(out, c.DurationMs)
		}
	}
}

func seq(i int) item { c := call(0); c.DurationMs = int64(i); return item{c: c} }

// The ring keeps FIFO order while it wraps and grows, refuses past its
// bound, clears popped slots, and shrinks a grown ring only after a quiet
// interval.
func TestRecordQueueOrderBoundAndShrink(t *testing.T) {
	const bound = 3000
	q := newRecordQueue(bound, 1)
	if q.capacity() != 0 {
		t.Fatalf("new queue holds a ring of %d", q.capacity())
	}
	next, want := 0, int64(0)
	// Interleave pushes and partial pops so head moves and the ring wraps
	// before each growth.
	for round := 0; round < 40; round++ {
		for range 70 {
			if !q.push(seq(next)) {
				t.Fatalf("push %d refused below the bound (len %d)", next, q.len())
			}
			next++
		}
		b := &pending{}
		q.popInto(b, 40)
		for _, c := range b.calls {
			if c.DurationMs != want {
				t.Fatalf("popped %d, want %d: order lost", c.DurationMs, want)
			}
			want++
		}
	}
	for q.len() < bound {
		q.push(seq(next))
		next++
	}
	if q.push(seq(next)) {
		t.Fatalf("push accepted past the bound %d", bound)
	}
	if c := q.capacity(); c != bound {
		t.Fatalf("full ring of capacity %d, want the bound %d", c, bound)
	}
	// Popped slots hold nothing: the ring must not keep records alive.
	b := &pending{}
	q.popInto(b, 10)
	q.mu.Lock()
	for i := range 10 {
		slot := (q.head - 1 - i + len(q.buf)) % len(q.buf)
		if q.buf[slot].c.Server != "" {
			q.mu.Unlock()
			t.Fatalf("popped slot %d still holds a record", slot)
		}
	}
	q.mu.Unlock()
	for _, c := range b.calls {
		if c.DurationMs != want {
			t.Fatalf("popped %d, want %d", c.DurationMs, want)
		}
		want++
	}
	for _, got := range popAll(q, 256) {
		if got != want {
			t.Fatalf("popped %d, want %d", got, want)
		}
		want++
	}
	if want != int64(next) {
		t.Fatalf("popped up to %d, pushed %d", want, next)
	}
	// Drained, the grown ring stays until a trim finds a quiet interval:
	// the first trim sees the interval's peak (the bound), the second none.
	if c := q.capacity(); c != bound {
		t.Fatalf("drained ring of %d, want %d kept until trim", c, bound)
	}
	q.trim()
	if c := q.capacity(); c != bound {
		t.Fatalf("trim after a full interval shrank the ring to %d", c)
	}
	q.push(seq(1))
	q.trim()
	if c := q.capacity(); c != queueMinCap {
		t.Fatalf("trim after a quiet interval left a ring of %d, want %d", c, queueMinCap)
	}
	if got := popAll(q, 256); len(got) != 1 || got[0] != 1 {
		t.Fatalf("after trim popped %v, want [1]", got)
	}
	// A small ring stays: the steady state does not reallocate.
	q.trim()
	q.trim()
	if c := q.capacity(); c != queueMinCap {
		t.Fatalf("small ring capacity %d after trims, want %d kept", c, queueMinCap)
	}
}

// The ring grows by doubling up to a batch and a quarter, not to two
// batches: under load it holds a batch and what comes before the writer
// takes it. A backlog past that doubles again, in order, up to the bound.
func TestRecordQueueRoomForABatch(t *testing.T) {
	const batch, bound = 1024, 10000
	q := newRecordQueue(bound, batch)
	var sizes []int
	next := 0
	push := func(n int) {
		t.Helper()
		for range n {
			if !q.push(seq(next)) {
				t.Fatalf("push %d refused below the bound", next)
			}
			next++
			if c := q.capacity(); len(sizes) == 0 || sizes[len(sizes)-1] != c {
				sizes = append(sizes, c)
			}
		}
	}
	push(batch + 30) // a batch, and the records that came before the writer woke
	want := []int{64, 128, 256, 512, 1024, 1280}
	if !slices.Equal(sizes, want) {
		t.Fatalf("ring sizes %v while a batch filled, want %v", sizes, want)
	}
	push(1280 - q.len() + 1) // a backlog: the writer is behind
	if c := q.capacity(); c != 2560 {
		t.Fatalf("ring of %d past a batch and a quarter, want 2560", c)
	}
	for i, got := range popAll(q, batch) {
		if got != int64(i) {
			t.Fatalf("popped %d at %d: order lost across the growths", got, i)
		}
	}
	// A batch size that is not a power of two, and a tiny one.
	for _, c := range []struct{ wakeAt, room int }{{100, 125}, {1, queueMinCap}, {5000, 6250}} {
		q := newRecordQueue(bound, c.wakeAt)
		if got := q.batchRoom(); got != c.room {
			t.Errorf("batchRoom with batches of %d: %d, want %d", c.wakeAt, got, c.room)
		}
		for range c.room {
			q.push(seq(0))
		}
		if got := q.capacity(); got != c.room {
			t.Errorf("batches of %d: %d records in a ring of %d, want %d", c.wakeAt, c.room, got, c.room)
		}
	}
}

// Many pushers and one popper (the writer's shape): every accepted record
// comes out once, each pusher's in its order, and the wake-up token is
// never lost (the popper waits only on ready).
func TestRecordQueueConcurrent(t *testing.T) {
	const pushers, each, bound = 8, 2000, 500
	q := newRecordQueue(bound, 1)
	var accepted [pushers]int
	var wg sync.WaitGroup
	for p := range pushers {
		wg.Go(func() {
			for i := range each {
				it := seq(p*each + i)
				if q.push(it) {
					accepted[p]++
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	last := make([]int64, pushers)
	for i := range last {
		last[i] = -1
	}
	got := 0
	check := func(vals []int64) {
		for _, v := range vals {
			p := v / each
			if v <= last[p] {
				t.Fatalf("pusher %d: %d after %d", p, v, last[p])
			}
			last[p] = v
			got++
		}
	}
	for running := true; running; {
		select {
		case <-q.ready:
			check(popAll(q, 64))
		case <-done:
			running = false
		}
	}
	check(popAll(q, 64))
	total := 0
	for _, n := range accepted {
		total += n
	}
	if got != total {
		t.Fatalf("popped %d records, %d were accepted", got, total)
	}
	if q.len() != 0 {
		t.Fatalf("%d left", q.len())
	}
}

// A push wakes the writer only when a batch is waiting or a caller waits
// for the record's commit; fewer records wait for the writer's tick.
func TestRecordQueueWakesForABatch(t *testing.T) {
	q := newRecordQueue(100, 4)
	woken := func() bool {
		select {
		case <-q.ready:
			return true
		default:
			return false
		}
	}
	for i := range 3 {
		q.push(seq(i))
	}
	if woken() {
		t.Fatal("three records of a batch of four woke the writer")
	}
	q.push(seq(3))
	if !woken() {
		t.Fatal("a whole batch did not wake the writer")
	}
	popAll(q, 4)
	durable := seq(4)
	durable.done = make(chan error, 1)
	q.push(durable)
	if !woken() {
		t.Fatal("a durable record did not wake the writer")
	}
}

// Records that never fill a batch are written by the tick, within about
// FlushInterval.
func TestRecordsBelowABatchWrittenOnTheTick(t *testing.T) {
	var written atomic.Int64
	l := &fakeLog{appendCalls: func(_ context.Context, calls []store.ToolCall) error {
		written.Add(int64(len(calls)))
		return nil
	}}
	w := newWriter(t, l, Options{FlushInterval: 30 * time.Millisecond, BatchSize: 1000})
	for range 3 {
		w.Record(call(0))
	}
	deadline := time.Now().Add(2 * time.Second)
	for written.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 records written after 2s", written.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
