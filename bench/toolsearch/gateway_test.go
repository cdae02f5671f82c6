package toolsearch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
)

// TestGatewaySearch serves the catalog's tools from 23 go-sdk upstreams
// through a gateway whose /mcp is a search route, and measures what a
// client sees: tools/list, and search_tools end to end (HTTP, session,
// policy, the result's schemas), whose ranking must be the one
// TestRecall measures.
func TestGatewaySearch(t *testing.T) {
	var cf catalogFile
	readJSON(t, "catalog.json", &cf)
	c := load(t)
	servers := map[string]*config.Server{}
	for _, s := range cf.Servers {
		srv := mcp.NewServer(&mcp.Implementation{Name: s.Server, Version: "1"}, nil)
		for _, raw := range s.Tools {
			var tl struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				InputSchema json.RawMessage `json:"inputSchema"`
			}
			if err := json.Unmarshal(raw, &tl); err != nil {
				t.Fatal(err)
			}
			if len(tl.InputSchema) == 0 {
				tl.InputSchema = json.RawMessage(`{"type":"object"}`)
			}
			srv.AddTool(&mcp.Tool{Name: tl.Name, Description: tl.Description, InputSchema: tl.InputSchema},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
				})
		}
		ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		t.Cleanup(ts.Close)
		servers[s.Server] = &config.Server{Name: s.Server, Transport: config.TransportHTTP, URL: ts.URL,
			Timeout: 30 * time.Second, ProtocolVersion: config.ProtocolVersionAuto}
	}
	g := gateway.New(gateway.Options{Version: "bench", Config: &config.Config{Listen: "127.0.0.1:0", ToolNameSeparator: sep,
		Servers: servers, Routes: map[string]*config.RouteConfig{"/mcp": {Tools: config.ToolsSearch}}}})
	ctx, cancel := context.WithCancel(context.Background())
	g.Start(ctx)
	gw := httptest.NewServer(g)
	t.Cleanup(func() {
		gw.CloseClientConnections()
		gw.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = g.Close(cctx)
		cancel()
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil || len(lt.Tools) != 2 {
		t.Fatalf("tools/list: %v %d tools", err, len(lt.Tools))
	}
	search := func(q string) ([]string, time.Duration) {
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_tools", Arguments: map[string]any{"query": q, "limit": 10}})
		d := time.Since(start)
		if err != nil || res.IsError {
			t.Fatalf("search_tools %q: %v %+v", q, err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var found struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		_ = json.Unmarshal(b, &found)
		var names []string
		for _, tl := range found.Tools {
			names = append(names, tl.Name)
		}
		return names, d
	}
	search("warm up every server's list") // the first search walks 23 upstreams
	var durs []time.Duration
	for _, tk := range c.tasks {
		got, d := search(tk.Task)
		durs = append(durs, d)
		if want := c.search(tk.Task, 10); !slices.Equal(got, want) {
			t.Errorf("%q through the gateway: %v, ranking alone: %v", tk.Task, got, want)
		}
	}
	// For scale: a plain tools/call forwarded to an upstream, same client.
	var calls []time.Duration
	for range len(c.tasks) {
		start := time.Now()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "github__get_issue", Arguments: map[string]any{"owner": "o", "repo": "r", "issue_number": 1}}); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, time.Since(start))
	}
	slices.Sort(durs)
	slices.Sort(calls)
	fmt.Printf("\n| search_tools through the gateway, p50 / p99 (%d tools, go-sdk client, loopback) | %v / %v |\n",
		len(c.tools), durs[len(durs)/2].Round(time.Microsecond), durs[len(durs)*99/100].Round(time.Microsecond))
	fmt.Printf("| a forwarded tools/call, same client, p50 / p99 | %v / %v |\n\n",
		calls[len(calls)/2].Round(time.Microsecond), calls[len(calls)*99/100].Round(time.Microsecond))
}
