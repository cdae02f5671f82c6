package state_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// FreshReads: a read never answers a use with what was read before the
// use arrived; uses arriving while one read runs share the next.
func TestFreshReadsShareOnlyLaterReads(t *testing.T) {
	synctest.Test(t, testFreshReadsShareOnlyLaterReads)
}

func testFreshReadsShareOnlyLaterReads(t *testing.T) {
	var f state.FreshReads[bool]
	var reads atomic.Int32
	release := make(chan struct{})
	fn := func(context.Context) (bool, error) {
		n := reads.Add(1)
		if n == 1 {
			<-release
		}
		return n > 1, nil // only a read after the first says true
	}
	first := make(chan bool)
	go func() {
		v, _ := f.Read(context.Background(), "k", fn)
		first <- v
	}()
	synctest.Wait() // the first read runs
	if reads.Load() != 1 {
		t.Fatalf("%d reads began, want the first", reads.Load())
	}
	// These arrive while the first read runs: they must not get its
	// answer, and share one read after it.
	var wg sync.WaitGroup
	got := make([]bool, 8)
	for i := range got {
		wg.Go(func() { got[i], _ = f.Read(context.Background(), "k", fn) })
	}
	synctest.Wait() // every use waits
	close(release)
	if <-first {
		t.Error("the first use got a later read's answer")
	}
	wg.Wait()
	for i, v := range got {
		if !v {
			t.Errorf("use %d, arrived during the first read, got its answer", i)
		}
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads for 9 uses (1, then 8 during it); want 2", n)
	}
}

// A read runs detached from the uses waiting for it, bounded by Timeout;
// a use that gives up gets its own context's error, the read goes on for
// the others. The clock is synctest's: the read ends at Timeout exactly.
func TestFreshReadsTimeout(t *testing.T) {
	synctest.Test(t, testFreshReadsTimeout)
}

func testFreshReadsTimeout(t *testing.T) {
	const timeout = 20 * time.Millisecond
	f := state.FreshReads[int]{Timeout: timeout}
	started := make(chan struct{})
	var ranFor time.Duration
	fn := func(ctx context.Context) (int, error) {
		begin := time.Now()
		close(started)
		<-ctx.Done()
		ranFor = time.Since(begin)
		return 0, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	gave := make(chan error)
	go func() {
		_, err := f.Read(ctx, "k", fn)
		gave <- err
	}()
	<-started
	other := make(chan error)
	go func() {
		_, err := f.Read(context.Background(), "k", func(context.Context) (int, error) { return 1, nil })
		other <- err
	}()
	cancel()
	if err := <-gave; err != context.Canceled {
		t.Errorf("a use that gave up: %v, want context.Canceled", err)
	}
	if err := <-other; err != nil {
		t.Errorf("a use that arrived during the first read: %v, want the next read's answer", err)
	}
	if ranFor != timeout {
		t.Errorf("the read ran %v, want Timeout (%v)", ranFor, timeout)
	}
}
