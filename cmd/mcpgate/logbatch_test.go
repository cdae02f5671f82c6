package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpgate/mcpgate/internal/gateway"
)

// Access lines wait at most lineBatchDelay; any other record goes out at
// once, after the access lines before it, so the log keeps its order.
func TestAccessLinesBatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		log, err := (&logFlags{format: "text", level: "info"}).logger(&out)
		if err != nil {
			t.Fatal(err)
		}
		access := accessCtx(t)
		log.InfoContext(access, "access", "n", 1)
		log.InfoContext(access, "access", "n", 2)
		if out.String() != "" {
			t.Fatalf("an access line was written at once: %q", out.String())
		}
		log.Warn("upstream down")
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 3 || !strings.Contains(lines[0], "n=1") || !strings.Contains(lines[1], "n=2") || !strings.Contains(lines[2], "upstream down") {
			t.Fatalf("a warning did not flush the access lines before it, in order: %q", lines)
		}
		log.InfoContext(access, "access", "n", 3)
		time.Sleep(lineBatchDelay - time.Millisecond)
		if strings.Contains(out.String(), "n=3") {
			t.Fatal("written before its delay")
		}
		time.Sleep(2 * time.Millisecond)
		if !strings.Contains(out.String(), "n=3") {
			t.Fatalf("an access line waited more than %v", lineBatchDelay)
		}
		// A full batch goes out whatever its age.
		big := strings.Repeat("x", lineBatchMax)
		log.InfoContext(access, "access", "big", big)
		if !strings.Contains(out.String(), big) {
			t.Fatal("a full batch was held")
		}
	})
}

// accessCtx is the context the gateway logs an access line with.
func accessCtx(t *testing.T) context.Context {
	t.Helper()
	ctx := gateway.AccessLineContext()
	if !gateway.DeferredLine(ctx) || gateway.DeferredLine(context.Background()) {
		t.Fatal("DeferredLine does not tell access lines from others")
	}
	return ctx
}

// blockingWriter holds every Write until release is closed.
type blockingWriter struct {
	started chan struct{} // gets a value as each Write starts
	release chan struct{}
	out     lockedBuffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.started <- struct{}{}
	<-w.release
	return w.out.Write(p)
}

// A full batch is written out after the batch's lock is released: while
// its write blocks (a slow disk, a full pipe), other requests still
// append their lines, and the batches leave in the order they filled.
func TestLineBatchWritesOutsideItsLock(t *testing.T) {
	w := &blockingWriter{started: make(chan struct{}, 4), release: make(chan struct{})}
	b := newLineBatch(w)
	first := strings.Repeat("a", lineBatchMax-1) + "\n"
	go b.Write([]byte(first)) // fills the batch: its write blocks
	select {
	case <-w.started:
	case <-time.After(5 * time.Second):
		t.Fatal("a full batch was not written")
	}
	appended := make(chan struct{})
	go func() {
		b.Write([]byte("b\n"))
		close(appended)
	}()
	select {
	case <-appended:
	case <-time.After(5 * time.Second):
		t.Fatal("a line waited for another batch's write")
	}
	close(w.release)
	b.Flush()
	if got := w.out.String(); got != first+"b\n" {
		t.Fatalf("written %d bytes, want the full batch then the line (%d bytes), in that order", len(got), len(first)+2)
	}
}

// Lines written at once from many goroutines, through batches filling
// and the timer's flushes, all come out whole, once, each writer's in its
// order.
func TestLineBatchConcurrentWriters(t *testing.T) {
	var out lockedBuffer
	b := newLineBatch(&out)
	const writers, lines = 8, 3000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(b, "w%d %06d %s\n", w, i, strings.Repeat("x", 40))
				if i%500 == 0 {
					b.Flush()
				}
			}
		})
	}
	wg.Wait()
	b.Flush()
	next := make([]int, writers)
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var w, i int
		var pad string
		if n, err := fmt.Sscanf(l, "w%d %d %s", &w, &i, &pad); n != 3 || err != nil || len(pad) != 40 || w < 0 || w >= writers {
			t.Fatalf("a torn or foreign line: %q", l)
		}
		if i != next[w] {
			t.Fatalf("writer %d: line %d after %d", w, i, next[w]-1)
		}
		next[w]++
	}
	for w, n := range next {
		if n != lines {
			t.Errorf("writer %d: %d lines out, want %d", w, n, lines)
		}
	}
}
