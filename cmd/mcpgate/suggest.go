package main

import (
	"fmt"
	"strings"
)

// didYouMean is ` (did you mean "x"?)` for the candidate closest to s,
// or "" when none is close enough to be the likely intent.
func didYouMean(s string, candidates []string) string {
	if best := closest(s, candidates); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// closest is the candidate with the smallest edit distance to s (case
// insensitive), if that distance is small for s's length: at most 2, or
// a third of s for longer words, and less than s itself (two letters
// are not a typo of anything). Ties go to the earlier candidate.
func closest(s string, candidates []string) string {
	ls := strings.ToLower(s)
	n := len([]rune(ls))
	limit := max(2, n/3)
	best, bestD := "", limit+1
	for _, c := range candidates {
		if d := editDistance(ls, strings.ToLower(c)); d < bestD && d < n {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in runes, with a
// swap of two neighbours counting one (Damerau's "restricted" distance:
// "sevre" is one step from "serve").
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// d[i][j]: distance of ra[:i] and rb[:j]; three rows suffice.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
