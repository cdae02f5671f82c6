package session

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Entry is what a Table holds: a type that embeds a *Session (the
// gateway's, which adds its route and upstream binding), comparable so
// that a copy is removed only by itself.
type Entry interface {
	comparable
	Base() *Session
}

// Table is the sessions one replica holds: by local id, by hash (what the
// fleet's notes name) and by owner (the per-owner cap, S4.3). A session
// ended stays in it until its owner removes it (Remove): lookups skip it.
// The zero value is empty and ready.
type Table[T Entry] struct {
	// mu guards the fields below. It is never held while a session's own
	// lock is taken, nor while calling out.
	mu      sync.Mutex
	byID    map[string]T
	byHash  map[string]T
	byOwner map[string]map[T]struct{}
}

// initLocked makes the maps of a zero Table.
func (t *Table[T]) initLocked() {
	if t.byID == nil {
		t.byID, t.byHash, t.byOwner = map[string]T{}, map[string]T{}, map[string]map[T]struct{}{}
	}
}

// putLocked stores e, replacing what had its id.
func (t *Table[T]) putLocked(e T) {
	s := e.Base()
	if old, ok := t.byID[s.id]; ok {
		t.dropOwnerLocked(old)
	}
	t.byID[s.id] = e
	t.byHash[s.hash] = e
	owner := s.Owner()
	own := t.byOwner[owner]
	if own == nil {
		own = map[T]struct{}{}
		t.byOwner[owner] = own
	}
	own[e] = struct{}{}
}

func (t *Table[T]) dropOwnerLocked(e T) {
	owner := e.Base().Owner()
	if own := t.byOwner[owner]; own != nil {
		delete(own, e)
		if len(own) == 0 {
			delete(t.byOwner, owner)
		}
	}
}

// Insert makes e findable, replacing any session of its id.
func (t *Table[T]) Insert(e T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.initLocked()
	t.putLocked(e)
}

// InsertNew makes e findable unless the table holds a session of its id
// already (concurrent first requests on one sealed id): then that one is
// returned, ended or not, and inserted is false.
func (t *Table[T]) InsertNew(e T) (held T, inserted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.initLocked()
	if old, ok := t.byID[e.Base().id]; ok {
		return old, false
	}
	t.putLocked(e)
	return e, true
}

// Remove takes e out of the table, and only e: a copy resumed from the
// same sealed id may already have taken its place.
func (t *Table[T]) Remove(e T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := e.Base()
	if t.byID[s.id] == e {
		delete(t.byID, s.id)
	}
	if t.byHash[s.hash] == e {
		delete(t.byHash, s.hash)
	}
	t.dropOwnerLocked(e)
}

func (t *Table[T]) get(m func() map[string]T, key string) (T, bool) {
	t.mu.Lock()
	e, ok := m()[key]
	t.mu.Unlock()
	if !ok || e.Base().Closed() {
		var zero T
		return zero, false
	}
	return e, true
}

// Live finds the live session whose client holds sid: by its local id,
// or (sealed) by the local id local that the sealed sid names. A session
// with a sealed token is found by that token only: the local id inside is
// not a credential.
func (t *Table[T]) Live(sid, local string, sealed bool) (T, bool) {
	if !sealed {
		local = sid
	}
	e, ok := t.get(func() map[string]T { return t.byID }, local)
	if ok && (sealed || e.Base().token == "") {
		return e, true
	}
	var zero T
	return zero, false
}

// ByHash is the live session whose id hashes to h.
func (t *Table[T]) ByHash(h string) (T, bool) {
	return t.get(func() map[string]T { return t.byHash }, h)
}

// Get is the session of local id id, ended or not, whatever its token:
// for tests and for what must see a session until it is removed.
func (t *Table[T]) Get(id string) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.byID[id]
	return e, ok
}

// All is every session in the table (some may have ended), a snapshot:
// the caller may end sessions while going through it.
func (t *Table[T]) All() []T {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]T, 0, len(t.byID))
	for _, e := range t.byID {
		out = append(out, e)
	}
	return out
}

// Len is how many sessions the table holds.
func (t *Table[T]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// Owned is owner's live sessions.
func (t *Table[T]) Owned(owner string) []T {
	t.mu.Lock()
	own := make([]T, 0, len(t.byOwner[owner]))
	for e := range t.byOwner[owner] {
		own = append(own, e)
	}
	t.mu.Unlock()
	return slices.DeleteFunc(own, func(e T) bool { return e.Base().Closed() })
}

// Admit applies the per-owner cap max before a new session of owner is
// created (S4.3): the owner's own least recently used sessions with
// nothing in flight are evicted (evict must end and remove them) to make
// room; other owners are never touched. false: still at the cap. max <= 0:
// no cap.
func (t *Table[T]) Admit(owner string, max int, evict func(T)) bool {
	if max <= 0 {
		return true
	}
	own := t.Owned(owner)
	if len(own) < max {
		return true
	}
	slices.SortFunc(own, func(a, b T) int {
		return cmp.Compare(a.Base().lastUsed.Load(), b.Base().lastUsed.Load())
	})
	excess := len(own) - max + 1
	for _, e := range own {
		if excess == 0 {
			break
		}
		if e.Base().inflight.Load() == 0 {
			evict(e)
			excess--
		}
	}
	return excess == 0
}

// Idle is the sessions unused since cutoff with nothing in flight and no
// live standalone stream: what the idle sweep ends (S12).
func (t *Table[T]) Idle(cutoff time.Time) []T {
	c := cutoff.UnixNano()
	var out []T
	for _, e := range t.All() {
		s := e.Base()
		if s.inflight.Load() == 0 && s.lastUsed.Load() < c && !s.Streaming() {
			out = append(out, e)
		}
	}
	return out
}
