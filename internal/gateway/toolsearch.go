package gateway

// Tool search (SPEC S20): a route configured `tools: search` lists two
// gateway tools instead of its catalog, search_tools and call_tool;
// `hybrid` lists the route's most used tools beside them.
//
//	tools/list   -> [search_tools, call_tool] (+ top used, hybrid)
//	search_tools -> per-server BM25 index (rebuilt when the catalog's list
//	                changes) searched over the caller's visible tools only
//	call_tool    -> the params rewritten to {name, arguments} -> toolsCall,
//	                the one path of tools/call (pipeline.go: policy, budget,
//	                guardrails, upstream, cost, audit, trace)
//
// The route's config is read from the current snapshot on every request,
// so a reload changes a route's mode for the next request.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/toolsearch"
)

// Names of the gateway's own tools on a search or hybrid route. They are
// not prefixed; a real tool of the same name stays callable through
// call_tool.
const (
	ToolSearchTools = "search_tools"
	ToolCallTool    = "call_tool"
)

// Limits of search_tools.
const (
	DefaultSearchLimit = 10
	MaxSearchLimit     = 50
)

// searchInstructions open a search route's instructions.
const searchInstructions = "Most tools here are not listed: find them with search_tools (say what you want to do) and call them with call_tool."

// SearchToolDefinitions are the definitions of search_tools and call_tool
// as a search route lists them (the tool-search benchmark counts their
// tokens). The caller must not modify them.
func SearchToolDefinitions() []json.RawMessage { return virtualTools }

var virtualTools = []json.RawMessage{
	json.RawMessage(`{"name":"search_tools","description":"Search the tools available here by what you want to do. Returns the best-matching tools with their names, descriptions and input schemas; call one with call_tool.","inputSchema":{"type":"object","properties":{"query":{"type":"string","description":"What you want to do, in a few words, e.g. \"create a GitHub issue\"."},"limit":{"type":"integer","minimum":1,"maximum":50,"description":"How many tools to return at most. Default: 10."}},"required":["query"]},"annotations":{"title":"Search tools","readOnlyHint":true,"openWorldHint":false}}`),
	json.RawMessage(`{"name":"call_tool","description":"Call a tool found with search_tools by its name, with its arguments.","inputSchema":{"type":"object","properties":{"name":{"type":"string","description":"The tool's name exactly as search_tools returned it."},"arguments":{"type":"object","description":"The tool's arguments, following its input schema."}},"required":["name"]}}`),
}

// routeConfig is the routes entry of rt, nil when there is none. A key is
// the route's path as the client uses it, matched exactly after the
// legacy SSE suffix and a trailing slash are removed ("/mcp/sse" is
// "/mcp"; "/" is "/mcp").
func (g *Gateway) routeConfig(rt *route) *config.RouteConfig {
	routes := g.conf().Routes
	if len(routes) == 0 {
		return nil
	}
	p := rt.path
	if p == "" || p == "/" {
		p = "/mcp"
	}
	return routes[p]
}

// toolsMode is rt's listing mode (config.ToolsAll when not configured).
func (g *Gateway) toolsMode(rt *route) (string, *config.RouteConfig) {
	rc := g.routeConfig(rt)
	return rc.ToolsMode(), rc
}

// virtualCall answers a tools/call of search_tools or call_tool on a
// search or hybrid route; handled is false for any other call.
func (g *Gateway) virtualCall(ctx context.Context, sc *scope, m *jsonrpc.Message) (res json.RawMessage, e *jsonrpc.Error, handled bool) {
	if mode, _ := g.toolsMode(sc.rt); mode == config.ToolsAll {
		return nil, nil, false
	}
	name, _ := jsonrpc.GetString(m.Params, "name")
	switch name {
	case ToolSearchTools:
		res, e = g.searchTools(ctx, sc, m.Params)
		return res, e, true
	case ToolCallTool:
		res, e = g.callTool(ctx, sc, m)
		return res, e, true
	}
	return nil, nil, false
}

// callTool rewrites call_tool(name, arguments) into the tools/call it
// stands for and sends it down the one call path. Everything else in the
// params (_meta with its progress token, the 2026-07-28 fields) stays.
func (g *Gateway) callTool(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	args, _ := jsonrpc.Get(m.Params, "arguments")
	name, ok := jsonrpc.GetString(args, "name")
	if !ok || name == "" {
		return nil, errInvalidParams("Invalid params: call_tool needs arguments.name")
	}
	params, err := jsonrpc.Set(m.Params, "name", jsonrpc.String(name))
	if err == nil {
		inner, found := jsonrpc.Get(args, "arguments")
		if !found || string(inner) == "null" {
			inner = []byte("{}")
		}
		params, err = jsonrpc.Set(params, "arguments", inner)
	}
	if err != nil {
		return nil, errInvalidParams("Invalid params")
	}
	call := *m
	call.Params = params
	return g.callRealTool(ctx, sc, &call)
}

// callRealTool is tools/call of a real tool: toolsCall, and on success the
// tool's use counted for hybrid routes.
func (g *Gateway) callRealTool(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	res, ref, e := g.toolsCall(ctx, sc, m)
	if e == nil {
		if mode, _ := g.toolsMode(sc.rt); mode == config.ToolsHybrid {
			g.usage.Add(sc.rt.path, ref.server, ref.name)
		}
	}
	return res, e
}

// virtualList is the tool list of a search or hybrid route: in hybrid
// mode the top most used tools the caller may see (by successful calls on
// this route path, ties by name; never-used tools are not listed), then
// the two gateway tools. Items of Server "" are the gateway's own.
func (g *Gateway) virtualList(ctx context.Context, sc *scope, mode string, rc *config.RouteConfig) ([]catalog.Item, error) {
	var out []catalog.Item
	if mode == config.ToolsHybrid && len(sc.rt.servers) > 0 {
		counts := g.usage.Counts(sc.rt.path)
		if len(counts) > 0 {
			items, err := g.mergedList(ctx, sc.rt, catalog.Tools)
			if err != nil {
				return nil, err
			}
			var used []catalog.Item
			for _, it := range items {
				if counts[toolsearch.ToolID{Server: it.Server, Name: it.Key}] > 0 {
					used = append(used, it)
				}
			}
			slices.SortStableFunc(used, func(a, b catalog.Item) int {
				return cmp.Compare(counts[toolsearch.ToolID{Server: b.Server, Name: b.Key}], counts[toolsearch.ToolID{Server: a.Server, Name: a.Key}])
			})
			out = used[:min(len(used), rc.HybridTopOrDefault())]
		}
	}
	for _, raw := range virtualTools {
		name, _ := jsonrpc.GetString(raw, "name")
		out = append(out, catalog.Item{Key: name, Raw: raw})
	}
	// A used tool exposed under a gateway tool's name would be listed
	// twice and called as the gateway's (sep "_": search + tools).
	return g.distinct(sc.rt, catalog.Tools, out), nil
}

// searchList says which list a search index was built from: the same
// slice (a list_changed or TTL refetch gives a new one) under the same
// gateway state (display overrides).
type searchList struct {
	first *catalog.Item
	n     int
	st    *compiled
}

// indexFor returns the index of server's tools items, building it when
// the list is new.
func (g *Gateway) indexFor(server string, items []catalog.Item) *toolsearch.Index {
	st := g.current()
	return g.searchIdx.For(server, searchList{&items[0], len(items), st}, func() []toolsearch.Doc {
		docs := make([]toolsearch.Doc, len(items))
		for i, it := range items {
			name, desc := it.Key, ""
			if o, ok := st.overrides[server][it.Key]; ok {
				name, desc = cmp.Or(o.Name, name), o.Description
			}
			docs[i] = toolsearch.DocFromTool(server, name, desc, it.Raw)
		}
		return docs
	})
}

// searchSeg is one server's tools in a search.
type searchSeg struct {
	server string
	items  []catalog.Item
}

// hideConflicts takes out of a search every visible tool whose exposed
// name another visible tool has too: the route serves none of them
// (names.go, clashing: the rule every list follows), so none may be found.
func (g *Gateway) hideConflicts(rt *route, segs []searchSeg, tsegs []toolsearch.Segment) {
	var named []toolRef
	var at [][2]int // named[n] is segs[at[n][0]].items[at[n][1]]
	for i, sg := range segs {
		for j, it := range sg.items {
			if tsegs[i].Visible[j] {
				named = append(named, toolRef{sg.server, g.exposed(rt, catalog.Tools, sg.server, it.Key)})
				at = append(at, [2]int{i, j})
			}
		}
	}
	for n, hide := range g.clashing(catalog.Tools, named) {
		if hide {
			tsegs[at[n][0]].Visible[at[n][1]] = false
		}
	}
}

// foundTool is one search_tools result.
type foundTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// searchTools answers search_tools(query, limit) with the best-matching
// tools the caller may see on the route, named as the route exposes
// them. Hidden tools take no part in the ranking at all (toolsearch
// Segment.Visible), and nothing is said about how many tools exist.
func (g *Gateway) searchTools(ctx context.Context, sc *scope, params json.RawMessage) (json.RawMessage, *jsonrpc.Error) {
	args, _ := jsonrpc.Get(params, "arguments")
	var in struct {
		Query string          `json:"query"`
		Limit json.RawMessage `json:"limit"`
	}
	if len(args) > 0 && json.Unmarshal(args, &in) != nil {
		return nil, errInvalidParams("Invalid params: search_tools arguments must be an object")
	}
	limit := DefaultSearchLimit
	if len(in.Limit) > 0 && string(in.Limit) != "null" {
		var n float64
		if json.Unmarshal(in.Limit, &n) != nil || n < 1 || n != float64(int(n)) {
			return toolErrorResult("limit must be a positive integer"), nil
		}
		limit = min(int(n), MaxSearchLimit)
	}
	if strings.TrimSpace(in.Query) == "" {
		return toolErrorResult("query is required: say in a few words what you want to do"), nil
	}
	start := time.Now()
	var segs []searchSeg
	var tsegs []toolsearch.Segment
	for _, server := range sc.rt.servers {
		var items []catalog.Item
		op := func() (err error) {
			items, err = g.cat.List(ctx, server, catalog.Tools)
			return err
		}
		var err error
		if len(sc.rt.servers) == 1 {
			err = g.connecting(ctx, sc, server, op)
		} else {
			err = op()
		}
		if err != nil {
			var ce *clientError
			if errors.As(err, &ce) {
				return nil, ce.rpc
			}
			if !sc.rt.prefixed && len(sc.rt.servers) == 1 {
				return nil, g.upstreamFault(ctx, sc, server, err)
			}
			g.log.Error("upstream list failed; left out of the search", "server", server, "error", err)
			continue
		}
		if len(items) == 0 {
			continue
		}
		vis := make([]bool, len(items))
		for i, it := range items {
			// The model searches: a tool only views may call is not its
			// to find (apps.go), whatever the client.
			vis[i] = g.toolUI(server, it.Raw).model && sc.rt.allows(catalog.Tools, server, it.Key)
		}
		segs = append(segs, searchSeg{server, items})
		tsegs = append(tsegs, toolsearch.Segment{Index: g.indexFor(server, items), Visible: vis})
	}
	g.hideConflicts(sc.rt, segs, tsegs)
	hits := toolsearch.Search(tsegs, in.Query, limit)
	st := g.current()
	found := make([]foundTool, 0, len(hits))
	for _, h := range hits {
		it := segs[h.Seg].items[h.Doc]
		ft := foundTool{Name: g.exposed(sc.rt, catalog.Tools, it.Server, it.Key)}
		ft.Description, _ = jsonrpc.GetString(it.Raw, "description")
		if o, ok := st.overrides[it.Server][it.Key]; ok && o.Description != "" {
			ft.Description = o.Description
		}
		ft.InputSchema, _ = jsonrpc.Get(it.Raw, "inputSchema")
		found = append(found, ft)
	}
	structured, _ := json.Marshal(map[string]any{"tools": found})
	text := string(structured)
	if len(found) == 0 {
		text = "No matching tools. Try other words."
	}
	res, _ := json.Marshal(map[string]any{
		"content":           []map[string]any{{"type": "text", "text": text}},
		"structuredContent": json.RawMessage(structured),
	})
	g.metrics.ObserveToolSearch(time.Since(start))
	return res, nil
}

// toolErrorResult is a tool result with isError: the model can read it
// and correct its call.
func toolErrorResult(msg string) json.RawMessage {
	res, _ := json.Marshal(map[string]any{
		"content": []map[string]any{{"type": "text", "text": msg}},
		"isError": true,
	})
	return res
}
