// Package toolsearch_test measures tool search (SPEC S20) on a catalog of
// real MCP servers' tools (catalog.json, with where each came from) and
// hand-labelled tasks (tasks.json): tokens of tools/list with and without
// search, recall@1/5/10 of search_tools, and the latency of a search.
//
//	go test ./bench/toolsearch -run TestRecall -v
//	go test ./bench/toolsearch -run '^$' -bench . -benchmem
package toolsearch_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tiktoken-go/tokenizer"

	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/toolsearch"
)

type catalogFile struct {
	Servers []struct {
		Server string            `json:"server"`
		Source string            `json:"source"`
		Tools  []json.RawMessage `json:"tools"`
	} `json:"servers"`
}

type task struct {
	Task string `json:"task"`
	Tool string `json:"tool"`
}

type corpus struct {
	names [][]string // per segment, exposed names (server__tool)
	segs  []toolsearch.Segment
	tools []json.RawMessage // every tool as /mcp lists it, name prefixed
	tasks []task
}

// sep is the default tool name separator of a /mcp route.
const sep = "__"

func load(t testing.TB) *corpus {
	t.Helper()
	var cf catalogFile
	readJSON(t, "catalog.json", &cf)
	var tf struct {
		Tasks []task `json:"tasks"`
	}
	readJSON(t, "tasks.json", &tf)
	c := &corpus{tasks: tf.Tasks}
	for _, s := range cf.Servers {
		if s.Source == "" {
			t.Fatalf("server %s: no source", s.Server)
		}
		var docs []toolsearch.Doc
		var names []string
		// In name order, as the gateway's catalog holds them: ties rank
		// in list order.
		slices.SortStableFunc(s.Tools, func(a, b json.RawMessage) int {
			na, _ := jsonName(a)
			nb, _ := jsonName(b)
			return strings.Compare(na, nb)
		})
		for _, raw := range s.Tools {
			d := toolsearch.DocFromTool(s.Server, "", "", raw)
			docs = append(docs, d)
			names = append(names, s.Server+sep+d.Name)
			var m map[string]json.RawMessage
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			m["name"], _ = json.Marshal(s.Server + sep + d.Name)
			b, _ := json.Marshal(m)
			c.tools = append(c.tools, b)
		}
		c.names = append(c.names, names)
		c.segs = append(c.segs, toolsearch.Segment{Index: toolsearch.NewIndex(docs)})
	}
	return c
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// search is what the gateway does per search_tools call: a visibility
// mask per server (all visible here), then the ranking.
func (c *corpus) search(q string, limit int) []string {
	segs := make([]toolsearch.Segment, len(c.segs))
	for i, s := range c.segs {
		vis := make([]bool, s.Index.Len())
		for j := range vis {
			vis[j] = true
		}
		segs[i] = toolsearch.Segment{Index: s.Index, Visible: vis}
	}
	var out []string
	for _, h := range toolsearch.Search(segs, q, limit) {
		out = append(out, c.names[h.Seg][h.Doc])
	}
	return out
}

// Floors: the measured values (README "Tool search") less a margin; a
// ranking change that loses more fails here.
const (
	floorAt1  = 0.83
	floorAt5  = 0.95
	floorAt10 = 0.97
)

func TestRecall(t *testing.T) {
	c := load(t)
	if len(c.tools) < 300 || len(c.tasks) < 100 {
		t.Fatalf("%d tools, %d tasks: the benchmark needs at least 300 and 100", len(c.tools), len(c.tasks))
	}
	enc, err := tokenizer.Get(tokenizer.Cl100kBase)
	if err != nil {
		t.Fatal(err)
	}
	tokens := func(b []byte) int {
		ids, _, _ := enc.Encode(string(b))
		return len(ids)
	}
	full, _ := json.Marshal(map[string]any{"tools": c.tools})
	two, _ := json.Marshal(map[string]any{"tools": gateway.SearchToolDefinitions()})

	var hit1, hit5, hit10 int
	var durs []time.Duration
	var resultTokens int
	for _, tk := range c.tasks {
		start := time.Now()
		got := c.search(tk.Task, 10)
		durs = append(durs, time.Since(start))
		rank := slices.Index(got, tk.Tool)
		switch {
		case rank == 0:
			hit1++
			fallthrough
		case rank >= 0 && rank < 5:
			hit5++
			fallthrough
		case rank >= 0:
			hit10++
		}
		if rank != 0 {
			t.Logf("miss@1 %q: want %s, got %v", tk.Task, tk.Tool, got[:min(3, len(got))])
		}
		// What the model reads back: the top 5 with their schemas.
		var top []json.RawMessage
		for _, name := range got[:min(5, len(got))] {
			for _, raw := range c.tools {
				if n, _ := jsonName(raw); n == name {
					top = append(top, raw)
				}
			}
		}
		b, _ := json.Marshal(map[string]any{"tools": top})
		resultTokens += tokens(b)
	}
	slices.Sort(durs)
	n := float64(len(c.tasks))
	r1, r5, r10 := float64(hit1)/n, float64(hit5)/n, float64(hit10)/n
	p50, p99 := durs[len(durs)/2], durs[len(durs)*99/100]
	fmt.Printf("\ncatalog: %d tools from %d servers; %d labelled tasks\n", len(c.tools), len(c.segs), len(c.tasks))
	fmt.Printf("| measure | value |\n|---|---|\n")
	fmt.Printf("| tools/list tokens, all tools (cl100k_base) | %d (%d bytes) |\n", tokens(full), len(full))
	fmt.Printf("| tools/list tokens, search mode | %d (%d bytes) |\n", tokens(two), len(two))
	fmt.Printf("| search_tools result tokens, top 5 (mean) | %.0f |\n", float64(resultTokens)/n)
	fmt.Printf("| recall@1 | %.3f (%d/%d) |\n", r1, hit1, len(c.tasks))
	fmt.Printf("| recall@5 | %.3f (%d/%d) |\n", r5, hit5, len(c.tasks))
	fmt.Printf("| recall@10 | %.3f (%d/%d) |\n", r10, hit10, len(c.tasks))
	fmt.Printf("| search latency p50 / p99 (%d tools) | %v / %v |\n\n", len(c.tools), p50.Round(time.Microsecond), p99.Round(time.Microsecond))
	if r1 < floorAt1 || r5 < floorAt5 || r10 < floorAt10 {
		t.Errorf("recall @1 %.3f @5 %.3f @10 %.3f under the floors %.2f %.2f %.2f", r1, r5, r10, floorAt1, floorAt5, floorAt10)
	}
}

func jsonName(raw json.RawMessage) (string, error) {
	var v struct {
		Name string `json:"name"`
	}
	err := json.Unmarshal(raw, &v)
	return v.Name, err
}

// BenchmarkSearch is one search_tools ranking over the whole catalog.
func BenchmarkSearch(b *testing.B) {
	c := load(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.search(c.tasks[i%len(c.tasks)].Task, 10)
		i++
	}
}

// BenchmarkIndex is rebuilding the whole catalog's index (a list_changed
// of every server at once).
func BenchmarkIndex(b *testing.B) {
	var cf catalogFile
	readJSON(b, "catalog.json", &cf)
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range cf.Servers {
			docs := make([]toolsearch.Doc, len(s.Tools))
			for i, raw := range s.Tools {
				docs[i] = toolsearch.DocFromTool(s.Server, "", "", raw)
			}
			toolsearch.NewIndex(docs)
		}
	}
}
