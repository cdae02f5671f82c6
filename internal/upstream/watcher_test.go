package upstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/cancelctx"
)

// A call under a cancelctx.Context (the gateway's request context)
// registers nothing on it: the context's end cancels the call, on every
// transport, as a context's cancellation does (TestCancellation): at
// once, the upstream told, the session still working. A context between
// the two that ends on its own (WithTimeout) is watched by the call
// itself instead.
func TestCancellationWatched(t *testing.T) {
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			srv, cancelled := tc.start(t)
			s := connect(t, Options{Server: srv})

			var w cancelctx.Context
			w.Start(context.Background())
			ctx := &CallContext{Context: &w, Values: CallValues{Origin: "o"}}
			if cancelctx.WatcherOf(ctx) != &w {
				t.Fatal("the call's context has no watcher")
			}
			if out, err := callTool(ctx, s, "echo", `{"text":"one"}`); err != nil || out != "one" {
				t.Fatalf("echo: %q, %v", out, err)
			}

			time.AfterFunc(100*time.Millisecond, w.Cancel)
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
			var w2 cancelctx.Context
			w2.Start(context.Background())
			defer w2.Cancel()
			tctx, stop := context.WithTimeout(&w2, 100*time.Millisecond)
			defer stop()
			if cancelctx.WatcherOf(tctx) != nil {
				t.Error("a watcher found through a deadline")
			}
			if _, err := callTool(tctx, s, "slow", ""); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("slow under a deadline: %v", err)
			}
		})
	}
}
