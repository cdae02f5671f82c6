package relay

import (
	"context"
	"strings"
	"sync"
)

// Confirmed terminations (see AnnounceEnded). A replica that ended its
// copy of an announced session publishes "<hash> <instance>" on
// TopicEndedCopy; the announcer counts distinct instances against the
// number of subscriptions its announcement reached (the PubSub's count,
// its own follower included). Counting instances, not messages, keeps
// two announcements of one session (two administrators at once, a
// DELETE meanwhile) from confirming each other: a replica that confirmed
// either has ended its copy.

// endWaits holds this replica's announcements waiting for confirmations,
// by session hash. Safe for concurrent use.
type endWaits struct {
	mu    sync.Mutex
	waits map[string]map[*endWait]struct{}
}

// endWait is one announcement of one session.
type endWait struct {
	hash string
	// want is how many replicas must confirm: -1 until the publish
	// said how many subscriptions it reached. Guarded by endWaits.mu,
	// as is from.
	want int
	from map[string]struct{}
	done chan struct{} // closed once want replicas confirmed
}

// add registers an announcement of hash, before it is published.
func (e *endWaits) add(hash string) *endWait {
	w := &endWait{hash: hash, want: -1, from: map[string]struct{}{}, done: make(chan struct{})}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.waits == nil {
		e.waits = map[string]map[*endWait]struct{}{}
	}
	if e.waits[hash] == nil {
		e.waits[hash] = map[*endWait]struct{}{}
	}
	e.waits[hash][w] = struct{}{}
	return w
}

// expect sets how many replicas heard w's announcement.
func (e *endWaits) expect(w *endWait, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w.want = n
	w.check()
}

// heard counts a confirmation ("<hash> <instance>") for every
// announcement of its session waiting here; anything else is ignored.
func (e *endWaits) heard(confirmation string) {
	hash, instance, ok := strings.Cut(confirmation, " ")
	if !ok || len(hash) != 64 || instance == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for w := range e.waits[hash] {
		w.from[instance] = struct{}{}
		w.check()
	}
}

// drop forgets w, answered or not.
func (e *endWaits) drop(w *endWait) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ws := e.waits[w.hash]
	delete(ws, w)
	if len(ws) == 0 {
		delete(e.waits, w.hash)
	}
}

// check closes done once enough replicas confirmed; e.mu is held.
func (w *endWait) check() {
	if w.want >= 0 && len(w.from) >= w.want && !w.confirmed() {
		close(w.done)
	}
}

// confirmed reports whether every replica that heard w confirmed.
func (w *endWait) confirmed() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// confirmEnded tells the announcer of hash's end that this replica's
// copy ended (or that it held none). A failure is logged: the announcer
// then reports the session's end as unconfirmed.
func (b *Bus) confirmEnded(ctx context.Context, hash string) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	if _, err := b.o.PubSub.Publish(ctx, TopicEndedCopy, []byte(hash+" "+b.o.Instance)); err != nil {
		b.o.Logger.Warn("could not confirm ending a terminated session's copy to the replica that ended it", "error", err)
	}
}
