package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcpgate/mcpgate/internal/store"
)

var concurrencyTests = []test{
	{"Writers", testConcurrentWriters},
}

// Writers and readers at once: every call must succeed (no "database is
// locked"), and every write must be there afterwards.
func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers, perWriter = 8, 50
	ctx := t.Context()
	mustCreateKey(t, s, newKey("seed"))

	var wg sync.WaitGroup
	errc := make(chan error, writers*perWriter*3)
	var done atomic.Bool
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				alias := fmt.Sprintf("w%d-%03d", w, i)
				if _, err := s.CreateKey(ctx, newKey(alias)); err != nil {
					errc <- fmt.Errorf("CreateKey(%s): %w", alias, err)
				}
				if _, err := s.AppendAudit(ctx, store.AuditEntry{Actor: alias, Action: "key.create", Target: alias}); err != nil {
					errc <- fmt.Errorf("AppendAudit(%s): %w", alias, err)
				}
				if err := s.TouchKey(ctx, "seed", at(w*perWriter+i)); err != nil {
					errc <- fmt.Errorf("TouchKey: %w", err)
				}
			}
		})
	}
	// Readers on the hot path while the writers run.
	var readers sync.WaitGroup
	var reads atomic.Int64
	for range 4 {
		readers.Go(func() {
			for !done.Load() {
				if _, err := s.GetKeyByHash(ctx, newKey("seed").KeyHash); err != nil {
					errc <- fmt.Errorf("GetKeyByHash: %w", err)
					return
				}
				reads.Add(1)
			}
		})
	}
	wg.Wait()
	done.Store(true)
	readers.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%d concurrent calls failed:\n%v", len(errs), err)
	}

	keys, err := s.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(keys), writers*perWriter+1; got != want {
		t.Errorf("%d keys, want %d", got, want)
	}
	entries, _, err := s.ListAudit(ctx, store.AuditFilter{Limit: store.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(entries), writers*perWriter; got != want {
		t.Errorf("%d audit entries, want %d", got, want)
	}
	seed, err := s.GetKeyByAlias(ctx, "seed")
	if err != nil {
		t.Fatal(err)
	}
	if want := at(writers*perWriter - 1); !seed.LastUsedAt.Equal(want) {
		// Each writer's touches rise; the latest of all must win.
		t.Errorf("LastUsedAt = %v, want %v", seed.LastUsedAt, want)
	}
	t.Logf("%d hot-path reads during the writes", reads.Load())
}
