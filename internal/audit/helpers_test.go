package audit

// Helpers shared by several of this package's test files.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// waitFor polls cond until it holds and fails the test after 10s: the
// wait for an event the test is not told of directly, instead of a pause.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !eventually(cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// eventually polls cond until it holds or 10s pass and returns its last
// answer, for a test that reports the failure itself.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return cond()
		}
	}
	return true
}

// openStore opens a real SQLite store in a temporary directory.
func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

// listAll reads every tool call, following cursors.
func listAll(t testing.TB, s store.AuditLog) []store.ToolCall {
	t.Helper()
	var all []store.ToolCall
	f := store.ToolCallFilter{Limit: 300}
	for {
		page, next, err := s.ListToolCalls(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == nil {
			return all
		}
		f.Before = next
	}
}

// newWriter starts a Writer and makes sure, at the end of the test, that
// it was closed and its goroutine is gone.
func newWriter(t testing.TB, s store.AuditLog, opts Options) *Writer {
	t.Helper()
	w := NewWriter(s, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Close(ctx)
		select {
		case <-w.done:
		case <-ctx.Done():
			t.Error("writer goroutine still running at the end of the test")
		}
		checkNoWriterGoroutine(t)
	})
	return w
}

// checkNoWriterGoroutine fails if a Writer's goroutine outlives its test.
func checkNoWriterGoroutine(t testing.TB) {
	t.Helper()
	var stacks []byte
	for range 100 {
		buf := make([]byte, 1<<20)
		stacks = buf[:runtime.Stack(buf, true)]
		if !bytes.Contains(stacks, []byte("audit.(*Writer).run")) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("leaked writer goroutine:\n%s", stacks)
}

func call(i int) store.ToolCall {
	return store.ToolCall{
		Time:            time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond),
		KeyAlias:        fmt.Sprintf("key-%d", i%8),
		User:            []string{"alice", "bob", ""}[i%3],
		Team:            []string{"eng", "ops"}[i%2],
		Server:          []string{"github", "jira"}[i%2],
		Tool:            []string{"search", "get", "create_issue"}[i%3],
		DurationMs:      int64(i % 977),
		Outcome:         []string{"ok", "ok", "error", "denied"}[i%4],
		SessionIDPrefix: "3f2a9c1b",
		RequestBytes:    int64(i), // identifies the record
		ResponseBytes:   int64(i) * 3,
	}
}

// logs is a slog handler that keeps what it is given.
type logs struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }

func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

func (l *logs) WithAttrs([]slog.Attr) slog.Handler { return l }

func (l *logs) WithGroup(string) slog.Handler { return l }

// text renders every record, attributes included.
func (l *logs) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	h := slog.NewTextHandler(&b, nil)
	for _, r := range l.recs {
		h.Handle(context.Background(), r)
	}
	return b.String()
}

// counts returns the "count" attribute of every record whose message
// contains msg.
func (l *logs) counts(msg string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int64
	for _, r := range l.recs {
		if !strings.Contains(r.Message, msg) {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == logCount {
				out = append(out, a.Value.Int64())
			}
			return true
		})
	}
	return out
}

// fakeLog is a store.AuditLog made of function fields.
type fakeLog struct {
	store.AuditLog // nil: other methods panic
	appendCalls    func(ctx context.Context, calls []store.ToolCall) error
}

func (f *fakeLog) AppendToolCalls(ctx context.Context, calls []store.ToolCall) error {
	return f.appendCalls(ctx, calls)
}
