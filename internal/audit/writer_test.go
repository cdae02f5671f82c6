package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mcpgate/mcpgate/internal/store"
)

func TestConcurrentRecordsAllWritten(t *testing.T) {
	s := openStore(t)
	var depths []int
	var mu sync.Mutex
	w := newWriter(t, s, Options{OnDepth: func(n int) { mu.Lock(); depths = append(depths, n); mu.Unlock() }})
	const goroutines, per = 8, 125
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				w.Record(call(g*per + i))
			}
		})
	}
	wg.Wait()
	if err := w.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got := listAll(t, s)
	if len(got) != goroutines*per {
		t.Fatalf("%d rows, want %d", len(got), goroutines*per)
	}
	slices.SortFunc(got, func(a, b store.ToolCall) int { return int(a.RequestBytes - b.RequestBytes) })
	var want []store.ToolCall
	for i := range goroutines * per {
		want = append(want, call(i))
	}
	if diff := cmp.Diff(got, want, cmpopts.IgnoreFields(store.ToolCall{}, "ID")); diff != "" {
		t.Errorf("rows (-got +want):\n%s", diff)
	}
	if w.Dropped() != 0 {
		t.Errorf("Dropped = %d, want 0", w.Dropped())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(depths) == 0 || depths[len(depths)-1] != 0 {
		t.Errorf("queue depths reported %v, want ending at 0", depths)
	}
}

// blockingLog is a store whose AppendToolCalls waits for release (and, if
// honourCtx, for its context) before writing to the real store.
type blockingLog struct {
	store.AuditLog
	release   chan struct{}
	entered   chan struct{}
	once      sync.Once
	honourCtx bool
}

func newBlockingLog(s store.AuditLog, honourCtx bool) *blockingLog {
	return &blockingLog{AuditLog: s, release: make(chan struct{}), entered: make(chan struct{}), honourCtx: honourCtx}
}

func (b *blockingLog) AppendToolCalls(ctx context.Context, calls []store.ToolCall) error {
	b.once.Do(func() { close(b.entered) })
	if b.honourCtx {
		select {
		case <-b.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	} else {
		<-b.release
	}
	return b.AuditLog.AppendToolCalls(ctx, calls)
}

// recordAll calls Record for each call in its own goroutine and fails the
// test if they do not all return within a generous bound: with a store
// that never returns, a Record that waited would never return at all.
func recordAll(t *testing.T, w *Writer, calls []store.ToolCall) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, c := range calls {
			w.Record(c)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked while the store was stalled")
	}
}

func TestRecordNeverBlocks(t *testing.T) {
	s := openStore(t)
	b := newBlockingLog(s, true)
	var onDrop atomic.Int64
	l := &logs{}
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const queue = 64
	w := newWriter(t, b, Options{
		QueueSize:     queue,
		BatchSize:     16,
		FlushInterval: 5 * time.Millisecond,
		OnDrop:        func(n int) { onDrop.Add(int64(n)) },
		Logger:        slog.New(l),
		now:           func() time.Time { return clock }, // drops all within one log interval
	})

	// The first record is taken by the writer goroutine, which then sits
	// in the stalled store holding it.
	w.Record(call(0))
	<-b.entered

	var calls []store.ToolCall
	for i := 1; i <= 1000; i++ {
		calls = append(calls, call(i))
	}
	start := time.Now()
	recordAll(t, w, calls)
	t.Logf("1000 Records against a stalled store took %v", time.Since(start))

	// 1 in the stalled batch + a full queue were accepted; the rest dropped.
	const accepted = 1 + queue
	if got := w.Dropped(); got != 1001-accepted {
		t.Errorf("Dropped = %d, want %d", got, 1001-accepted)
	}
	if got := onDrop.Load(); got != 1001-accepted {
		t.Errorf("OnDrop total = %d, want %d", got, 1001-accepted)
	}
	// One line at the first drop; the rest wait for the interval.
	if diff := cmp.Diff(l.counts("dropped"), []int64{1}); diff != "" {
		t.Errorf("drop log counts while stalled (-got +want):\n%s", diff)
	}

	close(b.release)
	if err := w.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got := listAll(t, s)
	if len(got) != accepted {
		t.Fatalf("%d rows after release, want the %d accepted", len(got), accepted)
	}
	// What was accepted is the first 65 records, in full.
	slices.SortFunc(got, func(a, b store.ToolCall) int { return int(a.RequestBytes - b.RequestBytes) })
	if diff := cmp.Diff(got, append([]store.ToolCall{call(0)}, calls[:queue]...), cmpopts.IgnoreFields(store.ToolCall{}, "ID")); diff != "" {
		t.Errorf("rows (-got +want):\n%s", diff)
	}
	// Close reported the drops not yet logged.
	if diff := cmp.Diff(l.counts("dropped"), []int64{1, 1001 - accepted - 1}); diff != "" {
		t.Errorf("drop log counts after Close (-got +want):\n%s", diff)
	}
}

func TestCloseExpiredContext(t *testing.T) {
	for _, honour := range []bool{true, false} {
		t.Run(fmt.Sprintf("storeHonoursCtx=%v", honour), func(t *testing.T) {
			s := openStore(t)
			b := newBlockingLog(s, honour)
			w := newWriter(t, b, Options{BatchSize: 4, FlushInterval: 5 * time.Millisecond})
			for i := range 10 {
				w.Record(call(i))
			}
			<-b.entered

			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			start := time.Now()
			err := w.Close(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Close(expired) = %v, want context.Canceled", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("Close(expired) took %v", d)
			}

			// Records after Close are dropped. The queued records Close
			// abandoned may be counted in the meantime (the writer does
			// that on its own goroutine), so this asks for at least one
			// more; the totals below are exact.
			before := w.Dropped()
			w.Record(call(99))
			if w.Dropped() < before+1 {
				t.Errorf("Record after Close: Dropped %d -> %d, want at least +1", before, w.Dropped())
			}

			close(b.release)
			err = w.Close(context.Background())
			if err == nil || !strings.Contains(err.Error(), "not written") {
				t.Errorf("second Close = %v, want the count of abandoned records", err)
			}
			checkNoWriterGoroutine(t)
			// Abandoned records count as dropped; nothing is both.
			if n := int64(len(listAll(t, s))); n+w.Dropped() != 11 {
				t.Errorf("%d written + %d dropped, want 11 in all", n, w.Dropped())
			}
		})
	}
}

func TestStoreErrors(t *testing.T) {
	secretish := store.ToolCall{
		KeyAlias: "alias-4f9e2c", User: "user-8d1a", Team: "team-77c3",
		Server: "github", Tool: "search", Outcome: "ok", SessionIDPrefix: "ab12cd34",
	}
	for _, tt := range []struct {
		name     string
		failures int
		written  int
		dropped  int64
	}{
		{"transient", 1, 3, 0},
		// A store that fails for a while (a full disk) loses nothing: the
		// batch is retried, backing off, until it is taken.
		{"repeated", 6, 3, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				attempts, written := 0, 0
				f := &fakeLog{appendCalls: func(_ context.Context, calls []store.ToolCall) error {
					mu.Lock()
					defer mu.Unlock()
					attempts++
					if attempts <= tt.failures {
						return errors.New("disk I/O error")
					}
					written += len(calls)
					return nil
				}}
				l := &logs{}
				var onDrop atomic.Int64
				w := newWriter(t, f, Options{BatchSize: 3, FlushInterval: time.Millisecond, Logger: slog.New(l), OnDrop: func(n int) { onDrop.Add(int64(n)) }})
				for range 3 {
					w.Record(secretish)
				}
				// Wait for the batch to be written or given up on before
				// Close, so the retry happens in normal running (the clock is
				// synctest's: the backoff takes no time).
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					mu.Lock()
					settled := written+int(w.Dropped()) == 3
					mu.Unlock()
					if settled {
						break
					}
				}
				if err := w.Close(t.Context()); err != nil {
					t.Errorf("Close = %v", err)
				}
				mu.Lock()
				defer mu.Unlock()
				if written != tt.written || w.Dropped() != tt.dropped || onDrop.Load() != tt.dropped {
					t.Errorf("written %d, Dropped %d, OnDrop %d; want %d, %d, %d", written, w.Dropped(), onDrop.Load(), tt.written, tt.dropped, tt.dropped)
				}
				if attempts != tt.failures+1 {
					t.Errorf("%d store attempts, want %d (a retry after each failure)", attempts, tt.failures+1)
				}
				text := l.text()
				if !strings.Contains(text, "disk I/O error") || !strings.Contains(text, "github") {
					t.Errorf("log lacks the error or the server:\n%s", text)
				}
				for _, s := range []string{secretish.KeyAlias, secretish.User, secretish.Team, secretish.SessionIDPrefix} {
					if strings.Contains(text, s) {
						t.Errorf("log holds record contents %q:\n%s", s, text)
					}
				}
			})
		})
	}
}

// TestStoreFailsUntilClose: while the store keeps failing, the refused
// batch is retried, the pause doubling from FlushInterval, and it and what
// queues behind it show in the depth gauge; Close with a deadline then
// gives them up, each counted as dropped. The clock is synctest's, so the
// pauses are exact.
func TestStoreFailsUntilClose(t *testing.T) {
	synctest.Test(t, testStoreFailsUntilClose)
}

func testStoreFailsUntilClose(t *testing.T) {
	var attempts atomic.Int64
	var mu sync.Mutex
	var at []time.Time
	f := &fakeLog{appendCalls: func(context.Context, []store.ToolCall) error {
		attempts.Add(1)
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		return errors.New("database or disk is full")
	}}
	var depth, maxDepth atomic.Int64
	w := newWriter(t, f, Options{BatchSize: 4, FlushInterval: time.Millisecond, OnDepth: func(n int) {
		depth.Store(int64(n))
		if int64(n) > maxDepth.Load() {
			maxDepth.Store(int64(n))
		}
	}})
	for i := range 10 {
		w.Record(call(i))
	}
	// The first attempt, then retries after 1, 2 and 4 FlushIntervals.
	synctest.Wait()
	time.Sleep(7*time.Millisecond + time.Millisecond/2)
	if attempts.Load() != 4 {
		t.Fatalf("%d store attempts, want 4 (the first and three retries)", attempts.Load())
	}
	mu.Lock()
	var pauses []time.Duration
	for i := 1; i < len(at); i++ {
		pauses = append(pauses, at[i].Sub(at[i-1]))
	}
	mu.Unlock()
	if diff := cmp.Diff(pauses, []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}); diff != "" {
		t.Errorf("pauses between store attempts (-got +want):\n%s", diff)
	}
	if got := maxDepth.Load(); got != 10 {
		t.Errorf("max depth %d while the store fails, want 10 (the refused batch and the queue behind it)", got)
	}
	if w.Dropped() != 0 {
		t.Errorf("Dropped %d while retrying, want 0", w.Dropped())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want the deadline", err)
	}
	if err := w.Close(context.Background()); err == nil || !strings.Contains(err.Error(), "not written") {
		t.Errorf("second Close = %v, want the count of records not written", err)
	}
	if w.Dropped() != 10 {
		t.Errorf("Dropped %d after Close, want 10", w.Dropped())
	}
	checkNoWriterGoroutine(t)
}

// TestBatching: full batches are written at once, the rest at Close, and
// a partial batch when FlushInterval has passed, not before. The clock is
// synctest's, so "at once" and "when the interval passed" are exact.
func TestBatching(t *testing.T) {
	synctest.Test(t, testBatching)
}

func testBatching(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	f := &fakeLog{appendCalls: func(_ context.Context, calls []store.ToolCall) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(calls))
		return nil
	}}
	// check lets the writer run until it waits, then compares the batches
	// written so far; no time passes.
	check := func(when string, want []int) {
		t.Helper()
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(sizes, want) {
			t.Errorf("%s: batches %v, want %v", when, sizes, want)
		}
	}

	// Full batches are written without waiting for the interval.
	w := newWriter(t, f, Options{BatchSize: 10, FlushInterval: time.Hour})
	for i := range 25 {
		w.Record(call(i))
	}
	check("at once", []int{10, 10})
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	check("after Close", []int{10, 10, 5}) // the rest at Close

	// A partial batch goes out when the interval passes, without Close.
	mu.Lock()
	sizes = nil
	mu.Unlock()
	const interval = 20 * time.Millisecond
	w = newWriter(t, f, Options{BatchSize: 1000, FlushInterval: interval})
	for i := range 3 {
		w.Record(call(i))
	}
	time.Sleep(interval - time.Millisecond)
	check("before the interval", nil)
	time.Sleep(time.Millisecond)
	check("when the interval passed", []int{3})
}

func TestRecordValidatesAndStamps(t *testing.T) {
	s := openStore(t)
	now := time.Date(2026, 4, 1, 9, 30, 0, 123e6, time.UTC)
	l := &logs{}
	w := newWriter(t, s, Options{Logger: slog.New(l), now: func() time.Time { return now }})
	w.Record(store.ToolCall{Server: "github", Tool: "search", Outcome: "ok"}) // stamped
	w.Record(store.ToolCall{Server: "github", Outcome: "ok"})                 // no tool: dropped alone
	w.Record(store.ToolCall{Server: "github", Tool: "get", Outcome: "ok", SessionIDPrefix: "full-session-id-not-a-prefix"})
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := listAll(t, s)
	if len(got) != 1 || !got[0].Time.Equal(now) || got[0].Tool != "search" {
		t.Errorf("rows = %+v; want the valid record, stamped %v", got, now)
	}
	if w.Dropped() != 2 {
		t.Errorf("Dropped = %d, want 2", w.Dropped())
	}
	if text := l.text(); strings.Contains(text, "full-session-id") {
		t.Errorf("log holds record contents:\n%s", text)
	}
	if diff := cmp.Diff(l.counts("invalid"), []int64{1, 1}); diff != "" {
		t.Errorf("invalid-record log counts (-got +want):\n%s", diff)
	}
}

func TestLimiter(t *testing.T) {
	var l limiter
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at    time.Duration
		add   int64
		n     int64
		logIt bool
	}
	for i, s := range []step{
		{0, 1, 1, true},            // the first drop is logged at once
		{time.Second, 5, 0, false}, // then held
		{9 * time.Second, 1, 0, false},
		{10 * time.Second, 2, 8, true}, // the interval passed: everything since
		{11 * time.Second, 1, 0, false},
		{25 * time.Second, 0, 1, true}, // flush on a tick reports leftovers
		{26 * time.Second, 0, 0, false},
	} {
		var n int64
		var ok bool
		if s.add > 0 {
			n, ok = l.add(s.add, t0.Add(s.at))
		} else {
			n, ok = l.flush(t0.Add(s.at), false)
		}
		if n != s.n || ok != s.logIt {
			t.Errorf("step %d: (%d, %v), want (%d, %v)", i, n, ok, s.n, s.logIt)
		}
	}
	if _, ok := l.flush(t0, true); ok {
		t.Error("forced flush with nothing pending logged")
	}
}

func TestNilWriter(t *testing.T) {
	var w *Writer
	w.Record(call(1))
	if err := w.Close(t.Context()); err != nil || w.Dropped() != 0 {
		t.Errorf("nil Writer: Close %v, Dropped %d", err, w.Dropped())
	}
}

// Arguments and results are never recorded: the record type has no field
// that could hold them.
func TestToolCallHasNoArgumentFields(t *testing.T) {
	forbidden := []string{"arg", "param", "input", "payload", "body", "result", "content"}
	typ := reflect.TypeFor[store.ToolCall]()
	for f := range typ.Fields() {
		name := strings.ToLower(f.Name)
		for _, bad := range forbidden {
			if strings.Contains(name, bad) {
				t.Errorf("store.ToolCall.%s looks like it could hold tool arguments or results", f.Name)
			}
		}
		switch f.Type.Kind() {
		case reflect.String, reflect.Int64, reflect.Float64: // a number holds no payload
		case reflect.Struct:
			if f.Type != reflect.TypeFor[time.Time]() {
				t.Errorf("store.ToolCall.%s: unexpected type %v", f.Name, f.Type)
			}
		default: // maps, slices, json.RawMessage, any: room for a payload
			t.Errorf("store.ToolCall.%s: type %v could carry a payload", f.Name, f.Type)
		}
	}
	for _, name := range []string{"Arguments", "Args", "Params", "Result"} {
		if _, ok := typ.FieldByName(name); ok {
			t.Errorf("store.ToolCall has a %s field", name)
		}
	}
}

// BenchmarkRecord measures the hot path. Against SQLite most records are
// dropped (the disk cannot keep up with a loop doing nothing else), so that
// case measures Record's drop path; dropped/op says how much.
func BenchmarkRecord(b *testing.B) {
	discard := &fakeLog{appendCalls: func(context.Context, []store.ToolCall) error { return nil }}
	for _, bb := range []struct {
		name string
		s    func(testing.TB) store.AuditLog
	}{
		{"discard", func(testing.TB) store.AuditLog { return discard }},
		{"sqlite", func(t testing.TB) store.AuditLog { return openStore(t) }},
	} {
		for _, parallel := range []bool{false, true} {
			name := bb.name + "/serial"
			if parallel {
				name = bb.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				w := NewWriter(bb.s(b), Options{})
				c := call(1)
				b.ReportAllocs()
				b.ResetTimer()
				if parallel {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							w.Record(c)
						}
					})
				} else {
					for range b.N {
						w.Record(c)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(w.Dropped())/float64(b.N), "dropped/op")
				w.Close(context.Background())
			})
		}
	}
}
