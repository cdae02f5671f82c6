package toolsearch

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
)

// BM25 parameters: the usual values.
const (
	k1 = 1.2
	b  = 0.75
)

// Field weights: a term in the tool's name says more about what it does
// than one in its description, which says more than one in a parameter.
const (
	weightName     = 3.0
	weightServer   = 1.0
	weightDesc     = 1.0
	weightProp     = 1.0
	weightPropDesc = 0.5
)

// Doc is the searchable text of one tool.
type Doc struct {
	Server      string // its server's name, a weak signal ("github")
	Name        string // the name the caller sees, display override applied
	Description string
	Props       []Prop // input schema properties, nested ones too
}

// Prop is one input schema property.
type Prop struct{ Name, Description string }

// maxSchemaDepth bounds the walk of nested object schemas.
const maxSchemaDepth = 4

// DocFromTool builds the Doc of a tool definition as an upstream sent it
// (name, description and inputSchema are read; the rest is ignored).
// name and description, when not "", replace the definition's own (a
// display override).
func DocFromTool(server, name, description string, raw json.RawMessage) Doc {
	var t struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	_ = json.Unmarshal(raw, &t) // a malformed tool is searchable by what it has
	d := Doc{Server: server, Name: cmp.Or(name, t.Name), Description: cmp.Or(description, t.Description)}
	d.Props = schemaProps(t.InputSchema, nil, 0)
	return d
}

func schemaProps(raw json.RawMessage, out []Prop, depth int) []Prop {
	if len(raw) == 0 || depth > maxSchemaDepth {
		return out
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Items      json.RawMessage            `json:"items"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return out
	}
	for _, name := range slices.Sorted(mapsKeys(s.Properties)) {
		var p struct {
			Description string `json:"description"`
		}
		_ = json.Unmarshal(s.Properties[name], &p)
		out = append(out, Prop{Name: name, Description: p.Description})
		out = schemaProps(s.Properties[name], out, depth+1)
	}
	return schemaProps(s.Items, out, depth+1)
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Index holds the term statistics of a fixed list of documents. It is
// immutable once built and safe for concurrent use; a changed catalog
// gets a new Index.
type Index struct {
	lens     []float64            // weighted length of each document
	postings map[string][]posting // term -> documents holding it, by doc
}

type posting struct {
	doc int
	tf  float64 // weighted term frequency
}

// NewIndex indexes docs; document i of a hit is docs[i].
func NewIndex(docs []Doc) *Index {
	ix := &Index{lens: make([]float64, len(docs)), postings: map[string][]posting{}}
	for i, d := range docs {
		tf := map[string]float64{}
		add := func(s string, w float64) {
			for _, t := range Tokenize(s) {
				tf[t] += w
				ix.lens[i] += w
			}
		}
		add(d.Name, weightName)
		add(d.Server, weightServer)
		add(d.Description, weightDesc)
		for _, p := range d.Props {
			add(p.Name, weightProp)
			add(p.Description, weightPropDesc)
		}
		for _, t := range slices.Sorted(mapsKeys(tf)) {
			ix.postings[t] = append(ix.postings[t], posting{doc: i, tf: tf[t]})
		}
	}
	return ix
}

// Len is the number of documents.
func (ix *Index) Len() int { return len(ix.lens) }

// Segment is one index and which of its documents a search may see.
type Segment struct {
	Index *Index
	// Visible[i] says whether document i takes part; nil: all do. A
	// document that does not take part is as if it were not indexed:
	// it counts in no statistic.
	Visible []bool
}

func (s Segment) visible(i int) bool { return s.Visible == nil || (i < len(s.Visible) && s.Visible[i]) }

// Hit is one ranked document: Doc of segment Seg.
type Hit struct {
	Seg, Doc int
	Score    float64
}

// Search ranks the visible documents of segs against query and returns
// at most limit hits with a positive score, best first (ties in segment
// and document order). The collection statistics (document count,
// average length, document frequencies) are those of the visible
// documents only.
func Search(segs []Segment, query string, limit int) []Hit {
	terms := slices.Compact(slices.Sorted(slices.Values(Tokenize(query))))
	if len(terms) == 0 || limit <= 0 {
		return nil
	}
	var n, total float64
	for _, s := range segs {
		for i, l := range s.Index.lens {
			if s.visible(i) {
				n++
				total += l
			}
		}
	}
	if n == 0 {
		return nil
	}
	avg := total / n
	scores := map[[2]int]float64{}
	for _, t := range terms {
		var df float64
		for _, s := range segs {
			for _, p := range s.Index.postings[t] {
				if s.visible(p.doc) {
					df++
				}
			}
		}
		if df == 0 {
			continue
		}
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for si, s := range segs {
			for _, p := range s.Index.postings[t] {
				if !s.visible(p.doc) {
					continue
				}
				norm := p.tf * (k1 + 1) / (p.tf + k1*(1-b+b*s.Index.lens[p.doc]/avg))
				scores[[2]int{si, p.doc}] += idf * norm
			}
		}
	}
	hits := make([]Hit, 0, len(scores))
	for k, sc := range scores {
		hits = append(hits, Hit{Seg: k[0], Doc: k[1], Score: sc})
	}
	slices.SortFunc(hits, func(a, b Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Seg, b.Seg); c != 0 {
			return c
		}
		return cmp.Compare(a.Doc, b.Doc)
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits
}
