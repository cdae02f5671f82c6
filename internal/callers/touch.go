package callers

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// touchEvery is the least time between two last_used_at writes for one key.
const touchEvery = time.Minute

// touchTimeout bounds one TouchKey call, so a stuck store cannot stall the
// writes for other keys forever.
const touchTimeout = 10 * time.Second

// toucher records key use in the store off the request path: the request
// goroutine only notes the alias (at most once per touchEvery per key) and
// wakes a single background worker, which writes the pending touches one by
// one. While the worker is busy, further touches coalesce per alias, so the
// pending set is bounded by the number of keys.
type toucher struct {
	keys   KeyStore
	logger *slog.Logger

	mu      sync.Mutex
	last    map[string]time.Time // alias -> time of its last accepted touch
	pending map[string]time.Time // alias -> time to write
	sweep   time.Time

	wake   chan struct{} // capacity 1: "pending is not empty"
	cancel context.CancelFunc
	done   chan struct{}
}

func newToucher(keys KeyStore, logger *slog.Logger) *toucher {
	ctx, cancel := context.WithCancel(context.Background())
	t := &toucher{
		keys:    keys,
		logger:  logger,
		last:    make(map[string]time.Time),
		pending: make(map[string]time.Time),
		wake:    make(chan struct{}, 1),
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	go t.run(ctx)
	return t
}

// touch notes that alias was used at now. It never blocks on the store.
func (t *toucher) touch(alias string, now time.Time) {
	t.mu.Lock()
	if last, ok := t.last[alias]; ok && now.Sub(last) < touchEvery {
		t.mu.Unlock()
		return
	}
	t.last[alias] = now
	t.pending[alias] = now
	if now.Sub(t.sweep) >= touchEvery {
		// Entries older than touchEvery no longer suppress anything.
		t.sweep = now
		for a, last := range t.last {
			if now.Sub(last) >= touchEvery {
				delete(t.last, a)
			}
		}
	}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default: // the worker is already due to look
	}
}

func (t *toucher) run(ctx context.Context) {
	defer close(t.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		}
		t.mu.Lock()
		batch := t.pending
		t.pending = make(map[string]time.Time)
		t.mu.Unlock()
		for alias, at := range batch {
			if ctx.Err() != nil {
				return
			}
			tctx, cancel := context.WithTimeout(ctx, touchTimeout)
			err := t.keys.TouchKey(tctx, alias, at)
			cancel()
			if err != nil && ctx.Err() == nil {
				// A deleted key is not worth a warning: it raced its revocation.
				level := slog.LevelWarn
				if isNotFound(err) {
					level = slog.LevelDebug
				}
				t.logger.Log(ctx, level, "record key use", attrAlias, alias, attrErr, err)
			}
		}
	}
}

// close stops the worker, abandoning pending touches (at most a minute of
// last_used_at per key), and waits for it to return.
func (t *toucher) close() {
	t.cancel()
	<-t.done
}
