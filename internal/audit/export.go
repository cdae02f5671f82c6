package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Exporters (audit.export) send the records the Writer takes to somewhere
// besides the store: JSONL files (jsonl.go) or an HTTP webhook
// (webhook.go).
//
//	Writer.Record --Export (non-blocking)--> exporter queue --one goroutine--> Sink.Send (batches)
//
// Each exporter has its own bounded queue and goroutine, fed from Record
// beside the store's queue: a slow or dead endpoint fills only its own
// queue, and what does not fit is dropped and counted for that exporter,
// never waited for. Only exporters see a record's Arguments, redacted
// (RedactArguments) by the gateway or, for RecordWithRawArguments, by the
// exporter's goroutine before its Sink gets them; the store never does.

// Entry is what an exporter gets: the store's record, and for a server
// with audit.arguments the call's redacted arguments.
type Entry struct {
	store.ToolCall
	Arguments json.RawMessage

	// raw, when set, holds the arguments not yet redacted
	// (Writer.RecordWithRawArguments): the exporter redacts them into
	// Arguments, and clears raw, before its Sink sees the entry.
	raw *rawArguments

	// Event, when set, makes the entry an administrative event instead of
	// a tool call (tool integrity's integrity.* events): exported as
	// {v, time, event, actor, target, server, detail}, with ToolCall's
	// Time and Server.
	Event *Event
}

// rawArguments are a call's arguments as the caller sent them, with the
// patterns to redact them by. They are redacted once, by the first
// exporter goroutine to send them, and shared by the others: the decode
// and encode RedactArguments costs is paid off the call's path, once.
type rawArguments struct {
	once     sync.Once
	raw      json.RawMessage // nil once redacted
	patterns []string
	out      json.RawMessage
}

// redacted returns the arguments redacted; nil when they are not JSON.
func (r *rawArguments) redacted() json.RawMessage {
	r.once.Do(func() {
		r.out = RedactArguments(r.raw, r.patterns)
		r.raw = nil // the unredacted bytes are not kept past this
	})
	return r.out
}

// Event is an audit event an exporter sends beside the tool calls.
type Event struct {
	Action string
	Actor  string
	Target string
	Detail json.RawMessage // never secrets, never tool arguments
}

// exportEvent is the exported form of an Event.
type exportEvent struct {
	V      int             `json:"v"`
	Time   time.Time       `json:"time"`
	Event  string          `json:"event"`
	Actor  string          `json:"actor"`
	Target string          `json:"target,omitempty"`
	Server string          `json:"server,omitempty"`
	Detail json.RawMessage `json:"detail,omitempty"`
}

// ExportSchemaVersion is the "v" of every exported record.
const ExportSchemaVersion = 1

// Defaults for the zero ExportOptions fields.
const (
	DefaultExportQueueSize     = 10000
	DefaultExportBatchSize     = 100
	DefaultExportFlushInterval = time.Second
)

// entryServers is servers for a batch of entries.
func entryServers(batch []Entry) []string {
	calls := make([]store.ToolCall, len(batch))
	for i := range batch {
		calls[i].Server = batch[i].Server
	}
	return servers(calls)
}

// Sink delivers batches for an Exporter. Its methods are called from the
// exporter's one goroutine, never concurrently. Send returns once the
// batch is delivered or given up (its own retries, bounded, included); it
// must return soon after ctx ends. Errors must not carry secrets (a
// webhook's URL or headers): the exporter logs them.
type Sink interface {
	Send(ctx context.Context, batch []Entry) error
	// Flush makes what was sent durable (a file's fsync); called every
	// flush interval after something was sent, and before Close.
	Flush() error
	Close() error
}

// ExportOptions configures an Exporter. The zero value of each field means
// its documented default.
type ExportOptions struct {
	// Name identifies the exporter in logs and metrics.
	Name string
	// QueueSize is how many records may wait (DefaultExportQueueSize).
	QueueSize int
	// BatchSize is the most records in one Send (DefaultExportBatchSize).
	BatchSize int
	// FlushInterval is the longest a record waits for its batch to fill
	// (DefaultExportFlushInterval).
	FlushInterval time.Duration
	// Logger receives send failures and drop counts (never record
	// contents beyond server names); nil discards.
	Logger *slog.Logger
	// OnDepth, when set, gets the queue depth after each batch and every
	// FlushInterval (for a gauge).
	OnDepth func(n int)
	// OnDrop, when set, gets the number of records just dropped; it may
	// be called from Export, so it must be cheap and must not block.
	OnDrop func(n int)
	// OnFailure, when set, is called for each batch Send gave up on.
	OnFailure func()
}

// Exporter sends records to a Sink in the background. Export and Close
// are safe for concurrent use.
type Exporter struct {
	sink  Sink
	opts  ExportOptions
	log   *slog.Logger
	queue chan Entry

	mu     sync.RWMutex // orders Export's send against Close (as Writer.mu)
	closed bool

	stop      chan struct{}
	closeOnce sync.Once
	ctx       context.Context
	abort     context.CancelFunc
	done      chan struct{}
	err       error // set by run before done

	dropped   atomic.Int64
	full      limiter
	failed    limiter
	flushFail limiter
}

// NewExporter starts an Exporter sending to sink; Close stops it and
// closes sink.
func NewExporter(sink Sink, opts ExportOptions) *Exporter {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultExportQueueSize
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultExportBatchSize
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultExportFlushInterval
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Exporter{
		sink: sink, opts: opts, log: log.With(logExporter, opts.Name),
		queue: make(chan Entry, opts.QueueSize),
		stop:  make(chan struct{}), ctx: ctx, abort: cancel, done: make(chan struct{}),
	}
	go e.run()
	return e
}

const logExporter = "exporter"

// Name is the exporter's name.
func (e *Exporter) Name() string { return e.opts.Name }

// Export queues c and returns at once; when the queue is full, or the
// exporter closed, c is dropped and counted.
func (e *Exporter) Export(c Entry) {
	e.mu.RLock()
	ok := !e.closed
	if ok {
		select {
		case e.queue <- c:
		default:
			ok = false
		}
	}
	e.mu.RUnlock()
	if !ok {
		e.drop(1)
		if n, due := e.full.add(1, time.Now()); due {
			e.log.Warn("audit: export queue full or exporter closed; records dropped", logCount, n, logTotal, e.dropped.Load())
		}
	}
}

// Dropped returns how many records the exporter dropped.
func (e *Exporter) Dropped() int64 { return e.dropped.Load() }

// Close stops accepting records, sends what is queued and closes the
// sink, or gives up when ctx ends (what is left counts as dropped). It may
// be called more than once.
func (e *Exporter) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		close(e.stop)
	})
	select {
	case <-e.done:
		return e.err
	default:
	}
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		e.abort()
		<-e.done // Send returns soon after ctx ends (Sink's contract)
		return errors.Join(fmt.Errorf("close audit exporter %s: %w", e.opts.Name, ctx.Err()), e.err)
	}
}

func (e *Exporter) run() {
	defer close(e.done)
	defer e.abort()
	batch := make([]Entry, 0, e.opts.BatchSize)
	tick := time.NewTicker(e.opts.FlushInterval)
	defer tick.Stop()
	dirty := false // sent since the last Flush
	for {
		select {
		case c := <-e.queue:
			batch = e.fill(append(batch, c))
			if len(batch) >= e.opts.BatchSize {
				batch = e.send(batch)
				dirty = true
				e.depth()
			}
		case <-tick.C:
			if len(batch) > 0 {
				batch = e.send(batch)
				dirty = true
			}
			if dirty {
				e.flush()
				dirty = false
			}
			e.depth()
			if n, due := e.full.flush(time.Now(), false); due {
				e.log.Warn("audit: export queue full; records dropped", logCount, n, logTotal, e.dropped.Load())
			}
		case <-e.stop:
			before := e.dropped.Load()
			for {
				batch = e.fill(batch)
				if len(batch) == 0 {
					break
				}
				batch = e.send(batch)
			}
			e.flush()
			e.depth()
			if n, due := e.full.flush(time.Now(), true); due {
				e.log.Warn("audit: export queue full or exporter closed; records dropped", logCount, n, logTotal, e.dropped.Load())
			}
			if n := e.dropped.Load() - before; n > 0 {
				e.log.Error("audit: tool-call records not exported at shutdown", logCount, n)
				e.err = fmt.Errorf("close audit exporter %s: %d tool-call records not exported", e.opts.Name, n)
			}
			if err := e.sink.Close(); err != nil {
				e.err = errors.Join(e.err, fmt.Errorf("close audit exporter %s: %w", e.opts.Name, err))
			}
			return
		}
	}
}

// fill moves queued records into batch, without waiting, until it is
// full or the queue is empty.
func (e *Exporter) fill(batch []Entry) []Entry {
	for len(batch) < e.opts.BatchSize {
		select {
		case c := <-e.queue:
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// send hands batch to the sink; a batch it gives up on is dropped and
// counted. It returns batch emptied.
func (e *Exporter) send(batch []Entry) []Entry {
	e.depth() // a slow Send must not hide the backlog behind it
	if e.ctx.Err() != nil {
		// Close's deadline passed: what is left is dropped, not tried
		// (and not counted as a failure of the endpoint).
		e.drop(len(batch))
	} else if err := e.sink.Send(e.ctx, redactBatch(batch)); err != nil {
		e.drop(len(batch))
		if e.opts.OnFailure != nil {
			e.opts.OnFailure()
		}
		if n, due := e.failed.add(1, time.Now()); due {
			e.log.Warn("audit: export failed; records dropped", logCount, n, logRecords, len(batch), logServers, entryServers(batch), logErr, err)
		}
	}
	clear(batch) // the records may hold arguments: don't keep them
	return batch[:0]
}

// redactBatch redacts the raw arguments of batch's entries into their
// Arguments and drops the raw ones, so a Sink only ever sees redacted
// arguments.
func redactBatch(batch []Entry) []Entry {
	for i := range batch {
		if r := batch[i].raw; r != nil {
			batch[i].Arguments, batch[i].raw = r.redacted(), nil
		}
	}
	return batch
}

func (e *Exporter) flush() {
	if err := e.sink.Flush(); err != nil {
		if n, due := e.flushFail.add(1, time.Now()); due {
			e.log.Warn("audit: export flush failed", logCount, n, logErr, err)
		}
	}
}

func (e *Exporter) drop(n int) {
	e.dropped.Add(int64(n))
	if e.opts.OnDrop != nil {
		e.opts.OnDrop(n)
	}
}

func (e *Exporter) depth() {
	if e.opts.OnDepth != nil {
		e.opts.OnDepth(len(e.queue))
	}
}

// exportRecord is the exported form of a store.ToolCall: one JSONL line,
// or one element of a webhook's batch.
type exportRecord struct {
	V               int             `json:"v"`
	Time            time.Time       `json:"time"`
	KeyAlias        string          `json:"key_alias,omitempty"`
	User            string          `json:"user,omitempty"`
	Team            string          `json:"team,omitempty"`
	Server          string          `json:"server"`
	Tool            string          `json:"tool"`
	DurationMs      int64           `json:"duration_ms"`
	Outcome         string          `json:"outcome"`
	ErrorClass      string          `json:"error_class,omitempty"`
	SessionIDPrefix string          `json:"session_id_prefix,omitempty"`
	RequestBytes    int64           `json:"request_bytes"`
	ResponseBytes   int64           `json:"response_bytes"`
	Guardrail       string          `json:"guardrail,omitempty"`
	Cost            float64         `json:"cost,omitempty"`
	Arguments       json.RawMessage `json:"arguments,omitempty"`
}

// appendRecord appends c's exported JSON (no newline) to buf.
func appendRecord(buf []byte, c *Entry) ([]byte, error) {
	if c.Event != nil {
		b, err := json.Marshal(exportEvent{V: ExportSchemaVersion, Time: c.Time.UTC(), Event: c.Event.Action,
			Actor: c.Event.Actor, Target: c.Event.Target, Server: c.Server, Detail: c.Event.Detail})
		if err != nil {
			return buf, err
		}
		return append(buf, b...), nil
	}
	b, err := json.Marshal(exportRecord{
		V: ExportSchemaVersion, Time: c.Time.UTC(), KeyAlias: c.KeyAlias, User: c.User, Team: c.Team,
		Server: c.Server, Tool: c.Tool, DurationMs: c.DurationMs, Outcome: c.Outcome, ErrorClass: c.ErrorClass,
		SessionIDPrefix: c.SessionIDPrefix, RequestBytes: c.RequestBytes, ResponseBytes: c.ResponseBytes,
		Guardrail: c.Guardrail, Cost: c.Cost, Arguments: c.Arguments,
	})
	if err != nil {
		return buf, err
	}
	return append(buf, b...), nil
}
