package upstream

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// watchCtx is a caller's context that tells its calls itself that it
// ended (a CallWatcher), as the gateway's request context does.
type watchCtx struct {
	context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	watched []Watched
	watches int
}

func newWatchCtx() *watchCtx {
	ctx, cancel := context.WithCancel(context.Background())
	return &watchCtx{Context: ctx, cancel: cancel}
}

func (w *watchCtx) Watch(x Watched) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.Err() != nil {
		return false
	}
	w.watched = append(w.watched, x)
	w.watches++
	return true
}

func (w *watchCtx) Unwatch(x Watched) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i := slices.Index(w.watched, x); i >= 0 {
		w.watched = slices.Delete(w.watched, i, i+1)
	}
}

func (w *watchCtx) end() {
	w.mu.Lock()
	w.cancel()
	ws := w.watched
	w.watched = nil
	w.mu.Unlock()
	for _, x := range ws {
		x.ContextEnded()
	}
}

func (w *watchCtx) state() (watched, watches int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watched), w.watches
}

// A call under a CallWatcher registers nothing on its context: the
// watcher's end cancels it, on every transport, as a context's
// cancellation does (TestCancellation): at once, the upstream told, the
// session still working; a finished call is unwatched. A context
// between the two that ends on its own (WithTimeout) is watched by the
// call itself instead.
func TestCancellationWatched(t *testing.T) {
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			srv, cancelled := tc.start(t)
			s := connect(t, Options{Server: srv})

			w := newWatchCtx()
			ctx := &CallContext{Context: w, Values: CallValues{Watcher: w}}
			if out, err := callTool(ctx, s, "echo", `{"text":"one"}`); err != nil || out != "one" {
				t.Fatalf("echo: %q, %v", out, err)
			}
			if n, watches := w.state(); n != 0 || watches != 1 {
				t.Errorf("after a call: %d watching, %d watches; want 0, 1", n, watches)
			}

			time.AfterFunc(100*time.Millisecond, w.end)
			start := time.Now()
			_, err := callTool(ctx, s, "slow", "")
			if !errors.Is(err, context.Canceled) || KindOf(err) == KindTimeout {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("cancel took %v", d)
			}
			want := `"reason":"request cancelled by the client"`
			var got string
			eventually(func() bool { got = cancelled(s); return strings.Contains(got, want) })
			if !strings.Contains(got, want) {
				t.Errorf("cancellations seen upstream = %q", got)
			}
			if out, err := callTool(context.Background(), s, "echo", `{"text":"after"}`); err != nil || out != "after" {
				t.Errorf("after cancel: %q, %v", out, err)
			}

			// Ended already: the call does not start.
			if _, err := callTool(ctx, s, "echo", `{"text":"late"}`); !errors.Is(err, context.Canceled) {
				t.Errorf("a call on an ended watcher: %v", err)
			}

			// A deadline between the watcher and the call: not watched.
			w2 := newWatchCtx()
			defer w2.end()
			tctx, stop := context.WithTimeout(&CallContext{Context: w2, Values: CallValues{Watcher: w2}}, 100*time.Millisecond)
			defer stop()
			if _, err := callTool(tctx, s, "slow", ""); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("slow under a deadline: %v", err)
			}
			if _, watches := w2.state(); watches != 0 {
				t.Errorf("a call under a deadline was watched (%d)", watches)
			}
		})
	}
}
