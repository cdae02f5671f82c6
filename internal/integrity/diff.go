package integrity

import "strings"

// maxDiffLines bounds the LCS table of Diff (lines of each side): beyond
// it the diff shows the whole old definition removed and the new added.
const maxDiffLines = 2000

// Diff is a readable line diff of two pretty definitions (Pretty): lines
// only in old start with "- ", only in new with "+ ", common ones with
// "  ". An empty old (a new tool) is all additions.
func Diff(old, new string) string {
	a, b := splitLines(old), splitLines(new)
	var out strings.Builder
	emit := func(prefix, line string) {
		out.WriteString(prefix)
		out.WriteString(line)
		out.WriteByte('\n')
	}
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		for _, l := range a {
			emit("- ", l)
		}
		for _, l := range b {
			emit("+ ", l)
		}
		return out.String()
	}
	// lcs[i][j]: the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			emit("  ", a[i])
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			emit("- ", a[i])
			i++
		default:
			emit("+ ", b[j])
			j++
		}
	}
	for ; i < len(a); i++ {
		emit("- ", a[i])
	}
	for ; j < len(b); j++ {
		emit("+ ", b[j])
	}
	return out.String()
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
