package toolsearch

import (
	"sync"
	"testing"
)

// Indexes keeps ListsPerServer indexes per server, builds one only for a
// list it has not seen, and keeps servers apart.
func TestIndexesKeepRecentLists(t *testing.T) {
	var x Indexes[int]
	builds := 0
	docs := func() []Doc { builds++; return []Doc{{Name: "t"}} }
	first := x.For("s", 0, docs)
	if x.For("s", 0, docs) != first || builds != 1 {
		t.Fatalf("the same list: %d builds, want 1", builds)
	}
	if x.For("other", 0, docs) == first {
		t.Error("another server's list got the first server's index")
	}
	for k := 1; k < ListsPerServer; k++ {
		x.For("s", k, docs)
	}
	if x.For("s", 0, docs) != first {
		t.Errorf("%d lists: the first one's index was rebuilt", ListsPerServer)
	}
	x.For("s", ListsPerServer, docs)
	if x.For("s", 0, docs) == first {
		t.Errorf("more than %d lists kept", ListsPerServer)
	}
}

// Usage counts per path and tool, and Counts is a copy.
func TestUsageCounts(t *testing.T) {
	var u Usage
	if c := u.Counts("/mcp"); len(c) != 0 {
		t.Fatalf("nothing counted: %v", c)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { u.Add("/mcp", "a", "t") })
	}
	wg.Wait()
	u.Add("/other", "a", "t")
	c := u.Counts("/mcp")
	if c[ToolID{"a", "t"}] != 10 || len(c) != 1 {
		t.Errorf("counts: %v, want a/t 10", c)
	}
	c[ToolID{"a", "t"}] = 0
	if u.Counts("/mcp")[ToolID{"a", "t"}] != 10 {
		t.Error("Counts returned the owner's map")
	}
}
