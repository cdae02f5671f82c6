package audit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// countingLog counts the transactions a store is asked for.
type countingLog struct {
	store.AuditLog
	txs  atomic.Int32
	fail atomic.Bool
	// hold, when set, makes the next transaction wait until it is
	// closed (a slow commit, for records to queue up behind).
	hold atomic.Pointer[chan struct{}]
}

func (c *countingLog) AppendToolCalls(ctx context.Context, calls []store.ToolCall) error {
	if c.fail.Load() {
		return errors.New("disk full")
	}
	if h := c.hold.Swap(nil); h != nil {
		<-*h
	}
	c.txs.Add(1)
	return c.AuditLog.AppendToolCalls(ctx, calls)
}

// A durable record is in the store when RecordDurable returns, without
// waiting for the flush interval; concurrent ones share transactions.
func TestRecordDurable(t *testing.T) {
	s := openStore(t)
	cl := &countingLog{AuditLog: s}
	w := newWriter(t, cl, Options{FlushInterval: time.Hour})
	start := time.Now()
	if err := w.RecordDurable(t.Context(), call(1)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("RecordDurable took %s: it waited for the flush interval", d)
	}
	if got := listAll(t, s); len(got) != 1 || got[0].RequestBytes != 1 {
		t.Fatalf("after RecordDurable the store holds %+v", got)
	}
	// A plain record queued before a durable one goes in the same commit.
	w.Record(call(2))
	if err := w.RecordDurable(t.Context(), call(3)); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, s); len(got) != 3 {
		t.Fatalf("the plain record queued before a durable one: %d records", len(got))
	}

	// While one commit is slow, the durable records that arrive queue
	// behind it and then share the next one (or two, when the writer
	// took a first few before the rest arrived).
	const n = 64
	before := cl.txs.Load()
	release := make(chan struct{})
	cl.hold.Store(&release)
	var wg sync.WaitGroup
	errs := make([]error, n)
	wg.Go(func() { errs[0] = w.RecordDurable(t.Context(), call(100)) })
	// The first commit has started, and waits.
	waitFor(t, "the first durable record's commit", func() bool { return cl.hold.Load() == nil })
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = w.RecordDurable(t.Context(), call(100+i)) })
	}
	if !eventually(func() bool { return w.queue.len() >= n-1 }) {
		t.Fatalf("%d of %d durable records queued behind the slow commit", w.queue.len(), n-1)
	}
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if got := listAll(t, s); len(got) != 3+n {
		t.Fatalf("%d records, want %d", len(got), 3+n)
	}
	if txs := cl.txs.Load() - before; txs > 2 {
		t.Errorf("%d durable records, %d of them queued behind a slow commit, took %d transactions: no group commit", n, n-1, txs)
	} else {
		t.Logf("%d durable records in %d transactions", n, txs)
	}
}

// While the store fails, a durable record's caller gives up with its
// context; the record stays queued and is written once the store takes
// it. A closed writer refuses at once.
func TestRecordDurableStoreDown(t *testing.T) {
	s := openStore(t)
	cl := &countingLog{AuditLog: s}
	cl.fail.Store(true)
	w := newWriter(t, cl, Options{FlushInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := w.RecordDurable(ctx, call(7)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("store down: %v, want the context's deadline", err)
	}
	cl.fail.Store(false)
	waitFor(t, "the record written once the store recovered", func() bool { return len(listAll(t, s)) == 1 })
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := w.RecordDurable(t.Context(), call(8)); !errors.Is(err, ErrNotWritten) {
		t.Errorf("after Close: %v, want ErrNotWritten", err)
	}
	if err := w.RecordDurable(t.Context(), store.ToolCall{}); !errors.Is(err, ErrNotWritten) {
		t.Errorf("an invalid record: %v, want ErrNotWritten", err)
	}
}
