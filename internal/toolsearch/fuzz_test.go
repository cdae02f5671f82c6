package toolsearch

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzTokenize: terms are non-empty, bounded, made of letters and digits
// only, never stop words; Tokenize is deterministic; a search with the
// text as query neither panics nor breaks its ordering and limit.
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"get_file_contents", "HTTPServer v2", "Übersicht", "a\xffb", "x" + strings.Repeat("y", 100), "ABCdefGHI", "123abc", "..."} {
		f.Add(s)
	}
	ix := NewIndex(docs)
	f.Fuzz(func(t *testing.T, s string) {
		terms := Tokenize(s)
		for _, term := range terms {
			if term == "" || len(term) > maxTermLen || !utf8.ValidString(term) || stopWords[term] {
				t.Fatalf("bad term %q from %q", term, s)
			}
			for _, r := range term {
				if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					t.Fatalf("term %q holds %q", term, r)
				}
			}
		}
		if again := Tokenize(s); strings.Join(again, "\x00") != strings.Join(terms, "\x00") {
			t.Fatalf("not deterministic: %q vs %q", terms, again)
		}
		hits := Search([]Segment{{Index: ix, Visible: []bool{true, false, true}}}, s, 3)
		if len(hits) > 3 {
			t.Fatalf("%d hits over limit", len(hits))
		}
		for i, h := range hits {
			if h.Doc == 1 || h.Doc >= 3 || h.Score <= 0 || (i > 0 && h.Score > hits[i-1].Score) {
				t.Fatalf("bad hits %v", hits)
			}
		}
	})
}
