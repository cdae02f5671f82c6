package main

// The access log's lines are written in batches (issue 25): one line per
// request written on its own cost a write system call per call, about 2%
// of the gateway's CPU at c=64. A line the gateway marks deferrable
// (gateway.DeferredLine: the access log's) waits in the batch at most
// lineBatchDelay; any other record goes out at once, with every line
// batched before it, so the log keeps its order and a warning or an
// error is never late.

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/gateway"
)

const (
	// lineBatchDelay bounds how late an access line is written.
	lineBatchDelay = 100 * time.Millisecond
	// lineBatchMax is the batch written at once, whatever its age.
	lineBatchMax = 32 << 10
)

// lineBatch is a writer that holds what is written until Flush, a batch
// of lineBatchMax, or lineBatchDelay after the first write of a batch.
// The handlers write whole records, so the batch holds whole lines.
type lineBatch struct {
	w io.Writer

	mu    sync.Mutex
	buf   []byte
	timer *time.Timer // armed while buf holds something
}

func newLineBatch(w io.Writer) *lineBatch { return &lineBatch{w: w} }

func (b *lineBatch) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) >= lineBatchMax {
		b.flushLocked()
		return len(p), nil
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(lineBatchDelay, b.Flush)
	} else if len(b.buf) == len(p) {
		b.timer.Reset(lineBatchDelay)
	}
	return len(p), nil
}

// Flush writes what is held.
func (b *lineBatch) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}

func (b *lineBatch) flushLocked() {
	if len(b.buf) == 0 {
		return
	}
	// A log that cannot be written has nowhere to say so.
	_, _ = b.w.Write(b.buf)
	b.buf = b.buf[:0]
	if cap(b.buf) > 4*lineBatchMax {
		b.buf = nil
	}
}

// batchHandler writes its records through a lineBatch: deferrable ones
// (gateway.DeferredLine) stay in the batch, every other one flushes it.
type batchHandler struct {
	slog.Handler
	batch *lineBatch
}

func (h batchHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if !gateway.DeferredLine(ctx) {
		h.batch.Flush()
	}
	return err
}

func (h batchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return batchHandler{h.Handler.WithAttrs(as), h.batch}
}

func (h batchHandler) WithGroup(name string) slog.Handler {
	return batchHandler{h.Handler.WithGroup(name), h.batch}
}
