package toolsearch

import (
	"maps"
	"sync"
)

// ListsPerServer bounds the indexes Indexes keeps of one server.
const ListsPerServer = 4

// Indexes owns the search indexes of each server's recent tool lists: a
// server reached with each caller's own credentials has one list per
// credential, and callers take turns, so a few are kept per server. K
// says which list an index was built from (the gateway's: the list's
// identity and the state that named its tools). The zero value is ready;
// safe for concurrent use.
type Indexes[K comparable] struct {
	// mu guards the fields below.
	mu sync.Mutex
	by map[string]*serverIndexes[K] // by server
}

// serverIndexes are one server's recent indexes, replaced in turn.
type serverIndexes[K comparable] struct {
	// mu guards the fields below; held while a slot is read or replaced,
	// never while an index is built.
	mu   sync.Mutex
	list [ListsPerServer]*keyedIndex[K]
	next int // the slot replaced next
}

type keyedIndex[K comparable] struct {
	key K
	ix  *Index
}

// For returns the index of server's list key, built from docs() when the
// list is new (the oldest of the server's indexes makes room). Concurrent
// first searches of one list may build one each, which costs time, not
// correctness.
func (x *Indexes[K]) For(server string, key K, docs func() []Doc) *Index {
	si := x.server(server)
	si.mu.Lock()
	for _, e := range si.list {
		if e != nil && e.key == key {
			si.mu.Unlock()
			return e.ix
		}
	}
	si.mu.Unlock()
	ix := NewIndex(docs())
	si.mu.Lock()
	si.list[si.next] = &keyedIndex[K]{key: key, ix: ix}
	si.next = (si.next + 1) % ListsPerServer
	si.mu.Unlock()
	return ix
}

func (x *Indexes[K]) server(name string) *serverIndexes[K] {
	x.mu.Lock()
	defer x.mu.Unlock()
	si := x.by[name]
	if si == nil {
		if x.by == nil {
			x.by = map[string]*serverIndexes[K]{}
		}
		si = &serverIndexes[K]{}
		x.by[name] = si
	}
	return si
}

// ToolID names a tool by its server and its upstream name.
type ToolID struct{ Server, Name string }

// Usage owns the count of successful tool calls per route path, in this
// replica's memory (reset by a restart); the gateway counts hybrid routes
// only, whose paths are configured and tools are catalog tools, so it is
// bounded. The zero value is ready; safe for concurrent use.
type Usage struct {
	// mu guards the fields below.
	mu     sync.Mutex
	counts map[string]map[ToolID]int64 // by route path
}

// Add counts one successful call of server's tool name on path.
func (u *Usage) Add(path, server, name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.counts == nil {
		u.counts = map[string]map[ToolID]int64{}
	}
	m := u.counts[path]
	if m == nil {
		m = map[ToolID]int64{}
		u.counts[path] = m
	}
	m[ToolID{server, name}]++
}

// Counts returns a copy of path's counts.
func (u *Usage) Counts(path string) map[ToolID]int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.counts[path])
}
