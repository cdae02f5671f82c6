package toolsearch

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"get_file_contents", []string{"get", "file", "content"}},
		{"searchRepositories", []string{"search", "repository"}},
		{"HTTPServer", []string{"http", "server"}},
		{"create-pull-request", []string{"create", "pull", "request"}},
		{"List the issues of a repo", []string{"list", "issue", "repo"}},
		{"utf8 v2Api", []string{"utf", "8", "v", "2", "api"}},
		{"searching branches", []string{"search", "branch"}},
		{"Übersicht größe", []string{"übersicht", "größe"}},
		{"anys thes", nil},     // stems that are stop words
		{"龾Ed", []string{"龾"}}, // U+9FBE is e9 be be: no byte-wise undoubling
		{strings.Repeat("Ⱥ", 20), []string{strings.Repeat("ⱥ", 13)}}, // cut to 40 bytes after lower-casing
		{"", nil},
		{"  --__  ", nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(Tokenize(tt.in), tt.want); diff != "" {
			t.Errorf("Tokenize(%q) (-got +want):\n%s", tt.in, diff)
		}
	}
}

func TestStem(t *testing.T) {
	for in, want := range map[string]string{
		"files": "file", "queries": "query", "branches": "branch", "status": "status",
		"running": "run", "created": "creat", "create": "create", "class": "class", "is": "is",
	} {
		if got := Stem(in); got != want {
			t.Errorf("Stem(%q) = %q, want %q", in, got, want)
		}
	}
}

var docs = []Doc{
	{Server: "github", Name: "create_issue", Description: "Create a new issue in a GitHub repository",
		Props: []Prop{{"owner", "Repository owner"}, {"repo", "Repository name"}, {"title", "Issue title"}}},
	{Server: "github", Name: "search_repositories", Description: "Search for GitHub repositories",
		Props: []Prop{{"query", "Search query"}}},
	{Server: "fs", Name: "read_file", Description: "Read the complete contents of a file from the file system",
		Props: []Prop{{"path", ""}}},
	{Server: "fs", Name: "write_file", Description: "Create a new file or overwrite an existing file",
		Props: []Prop{{"path", ""}, {"content", ""}}},
	{Server: "slack", Name: "slack_post_message", Description: "Post a new message to a Slack channel",
		Props: []Prop{{"channel_id", "The ID of the channel"}, {"text", "The message text"}}},
}

func names(hits []Hit, docs []Doc) []string {
	var out []string
	for _, h := range hits {
		out = append(out, docs[h.Doc].Name)
	}
	return out
}

func TestSearchRanks(t *testing.T) {
	ix := NewIndex(docs)
	tests := []struct {
		q    string
		want string
	}{
		{"open a bug report issue on github", "create_issue"},
		{"find repositories about kubernetes", "search_repositories"},
		{"show me what is in this file", "read_file"},
		{"overwrite the file content", "write_file"},
		{"send a message to the team channel", "slack_post_message"},
	}
	for _, tt := range tests {
		hits := Search([]Segment{{Index: ix}}, tt.q, 3)
		if len(hits) == 0 || docs[hits[0].Doc].Name != tt.want {
			t.Errorf("Search(%q) = %v, want %s first", tt.q, names(hits, docs), tt.want)
		}
	}
}

func TestSearchLimitAndOrder(t *testing.T) {
	ix := NewIndex(docs)
	hits := Search([]Segment{{Index: ix}}, "file", 10)
	if len(hits) != 2 {
		t.Fatalf("hits for file: %v, want the two file tools", names(hits, docs))
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Errorf("not sorted: %v", hits)
		}
	}
	if got := Search([]Segment{{Index: ix}}, "file", 1); len(got) != 1 {
		t.Errorf("limit 1: %d hits", len(got))
	}
	if got := Search([]Segment{{Index: ix}}, "the of and", 10); got != nil {
		t.Errorf("stop words only: %v", got)
	}
	if got := Search([]Segment{{Index: ix}}, "file", 0); got != nil {
		t.Errorf("limit 0: %v", got)
	}
}

// TestSearchHiddenLeavesNoTrace: a search over an index with some
// documents hidden scores exactly like a search over an index of the
// visible documents alone, so nothing (not the scores, not the order, not
// the count) depends on what the caller may not see.
func TestSearchHiddenLeavesNoTrace(t *testing.T) {
	full := NewIndex(docs)
	vis := []bool{true, false, true, false, true}
	var kept []Doc
	for i, d := range docs {
		if vis[i] {
			kept = append(kept, d)
		}
	}
	alone := NewIndex(kept)
	for _, q := range []string{"create file", "github repositories search", "message channel", "file path content"} {
		got := Search([]Segment{{Index: full, Visible: vis}}, q, 10)
		want := Search([]Segment{{Index: alone}}, q, 10)
		if len(got) != len(want) {
			t.Fatalf("%q: %d hits, want %d", q, len(got), len(want))
		}
		for i := range got {
			if docs[got[i].Doc].Name != kept[want[i].Doc].Name || math.Abs(got[i].Score-want[i].Score) > 1e-12 {
				t.Errorf("%q hit %d: %s %v, want %s %v", q, i, docs[got[i].Doc].Name, got[i].Score, kept[want[i].Doc].Name, want[i].Score)
			}
		}
		for _, h := range got {
			if !vis[h.Doc] {
				t.Errorf("%q: hidden %s returned", q, docs[h.Doc].Name)
			}
		}
	}
}

// TestSearchSegments: two segments rank as one index of both would.
func TestSearchSegments(t *testing.T) {
	a, b := NewIndex(docs[:2]), NewIndex(docs[2:])
	one := NewIndex(docs)
	got := Search([]Segment{{Index: a}, {Index: b}}, "create new file issue", 10)
	want := Search([]Segment{{Index: one}}, "create new file issue", 10)
	if len(got) != len(want) {
		t.Fatalf("%d hits, want %d", len(got), len(want))
	}
	for i := range got {
		gi := got[i].Doc
		if got[i].Seg == 1 {
			gi += 2
		}
		if gi != want[i].Doc || math.Abs(got[i].Score-want[i].Score) > 1e-12 {
			t.Errorf("hit %d: doc %d %v, want %d %v", i, gi, got[i].Score, want[i].Doc, want[i].Score)
		}
	}
}

func TestDocFromTool(t *testing.T) {
	raw := []byte(`{"name":"query","description":"Run SQL","inputSchema":{"type":"object","properties":{"sql":{"type":"string","description":"The SQL"},"opts":{"type":"object","properties":{"timeout":{"description":"secs"}}},"tags":{"type":"array","items":{"type":"object","properties":{"label":{}}}}}}}`)
	got := DocFromTool("pg", "", "", raw)
	want := Doc{Server: "pg", Name: "query", Description: "Run SQL", Props: []Prop{
		{"opts", ""}, {"timeout", "secs"}, {"sql", "The SQL"}, {"tags", ""}, {"label", ""},
	}}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("DocFromTool (-got +want):\n%s", diff)
	}
	if got := DocFromTool("pg", "pg_query", "Runs it", raw); got.Name != "pg_query" || got.Description != "Runs it" {
		t.Errorf("override not applied: %+v", got)
	}
	if got := DocFromTool("x", "", "", []byte(`not json`)); got.Name != "" || got.Props != nil {
		t.Errorf("malformed: %+v", got)
	}
}
