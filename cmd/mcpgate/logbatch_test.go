package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

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
		synctest.Wait() // its writer's goroutine
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

// Lines written at once from many goroutines, through batches filling,
// the timer's flushes and Flush calls racing them, all come out whole,
// once, each writer's in its order: with an output that keeps up, and
// with one slower than the lines coming (a busy disk, a slow pipe
// reader), where batches pass from one writing goroutine to the next.
func TestLineBatchConcurrentWriters(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		delay                       time.Duration
		writers, lines, pad, flushN int
	}{
		{"output keeps up", 0, 8, 3000, 40, 500},
		{"slow output", 2 * time.Millisecond, 8, 2000, 60, 700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the writing goroutines end
			w := &slowWriter{delay: tc.delay}
			b := newLineBatch(w)
			writeConcurrently(b, tc.writers, tc.lines, tc.pad, tc.flushN)
			b.Flush()
			if d := b.Dropped(); d != 0 {
				t.Fatalf("%d lines dropped with an output that moves", d)
			}
			next := writersLines(t, strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n"), tc.writers, tc.pad)
			for i, n := range next {
				if n != tc.lines {
					t.Errorf("writer %d: %d lines out, want %d", i, n, tc.lines)
				}
			}
		})
	}
}

// writeConcurrently has writers goroutines write lines lines each into
// b, as "w<writer> <n> <pad>" with a pad of padLen, each calling Flush
// every flushEvery lines (0: never), and returns when all are written.
func writeConcurrently(b *lineBatch, writers, lines, padLen, flushEvery int) {
	pad := strings.Repeat("x", padLen)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for n := range lines {
				fmt.Fprintf(b, "w%d %06d %s\n", i, n, pad)
				if flushEvery > 0 && n%flushEvery == 0 {
					b.Flush()
				}
			}
		})
	}
	wg.Wait()
}

// writersLines checks lines written as "w<writer> <n> <pad>" by writers
// concurrent writers, each numbering its lines from 0: every line whole
// (pad of padLen), each writer's in order and without a gap. It returns
// how many lines each writer has.
func writersLines(t *testing.T, lines []string, writers, padLen int) []int {
	t.Helper()
	next := make([]int, writers)
	for _, l := range lines {
		var w, i int
		var pad string
		if n, err := fmt.Sscanf(l, "w%d %d %s", &w, &i, &pad); n != 3 || err != nil || len(pad) != padLen || w < 0 || w >= writers {
			t.Fatalf("a torn or foreign line: %q", l)
		}
		if i != next[w] {
			t.Fatalf("writer %d: line %d after %d", w, i, next[w]-1)
		}
		next[w]++
	}
	return next
}

// gateWriter holds every Write until open is closed, and counts the
// writes that started.
type gateWriter struct {
	open    chan struct{}
	started atomic.Int32
	out     lockedBuffer
}

func (w *gateWriter) Write(p []byte) (int, error) {
	w.started.Add(1)
	<-w.open
	return w.out.Write(p)
}

// While the output blocks, lines keep being taken without waiting: they
// are held up to lineBatchHeld, then dropped and counted; once the output
// moves, what was held comes out in order and a notice says how many
// lines were dropped, where they were.
func TestLineBatchNeverWaitsForABlockedOutput(t *testing.T) {
	w := &gateWriter{open: make(chan struct{})}
	b := newLineBatch(w)
	first := strings.Repeat("a", lineBatchMax-1) + "\n"
	go b.Write([]byte(first)) // fills the batch: its write blocks
	for w.started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	const writers, lines = 4, 5000 // 2 MB of lines: twice what is held
	done := make(chan struct{})
	go func() {
		defer close(done)
		writeConcurrently(b, writers, lines, 88, 0)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a writer waited for the blocked output")
	}
	dropped := b.Dropped()
	if dropped == 0 || dropped >= writers*lines {
		t.Fatalf("dropped %d of %d lines while the output blocked, want some but not all", dropped, writers*lines)
	}
	close(w.open)
	b.Flush()
	out := w.out.String()
	if !strings.HasPrefix(out, first) {
		t.Fatal("the first batch did not come out first")
	}
	rest := strings.Split(strings.TrimSuffix(out[len(first):], "\n"), "\n")
	notice := fmt.Sprintf("log: %d lines dropped while the output was blocked", dropped)
	if rest[len(rest)-1] != notice {
		t.Fatalf("the last line is %q, want the notice %q", rest[len(rest)-1], notice)
	}
	// Each writer's lines kept are its first ones, in order: the
	// dropped ones came after all of them.
	writersLines(t, rest[:len(rest)-1], writers, 88)
	kept := int64(len(rest) - 1)
	if kept+dropped != writers*lines {
		t.Errorf("%d lines kept and %d dropped, want %d in all", kept, dropped, writers*lines)
	}
	if held := len(out) - len(first); held > lineBatchHeld+len(notice)+1 {
		t.Errorf("%d bytes held while blocked, over the bound %d", held, lineBatchHeld)
	}
}

// A warning waits for a blocked output, in its own goroutine only: the
// access lines of other requests are taken meanwhile, and the warning
// comes out after the lines logged before it.
func TestLogWarningWaitsAlone(t *testing.T) {
	w := &gateWriter{open: make(chan struct{})}
	log, err := (&logFlags{format: "text", level: "info"}).logger(w)
	if err != nil {
		t.Fatal(err)
	}
	access := accessCtx(t)
	go log.InfoContext(access, "access", "big", strings.Repeat("x", lineBatchMax))
	for w.started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	returnsAtOnce(t, "an access line", func() { log.InfoContext(access, "access", "n", 1) })
	warned := make(chan struct{})
	go func() {
		log.Warn("upstream down")
		close(warned)
	}()
	time.Sleep(50 * time.Millisecond)
	returnsAtOnce(t, "an access line", func() { log.InfoContext(access, "access", "n", 2) })
	select {
	case <-warned:
		t.Fatal("the warning returned before the blocked output took it")
	default:
	}
	close(w.open)
	select {
	case <-warned:
	case <-time.After(5 * time.Second):
		t.Fatal("the warning was not written once the output moved")
	}
	out := w.out.String()
	i1, iw := strings.Index(out, "n=1"), strings.Index(out, "upstream down")
	if i1 < 0 || iw < 0 || iw < i1 || strings.Index(out, "big=") > i1 {
		t.Fatalf("the log is out of order: big line, n=1, warning wanted; got n=1 at %d, the warning at %d", i1, iw)
	}
}

// Flush waits for its record while the output moves, and no longer than
// its patience when it does not: the record stays in the batch, and the
// goroutine writing writes it once the output moves, in its place.
func TestFlushLeavesAStuckOutput(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the writing goroutine ends once the output moves
	w := &gateWriter{open: make(chan struct{})}
	b := newLineBatch(w)
	first := strings.Repeat("a", lineBatchMax-1) + "\n"
	b.Write([]byte(first)) // its write, on a goroutine of its own, blocks
	for w.started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	b.Write([]byte("warning\n"))
	start := time.Now()
	b.flush(50 * time.Millisecond)
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("Flush on a stuck output returned after %v, want its patience (50ms)", d)
	}
	b.Write([]byte("later\n"))
	close(w.open)
	b.Flush() // the output moves: this one waits until all is out
	if got, want := w.out.String(), first+"warning\nlater\n"; got != want {
		t.Fatalf("out of order or lost once the output moved: %d bytes, want %d", len(got), len(want))
	}
}

// slowWriter takes delay over each write, as a busy disk or a slow pipe
// reader does: batches fill while one is being written.
type slowWriter struct {
	lockedBuffer
	delay time.Duration
}

func (w *slowWriter) Write(p []byte) (int, error) {
	if w.delay > 0 {
		time.Sleep(w.delay)
	}
	return w.lockedBuffer.Write(p)
}

// The lines dropped while the output is blocked are one gap: once a line
// is dropped, a shorter one that would still fit is dropped too, and the
// notice stands where they were.
func TestLineBatchDropsAreOneGap(t *testing.T) {
	w := &gateWriter{open: make(chan struct{})}
	b := newLineBatch(w)
	first := strings.Repeat("a", lineBatchMax-1) + "\n"
	b.Write([]byte(first)) // its write blocks
	for w.started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	held := strings.Repeat("h", lineBatchHeld-100) + "\n"
	b.Write([]byte(held))
	b.Write([]byte(strings.Repeat("L", 200) + "\n")) // does not fit: dropped
	b.Write([]byte("short\n"))                       // would fit: dropped, after the long one
	if d := b.Dropped(); d != 2 {
		t.Fatalf("dropped %d lines, want the long one and the short one after it", d)
	}
	close(w.open)
	b.Flush()
	b.Write([]byte("after\n"))
	b.Flush()
	want := first + held + "log: 2 lines dropped while the output was blocked\n" + "after\n"
	if got := w.out.String(); got != want {
		t.Fatalf("got %d bytes ending %q, want the held lines, the notice, then the next line", len(got), got[max(0, len(got)-80):])
	}
}

// returnsAtOnce fails unless f returns within 5 s: what (a line that
// must not wait) waited for a blocked output.
func returnsAtOnce(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		f()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s waited for the blocked output", what)
	}
}
