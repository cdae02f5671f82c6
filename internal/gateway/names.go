package gateway

// Names a route exposes (SPEC S6.1, S6.3). On a route of several servers
// a tool or prompt is exposed as <server><sep><display name>, on a
// single-server route as its display name (a tool's override name, else
// the upstream's own). Upstreams choose their item names, so a name a
// client sends is resolved back by exact lookup among the items the route
// would expose under it (candidates, then the catalog), never by cutting
// it at a separator:
//
//	"a___x" on /mcp with servers a and a_ (sep "__"):
//	  candidates: a's tool "_x", a_'s tool "x" -> both exist -> refused
//
// Server names may not begin or end with a character of the separator
// (config), which makes <server><sep> prefixes unambiguous; what is left
// (an override's display name that the upstream also lists, a config that
// bypassed validation) is handled here: a name that more than one item
// would have is left out of every list, refused on call, and reported once
// (log and mcpgate_catalog_name_conflicts_total).
//
// Resource URIs are not renamed, except MCP Apps views (ui://) and view
// templates, which a merged route namespaces like names (apps.go); a URI
// that more than one server of a route claims (lists it, or has a
// template matching it) is treated the same way (claimURI in dispatch.go).

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// toolRef is one upstream item: its server and its upstream name.
type toolRef struct{ server, name string }

// exposed is the downstream name of a tool or prompt of server: a tool's
// display name when the server's config overrides it (S6.3; overrides are
// of tools only), prefixed on routes of several servers.
func (g *Gateway) exposed(rt *route, k catalog.Kind, server, name string) string {
	if k == catalog.Tools {
		if o, ok := g.current().overrides[server][name]; ok && o.Name != "" {
			name = o.Name
		}
	}
	if !rt.prefixed {
		return name
	}
	return server + g.sep + name
}

// candidates are the items of kind k (tools or prompts) that rt would
// expose as name, by configuration alone: for each server of the route
// whose prefix name carries (every server of an unprefixed route), the
// tool an override shows under the rest, and the rest itself unless an
// override shows that tool under another name. Items the route's view
// hides are not candidates (S6.2). Whether each exists is the catalog's
// to say. They are appended to out (a caller's buffer, so that the usual
// one or two need no allocation).
func (g *Gateway) candidates(out []toolRef, rt *route, k catalog.Kind, name string) []toolRef {
	st := g.current()
	for _, server := range rt.servers {
		shown := name
		if rt.prefixed {
			rest, ok := strings.CutPrefix(name, server+g.sep)
			if !ok {
				continue
			}
			shown = rest
		}
		if shown == "" {
			continue
		}
		if k == catalog.Tools {
			up, renamed := st.reverse[server][shown]
			if renamed && rt.allows(k, server, up) {
				out = append(out, toolRef{server, up})
			}
			if renamed && up == shown {
				continue // an override naming a tool after itself
			}
			if o, ok := st.overrides[server][shown]; ok && o.Name != "" && o.Name != shown {
				continue // shown under its display name only
			}
		}
		if rt.allows(k, server, shown) {
			out = append(out, toolRef{server, shown})
		}
	}
	return out
}

// resolve finds the one item of kind k exposed as name among cands (the
// route's candidates for it), asking lookup whether each exists. found is
// false when none does, and when more than one does: such a name is
// reported (nameConflict) and conflict is true; the caller refuses it. A
// lookup error ends the search: uniqueness cannot be told without that
// list.
func (g *Gateway) resolve(cands []toolRef, k catalog.Kind, name string, lookup func(c toolRef) (catalog.Item, bool, error)) (it catalog.Item, found, conflict bool, err error) {
	// The servers are listed only for a conflict: one found allocates
	// nothing.
	var first string
	var servers []string
	n := 0
	for _, c := range cands {
		got, ok, err := lookup(c)
		if err != nil {
			return catalog.Item{}, false, false, err
		}
		if ok {
			it = got
			switch n++; n {
			case 1:
				first = c.server
			case 2:
				servers = []string{first, c.server}
			default:
				servers = append(servers, c.server)
			}
		}
	}
	switch n {
	case 0:
		return catalog.Item{}, false, false, nil
	case 1:
		return it, true, false, nil
	}
	g.nameConflict(k, name, servers)
	return catalog.Item{}, false, true, nil
}

// lookupIn is resolve's lookup in the catalog as seen with ctx's
// credentials.
func (g *Gateway) lookupIn(ctx context.Context, k catalog.Kind) func(toolRef) (catalog.Item, bool, error) {
	return func(c toolRef) (catalog.Item, bool, error) {
		return g.cat.Lookup(ctx, c.server, k, c.name)
	}
}

// errAmbiguous refuses a name more than one item of the route has.
func errAmbiguous(what, name string) *jsonrpc.Error {
	return errInvalidParams("Ambiguous %s: %s is the name of more than one %s on this route, so none is served under it", what, name, what)
}

// errAmbiguousURI refuses a resource URI more than one server of the
// route claims.
func errAmbiguousURI(uri string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]string{"uri": uri})
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Ambiguous resource: more than one server on this route serves this URI, so none is asked for it (use a route of one server)", Data: data}
}

// distinct leaves out of items (of kind k, as rt lists them) every item
// whose exposed name another item has too, and reports each such name.
// Items of Server "" are the gateway's own tools (S20), listed under
// their own names: a real tool exposed under one of those names is left
// out (the gateway's tool answers that name). Resources conflict by URI.
func (g *Gateway) distinct(rt *route, k catalog.Kind, items []catalog.Item) []catalog.Item {
	if k == catalog.Templates || len(items) < 2 {
		return items
	}
	named := make([]toolRef, len(items))
	for i, it := range items {
		named[i] = toolRef{it.Server, g.listedName(rt, k, it)}
	}
	clash := g.clashing(k, named)
	if clash == nil {
		return items
	}
	out := make([]catalog.Item, 0, len(items))
	for i, it := range items {
		if !clash[i] {
			out = append(out, it)
		}
	}
	return out
}

// listedName is the name rt lists item it of kind k under: its exposed
// name; a resource's URI; a gateway tool's own name.
func (g *Gateway) listedName(rt *route, k catalog.Kind, it catalog.Item) string {
	if k == catalog.Resources && rt.prefixed && it.Server != "" && strings.HasPrefix(it.Key, mcpwire.SchemeUI) {
		// An MCP Apps view, in its server's namespace (apps.go).
		return g.uiNamespaced(it.Server, it.Key)
	}
	if it.Server == "" || k == catalog.Resources {
		return it.Key
	}
	return g.exposed(rt, k, it.Server, it.Key)
}

// clashing marks the entries of named (each an item of kind k: its server
// and its listed name) whose name another entry has too, and reports each
// such name (nameConflict). An entry of server "" is the gateway's own
// tool (S20): it keeps its name, and a real tool listed under it is
// marked. nil when none is marked. Every list (distinct) and search
// (hideConflicts) of a route leaves the marked ones out.
func (g *Gateway) clashing(k catalog.Kind, named []toolRef) []bool {
	if len(named) < 2 {
		return nil
	}
	count := make(map[string]int, len(named))
	var own map[string]bool
	for _, n := range named {
		count[n.name]++
		if n.server == "" {
			if own == nil {
				own = map[string]bool{}
			}
			own[n.name] = true
		}
	}
	var marked []bool
	var conflicts map[string][]string
	for i, n := range named {
		if count[n.name] == 1 || (n.server == "" && own[n.name]) {
			continue
		}
		if marked == nil {
			marked = make([]bool, len(named))
			conflicts = map[string][]string{}
		}
		marked[i] = true
		if n.server != "" {
			conflicts[n.name] = append(conflicts[n.name], n.server)
		}
	}
	for name, servers := range conflicts {
		g.nameConflict(k, name, servers)
	}
	return marked
}

// nameConflict reports, once per kind and name, a name the route leaves
// out because more than one item has it: a warning naming the servers
// and a count per server in mcpgate_catalog_name_conflicts_total.
func (g *Gateway) nameConflict(k catalog.Kind, name string, servers []string) {
	if !g.conflicts.first(k.String() + "\x00" + name) {
		return
	}
	servers = slices.Compact(slices.Sorted(slices.Values(servers)))
	what := "exposed name"
	if k == catalog.Resources {
		what = "resource URI"
	}
	g.log.Warn(what+" claimed by more than one item of a route; left out and refused (rename a tool with tools.overrides, or use a route of one server)",
		"kind", k.String(), "name", name, "servers", servers)
	for _, s := range servers {
		g.metrics.NameConflict(s, k.String())
	}
}

// onceSet remembers keys already reported, so a report is made once per
// key. Upstreams choose the keys (tool names), so it holds at most
// onceSetMax of them: when full it starts over, which repeats a report
// rather than growing without bound. The zero value is ready to use.
type onceSet struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

const onceSetMax = 4096

// first reports whether key is new, and remembers it.
func (s *onceSet) first(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[key]; ok {
		return false
	}
	if s.seen == nil || len(s.seen) >= onceSetMax {
		s.seen = map[string]struct{}{}
	}
	s.seen[key] = struct{}{}
	return true
}
