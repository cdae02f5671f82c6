package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// downstream collects what the gateway sends a go-sdk client.
type downstream struct {
	// noRoots: the client declares no roots capability, so its calls use
	// the pooled upstream sessions (with roots, sessions of its own).
	noRoots  bool
	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
	logs     []*mcp.LoggingMessageParams
	updated  []string
	toolsChg int
}

func (d *downstream) client(t testing.TB) *mcp.Client {
	var caps *mcp.ClientCapabilities
	if d.noRoots {
		caps = &mcp.ClientCapabilities{}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-client", Version: "1.0"}, &mcp.ClientOptions{
		Capabilities: caps,
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			in := req.Params.Messages[0].Content.(*mcp.TextContent).Text
			return &mcp.CreateMessageResult{Model: "test-model", Role: "assistant", Content: &mcp.TextContent{Text: strings.ToUpper(in)}}, nil
		},
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ada"}}, nil
		},
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			d.mu.Lock()
			d.progress = append(d.progress, req.Params)
			d.mu.Unlock()
		},
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			d.mu.Lock()
			d.logs = append(d.logs, req.Params)
			d.mu.Unlock()
		},
		ResourceUpdatedHandler: func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			d.mu.Lock()
			d.updated = append(d.updated, req.Params.URI)
			d.mu.Unlock()
		},
		ToolListChangedHandler: func(ctx context.Context, req *mcp.ToolListChangedRequest) {
			d.mu.Lock()
			d.toolsChg++
			d.mu.Unlock()
		},
	})
	if !d.noRoots {
		c.AddRoots(&mcp.Root{URI: "file:///work/project", Name: "project"})
	}
	return c
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func callText(t testing.TB, ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams) string {
	t.Helper()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("CallTool(%s): %v", params.Name, err)
	}
	if res.IsError {
		t.Fatalf("CallTool(%s): tool error: %v", params.Name, res.Content)
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// TestSDKPeersEveryRevision runs the official go-sdk client against the
// gateway in front of two go-sdk servers, once per handshake revision, and
// checks every relayed feature end to end.
// Upstreams are reached over each transport: streamable HTTP, legacy SSE
// and stdio (a real child process).
func TestSDKPeersEveryRevision(t *testing.T) {
	for _, transport := range []string{config.TransportHTTP, config.TransportSSE, config.TransportStdio} {
		t.Run(transport, func(t *testing.T) { testSDKPeers(t, transport) })
	}
}

func testSDKPeers(t *testing.T, transport string) {
	alpha, _ := upstreamConfig(t, transport, "alpha")
	beta, _ := upstreamConfig(t, transport, "beta")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"alpha": alpha,
		"beta":  beta,
	}})
	for _, rev := range mcpwire.HandshakeRevisions {
		t.Run(rev, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var d downstream
			cs, err := d.client(t).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: rev})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer cs.Close()
			init := cs.InitializeResult()
			if init.ProtocolVersion != rev {
				t.Errorf("negotiated %q, want %q", init.ProtocolVersion, rev)
			}
			if init.ServerInfo.Name != "mcpgate" {
				t.Errorf("serverInfo.name = %q, want mcpgate", init.ServerInfo.Name)
			}
			for _, want := range []string{"Use alpha for testing.", "Use beta for testing."} {
				if !strings.Contains(init.Instructions, want) {
					t.Errorf("instructions %q lack %q", init.Instructions, want)
				}
			}
			caps := init.Capabilities
			if caps.Tools == nil || caps.Prompts == nil || caps.Resources == nil || !caps.Resources.Subscribe || caps.Logging == nil || caps.Completions == nil {
				t.Errorf("capabilities = %+v, want tools, prompts, resources.subscribe, logging, completions", caps)
			}

			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range tools.Tools {
				names = append(names, tl.Name)
			}
			var want []string
			for _, s := range []string{"alpha", "beta"} {
				for _, n := range []string{"add", "ask", "echo", "log", "progress", "roots", "sample", "touch"} {
					want = append(want, s+"__"+n)
				}
			}
			if diff := cmp.Diff(names, want); diff != "" {
				t.Errorf("tools (-got +want):\n%s", diff)
			}

			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__add", Arguments: map[string]any{"a": 2, "b": 40}}); got != "42" {
				t.Errorf("alpha__add = %q, want 42", got)
			}
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "beta__echo", Arguments: map[string]any{"text": "hi"}}); got != "beta:hi" {
				t.Errorf("beta__echo = %q", got)
			}

			// Progress: the client's own token comes back.
			p := &mcp.CallToolParams{Name: "beta__progress", Arguments: map[string]any{"steps": 3}}
			p.SetProgressToken("client-token-7")
			callText(t, ctx, cs, p)
			waitFor(t, "3 progress notifications", func() bool { d.mu.Lock(); defer d.mu.Unlock(); return len(d.progress) == 3 })
			for _, pn := range d.progress {
				if pn.ProgressToken != "client-token-7" {
					t.Errorf("progress token = %v, want client-token-7", pn.ProgressToken)
				}
			}

			// Logging.
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Fatal(err)
			}
			callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__log", Arguments: map[string]any{"text": "note-" + rev}})
			waitFor(t, "log message", func() bool {
				d.mu.Lock()
				defer d.mu.Unlock()
				return slices.ContainsFunc(d.logs, func(l *mcp.LoggingMessageParams) bool { return l.Data == "note-"+rev })
			})

			// Sampling, elicitation and roots go back to this client.
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__sample", Arguments: map[string]any{"text": "ping"}}); got != "sampled:PING" {
				t.Errorf("sampling = %q, want sampled:PING", got)
			}
			if rev >= mcpwire.Rev20250618 {
				if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "beta__ask", Arguments: map[string]any{"text": "name?"}}); got != "accept:ada" {
					t.Errorf("elicitation = %q, want accept:ada", got)
				}
			}
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__roots"}); got != "file:///work/project" {
				t.Errorf("roots = %q", got)
			}

			// Prompts.
			pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "beta__greet", Arguments: map[string]string{"who": "you"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := pr.Messages[0].Content.(*mcp.TextContent).Text; got != "beta greets you" {
				t.Errorf("prompt = %q", got)
			}

			// Resources: exact URI and template routed to the right server.
			res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://beta/readme"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Contents[0].Text != "readme of beta" {
				t.Errorf("read = %q", res.Contents[0].Text)
			}
			res, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://alpha/items/7"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Contents[0].Text != "item mem://alpha/items/7" {
				t.Errorf("template read = %q", res.Contents[0].Text)
			}
			rl, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rl.Resources) != 2 {
				t.Errorf("resources/list has %d items, want 2", len(rl.Resources))
			}

			// Completion by prefixed prompt name.
			comp, err := cs.Complete(ctx, &mcp.CompleteParams{
				Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "alpha__greet"},
				Argument: mcp.CompleteParamsArgument{Name: "who", Value: "x"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(comp.Completion.Values, []string{"alpha-x1", "alpha-x2"}); diff != "" {
				t.Errorf("completion (-got +want):\n%s", diff)
			}

			// Subscribe, then an update reaches this client.
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://alpha/readme"}); err != nil {
				t.Fatal(err)
			}
			callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__touch", Arguments: map[string]any{"uri": "mem://alpha/readme"}})
			waitFor(t, "resources/updated", func() bool { d.mu.Lock(); defer d.mu.Unlock(); return len(d.updated) > 0 })
			if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "mem://alpha/readme"}); err != nil {
				t.Fatal(err)
			}

			// Unknown tools look the same whether the server exists or not.
			_, err1 := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__nope"})
			_, err2 := cs.CallTool(ctx, &mcp.CallToolParams{Name: "gamma__echo"})
			if err1 == nil || err2 == nil {
				t.Fatalf("unknown tools succeeded: %v %v", err1, err2)
			}
			if strings.Contains(err2.Error(), "gamma") && !strings.Contains(err2.Error(), "gamma__echo") {
				t.Errorf("unknown-server error reveals more than the name: %v", err2)
			}
		})
	}
}

// TestSingleServerRoute checks /mcp/<server> and /<server>/mcp expose one
// server with its own names.
func TestSingleServerRoute(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	beta := startSDKUpstream(t, "beta")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"alpha": httpServer(alpha.http.URL),
		"beta":  httpServer(beta.http.URL),
	}})
	for _, path := range []string{"/mcp/beta", "/beta/mcp"} {
		t.Run(path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var d downstream
			cs, err := d.client(t).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + path}, handshakeEra)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ServerInfo.Name; got != "beta" {
				t.Errorf("serverInfo.name = %q, want beta", got)
			}
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tl := range tools.Tools {
				if strings.Contains(tl.Name, "__") {
					t.Errorf("tool %q is prefixed on a single-server route", tl.Name)
				}
			}
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); got != "beta:x" {
				t.Errorf("echo = %q", got)
			}
		})
	}
}

// TestLegacySSEDownstream serves a 2024-11-05 client over HTTP+SSE.
func TestLegacySSEDownstream(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	for _, path := range []string{"/sse", "/mcp/sse", "/mcp/alpha/sse"} {
		t.Run(path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var d downstream
			cs, err := d.client(t).Connect(ctx, &mcp.SSEClientTransport{Endpoint: gw.URL + path}, &mcp.ClientSessionOptions{ProtocolVersion: mcpwire.Rev20241105})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			name := "alpha__add"
			if path == "/mcp/alpha/sse" {
				name = "add"
			}
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"a": 1, "b": 2}}); got != "3" {
				t.Errorf("add = %q", got)
			}
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: strings.Replace(name, "add", "sample", 1), Arguments: map[string]any{"text": "sse"}}); got != "sampled:SSE" {
				t.Errorf("sample over SSE = %q", got)
			}
		})
	}
}

// TestMultiServerRoutes: /mcp/a,b serves those servers prefixed; the
// x-mcp-servers header narrows any route; unknown servers are refused.
func TestMultiServerRoutes(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	beta := startSDKUpstream(t, "beta")
	gamma := startSDKUpstream(t, "gamma")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"alpha": httpServer(alpha.http.URL), "beta": httpServer(beta.http.URL), "gamma": httpServer(gamma.http.URL),
	}})
	servers := func(body []byte) []string {
		var res struct {
			Result struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
			} `json:"result"`
		}
		json.Unmarshal(body, &res)
		seen := map[string]bool{}
		var out []string
		for _, tl := range res.Result.Tools {
			s, _, _ := strings.Cut(tl.Name, "__")
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
		return out
	}
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	for _, tc := range []struct {
		path, header string
		want         []string
	}{
		{"/mcp", "", []string{"alpha", "beta", "gamma"}},
		{"/mcp/alpha,gamma", "", []string{"alpha", "gamma"}},
		{"/mcp/gamma,alpha/tools", "", []string{"alpha", "gamma"}},
		{"/mcp", "beta", []string{"beta"}},
		{"/mcp/alpha,gamma", "gamma, beta", []string{"gamma"}},
	} {
		hdr := map[string]string{}
		if tc.header != "" {
			hdr["X-Mcp-Servers"] = tc.header
		}
		status, _, body := rpc(t, gw.URL+tc.path, hdr, list)
		if status != 200 {
			t.Errorf("%s [%s]: status %d", tc.path, tc.header, status)
			continue
		}
		if diff := cmp.Diff(servers(body), tc.want); diff != "" {
			t.Errorf("%s [%s] servers (-got +want):\n%s", tc.path, tc.header, diff)
		}
	}
	if status, _, body := rpc(t, gw.URL+"/mcp/alpha,nosuch", nil, list); status != http.StatusNotFound || !strings.Contains(string(body), "nosuch") {
		t.Errorf("unknown server in route: %d %s", status, body)
	}
	// A route narrowed to nothing: initialize says so (S6.5).
	_, _, body := rpc(t, gw.URL+"/mcp", map[string]string{"X-Mcp-Servers": "nosuch"},
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"n","version":"0"}}}`)
	if !strings.Contains(string(body), `"error"`) || !strings.Contains(string(body), "No MCP servers") {
		t.Errorf("initialize on an empty route: %s", body)
	}
}

// TestResourceURIConflict: a URI two go-sdk upstreams both list is not a
// silent pick (S6.1): it is left out of the list, its read is refused, and
// the conflict is logged.
func TestResourceURIConflict(t *testing.T) {
	mk := func(name string) *httptest.Server {
		srv := mcp.NewServer(&mcp.Implementation{Name: name}, nil)
		srv.AddResource(&mcp.Resource{URI: "mem://shared/doc", Name: "doc"}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "from " + name}}}, nil
		})
		return serveSDK(t, srv)
	}
	a, b := mk("a"), mk("b")
	var logs syncBuffer
	_, gw := startGatewayWith(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Config: &config.Config{Servers: map[string]*config.Server{"a": httpServer(a.URL), "b": httpServer(b.URL)}}})
	_, _, body := rpc(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":1,"method":"resources/list"}`)
	if n := strings.Count(string(body), "mem://shared/doc"); n != 0 {
		t.Errorf("resources/list lists the shared URI %d times: %s", n, body)
	}
	_, _, body = rpc(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"mem://shared/doc"}}`)
	if !strings.Contains(string(body), "Ambiguous resource") || strings.Contains(string(body), "from ") {
		t.Errorf("read of the shared URI: %s, want it refused", body)
	}
	if !strings.Contains(logs.String(), "resource URI claimed by more than one item of a route") {
		t.Errorf("conflict not logged: %s", logs.String())
	}
}
