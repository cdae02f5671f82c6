package postgres

import (
	"strconv"
	"strings"
	"testing"
)

// The multi-row INSERT texts are built on first use, each the same as
// insertToolCalls gives, with exactly rows*toolCallParams parameters
// numbered in order, and the builder's estimate never reallocates.
func TestInsertToolCallsSQLLazyAndExact(t *testing.T) {
	for i, n := range insertChunks {
		got := insertToolCallsSQL[i]()
		if got != insertToolCalls(n) {
			t.Fatalf("chunk %d (%d rows): lazy text differs from insertToolCalls", i, n)
		}
		if again := insertToolCallsSQL[i](); again != got {
			t.Fatalf("chunk %d: second call differs", i)
		}
		params := n * toolCallParams
		if c := strings.Count(got, "$"); c != params {
			t.Fatalf("chunk %d: %d parameters, want %d", i, c, params)
		}
		last := "$" + strconv.Itoa(params) + ")"
		if !strings.HasSuffix(got, last) {
			t.Fatalf("chunk %d: ends %q, want suffix %q", i, got[len(got)-20:], last)
		}
		if strings.Contains(got, "$"+strconv.Itoa(params+1)) {
			t.Fatalf("chunk %d: parameter past %d", i, params)
		}
		if est := 200 + n*(toolCallParams*8+4); len(got) > est {
			t.Fatalf("chunk %d: %d bytes, over the builder's estimate %d", i, len(got), est)
		}
	}
}
