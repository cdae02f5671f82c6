package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// chattyUpstream behaves like a Python MCP SDK server (FastMCP): it
// declares no logging capability and never waits for logging/setLevel,
// yet sends notifications/message: its tool chatty logs during the call
// (on the call's response stream, as ctx.info() does), and push sends one
// on the standalone GET stream, outside any call.
type chattyUpstream struct {
	ts    *httptest.Server
	mu    sync.Mutex
	gets  []chan string // open GET streams
	inits int           // live sessions (initialized, not deleted)
	set   []string      // logging/setLevel levels received
}

func newChattyUpstream(t *testing.T) *chattyUpstream {
	u := &chattyUpstream{}
	u.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodDelete:
			u.mu.Lock()
			u.inits--
			u.mu.Unlock()
			return
		case http.MethodGet:
			ch := make(chan string, 4)
			u.mu.Lock()
			u.gets = append(u.gets, ch)
			u.mu.Unlock()
			defer func() {
				u.mu.Lock()
				u.gets = slices.DeleteFunc(u.gets, func(c chan string) bool { return c == ch })
				u.mu.Unlock()
			}()
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for {
				select {
				case data := <-ch:
					fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
					w.(http.Flusher).Flush()
				case <-r.Context().Done():
					return
				}
			}
		}
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		reply := func(result string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
		}
		switch m.Method {
		case "initialize":
			u.mu.Lock()
			u.inits++
			w.Header().Set("Mcp-Session-Id", fmt.Sprintf("py-%d", u.inits))
			u.mu.Unlock()
			reply(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"py","version":"0"}}`)
		case "tools/list":
			reply(`{"tools":[{"name":"chatty","inputSchema":{"type":"object"}}]}`)
		case "logging/setLevel":
			level, _ := jsonrpc.GetString(m.Params, "level")
			u.mu.Lock()
			u.set = append(u.set, level)
			u.mu.Unlock()
			reply(`{}`)
		case "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"py","data":"during-call"}}`)
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"debug","logger":"py","data":"during-call-debug"}}`)
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"said things\"}]}}\n\n", m.ID.Raw())
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`, m.ID.Raw())
		}
	}))
	t.Cleanup(u.ts.Close)
	return u
}

// push sends a log message on every open GET stream.
func (u *chattyUpstream) push(data string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, ch := range u.gets {
		ch <- `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"warning","logger":"py","data":"` + data + `"}}`
	}
}

func (u *chattyUpstream) streams() int  { u.mu.Lock(); defer u.mu.Unlock(); return len(u.gets) }
func (u *chattyUpstream) sessions() int { u.mu.Lock(); defer u.mu.Unlock(); return u.inits }

// TestUpstreamLogsWithoutSetLevel (defect 6): a client that never sent
// logging/setLevel gets every log message an upstream sends, during a call
// and outside one, on every route; the gateway advertises logging (it can
// always honour logging/setLevel itself). After setLevel it gets only
// those at or above that level.
func TestUpstreamLogsWithoutSetLevel(t *testing.T) {
	up := newChattyUpstream(t)
	g, gw := startGateway(t, &config.Config{
		Servers:  map[string]*config.Server{"py": httpServer(up.ts.URL)},
		Toolsets: map[string]*config.Toolset{"ts": {Servers: map[string][]string{"py": {"chatty"}}}},
	})
	for _, tc := range []struct {
		route, tool string
		roots       bool // the client's calls use an upstream session of its own
	}{
		{"/mcp", "py__chatty", false},
		{"/mcp/py", "chatty", false},
		{"/toolset/ts/mcp", "py__chatty", false},
		{"/mcp/proxy", "py__chatty", false},
		{"/mcp", "py__chatty", true},
	} {
		t.Run(fmt.Sprintf("%s/roots=%v", tc.route, tc.roots), func(t *testing.T) {
			caps := &mcp.ClientCapabilities{}
			if tc.roots {
				caps.RootsV2 = &mcp.RootCapabilities{}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var mu sync.Mutex
			var logs []string
			got := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(logs) }
			cs := connectTo(t, ctx, gw.URL+tc.route, &mcp.ClientOptions{
				Capabilities: caps,
				LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
					mu.Lock()
					logs = append(logs, fmt.Sprint(req.Params.Data))
					mu.Unlock()
				},
			}, handshakeEra)
			if cs.InitializeResult().Capabilities.Logging == nil {
				t.Errorf("initialize on %s: capabilities %+v lack logging", tc.route, cs.InitializeResult().Capabilities)
			}
			waitStreams(t, g)
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: tc.tool}); got != "said things" {
				t.Fatalf("%s = %q", tc.tool, got)
			}
			waitFor(t, "the log messages of the call", func() bool { return len(got()) >= 2 })
			if want := []string{"during-call", "during-call-debug"}; !slices.Equal(got(), want) {
				t.Errorf("logs during the call = %q, want %q", got(), want)
			}
			// Every upstream session's GET stream carries one; the client
			// hears the one of the upstream session its calls use.
			mu.Lock()
			logs = nil
			mu.Unlock()
			waitFor(t, "the upstream's GET streams", func() bool { return up.streams() == up.sessions() })
			up.push("outside-call")
			waitFor(t, "the log message outside any call", func() bool { return slices.Contains(got(), "outside-call") })
			time.Sleep(100 * time.Millisecond)
			if want := []string{"outside-call"}; !slices.Equal(got(), want) {
				t.Errorf("logs outside any call = %q, want %q", got(), want)
			}

			// With a level set, less severe messages stay behind.
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
				t.Fatalf("logging/setLevel: %v", err)
			}
			mu.Lock()
			logs = nil
			mu.Unlock()
			callText(t, ctx, cs, &mcp.CallToolParams{Name: tc.tool})
			waitFor(t, "the info message", func() bool { return slices.Contains(got(), "during-call") })
			time.Sleep(100 * time.Millisecond)
			if slices.Contains(got(), "during-call-debug") {
				t.Errorf("logs after setLevel info = %q: the debug message came through", got())
			}
		})
	}
}

// A 2026-07-28 request gets log messages only when it asked for them
// (io.modelcontextprotocol/logLevel in its _meta), those at or above that
// level: that era's rule, kept in front of an handshake-era upstream too. Its
// server/discover still advertises logging.
func TestStatelessLogsOnlyWhenAsked(t *testing.T) {
	up := newChattyUpstream(t)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"py": httpServer(up.ts.URL)}})
	hdr := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "chatty"}
	call := func(meta string) string {
		_, body := statelessPost(t, gw.URL+"/mcp/py", hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"chatty","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`+meta+`}}}`)
		if !strings.Contains(body, "said things") {
			t.Fatalf("chatty: %s", body)
		}
		return body
	}
	if body := call(""); strings.Contains(body, "notifications/message") {
		t.Errorf("a request without logLevel got log messages:\n%s", body)
	}
	body := call(`,"io.modelcontextprotocol/logLevel":"info"`)
	if !strings.Contains(body, `"data":"during-call"`) || strings.Contains(body, "during-call-debug") {
		t.Errorf("a request with logLevel info got, want the info message only:\n%s", body)
	}
	_, disc := statelessPost(t, gw.URL+"/mcp/py", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"},
		`{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{`+statelessMetaJSON+`}}`)
	if !strings.Contains(disc, `"logging":{}`) {
		t.Errorf("server/discover does not advertise logging: %s", disc)
	}
}
