package main

// The access log's lines are written in batches (issue 25): one line per
// request written on its own cost a write system call per call, about 2%
// of the gateway's CPU at c=64. A line the gateway marks deferrable
// (gateway.DeferredLine: the access log's) waits in the batch at most
// lineBatchDelay; any other record goes out at once, with every line
// batched before it, so the log keeps its order and a warning or an
// error is never late while the output moves. A request never waits for
// a blocked output (lineBatch).

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/gateway"
)

const (
	// lineBatchDelay bounds how late an access line is written.
	lineBatchDelay = 100 * time.Millisecond
	// lineBatchMax is the batch written at once, whatever its age.
	lineBatchMax = 32 << 10
	// lineBatchHeld bounds what waits while the output is blocked (a
	// full pipe, a stalled disk): past it, access lines are dropped and
	// counted rather than held, or waited for.
	lineBatchHeld = 1 << 20
	// flushPatience is how long Flush waits for an output that does not
	// move at all before it leaves its record to the goroutine writing.
	flushPatience = time.Second
)

// lineBatch is a writer that holds what is written until Flush, a batch
// of lineBatchMax, or lineBatchDelay after the first write of a batch.
//
// Writing a batch out never holds mu, under which every request appends
// its line, and a request never waits for the output: a full batch is
// written by a goroutine the request that filled it starts when no other
// batch is being written; otherwise the goroutine writing takes it next
// (out is held by whoever writes, which keeps the batches in order). While the
// output blocks, lines pile up to lineBatchHeld and then are dropped,
// counted (Dropped, the metric mcpgate_log_lines_dropped_total) and
// reported in the log once it moves again (dropNotice). Only Flush, for
// a record that must not be late (a warning, an error, the last lines at
// shutdown), waits for the output, only its own caller does, and only
// while the output moves: after flushPatience without a write done, it
// leaves its record to the goroutine writing (a stalled log collector
// and a caller whose every request logs a warning must not pile up
// goroutines).
type lineBatch struct {
	w io.Writer
	// dropNotice formats the line that reports n dropped lines, in the
	// log's format; nil: a plain text line.
	dropNotice func(n int64) []byte

	mu      sync.Mutex
	buf     []byte
	spare   []byte      // the buffer last written out, to fill next
	timer   *time.Timer // armed while buf holds something
	due     bool        // Flush or the timer asked for what buf holds
	dropped int64       // lines dropped since the last notice (droppedTotal: ever)
	// appended and written count the bytes taken into buf and those
	// whose write has returned; moved is closed, and replaced, as
	// written grows (Flush waits on it).
	appended, written int64
	moved             chan struct{}

	out sync.Mutex // held while batches are written: they leave in order
	// droppedTotal is read by the metric's scrape without taking mu.
	droppedTotal atomic.Int64
}

func newLineBatch(w io.Writer) *lineBatch { return &lineBatch{w: w} }

func (b *lineBatch) Write(p []byte) (int, error) {
	b.mu.Lock()
	// Once dropping, every line is dropped until the held lines are
	// taken, even one short enough to fit: the dropped lines are one gap,
	// where the notice stands.
	if b.dropped > 0 || len(b.buf)+len(p) > lineBatchHeld {
		b.dropped++
		b.mu.Unlock()
		b.droppedTotal.Add(1)
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	b.appended += int64(len(p))
	if len(b.buf) >= lineBatchMax {
		b.mu.Unlock()
		if b.out.TryLock() {
			// Not on the caller's goroutine: slog's handlers hold
			// their own lock through this Write, which a blocked
			// output would then hold for every other record.
			go b.writeOut()
		}
		return len(p), nil
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(lineBatchDelay, b.flushSoon)
	} else if len(b.buf) == len(p) {
		b.timer.Reset(lineBatchDelay)
	}
	b.mu.Unlock()
	return len(p), nil
}

// Dropped is how many lines were dropped because the output was blocked.
func (b *lineBatch) Dropped() int64 { return b.droppedTotal.Load() }

// Flush writes what is held, and waits for it to be written while the
// output moves (flushPatience).
func (b *lineBatch) Flush() { b.flush(flushPatience) }

func (b *lineBatch) flush(patience time.Duration) {
	b.mu.Lock()
	b.due = true
	target := b.appended
	b.mu.Unlock()
	var stuck *time.Timer
	for {
		if b.out.TryLock() {
			b.writeOut()
		}
		b.mu.Lock()
		if b.written >= target {
			b.mu.Unlock()
			if stuck != nil {
				stuck.Stop()
			}
			return
		}
		if b.moved == nil {
			b.moved = make(chan struct{})
		}
		moved := b.moved
		b.mu.Unlock()
		// Another goroutine is writing: what is due goes out after
		// its write, by it or by the next turn of this loop.
		if stuck == nil {
			stuck = time.NewTimer(patience)
		} else {
			stuck.Reset(patience)
		}
		select {
		case <-moved:
		case <-stuck.C:
			return // the output is stuck: the writer takes it later
		}
	}
}

// flushSoon is the timer's Flush: when a batch is being written, the
// goroutine writing it writes this one after it.
func (b *lineBatch) flushSoon() {
	b.mu.Lock()
	b.due = true
	b.mu.Unlock()
	if b.out.TryLock() {
		b.writeOut()
	}
}

// writeOut writes, holding out (which it releases), every batch that is
// full or due, in order. After releasing out it looks again: a batch
// that filled, or a flush asked for, while out was held found it taken
// and left its batch to this goroutine.
func (b *lineBatch) writeOut() {
	for {
		b.mu.Lock()
		for len(b.buf) >= lineBatchMax || (b.due && len(b.buf) > 0) || b.dropped > 0 {
			full, dropped := b.buf, b.dropped
			b.buf, b.spare, b.dropped, b.due = b.spare[:0], nil, 0, false
			b.mu.Unlock()
			taken := len(full)
			if dropped > 0 {
				// After the lines held before the drops, which were
				// the oldest: the notice comes where the gap is.
				full = append(full, b.notice(dropped)...)
			}
			// A log that cannot be written has nowhere to say so.
			_, _ = b.w.Write(full)
			b.mu.Lock()
			b.written += int64(taken)
			if b.moved != nil {
				close(b.moved)
				b.moved = nil
			}
			if b.spare == nil && cap(full) <= 4*lineBatchMax {
				b.spare = full[:0]
			}
		}
		b.due = false
		b.mu.Unlock()
		b.out.Unlock()
		b.mu.Lock()
		again := len(b.buf) >= lineBatchMax || (b.due && len(b.buf) > 0) || b.dropped > 0
		b.mu.Unlock()
		if !again || !b.out.TryLock() {
			return
		}
	}
}

func (b *lineBatch) notice(n int64) []byte {
	if b.dropNotice != nil {
		return b.dropNotice(n)
	}
	return []byte("log: " + strconv.FormatInt(n, 10) + " lines dropped while the output was blocked\n")
}

// batchHandler writes its records through a lineBatch: deferrable ones
// (gateway.DeferredLine) stay in the batch, every other one flushes it.
//
// format says which of slog's handlers Handler is, as made by
// newBatchHandler, with no attributes or groups added: an access line
// (gateway.AccessLineWriter) is then written here, byte for byte as that
// handler writes its record, without building the record, when every
// value it holds is one that handler writes as is (appendAccessLine).
type batchHandler struct {
	slog.Handler
	batch  *lineBatch
	format lineFormat
}

// lineFormat is the format of a batchHandler's lines, when it writes
// access lines itself.
type lineFormat uint8

const (
	formatOther lineFormat = iota // a derived handler: records only
	formatText                    // slog.NewTextHandler's
	formatJSON                    // slog.NewJSONHandler's
)

// newBatchHandler is slog's text or JSON handler writing to b.
func newBatchHandler(b *lineBatch, f lineFormat, opts *slog.HandlerOptions) batchHandler {
	var h slog.Handler
	json := f == formatJSON
	if json {
		h = slog.NewJSONHandler(b, opts)
	} else {
		h = slog.NewTextHandler(b, opts)
	}
	if opts != nil && (opts.ReplaceAttr != nil || opts.AddSource) {
		f = formatOther
	}
	b.dropNotice = func(n int64) []byte {
		// The notice in the log's own format, whatever its level.
		var o slog.HandlerOptions
		if opts != nil {
			o = *opts
		}
		o.Level = nil
		var buf bytes.Buffer
		var nh slog.Handler
		if json {
			nh = slog.NewJSONHandler(&buf, &o)
		} else {
			nh = slog.NewTextHandler(&buf, &o)
		}
		slog.New(nh).Warn("log: lines dropped while the log's output was blocked", "lines", n)
		return buf.Bytes()
	}
	return batchHandler{h, b, f}
}

func (h batchHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if !gateway.DeferredLine(ctx) {
		h.batch.Flush()
	}
	return err
}

func (h batchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return batchHandler{h.Handler.WithAttrs(as), h.batch, formatOther}
}

func (h batchHandler) WithGroup(name string) slog.Handler {
	return batchHandler{h.Handler.WithGroup(name), h.batch, formatOther}
}

// WriteAccessLine writes l into the batch as the handler would write its
// record (gateway.AccessLineWriter); the caller has checked that the
// handler logs at info.
func (h batchHandler) WriteAccessLine(l gateway.AccessLine) bool {
	if h.format == formatOther {
		return false
	}
	var buf [512]byte
	b, ok := appendAccessLine(buf[:0], h.format, &l)
	if !ok {
		return false
	}
	_, _ = h.batch.Write(b)
	return true
}

// appendAccessLine appends l as slog's text or JSON handler writes the
// record gateway logs for it (the same keys, in the same order), and
// reports whether it could: a string value either handler would quote
// or escape (anything but printable ASCII other than space, '"', '\\'
// and '='), an empty one (which the text handler quotes), or a time
// outside years 0-9999 is left to the handler.
func appendAccessLine(b []byte, f lineFormat, l *gateway.AccessLine) ([]byte, bool) {
	if y := l.Time.Year(); y < 0 || y >= 10000 {
		return b, false
	}
	t := l.Time.Round(0) // as slog: no monotonic reading
	if f == formatJSON {
		b = append(b, `{"time":"`...)
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `","level":"INFO","msg":"access"`...)
	} else {
		// As slog's text handler writes a time: RFC 3339 to the
		// millisecond (RFC3339Nano is the layout time formats fastest;
		// a tenth of a millisecond added keeps its trailing zeros, and
		// the fourth digit is dropped).
		b = append(b, "time="...)
		n := len(b)
		b = t.Truncate(time.Millisecond).Add(time.Millisecond/10).AppendFormat(b, time.RFC3339Nano)
		b = append(b[:n+len("2006-01-02T15:04:05.000")], b[n+len("2006-01-02T15:04:05.0000"):]...)
		b = append(b, " level=INFO msg=access"...)
	}
	ok := true
	str := func(key, v string, always bool) {
		if v == "" && !always {
			return
		}
		if !plainValue(v) {
			ok = false
			return
		}
		if f == formatJSON {
			b = append(b, `,"`...)
			b = append(b, key...)
			b = append(b, `":"`...)
			b = append(b, v...)
			b = append(b, '"')
		} else {
			b = append(b, ' ')
			b = append(b, key...)
			b = append(b, '=')
			b = append(b, v...)
		}
	}
	num := func(key string, v int64) {
		if f == formatJSON {
			b = append(b, `,"`...)
			b = append(b, key...)
			b = append(b, `":`...)
		} else {
			b = append(b, ' ')
			b = append(b, key...)
			b = append(b, '=')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	str("method", l.Method, true)
	str("route", l.Route, true)
	str("path", l.Path, true)
	num("status", int64(l.Status))
	num("bytes", l.Bytes)
	if f == formatJSON {
		b = append(b, `,"ms":"`...)
		b = l.AppendMS(b)
		b = append(b, '"')
	} else {
		b = append(b, " ms="...)
		b = l.AppendMS(b)
	}
	str("alias", l.Alias, false)
	str("user", l.User, false)
	str("session", l.Session, false)
	str("mcp_method", l.MCPMethod, false)
	str("tool", l.Tool, false)
	str("reason", l.Reason, false)
	if f == formatJSON {
		b = append(b, '}')
	}
	return append(b, '\n'), ok
}

// plainValue reports whether both of slog's handlers write s as it is:
// not empty, and only printable ASCII other than space, '"', '\\' and
// '=' (the text handler quotes a value with any of those, the JSON
// handler escapes '"' and '\\').
func plainValue(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '=' {
			return false
		}
	}
	return true
}
