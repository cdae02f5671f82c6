package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/toolsearch"
)

// ghServer is a go-sdk upstream with a few GitHub-like tools.
func ghServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "gh", Version: "1.0.0"}, nil)
	type issueArgs struct {
		Title string `json:"title" jsonschema:"the issue title"`
		Body  string `json:"body,omitempty" jsonschema:"the issue body"`
	}
	type queryArgs struct {
		Query string `json:"query" jsonschema:"search query"`
	}
	type repoArgs struct {
		Repo string `json:"repo" jsonschema:"repository name"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "create_issue", Description: "Create a new issue in a GitHub repository"}, func(ctx context.Context, req *mcp.CallToolRequest, a issueArgs) (*mcp.CallToolResult, any, error) {
		return textResult("created " + a.Title), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "search_repositories", Description: "Search for GitHub repositories"}, func(ctx context.Context, req *mcp.CallToolRequest, a queryArgs) (*mcp.CallToolResult, any, error) {
		return textResult("found " + a.Query), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "delete_repository", Description: "Delete a GitHub repository for good"}, func(ctx context.Context, req *mcp.CallToolRequest, a repoArgs) (*mcp.CallToolResult, any, error) {
		return textResult("deleted " + a.Repo), nil, nil
	})
	return srv
}

type foundTools struct {
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	} `json:"tools"`
}

// searchResult decodes a search_tools result's structured content and
// checks that its text says the same.
func searchResult(t *testing.T, r *eraReply) []string {
	t.Helper()
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		Structured foundTools `json:"structuredContent"`
		IsError    bool       `json:"isError"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("search_tools: %s", r)
	}
	var names []string
	for _, tl := range res.Structured.Tools {
		names = append(names, tl.Name)
		if len(tl.InputSchema) == 0 || tl.Description == "" {
			t.Errorf("search hit %s without schema or description", tl.Name)
		}
	}
	if len(names) > 0 {
		var fromText foundTools
		if err := json.Unmarshal([]byte(res.Content[0].Text), &fromText); err != nil || len(fromText.Tools) != len(names) {
			t.Errorf("text content %q does not carry the tools", res.Content[0].Text)
		}
	}
	return names
}

func searchCall(query string, limit int) string {
	return `{"name":"search_tools","arguments":{"query":` + string(mustJSON(query)) + `,"limit":` + string(mustJSON(limit)) + `}}`
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func textOf(t *testing.T, r *eraReply) string {
	t.Helper()
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || len(res.Content) == 0 {
		t.Fatalf("call: %s", r)
	}
	return res.Content[0].Text
}

// Tool search (S20), in both eras: a search route lists the two gateway
// tools; search_tools finds the right tool among those the key may see
// and never a hidden one; call_tool goes the way of tools/call (audit
// record, errors byte for byte); tools/call of a real name still works;
// hybrid lists the most used tools beside the two.
func TestToolSearchRoute(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	gh := serveSDK(t, ghServer())
	keys := &memKeys{}
	full := keys.add(t, store.Key{Alias: "full"})
	limited := keys.add(t, store.Key{Alias: "limited", DenyTools: map[string][]string{"gh": {"delete_repository"}}})
	audit := &memAudit{}
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Audit: audit, Metrics: metrics.New(), MetricsOnMain: true, Config: &config.Config{
		Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL), "gh": httpServer(gh.URL)},
		Routes: map[string]*config.RouteConfig{
			"/mcp":    {Tools: config.ToolsSearch},
			"/mcp/gh": {Tools: config.ToolsHybrid, HybridTop: 1},
		},
	}})
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			c := e.client(t, gw.URL+"/mcp", withKey(full))
			lc := e.client(t, gw.URL+"/mcp", withKey(limited))
			for _, cl := range []*eraClient{c, lc} {
				if got := toolNames(t, cl.call("1", "tools/list", "")); !slices.Equal(got, []string{"search_tools", "call_tool"}) {
					t.Errorf("search route lists %v", got)
				}
			}
			if got := searchResult(t, c.call("2", "tools/call", searchCall("open a new issue", 3))); len(got) == 0 || got[0] != "gh__create_issue" {
				t.Errorf("search for an issue: %v", got)
			}
			if got := searchResult(t, c.call("3", "tools/call", searchCall("echo text back", 1))); !slices.Equal(got, []string{"alpha__echo"}) {
				t.Errorf("search with limit 1: %v", got)
			}
			// Hidden for limited: never returned, not even last; the full
			// key finds it first with the same query.
			if got := searchResult(t, c.call("4", "tools/call", searchCall("delete a repository", 10))); len(got) == 0 || got[0] != "gh__delete_repository" {
				t.Errorf("full key, delete: %v", got)
			}
			if got := searchResult(t, lc.call("5", "tools/call", searchCall("delete a repository", 50))); slices.Contains(got, "gh__delete_repository") {
				t.Errorf("limited key sees the hidden tool: %v", got)
			}
			if got := searchResult(t, lc.call("6", "tools/call", searchCall("zzzunmatched", 5))); len(got) != 0 {
				t.Errorf("no match: %v", got)
			}
			// call_tool of a hidden or unknown tool fails as tools/call does.
			for _, name := range []string{"gh__delete_repository", "nope__x", "alpha__nope"} {
				direct := lc.call("7", "tools/call", `{"name":"`+name+`","arguments":{"repo":"r"}}`)
				viaTool := lc.call("7", "tools/call", `{"name":"call_tool","arguments":{"name":"`+name+`","arguments":{"repo":"r"}}}`)
				if direct.Error == nil || direct.errJSON() != viaTool.errJSON() || direct.status != viaTool.status {
					t.Errorf("%s: call_tool %s, tools/call %s", name, viaTool, direct)
				}
			}
			before := len(audit.records())
			if got := textOf(t, c.call("8", "tools/call", `{"name":"call_tool","arguments":{"name":"alpha__echo","arguments":{"text":"hi"}}}`)); got != "alpha:hi" {
				t.Errorf("call_tool echo: %q", got)
			}
			if got := textOf(t, c.call("9", "tools/call", `{"name":"alpha__echo","arguments":{"text":"direct"}}`)); got != "alpha:direct" {
				t.Errorf("direct tools/call: %q", got)
			}
			recs := audit.records()[before:]
			if len(recs) != 2 || recs[0].Server != "alpha" || recs[0].Tool != "echo" || recs[0].Outcome != "ok" || recs[0].KeyAlias != "full" {
				t.Errorf("audit of call_tool: %+v", recs)
			}
			if r := c.call("10", "tools/call", `{"name":"call_tool","arguments":{}}`); r.Error == nil {
				t.Errorf("call_tool without a name: %s", r)
			}
			// Bad search arguments are tool errors the model can correct.
			for _, args := range []string{`{}`, `{"query":"  "}`, `{"query":"echo","limit":0}`, `{"query":"echo","limit":1.5}`, `{"query":"echo","limit":"3"}`} {
				r := c.call("11", "tools/call", `{"name":"search_tools","arguments":`+args+`}`)
				if r.Error != nil || !strings.Contains(string(r.Result), `"isError":true`) {
					t.Errorf("search_tools %s: %s, want a tool error", args, r)
				}
			}
			if r := c.call("12", "tools/call", `{"name":"search_tools","arguments":["echo"]}`); r.Error == nil {
				t.Errorf("search_tools with array arguments: %s, want invalid params", r)
			}
			if got := searchResult(t, c.call("13", "tools/call", searchCall("alpha", 500))); len(got) > MaxSearchLimit {
				t.Errorf("limit 500: %d tools, want at most %d", len(got), MaxSearchLimit)
			}
		})
	}
	t.Run("metrics", func(t *testing.T) {
		resp, err := http.Get(gw.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// call_tool is counted as the tool it called, as tools/call is.
		for _, want := range []string{`mcpgate_tool_calls_total{outcome="ok",server="alpha",tool="echo"} 4`, "mcpgate_tool_search_duration_seconds_count "} {
			if !strings.Contains(string(body), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		if strings.Contains(string(body), `tool="call_tool"`) || strings.Contains(string(body), `tool="search_tools"`) {
			t.Error("the gateway's own tools are counted as upstream tool calls")
		}
	})
	t.Run("hybrid", func(t *testing.T) {
		c := eras[0].client(t, gw.URL+"/mcp/gh", withKey(full))
		if got := toolNames(t, c.call("1", "tools/list", "")); !slices.Equal(got, []string{"search_tools", "call_tool"}) {
			t.Errorf("unused hybrid route lists %v", got)
		}
		for range 2 {
			textOf(t, c.call("2", "tools/call", `{"name":"call_tool","arguments":{"name":"search_repositories","arguments":{"query":"q"}}}`))
		}
		textOf(t, c.call("3", "tools/call", `{"name":"create_issue","arguments":{"title":"t"}}`))
		if got := toolNames(t, c.call("4", "tools/list", "")); !slices.Equal(got, []string{"search_repositories", "search_tools", "call_tool"}) {
			t.Errorf("hybrid top 1 lists %v", got)
		}
		// /mcp is another route: its counts are its own.
		if got := toolNames(t, eras[0].client(t, gw.URL+"/mcp", withKey(full)).call("5", "tools/list", "")); len(got) != 2 {
			t.Errorf("search route lists %v", got)
		}
	})
}

// headerRT adds headers to every request.
type headerRT struct {
	hdr map[string]string
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.hdr {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Tool search through the official go-sdk client: two tools listed,
// call_tool relays progress and elicitation and passes a cancellation on,
// and a tool added upstream (list_changed)
// becomes searchable.
func TestToolSearchSDKClient(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	ghSrv := ghServer()
	started, cancelled := make(chan struct{}), make(chan struct{})
	mcp.AddTool(ghSrv, &mcp.Tool{Name: "export_all", Description: "Export every repository, slowly"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return nil, nil, ctx.Err()
	})
	gh := serveSDK(t, ghSrv)
	keys := &memKeys{}
	key := keys.add(t, store.Key{Alias: "k"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Config: &config.Config{
		Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL), "gh": httpServer(gh.URL)},
		Routes:  map[string]*config.RouteConfig{"/mcp": {Tools: config.ToolsSearch}},
	}})
	var (
		mu       sync.Mutex
		progress []float64
	)
	client := mcp.NewClient(&mcp.Implementation{Name: "search-client", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ada"}}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, req.Params.Progress)
			mu.Unlock()
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp",
		HTTPClient: &http.Client{Transport: headerRT{withKey(key)}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if init := cs.InitializeResult(); init.Capabilities.Tools == nil || !strings.HasPrefix(init.Instructions, searchInstructions) {
		t.Errorf("a search route's initialize: tools %v, instructions %q", init.Capabilities.Tools, init.Instructions)
	}
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
		if tl.InputSchema == nil {
			t.Errorf("%s has no input schema", tl.Name)
		}
	}
	if !slices.Equal(names, []string{"search_tools", "call_tool"}) {
		t.Errorf("listed %v", names)
	}
	params := &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "alpha__progress", "arguments": map[string]any{"steps": 3}}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "done" {
		t.Fatalf("call_tool progress: %v %+v", err, res)
	}
	waitFor(t, "progress relayed", func() bool { mu.Lock(); defer mu.Unlock(); return len(progress) == 3 })

	// The upstream's elicitation reaches this client during call_tool.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "alpha__ask", "arguments": map[string]any{"text": "who?"}}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "accept:ada" {
		t.Fatalf("call_tool elicitation: %v %+v", err, res)
	}
	// Cancelling call_tool cancels the upstream call.
	cctx, ccancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "gh__export_all"}})
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream call did not start")
	}
	ccancel()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream call was not cancelled")
	}
	if err := <-errc; err == nil {
		t.Error("a cancelled call_tool returned no error")
	}

	search := func(q string) []string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_tools", Arguments: map[string]any{"query": q, "limit": 3}})
		if err != nil || res.IsError {
			t.Fatalf("search_tools: %v %+v", err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var ft foundTools
		_ = json.Unmarshal(b, &ft)
		var out []string
		for _, tl := range ft.Tools {
			out = append(out, tl.Name)
		}
		return out
	}
	if got := search("archive project"); slices.Contains(got, "gh__archive_project") {
		t.Fatalf("found before it exists: %v", got)
	}
	mcp.AddTool(ghSrv, &mcp.Tool{Name: "archive_project", Description: "Archive a project board"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return textResult("archived"), nil, nil
	})
	waitFor(t, "the new tool searchable", func() bool {
		got := search("archive a project")
		return len(got) > 0 && got[0] == "gh__archive_project"
	})
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "gh__archive_project"}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "archived") {
		t.Errorf("call_tool of the new tool: %v %+v", err, res)
	}
}

// Route keys match the path as the client uses it (a toolset's too), and
// a reload changes a route's mode for the next request.
func TestToolSearchRouteKeysAndReload(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	servers := func() map[string]*config.Server {
		return map[string]*config.Server{"alpha": reloadServer(alpha)}
	}
	toolsets := map[string]*config.Toolset{"ts": {Servers: map[string][]string{"alpha": {"echo", "add"}}}}
	cfg := reloadFile(servers(), toolsets)
	cfg.Routes = map[string]*config.RouteConfig{"/toolset/ts/mcp": {Tools: config.ToolsSearch}}
	g, gw := startGatewayWith(t, Options{Config: cfg})
	list := func(path string) []string {
		return toolNames(t, eras[0].client(t, gw.URL+path, nil).call("1", "tools/list", ""))
	}
	two := []string{"search_tools", "call_tool"}
	if got := list("/toolset/ts/mcp"); !slices.Equal(got, two) {
		t.Errorf("toolset search route lists %v", got)
	}
	c := eras[0].client(t, gw.URL+"/toolset/ts/mcp", nil)
	if got := searchResult(t, c.call("2", "tools/call", searchCall("echo", 10))); !slices.Equal(got, []string{"alpha__echo"}) {
		t.Errorf("toolset search: %v (only the toolset's tools may appear)", got)
	}
	if got := searchResult(t, c.call("3", "tools/call", searchCall("reports progress", 10))); len(got) != 0 {
		t.Errorf("a tool outside the toolset was found: %v", got)
	}
	if got := list("/mcp/alpha"); len(got) != 8 {
		t.Errorf("a route without an entry lists %v", got)
	}
	// Reload: /mcp/alpha becomes a search route, the toolset goes back to all.
	next := reloadFile(servers(), toolsets)
	next.Routes = map[string]*config.RouteConfig{"/mcp/alpha": {Tools: config.ToolsSearch}}
	if _, err := g.Reload(next); err != nil {
		t.Fatal(err)
	}
	if got := list("/mcp/alpha"); !slices.Equal(got, two) {
		t.Errorf("after reload /mcp/alpha lists %v", got)
	}
	if got := list("/mcp/alpha/"); !slices.Equal(got, two) {
		t.Errorf("a trailing slash: %v", got)
	}
	if got := list("/toolset/ts/mcp"); !slices.Equal(got, []string{"alpha__add", "alpha__echo"}) {
		t.Errorf("after reload the toolset lists %v", got)
	}
	if got := searchResult(t, eras[0].client(t, gw.URL+"/mcp/alpha", nil).call("4", "tools/call", searchCall("add two integers", 1))); !slices.Equal(got, []string{"add"}) {
		t.Errorf("single-server route names: %v", got)
	}
}

// A hybrid list pages like any other list.
func TestToolSearchHybridPages(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	_, gw := startGatewayWith(t, Options{PageSize: 2, Config: &config.Config{
		Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)},
		Routes:  map[string]*config.RouteConfig{"/mcp": {Tools: config.ToolsHybrid, HybridTop: 3}},
	}})
	c := eras[0].client(t, gw.URL+"/mcp", nil)
	for _, tool := range []string{"echo", "echo", "add", "add", "add", "log", "roots"} {
		args := `{}`
		if tool == "add" {
			args = `{"a":1,"b":2}`
		}
		c.call("1", "tools/call", `{"name":"call_tool","arguments":{"name":"alpha__`+tool+`","arguments":`+args+`}}`)
	}
	var all []string
	cursor := ""
	for range 5 {
		params := ""
		if cursor != "" {
			params = `{"cursor":"` + cursor + `"}`
		}
		r := c.call("2", "tools/list", params)
		all = append(all, toolNames(t, r)...)
		var page struct {
			Next string `json:"nextCursor"`
		}
		_ = json.Unmarshal(r.Result, &page)
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	// log and roots tie at one call: the list's own order decides.
	if want := []string{"alpha__add", "alpha__echo", "alpha__log", "search_tools", "call_tool"}; !slices.Equal(all, want) {
		t.Errorf("hybrid pages: %v, want %v", all, want)
	}
}

// indexFor keeps an index per recent list of a server (one per upstream
// credential) and rebuilds one only for a list it has not seen.
func TestToolSearchIndexCache(t *testing.T) {
	g := &Gateway{}
	g.compiled.Store(&compiled{})
	lists := make([][]catalog.Item, toolsearch.ListsPerServer+1)
	for i := range lists {
		lists[i] = []catalog.Item{{Server: "s", Key: "t", Raw: json.RawMessage(`{"name":"t"}`)}}
	}
	first := g.indexFor("s", lists[0])
	if g.indexFor("s", lists[1]) == first {
		t.Fatal("another list got the first list's index")
	}
	if g.indexFor("s", lists[0]) != first {
		t.Error("the first list's index was rebuilt")
	}
	for _, l := range lists[2:] {
		g.indexFor("s", l)
	}
	if g.indexFor("s", lists[0]) == first {
		t.Errorf("more than %d lists kept", toolsearch.ListsPerServer)
	}
	last := lists[len(lists)-1]
	before := g.indexFor("s", last)
	if g.indexFor("s", last) != before {
		t.Fatal("the last list's index was rebuilt")
	}
	g.compiled.Store(&compiled{}) // a reload: overrides may have changed
	if g.indexFor("s", last) == before {
		t.Error("reload: the index was not rebuilt")
	}
}
