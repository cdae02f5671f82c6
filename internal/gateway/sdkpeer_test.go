package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sdkUpstream is an upstream MCP server built with the official go-sdk,
// exercising every feature the gateway relays.
type sdkUpstream struct {
	name   string
	server *mcp.Server
	http   *httptest.Server
}

type textArgs struct {
	Text string `json:"text"`
}
type addArgs struct {
	A int `json:"a"`
	B int `json:"b"`
}
type stepsArgs struct {
	Steps int `json:"steps"`
}
type uriArgs struct {
	URI string `json:"uri"`
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func newSDKServer(name string) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, &mcp.ServerOptions{
		Instructions: "Use " + name + " for testing.",
		// Small pages make the gateway walk upstream pagination (C8.3).
		PageSize: 3,
		CompletionHandler: func(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{
				Values: []string{name + "-" + req.Params.Argument.Value + "1", name + "-" + req.Params.Argument.Value + "2"},
			}}, nil
		},
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "echo text"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		return textResult(name + ":" + a.Text), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "add two integers"}, func(ctx context.Context, req *mcp.CallToolRequest, a addArgs) (*mcp.CallToolResult, any, error) {
		return textResult(fmt.Sprint(a.A + a.B)), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "progress", Description: "reports progress"}, func(ctx context.Context, req *mcp.CallToolRequest, a stepsArgs) (*mcp.CallToolResult, any, error) {
		tok := req.Params.GetProgressToken()
		for i := 1; i <= a.Steps; i++ {
			if tok != nil {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(a.Steps)}); err != nil {
					return nil, nil, err
				}
			}
		}
		return textResult("done"), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "log", Description: "logs a message"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Logger: name, Data: a.Text})
		return textResult("logged"), nil, err
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "sample", Description: "asks the client's model"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
			MaxTokens: 10,
			Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: a.Text}}},
		})
		if err != nil {
			return nil, nil, err
		}
		return textResult("sampled:" + res.Content.(*mcp.TextContent).Text), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "ask", Description: "asks the user"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
			Message: a.Text,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
				"name": map[string]any{"type": "string"},
			}},
		})
		if err != nil {
			return nil, nil, err
		}
		return textResult(fmt.Sprintf("%s:%v", res.Action, res.Content["name"])), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "roots", Description: "lists the client's roots"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return textResult(strings.Join(uris, ",")), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "touch", Description: "marks a resource updated"}, func(ctx context.Context, req *mcp.CallToolRequest, a uriArgs) (*mcp.CallToolResult, any, error) {
		return textResult("touched"), nil, srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: a.URI})
	})
	srv.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who", Required: true}}},
		func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user",
				Content: &mcp.TextContent{Text: name + " greets " + req.Params.Arguments["who"]}}}}, nil
		})
	srv.AddResource(&mcp.Resource{URI: "mem://" + name + "/readme", Name: "readme", MIMEType: "text/plain"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "readme of " + name}}}, nil
		})
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "mem://" + name + "/items/{id}", Name: "item"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "item " + req.Params.URI}}}, nil
		})
	return srv
}

func startSDKUpstream(t testing.TB, name string) *sdkUpstream {
	t.Helper()
	srv := newSDKServer(name)
	return &sdkUpstream{name: name, server: srv, http: serveSDK(t, srv)}
}

// serveSDK serves a go-sdk server over streamable HTTP until the test
// ends. Register it before the gateway: cleanups run last-in first-out,
// and the gateway holds a GET stream open to it.
func serveSDK(t testing.TB, srv *mcp.Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	return ts
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("MCPGATE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// startGateway serves cfg on a loopback httptest server.
func startGateway(t testing.TB, cfg *config.Config) (*Gateway, *httptest.Server) {
	t.Helper()
	return startGatewayWith(t, Options{Config: cfg})
}

// startGatewayWith is startGateway with options; missing config fields get
// test defaults, a nil logger the test logger.
func startGatewayWith(t testing.TB, o Options) (*Gateway, *httptest.Server) {
	t.Helper()
	cfg := o.Config
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	if o.Version == "" {
		o.Version = "test"
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.ToolNameSeparator == "" {
		cfg.ToolNameSeparator = config.DefaultSeparator
	}
	for name, s := range cfg.Servers {
		s.Name = name
		if s.Timeout == 0 {
			s.Timeout = 20 * time.Second
		}
		if s.ProtocolVersion == "" {
			s.ProtocolVersion = config.ProtocolVersionAuto
		}
	}
	g := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	g.Start(ctx)
	ts := httptest.NewServer(g)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = g.Close(cctx)
		cancel()
	})
	return g, ts
}

func httpServer(url string) *config.Server {
	return &config.Server{Transport: config.TransportHTTP, URL: url}
}

// stdioServerEnv makes the test binary itself run a go-sdk server over
// stdio (see TestMain), so stdio upstreams are real child processes.
const stdioServerEnv = "MCPGATE_TEST_STDIO_SERVER"

// extraToolsEnv adds the tools crash and slow to a stdio test server.
const extraToolsEnv = "MCPGATE_TEST_EXTRA_TOOLS"

func TestMain(m *testing.M) {
	if name := os.Getenv(stdioServerEnv); name != "" {
		srv := newSDKServer(name)
		if os.Getenv(rootsCacheEnv) != "" {
			srv = rootsCacheServer(name)
		}
		if os.Getenv(extraToolsEnv) != "" {
			mcp.AddTool(srv, &mcp.Tool{Name: "crash"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				os.Exit(3)
				return nil, nil, nil
			})
			mcp.AddTool(srv, &mcp.Tool{Name: "late_sample"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				time.Sleep(500 * time.Millisecond)
				res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 1,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "late"}}}})
				if err != nil {
					return textResult("refused: " + err.Error()), nil, nil
				}
				return textResult("sampled:" + res.Content.(*mcp.TextContent).Text), nil, nil
			})
			mcp.AddTool(srv, &mcp.Tool{Name: "grow"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				mcp.AddTool(srv, &mcp.Tool{Name: "grown"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return textResult("grown"), nil, nil
				})
				return textResult("grew"), nil, nil
			})
			mcp.AddTool(srv, &mcp.Tool{Name: "slow"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				select {
				case <-time.After(1500 * time.Millisecond):
				case <-ctx.Done():
				}
				return textResult("slept"), nil, nil
			})
		}
		if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "stdio server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	runLeakChecked(m)
}

// upstreamConfig returns the config of a go-sdk upstream named name reached
// over transport: a child process for stdio, an httptest server otherwise.
func upstreamConfig(t testing.TB, transport, name string) (*config.Server, *sdkUpstream) {
	t.Helper()
	switch transport {
	case config.TransportStdio:
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		return &config.Server{Transport: config.TransportStdio, Command: exe, Env: map[string]string{stdioServerEnv: name}}, nil
	case config.TransportSSE:
		srv := newSDKServer(name)
		ts := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		t.Cleanup(ts.Close)
		return &config.Server{Transport: config.TransportSSE, URL: ts.URL}, &sdkUpstream{name: name, server: srv, http: ts}
	default:
		u := startSDKUpstream(t, name)
		return httpServer(u.http.URL), u
	}
}

// handshakeEra pins a go-sdk client to the handshake era: v1.8.0 clients try the
// stateless 2026-07-28 revision first, and these tests are about sessions,
// GET streams and server-initiated requests.
var handshakeEra = &mcp.ClientSessionOptions{ProtocolVersion: mcpwire.Rev20251125}

// connectTo connects the official go-sdk client to url over streamable
// HTTP, in the era opts pins (nil: the client's default, 2026-07-28), with
// the handlers in copts; the session is closed with the test.
func connectTo(t testing.TB, ctx context.Context, url string, copts *mcp.ClientOptions, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, copts).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
