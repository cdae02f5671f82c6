// Command statelessserver is the new-era upstream of the TypeScript interop
// test test/interop/stateless.test.mjs: an MCP server built with the
// official go-sdk that speaks only protocol revision 2026-07-28, statelessly
// over streamable HTTP.
//
// Its tools ask for client input the 2026-07-28 way, with Multi Round-Trip
// Requests: the first call answers input_required (an elicitation, a
// sampling request or a roots/list request, plus a requestState), and the
// retry carries the answers. The test puts mcpgate between this server and
// an handshake-era (2025-11-25) TypeScript SDK client, and checks that the gateway
// asks that client on its session and hands it one ordinary result.
//
// Usage:
//
//	statelessserver [-addr 127.0.0.1:0]
//
// The first line on stdout is "LISTEN <url>", the endpoint's URL.
package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// protocolVersion is the only revision this server speaks.
const protocolVersion = "2026-07-28"

// aboutURI is the static resource, read with a cache hint.
const aboutURI = "info://statelessserver/about"

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := newServer()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true})
	mux := http.NewServeMux()
	mux.Handle("/mcp", logRequests(handler))
	fmt.Printf("LISTEN http://%s/mcp\n", ln.Addr())
	log.Fatal(http.Serve(ln, mux))
}

// logRequests writes one stderr line per HTTP request, for the test to
// check which revision its peers speak:
//
//	REQUEST via=<query parameter via> http=POST method=tools/call version=2026-07-28
//
// method and version come from the JSON-RPC body (version from
// params._meta, "-" when absent, as in a legacy request).
func logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, version := "-", "-"
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				Method string `json:"method"`
				Params struct {
					Meta map[string]any `json:"_meta"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &msg) == nil {
				method = cmp.Or(msg.Method, "-")
				if v, ok := msg.Params.Meta["io.modelcontextprotocol/protocolVersion"].(string); ok {
					version = v
				}
			}
		}
		log.Printf("REQUEST via=%s http=%s method=%s version=%s", cmp.Or(r.URL.Query().Get("via"), "-"), r.Method, method, version)
		next.ServeHTTP(w, r)
	})
}

func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "statelessserver", Version: "1.0.0"}, &mcp.ServerOptions{
		SupportedProtocolVersions: []string{protocolVersion},
		// Every list, and the read of a resource that sets none itself, may
		// be kept for 30 s by anyone.
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			if c.TTLMs == 0 {
				c.TTLMs = 30_000
			}
		},
	})

	type echoIn struct {
		Text string `json:"text" jsonschema:"the text to echo"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})

	// region is mirrored in the Mcp-Param-Region header, which the
	// stateless HTTP handler checks against the body.
	s.AddTool(&mcp.Tool{
		Name:        "region_echo",
		Description: "Echoes its arguments; region travels in the Mcp-Param-Region header too.",
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"region": map[string]any{"type": "string", "x-mcp-header": "Region"},
				"query":  map[string]any{"type": "string"},
			},
			"required": []string{"region", "query"},
		},
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct{ Region, Query string }
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, err
		}
		return text(fmt.Sprintf("region=%s query=%s", in.Region, in.Query)), nil
	})

	s.AddTool(&mcp.Tool{Name: "ask_name", Description: "Asks the user's name (elicitation), then greets.", InputSchema: emptyObject},
		mrtr("name", &mcp.ElicitParams{
			Mode:    "form",
			Message: "statelessserver wants your name",
			RequestedSchema: map[string]any{
				"type":       "object",
				"properties": map[string]any{"name": map[string]any{"type": "string", "description": "Your name"}},
				"required":   []string{"name"},
			},
		}, func(r mcp.InputResponse) (*mcp.CallToolResult, error) {
			ans, ok := r.(*mcp.ElicitResult)
			if !ok {
				return nil, fmt.Errorf("want an elicitation result, got %T", r)
			}
			if ans.Action != "accept" {
				return toolError("ask_name: the user chose %q", ans.Action), nil
			}
			name, _ := ans.Content["name"].(string)
			return text("hello " + name), nil
		}))

	s.AddTool(&mcp.Tool{Name: "ask_model", Description: "Asks the client's model for text (sampling).", InputSchema: emptyObject},
		mrtr("model", &mcp.CreateMessageParams{
			Messages:     []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say something for statelessserver."}}},
			SystemPrompt: "You are the statelessserver interop test.",
			MaxTokens:    64,
		}, func(r mcp.InputResponse) (*mcp.CallToolResult, error) {
			var content []mcp.Content
			switch ans := r.(type) {
			case *mcp.CreateMessageWithToolsResult:
				content = ans.Content
			case *mcp.CreateMessageResult:
				content = []mcp.Content{ans.Content}
			default:
				return nil, fmt.Errorf("want a sampling result, got %T", r)
			}
			var parts []string
			for _, c := range content {
				if t, ok := c.(*mcp.TextContent); ok {
					parts = append(parts, t.Text)
				}
			}
			return text("model said: " + strings.Join(parts, "")), nil
		}))

	s.AddTool(&mcp.Tool{Name: "ask_roots", Description: "Lists the client's roots.", InputSchema: emptyObject},
		mrtr("roots", &mcp.ListRootsParams{}, func(r mcp.InputResponse) (*mcp.CallToolResult, error) {
			ans, ok := r.(*mcp.ListRootsResult)
			if !ok {
				return nil, fmt.Errorf("want a roots/list result, got %T", r)
			}
			var uris []string
			for _, root := range ans.Roots {
				uris = append(uris, root.URI)
			}
			return text("roots: " + strings.Join(uris, " ")), nil
		}))

	s.AddPrompt(&mcp.Prompt{
		Name:        "greeting",
		Description: "Greets someone.",
		Arguments:   []*mcp.PromptArgument{{Name: "name", Required: true}},
	}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{
			Description: "A greeting",
			Messages: []*mcp.PromptMessage{{
				Role:    "user",
				Content: &mcp.TextContent{Text: "Please greet " + req.Params.Arguments["name"] + " from statelessserver."},
			}},
		}, nil
	})

	s.AddResource(&mcp.Resource{URI: aboutURI, Name: "about", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			res := &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
				URI: req.Params.URI, MIMEType: "text/plain", Text: "statelessserver speaks only " + protocolVersion,
			}}}
			res.TTLMs, res.CacheScope = 60_000, "public"
			return res, nil
		})
	return s
}

var emptyObject = map[string]any{"type": "object"}

// stateKey signs requestStates; a new one per process.
var stateKey = func() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}()

// requestState binds a retry to the tool and arguments of the first round.
func requestState(req *mcp.CallToolRequest) string {
	m := hmac.New(sha256.New, stateKey)
	m.Write([]byte(req.Params.Name))
	m.Write([]byte{0})
	// Canonical JSON (sorted keys), so that re-encoding on the way does not matter.
	var args any
	json.Unmarshal(req.Params.Arguments, &args)
	canon, _ := json.Marshal(args)
	m.Write(canon)
	return req.Params.Name + "." + hex.EncodeToString(m.Sum(nil))
}

// mrtr returns a tool handler that asks for one input (under key) with an
// input_required result, and on the retry passes the answer to done.
func mrtr(key string, ask mcp.InputRequest, done func(mcp.InputResponse) (*mcp.CallToolResult, error)) mcp.ToolHandler {
	return func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ans, ok := req.Params.InputResponses[key]
		if !ok {
			// The first round, or a retry without the answer: ask (again).
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{key: ask}, RequestState: requestState(req)}, nil
		}
		if !hmac.Equal([]byte(req.Params.RequestState), []byte(requestState(req))) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "requestState was not issued for this call"}
		}
		return done(ans)
	}
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func toolError(format string, args ...any) *mcp.CallToolResult {
	r := text(fmt.Sprintf(format, args...))
	r.IsError = true
	return r
}
