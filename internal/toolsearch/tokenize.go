// Package toolsearch ranks tool definitions against a free-text query
// with BM25 (SPEC S20). It owns the tokenizer, the per-catalog index and
// the scoring; it knows nothing of callers, routes or the wire: the
// gateway decides which documents a caller may see and passes that in,
// and the statistics of a search are taken over those documents only, so
// that a hidden tool shapes no score, rank or count.
//
// Flow: catalog items -> DocFromTool -> NewIndex (once per catalog
// version) -> Search(segments with visibility, query, limit) -> hits.
//
// It also owns the search state a replica keeps (state.go): Indexes, the
// indexes of each server's recent lists, and Usage, the successful calls
// per route a hybrid route lists its most used tools by.
package toolsearch

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tokenize splits s into lower-case terms: on every rune that is not a
// letter or digit, at camelCase boundaries ("getFileContents" -> get,
// file, contents; "HTTPServer" -> http, server) and between letters and
// digits; stop words are dropped and each term is lightly stemmed
// (Stem), so a query and a document meet on "files"/"file",
// "searching"/"search".
func Tokenize(s string) []string {
	var out []string
	for _, w := range words(s) {
		// Cut after lower-casing, which can make a rune longer (Ⱥ -> ⱥ).
		w = truncate(strings.ToLower(w), maxTermLen)
		if stopWords[w] {
			continue
		}
		// A stem can be a stop word too ("anys" -> "any").
		if t := Stem(w); t != "" && !stopWords[t] {
			out = append(out, t)
		}
	}
	return out
}

// maxTermLen bounds one term: longer runs are hashes, ids or base64,
// never useful to match on, and cut to keep the index small.
const maxTermLen = 40

// truncate cuts w to at most n bytes at a rune boundary.
func truncate(w string, n int) string {
	if len(w) <= n {
		return w
	}
	w = w[:n]
	for len(w) > 0 && !utf8.ValidString(w) {
		w = w[:len(w)-1]
	}
	return w
}

// words splits s into its raw word parts, case kept.
func words(s string) []string {
	var (
		out   []string
		start = -1
		prev  rune // previous rune of the current word
	)
	flush := func(end int) {
		if start >= 0 && end > start {
			out = append(out, s[start:end])
		}
		start = -1
	}
	for i, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush(i)
			prev = 0
			continue
		}
		if start >= 0 {
			next, _ := utf8.DecodeRuneInString(s[i+utf8.RuneLen(r):])
			switch {
			case unicode.IsLower(prev) && unicode.IsUpper(r):
				flush(i) // fileName
			case unicode.IsUpper(prev) && unicode.IsUpper(r) && unicode.IsLower(next):
				flush(i) // HTTPServer: the S starts "Server"
			case unicode.IsDigit(prev) != unicode.IsDigit(r):
				flush(i) // utf8, v2
			}
		}
		if start < 0 {
			start = i
		}
		prev = r
	}
	flush(len(s))
	return out
}

// Stem strips a few English suffixes from a lower-case word (plurals,
// -ing, -ed), keeping at least three letters; it is deliberately weak:
// its only job is to make inflections of one word meet.
func Stem(w string) string {
	n := len(w)
	switch {
	case n > 4 && strings.HasSuffix(w, "ies"):
		return w[:n-3] + "y"
	case n > 5 && strings.HasSuffix(w, "sses"):
		return w[:n-2]
	case n > 4 && (strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "xes")):
		return w[:n-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		return w[:n-1]
	case n > 5 && strings.HasSuffix(w, "ing"):
		return undouble(w[:n-3])
	case n > 4 && strings.HasSuffix(w, "ed"):
		return undouble(w[:n-2])
	}
	return w
}

// undouble turns "runn" (from running) back into "run".
func undouble(w string) string {
	// ASCII letters only: the bytes of one multi-byte rune can repeat too.
	if n := len(w); n >= 3 && w[n-1] == w[n-2] && 'a' <= w[n-1] && w[n-1] <= 'z' && !strings.ContainsRune("aeioulsz", rune(w[n-1])) {
		return w[:n-1]
	}
	return w
}

// stopWords carry no meaning for tool choice.
var stopWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the and or of to in on at by for from with into onto as is are be been
		was were it its this that these those i me my we our you your he she they them their there here
		can could would should will shall may might must do does did done have has had please want need
		so if then than also just some any all each every which what when where who whom whose how
		about over under via using use used one`) {
		stopWords[w] = true
	}
}
