package security

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// upstream is an MCP server of the suite's own (the official go-sdk over
// streamable HTTP) whose tools ask the client something through the
// gateway and report what came back:
//
//	ask     elicitation/create, returns "<action> <content JSON>"
//	sample  sampling/createMessage, returns the sampled text
//	roots   roots/list, returns the root URIs, comma-separated
//	echo    returns its "text" argument
//
// Every answer a tool received is also kept in order (got), so a case can
// tell what reached the upstream, from whom it meant to hear.
type upstream struct {
	name string
	srv  *httptest.Server

	mu  sync.Mutex
	got []string
	// headers of each HTTP request the upstream received, for cases about
	// what the gateway sends upstream (credentials).
	headers []http.Header
}

func newUpstream(t testing.TB, name string, extraTools ...string) *upstream {
	t.Helper()
	u := &upstream{name: name}
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	type askIn struct {
		Message string `json:"message"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Description: "asks the user to confirm"},
		func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
				Message: in.Message,
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
					"confirm": map[string]any{"type": "boolean"}, "by": map[string]any{"type": "string"}}},
			})
			if err != nil {
				u.note("ask error: " + err.Error())
				return nil, nil, err
			}
			content, _ := json.Marshal(res.Content)
			text := res.Action + " " + string(content)
			u.note("ask " + text)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sample", Description: "asks the client's model"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
				Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "say something"}}},
				MaxTokens: 16,
			})
			if err != nil {
				u.note("sample error: " + err.Error())
				return nil, nil, err
			}
			text := ""
			if tc, ok := res.Content.(*mcp.TextContent); ok {
				text = tc.Text
			}
			u.note("sample " + text)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "roots", Description: "lists the client's roots"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.ListRoots(ctx, &mcp.ListRootsParams{})
			if err != nil {
				u.note("roots error: " + err.Error())
				return nil, nil, err
			}
			var uris []string
			for _, r := range res.Roots {
				uris = append(uris, r.URI)
			}
			text := strings.Join(uris, ",")
			u.note("roots " + text)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	type echoIn struct {
		Text string `json:"text"`
	}
	echo := func(tool string) {
		mcp.AddTool(s, &mcp.Tool{Name: tool, Description: "echoes its text"},
			func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
				u.note(tool + " " + in.Text)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + "/" + tool + ": " + in.Text}}}, nil, nil
			})
	}
	echo("echo")
	for _, tool := range extraTools {
		echo(tool)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.headers = append(u.headers, r.Header.Clone())
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) url() string { return u.srv.URL + "/mcp" }

func (u *upstream) note(s string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.got = append(u.got, s)
}

// received is every answer the upstream's tools got so far.
func (u *upstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.got...)
}

// receivedHeader is every value of header k on requests the upstream got.
func (u *upstream) receivedHeader(k string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, h := range u.headers {
		out = append(out, h.Values(k)...)
	}
	return out
}

// server is the servers: entry of an upstream.
func (u *upstream) server() string {
	return fmt.Sprintf("  %s: {transport: http, url: %q}\n", u.name, u.url())
}
