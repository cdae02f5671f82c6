package main

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
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

// The names the gateway knows, to refuse a mistyped server or tool with
// a suggestion before the request is sent. They are looked up through
// the admin API; when it does not tell (an older gateway, a key that may
// not list servers), nothing is checked here and the gateway judges.

// gatewayServers is the names of the gateway's servers; ok is false
// when they could not be learned.
func gatewayServers(ctx context.Context, cl *adminClient) (names []string, ok bool) {
	var list struct {
		Servers *[]struct {
			Name string `json:"name"`
		} `json:"servers"`
	}
	if cl.get(ctx, "servers", &list) != nil || list.Servers == nil {
		return nil, false
	}
	for _, s := range *list.Servers {
		names = append(names, s.Name)
	}
	return names, true
}

// serverTools is the upstream names of server's tools; ok is false when
// they could not be learned.
func serverTools(ctx context.Context, cl *adminClient, server string) (names []string, ok bool) {
	var list struct {
		Tools *[]struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if cl.get(ctx, "servers/"+url.PathEscape(server)+"/tools", &list) != nil || list.Tools == nil {
		return nil, false
	}
	for _, t := range *list.Tools {
		names = append(names, t.Name)
	}
	return names, true
}

// unknownName is the usage error for name, not among known: what the
// flag names, and the closest known name when there is one.
func unknownName(flag, what, name string, known []string) error {
	return &usageError{fmt.Sprintf("%s: no %s %q%s", flag, what, name, didYouMean(name, known))}
}

// checkServerNames refuses a name that is not one of the gateway's
// servers but is close to one (a likely typo), suggesting it. Any other
// unknown name is left to the gateway, which refuses a key naming a
// server it does not have, and whose records may name a server since
// removed (a filter on them is not a mistake).
func checkServerNames(ctx context.Context, cl *adminClient, flag string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	known, ok := gatewayServers(ctx, cl)
	if !ok {
		return nil
	}
	for _, n := range names {
		if !slices.Contains(known, n) && closest(n, known) != "" {
			return unknownName(flag, "server", n, known)
		}
	}
	return nil
}

// checkToolNames refuses, for each server of tools, the tool names it
// does not have (when its tools can be learned), suggesting the closest:
// the gateway takes any name, and a key allowed a misspelt tool would
// fail only when the tool is called.
func checkToolNames(ctx context.Context, cl *adminClient, flag string, tools map[string][]string) error {
	servers := slices.Sorted(maps.Keys(tools))
	if err := checkServerNames(ctx, cl, flag, servers); err != nil {
		return err
	}
	for _, s := range servers {
		known, ok := serverTools(ctx, cl, s)
		if !ok {
			continue
		}
		for _, t := range tools[s] {
			if !slices.Contains(known, t) {
				return unknownName(flag, "tool of "+s, t, known)
			}
		}
	}
	return nil
}
