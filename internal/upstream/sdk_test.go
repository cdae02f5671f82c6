package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// Interop: the official go-sdk server is the upstream (STYLE 16).

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

type addOut struct {
	Sum int `json:"sum"`
}

// newSDKServer is a go-sdk server with an "add" tool and a "roots" tool
// that asks the client for its roots and reports progress first.
func newSDKServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "sdk-upstream", Version: "1.0.0"},
		&mcp.ServerOptions{Instructions: "  Use add to add.  "})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "adds"},
		func(ctx context.Context, req *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "roots", Description: "lists the client's roots"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1}); err != nil {
					return nil, nil, err
				}
			}
			roots, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return nil, nil, err
			}
			var uris []string
			for _, r := range roots.Roots {
				uris = append(uris, r.URI)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(uris, ",")}}}, nil, nil
		})
	return s
}

func runStdioSDK() {
	if err := newSDKServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Println("sdk server:", err)
	}
}

// exerciseSDK runs the same checks against a go-sdk upstream on any
// transport: handshake, tools/list, a typed tool call, and a
// server-initiated request on behalf of a call (with progress).
func exerciseSDK(t *testing.T, srv *config.Server, wantExactOrigin bool) {
	t.Helper()
	h := &recorder{}
	s := connect(t, Options{Server: srv, Handler: h, ClientName: "mcpgate-test", ClientVersion: "1",
		ClientCapabilities: json.RawMessage(`{"roots":{"listChanged":true}}`)})
	info := s.Info()
	if info.ProtocolVersion != mcpwire.LatestHandshake {
		t.Errorf("ProtocolVersion = %q, want %q", info.ProtocolVersion, mcpwire.LatestHandshake)
	}
	if !info.HasInstructions || info.Instructions != "Use add to add." {
		t.Errorf("Instructions = %q (present %v), want trimmed", info.Instructions, info.HasInstructions)
	}
	if !info.Caps.Tools {
		t.Errorf("Caps.Tools = false")
	}
	if name, _ := jsonrpc.GetString(info.ServerInfo, "name"); name != "sdk-upstream" {
		t.Errorf("serverInfo.name = %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	list, err := s.Call(ctx, mcpwire.MethodToolsList, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	if !strings.Contains(string(list), `"add"`) || !strings.Contains(string(list), `"roots"`) {
		t.Errorf("tools/list = %s", list)
	}
	res, err := s.Call(ctx, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"add","arguments":{"a":2,"b":40}}`))
	if err != nil {
		t.Fatalf("tools/call add: %v", err)
	}
	if sum, ok := jsonrpc.GetPath(res, "structuredContent", "sum"); !ok || string(sum) != "42" {
		t.Errorf("add result = %s", res)
	}

	octx := WithOrigin(ctx, "caller-1")
	res, err = s.Call(octx, mcpwire.MethodToolsCall, json.RawMessage(`{"name":"roots","arguments":{},"_meta":{"progressToken":"p1"}}`))
	if err != nil {
		t.Fatalf("tools/call roots: %v", err)
	}
	if !strings.Contains(string(res), "file:///work") {
		t.Errorf("roots result = %s", res)
	}
	notes, reqs := h.got()
	if len(reqs) != 1 || reqs[0].method != mcpwire.MethodRootsList || reqs[0].server != srv.Name {
		t.Fatalf("server requests = %+v, want one roots/list", reqs)
	}
	if wantExactOrigin && reqs[0].origin != "caller-1" {
		t.Errorf("roots/list origin = %v, want caller-1", reqs[0].origin)
	}
	var progress *delivered
	for i := range notes {
		if notes[i].method == mcpwire.NotifyProgress {
			progress = &notes[i]
		}
	}
	if progress == nil || progress.origin != "caller-1" {
		t.Errorf("progress notification = %+v, want origin caller-1", progress)
	}
}

func TestSDKStdio(t *testing.T) {
	exerciseSDK(t, stdioServer(t, "sdk", nil), true)
}

func TestSDKStreamable(t *testing.T) {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newSDKServer() }, nil)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	exerciseSDK(t, &config.Server{Name: "sdk-http", Transport: config.TransportHTTP, URL: ts.URL, Timeout: 5 * time.Second}, true)
}

func TestSDKStreamableJSON(t *testing.T) {
	// JSON replies: server requests then travel on the GET stream.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newSDKServer() },
		&mcp.StreamableHTTPOptions{JSONResponse: true})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	exerciseSDK(t, &config.Server{Name: "sdk-http-json", Transport: config.TransportHTTP, URL: ts.URL, Timeout: 5 * time.Second}, true)
}

func TestSDKSSE(t *testing.T) {
	h := mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return newSDKServer() }, nil)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	exerciseSDK(t, &config.Server{Name: "sdk-sse", Transport: config.TransportSSE, URL: ts.URL, Timeout: 5 * time.Second}, true)
}
