package session

import (
	"context"
	"sync"
	"time"
)

// Terminations remembers the session ids that were ended (S8.2), by hash,
// so that their clients are told to start over rather than being served a
// new session silently. The store backs it across restarts.
type Terminations interface {
	MarkTerminated(ctx context.Context, hash string, until time.Time) error
	IsTerminated(ctx context.Context, hash string, now time.Time) (bool, error)
	TouchTerminated(ctx context.Context, hash string, until time.Time) error
	// PurgeTerminated forgets the ids whose time is up. Every ended
	// session is remembered (S8.2), so without the idle sweep's purge the
	// ids no client asks about again would pile up for the life of the
	// process or the store.
	PurgeTerminated(ctx context.Context, now time.Time) (int64, error)
}

// MemTerminations is the in-process Terminations used when no store is
// configured.
type MemTerminations struct {
	// mu guards the fields below.
	mu    sync.Mutex
	until map[string]time.Time
}

// NewMemTerminations remembers nothing yet.
func NewMemTerminations() *MemTerminations {
	return &MemTerminations{until: map[string]time.Time{}}
}

// MarkTerminated remembers hash until then.
func (m *MemTerminations) MarkTerminated(_ context.Context, hash string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.until[hash] = until
	return nil
}

// IsTerminated reports whether hash is remembered at now.
func (m *MemTerminations) IsTerminated(_ context.Context, hash string, now time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.until[hash]
	if ok && !now.Before(u) {
		delete(m.until, hash)
		return false, nil
	}
	return ok, nil
}

// TouchTerminated remembers hash until then, if it is remembered.
func (m *MemTerminations) TouchTerminated(_ context.Context, hash string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.until[hash]; ok {
		m.until[hash] = until
	}
	return nil
}

// PurgeTerminated forgets the ids whose memory has expired.
func (m *MemTerminations) PurgeTerminated(_ context.Context, now time.Time) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for h, u := range m.until {
		if !now.Before(u) {
			delete(m.until, h)
			n++
		}
	}
	return n, nil
}

// Len is how many ids it remembers, expired or not.
func (m *MemTerminations) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.until)
}

// Ends is what a replica remembers of ended sessions: its Terminations,
// read and written on the gateway's clock, each id remembered for as long
// as a session may sit idle (a client still using one is told to start
// over, S8.2, not served a new session silently).
type Ends struct {
	Terminations
	Now func() time.Time
	For time.Duration
}

// Mark remembers the session of hash as ended.
func (e Ends) Mark(ctx context.Context, hash string) error {
	return e.MarkTerminated(ctx, hash, e.Now().Add(e.For))
}

// Ended reports whether the session of local id id was ended, and keeps
// remembering it while its client keeps using it (S8.2). An error: the
// store could not say (the caller decides what that means for the id).
func (e Ends) Ended(ctx context.Context, id string) (bool, error) {
	h := Hash(id)
	now := e.Now()
	ok, err := e.IsTerminated(ctx, h, now)
	if err != nil {
		return false, err
	}
	if ok {
		_ = e.TouchTerminated(ctx, h, now.Add(e.For))
	}
	return ok, nil
}

// Purge forgets the ids whose time is up.
func (e Ends) Purge(ctx context.Context) error {
	_, err := e.PurgeTerminated(ctx, e.Now())
	return err
}
