// Package audit owns the tool-call audit trail (SPEC S16.3): every tool
// call the gateway handles becomes one store.ToolCall row (time, caller's
// key alias, user and team, server, tool, outcome and fault class, latency,
// request and response bytes), written durably through the store.
//
// The flow:
//
//	gateway --Record--> bounded queue --one goroutine--> AppendToolCalls (one transaction per batch)
//	               \--> one bounded queue per exporter (audit.export) --its goroutine--> JSONL file / webhook
//
// Record never waits on the disk: it hands the record to a bounded queue
// and returns; when the queue is full the record is dropped and counted.
// RecordDurable (audit.durable) waits for its record's commit instead: a
// waiting record makes the batch go at once, with whatever else is
// queued, so concurrent calls share one transaction, and that batch is
// committed to stable storage (store.SyncAuditLog: survives a power
// loss); the other batches are committed as the store does by default
// (SQLite: they survive a crash of the process, and a power loss from the
// next checkpoint on).
// A single goroutine drains the queue in batches, written when BatchSize
// records are waiting or FlushInterval has passed; a batch the store
// refuses is retried (backing off) until it is taken, the queue absorbing
// what arrives meanwhile; Close flushes what is queued.
//
// The store gets what store.ToolCall holds and nothing else: that type has
// no field for tool arguments or results (only exporters may get redacted
// arguments, see export.go), and this package must never log
// record contents beyond server and tool names (a key alias identifies a
// caller; the store, not the log, is where it belongs). It does not decide
// what a call's outcome was (the gateway does) nor how records are stored
// (the store does).
package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Defaults for the zero Options fields.
//
// DefaultBatchSize is 1024 records, not fewer: a transaction costs more
// than its rows (each commit writes again the partly filled last pages of
// the table and its three indexes into the WAL, and wakes the writer), and
// at a few thousand calls a second the batches are full. From 256 to 1024,
// SQLite's cost per record fell 15% (BenchmarkAuditBatch in
// internal/store/sqlite) and the gateway's CPU per call at c=64 by about
// 2 µs (docs/benchmarks.md, issue 25), for about 0.5 MB more queue and
// batch at the peak. A record still waits at most DefaultFlushInterval.
const (
	DefaultQueueSize     = 10000
	DefaultBatchSize     = 1024
	DefaultFlushInterval = 200 * time.Millisecond
)

// dropLogInterval bounds how often dropped records, and a store that
// keeps failing, are logged: under overload every call would drop, and one
// log line each would add to it.
const dropLogInterval = 10 * time.Second

// maxRetryInterval caps the wait between two attempts to write a batch the
// store refused.
const maxRetryInterval = 5 * time.Second

// Log attribute keys.
const (
	logCount     = "count"
	logTotal     = "total"
	logRecords   = "records"
	logServers   = "servers"
	logServer    = "server"
	logTool      = "tool"
	logErr       = "err"
	logAttempts  = "attempts"
	logQueued    = "queued"
	logFailedFor = "failed_for"
)

// Options configures a Writer. The zero value of each field means its
// documented default.
type Options struct {
	// QueueSize is how many records may wait to be written
	// (DefaultQueueSize). It absorbs a slow or stalled disk: a record
	// arriving when it is full is dropped.
	QueueSize int
	// BatchSize is the most records written in one transaction
	// (DefaultBatchSize).
	BatchSize int
	// FlushInterval is the longest a record waits for its batch to fill
	// (DefaultFlushInterval).
	FlushInterval time.Duration
	// Logger receives store errors and drop counts; nil discards.
	Logger *slog.Logger
	// OnDepth, when set, is called with the number of records waiting to
	// be written (queued, plus a batch the store refused), from the writer
	// goroutine after each batch, at least every FlushInterval while the
	// store responds, and before each retry while it fails (for a gauge).
	OnDepth func(n int)
	// OnDrop, when set, is called with the number of records just dropped
	// (for a counter). It may be called from Record, so it must be cheap
	// and must not block.
	OnDrop func(n int)
	// Exporters also get every valid record (audit.export), each on its
	// own queue; Close closes them after the store's flush. Only they see
	// a record's Arguments.
	Exporters []*Exporter

	now func() time.Time // tests; nil: time.Now
}

// Writer records tool calls to a store.AuditLog in the background. Record
// and Close are safe for concurrent use. A nil *Writer records nothing.
type Writer struct {
	s     store.AuditLog
	opts  Options
	log   *slog.Logger
	queue *recordQueue

	// mu orders Record's send against Close: Record sends under the read
	// lock and Close sets closed under the write lock, so once Close holds
	// it no record can enter the queue, and the drain that follows sees
	// every accepted record.
	mu     sync.RWMutex
	closed bool

	stop      chan struct{} // closed by the first Close: drain and exit
	closeOnce sync.Once
	ctx       context.Context // of every store call; cancelled by abort
	abort     context.CancelFunc
	done      chan struct{} // closed when run returns
	err       error         // what run left unwritten; read after done

	dropped atomic.Int64 // every record dropped, for Dropped
	// droppedAtClose is dropped when Close was first called: shutdown
	// reports the records dropped since as not written.
	droppedAtClose atomic.Int64
	full           limiter // queue full or closed
	invalid        limiter // failed store.ToolCall.Validate
}

// NewWriter starts a Writer that writes to s. Close must be called to
// flush and stop it.
func NewWriter(s store.AuditLog, opts Options) *Writer {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{
		s:     s,
		opts:  opts,
		log:   log,
		queue: newRecordQueue(opts.QueueSize, opts.BatchSize),
		stop:  make(chan struct{}),
		ctx:   ctx,
		abort: cancel,
		done:  make(chan struct{}),
	}
	go w.run()
	return w
}

// Record queues c to be written and returns at once. A zero c.Time is set
// to now, so it is the time of the call rather than of the write. The
// record is dropped and counted, never waited for, when the queue is full,
// when the Writer is closed, or when c is invalid (store.ToolCall.Validate;
// one bad record must not sink the batch it would join).
func (w *Writer) Record(c store.ToolCall) { w.RecordWithArguments(c, nil) }

// RecordWithArguments is Record, and gives the exporters (only them, never
// the store) the call's arguments, which the caller has redacted
// (RedactArguments); nil: none.
func (w *Writer) RecordWithArguments(c store.ToolCall, args json.RawMessage) {
	if w == nil {
		return
	}
	w.recordEntry(c, Entry{Arguments: args})
}

// recordEntry is Record, with e's arguments for the exporters (e's
// ToolCall is c).
func (w *Writer) recordEntry(c store.ToolCall, e Entry) {
	if err := c.Validate(); err != nil {
		w.drop(1)
		if n, ok := w.invalid.add(1, w.opts.now()); ok {
			w.log.Error("audit: invalid tool-call records dropped", logCount, n, logServer, c.Server, logTool, c.Tool, logErr, err)
		}
		return
	}
	if c.Time.IsZero() {
		c.Time = w.opts.now()
	}
	e.ToolCall = c
	w.export(e)
	if !w.enqueue(item{c: c}) {
		w.dropFull()
	}
}

// RecordWithRawArguments is RecordWithArguments for arguments not yet
// redacted: raw is the call's arguments as received, redacted by patterns
// (RedactArguments) on the exporters' goroutines, so the call's path pays
// a copy of raw instead of a JSON decode and encode. raw is copied (the
// caller may reuse its buffer), and only when there are exporters; no
// Sink, log or store ever gets it unredacted.
func (w *Writer) RecordWithRawArguments(c store.ToolCall, raw json.RawMessage, patterns []string) {
	if w == nil {
		return
	}
	w.recordEntry(c, w.rawEntry(raw, patterns))
}

// RecordDurableWithRawArguments is RecordDurable, with the arguments of
// RecordWithRawArguments.
func (w *Writer) RecordDurableWithRawArguments(ctx context.Context, c store.ToolCall, raw json.RawMessage, patterns []string) error {
	if w == nil {
		return nil
	}
	return w.recordDurableEntry(ctx, c, w.rawEntry(raw, patterns))
}

// rawEntry is an Entry whose arguments the exporters redact; nil
// arguments when there is no exporter to see them.
func (w *Writer) rawEntry(raw json.RawMessage, patterns []string) Entry {
	if len(w.opts.Exporters) == 0 || len(raw) == 0 {
		return Entry{}
	}
	return Entry{raw: &rawArguments{raw: bytes.Clone(raw), patterns: patterns}}
}

// export hands c to every exporter, without waiting. A closed Writer
// exports nothing more (the exporters are being closed).
func (w *Writer) export(c Entry) {
	if len(w.opts.Exporters) == 0 {
		return
	}
	w.mu.RLock()
	closed := w.closed
	w.mu.RUnlock()
	if closed {
		return
	}
	for _, e := range w.opts.Exporters {
		e.Export(c)
	}
}

// item is one queued record; done, for RecordDurable, hears whether its
// batch was committed.
type item struct {
	c    store.ToolCall
	done chan error
}

// enqueue hands it to the writer goroutine without waiting; false when
// the queue is full or the Writer closed.
func (w *Writer) enqueue(it item) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return false
	}
	return w.queue.push(it)
}

func (w *Writer) dropFull() {
	w.drop(1)
	if n, ok := w.full.add(1, w.opts.now()); ok {
		w.logDropped(n)
	}
}

// ErrNotWritten: a durable record was dropped (queue full, Writer closed,
// invalid) or abandoned at shutdown; it is counted in Dropped.
var ErrNotWritten = errors.New("audit record not written")

// RecordDurable is Record, returning once c is committed to the store:
// the writer flushes at once instead of waiting FlushInterval, so the
// records of concurrent calls share one transaction (group commit). It
// returns ErrNotWritten when the record was dropped, and ctx's error when
// ctx ends first; the record then stays queued and is written later, as
// with Record (a store that fails is retried, see write).
func (w *Writer) RecordDurable(ctx context.Context, c store.ToolCall) error {
	return w.RecordDurableWithArguments(ctx, c, nil)
}

// RecordDurableWithArguments is RecordDurable, with the arguments of
// RecordWithArguments. The exporters get the record at once; the wait is
// the store's commit only.
func (w *Writer) RecordDurableWithArguments(ctx context.Context, c store.ToolCall, args json.RawMessage) error {
	if w == nil {
		return nil
	}
	return w.recordDurableEntry(ctx, c, Entry{Arguments: args})
}

func (w *Writer) recordDurableEntry(ctx context.Context, c store.ToolCall, e Entry) error {
	if err := c.Validate(); err != nil {
		w.Record(c) // counted and logged there
		return fmt.Errorf("%w: %v", ErrNotWritten, err)
	}
	if c.Time.IsZero() {
		c.Time = w.opts.now()
	}
	e.ToolCall = c
	w.export(e)
	done := make(chan error, 1)
	if !w.enqueue(item{c: c, done: done}) {
		w.dropFull()
		return ErrNotWritten
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Dropped returns how many records were dropped since the Writer started:
// queue full, closed, invalid, or lost to store errors.
func (w *Writer) Dropped() int64 {
	if w == nil {
		return 0
	}
	return w.dropped.Load()
}

// Close stops accepting records and waits until everything queued has been
// written, or until ctx is done. In the latter case it abandons the
// records not yet written (they count as dropped), cancels the store call
// in progress and returns ctx's error at once, without waiting for the
// store to give up; a later Close waits for that. Close may be called more
// than once; a call after the writer goroutine finished returns nil, or an
// error saying how many records shutdown left unwritten.
func (w *Writer) Close(ctx context.Context) error {
	if w == nil {
		return nil
	}
	err := w.closeStore(ctx)
	// The exporters last: they were fed until closed was set, and each
	// gets what is left of ctx to send its queue.
	for _, e := range w.opts.Exporters {
		err = errors.Join(err, e.Close(ctx))
	}
	return err
}

func (w *Writer) closeStore(ctx context.Context) error {
	w.closeOnce.Do(func() {
		// What is dropped from now on was not written at shutdown,
		// whether it goes in shutdown itself or in a write that was
		// retrying when Close came and that its deadline ended.
		w.droppedAtClose.Store(w.dropped.Load())
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.stop)
	})
	// Done wins over an expired ctx when both are ready.
	select {
	case <-w.done:
		return w.err
	default:
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		w.abort()
		return fmt.Errorf("close audit writer: %w", ctx.Err())
	}
}

func (w *Writer) run() {
	defer close(w.done)
	defer w.abort() // release the context's resources
	b := &pending{calls: make([]store.ToolCall, 0, w.opts.BatchSize)}
	tick := time.NewTicker(w.opts.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-w.queue.ready:
			// A batch is queued, or a durable record waits: write
			// now, a batch at a time (the records queued meanwhile
			// share the commit); a partial batch without a waiter
			// stays queued for the tick.
			for w.queue.popReady(b, w.opts.BatchSize) {
				w.flush(b)
				w.depth()
			}
		case <-tick.C:
			// What waited for the tick (pushes below a batch do not
			// wake the writer), a batch at a time.
			for {
				w.fill(b)
				if len(b.calls) == 0 {
					break
				}
				full := len(b.calls) >= w.opts.BatchSize
				w.flush(b)
				if !full {
					break
				}
			}
			w.queue.trim()
			w.depth()
			if n, ok := w.full.flush(w.opts.now(), false); ok {
				w.logDropped(n)
			}
		case <-w.stop:
			w.shutdown(b)
			return
		}
	}
}

// pending is the batch being built, and the durable records' waiters.
type pending struct {
	calls   []store.ToolCall
	waiters []chan error
}

func (b *pending) add(it item) {
	b.calls = append(b.calls, it.c)
	if it.done != nil {
		b.waiters = append(b.waiters, it.done)
	}
}

// flush writes the batch and tells its waiters, then empties it.
func (w *Writer) flush(b *pending) {
	var err error
	// A batch an answer waits for is committed to stable storage, when
	// the store can (store.SyncAuditLog); the others only as durably as
	// the store's default commit.
	if !w.write(b.calls, len(b.waiters) > 0) {
		err = ErrNotWritten
	}
	for _, d := range b.waiters {
		d <- err
	}
	b.calls, b.waiters = b.calls[:0], b.waiters[:0]
}

// shutdown writes batch and everything still queued. Close set closed
// before closing stop, so the queue can only shrink.
func (w *Writer) shutdown(b *pending) {
	before := w.droppedAtClose.Load()
	for {
		w.fill(b)
		if len(b.calls) == 0 {
			break
		}
		w.flush(b)
	}
	w.depth()
	if n, ok := w.full.flush(w.opts.now(), true); ok {
		w.logDropped(n)
	}
	if n, ok := w.invalid.flush(w.opts.now(), true); ok {
		w.log.Error("audit: invalid tool-call records dropped", logCount, n)
	}
	if n := w.dropped.Load() - before; n > 0 {
		w.log.Error("audit: tool-call records not written at shutdown", logCount, n)
		w.err = fmt.Errorf("close audit writer: %d tool-call records not written", n)
	}
}

// fill moves queued records into batch, without waiting, until it is full
// or the queue is empty.
func (w *Writer) fill(b *pending) {
	w.queue.popInto(b, w.opts.BatchSize)
}

// write stores batch. A store error does not cost the batch: it is tried
// again FlushInterval later, then at doubling intervals up to
// maxRetryInterval, until the store takes it, while Record keeps queueing
// (dropping only when the queue is full). So a disk that filled up, or a
// database locked for a while, loses no record that fits in the queue,
// and the queue depth shows the backlog. Only an abort (Close's deadline)
// gives the batch up: it is dropped and counted.
func (w *Writer) write(batch []store.ToolCall, sync bool) bool {
	appendCalls := w.s.AppendToolCalls
	if ss, ok := w.s.(store.SyncAuditLog); ok && sync {
		appendCalls = ss.AppendToolCallsSync
	}
	wait := w.opts.FlushInterval
	var failedAt time.Time
	var lines limiter // the first failure is logged, then one line per dropLogInterval
	for attempt := 1; ; attempt++ {
		if w.ctx.Err() != nil {
			w.drop(len(batch))
			return false
		}
		err := appendCalls(w.ctx, batch)
		if err == nil {
			if attempt > 1 {
				w.log.Info("audit: the store takes tool calls again", logRecords, len(batch), logAttempts, attempt,
					logFailedFor, w.opts.now().Sub(failedAt).Round(time.Millisecond).String())
			}
			return true
		}
		if w.ctx.Err() != nil {
			err = errors.Join(err, fmt.Errorf("shutdown deadline passed: %w", w.ctx.Err()))
			w.log.Error("audit: tool-call records dropped after a store error", logRecords, len(batch), logServers, servers(batch), logErr, err)
			w.drop(len(batch))
			return false
		}
		now := w.opts.now()
		if attempt == 1 {
			failedAt = now
		}
		if _, due := lines.add(1, now); due {
			if attempt == 1 {
				w.log.Warn("audit: writing tool calls failed; retrying until the store takes them", logRecords, len(batch), logServers, servers(batch), logErr, err)
			} else {
				w.log.Warn("audit: the store still fails; retrying", logRecords, len(batch), logQueued, w.queue.len(), logAttempts, attempt, logErr, err)
			}
		}
		w.depthWith(len(batch))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-w.ctx.Done():
		}
		t.Stop()
		wait = min(wait*2, maxRetryInterval)
	}
}

func (w *Writer) drop(n int) {
	w.dropped.Add(int64(n))
	if w.opts.OnDrop != nil {
		w.opts.OnDrop(n)
	}
}

func (w *Writer) depth() { w.depthWith(0) }

// depthWith reports the queue depth plus pending records taken from the
// queue but not yet written (a batch being retried).
func (w *Writer) depthWith(pending int) {
	if w.opts.OnDepth != nil {
		w.opts.OnDepth(w.queue.len() + pending)
	}
}

func (w *Writer) logDropped(n int64) {
	w.log.Warn("audit: queue full or writer closed; tool-call records dropped", logCount, n, logTotal, w.dropped.Load())
}

// servers returns the distinct server names in batch: what an operator
// needs to know whose calls went unaudited, and nothing more.
func servers(batch []store.ToolCall) []string {
	var out []string
	for i := range batch {
		if !slices.Contains(out, batch[i].Server) {
			out = append(out, batch[i].Server)
		}
	}
	slices.Sort(out)
	return out
}

// limiter counts events and says when to log them: at the first event, and
// then at most once per dropLogInterval, with the count since the last
// line. Lock-free, for the Record path.
type limiter struct {
	pending atomic.Int64
	last    atomic.Int64 // unix nanoseconds of the last line; 0: never
}

// add counts n events and reports whether a line is due now, with the
// count it should report.
func (l *limiter) add(n int64, now time.Time) (int64, bool) {
	l.pending.Add(n)
	return l.flush(now, false)
}

// flush reports the pending count if a line is due now (or force), and
// there is something to report.
func (l *limiter) flush(now time.Time, force bool) (int64, bool) {
	if l.pending.Load() == 0 {
		return 0, false
	}
	last, t := l.last.Load(), now.UnixNano()
	if !force && last != 0 && t-last < int64(dropLogInterval) {
		return 0, false
	}
	if !l.last.CompareAndSwap(last, t) {
		return 0, false // another goroutine is logging
	}
	n := l.pending.Swap(0)
	return n, n > 0
}
