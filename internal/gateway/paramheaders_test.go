package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

const regionSchema = `{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"query":{"type":"string"},"opts":{"type":"object","properties":{"shard":{"type":"integer","x-mcp-header":"Shard"}}}},"required":["region","query"]}`

// paramServer is a go-sdk server with one tool whose arguments travel as
// Mcp-Param-* headers too; served
// statelessly, it checks those headers itself (go-sdk's
// validateParamHeaders) before the tool runs. It records the
// Mcp-Param-Region header of every tools/call it gets.
func paramServer(t *testing.T) (*config.Server, func() []string) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "sql", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "query", InputSchema: json.RawMessage(regionSchema)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct {
			Region, Query string
		}
		_ = json.Unmarshal(req.Params.Arguments, &args)
		return textResult("ran " + args.Query + " in " + args.Region), nil
	})
	var mu sync.Mutex
	var seen []string
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == "tools/call" {
			mu.Lock()
			seen = append(seen, r.Header.Get("Mcp-Param-Region"))
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	cfg := httpServer(up.URL)
	cfg.ProtocolVersion = "2026-07-28"
	return cfg, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

// Mcp-Param-* end to end: the go-sdk client (2026-07-28) mirrors the
// annotated arguments into headers, the gateway checks them against the
// body, and sends a stateless upstream the headers its own schema asks
// for, which the go-sdk server checks in turn. An handshake-era client sends no
// such headers and still reaches the tool: the gateway adds them.
func TestParamHeadersEndToEnd(t *testing.T) {
	cfg, seen := paramServer(t)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"db": cfg}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, opts := range []*mcp.ClientSessionOptions{nil, handshakeEra} {
		cs := connectTo(t, ctx, gw.URL+"/mcp", nil, opts)
		rev := cs.InitializeResult().ProtocolVersion
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(tools.Tools) != 1 || tools.Tools[0].Name != "db__query" {
			t.Fatalf("%s: tools %+v", rev, tools.Tools)
		}
		region := "Hello, 世界"
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "db__query", Arguments: map[string]any{"region": region, "query": "SELECT 1", "opts": map[string]any{"shard": 3}}})
		if err != nil || res.IsError {
			t.Fatalf("%s: call: %+v %v", rev, res, err)
		}
		if got := res.Content[0].(*mcp.TextContent).Text; got != "ran SELECT 1 in "+region {
			t.Errorf("%s: result %q", rev, got)
		}
		cs.Close()
	}
	for _, h := range seen() {
		if h != "=?base64?SGVsbG8sIOS4lueVjA==?=" {
			t.Errorf("upstream got Mcp-Param-Region %q, want the Base64 form", h)
		}
	}
	if n := len(seen()); n != 2 {
		t.Errorf("upstream got %d calls, want 2", n)
	}
}

// The gateway's own check of Mcp-Param-* (streamable-http.md "Server
// Validation"): 400 and -32020 on a missing, different or stray header;
// nothing reaches the upstream then.
func TestParamHeadersChecked(t *testing.T) {
	cfg, seen := paramServer(t)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"db": cfg}})
	url := gw.URL + "/mcp"
	base := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "db__query"}
	with := func(kv ...string) map[string]string {
		h := map[string]string{}
		for k, v := range base {
			h[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	call := func(args string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"db__query","arguments":` + args + `,` + statelessMetaJSON + `}}`
	}
	for _, tc := range []struct {
		name   string
		hdr    map[string]string
		args   string
		status int
		want   string
	}{
		{"matching", with("Mcp-Param-Region", "eu", "Mcp-Param-Shard", "7.0"), `{"region":"eu","query":"q","opts":{"shard":7}}`, 200, `"text":"ran q in eu"`},
		{"missing", with(), `{"region":"eu","query":"q"}`, 400, `{"code":-32020,"message":"Header mismatch: missing Mcp-Param-Region header for argument \"region\""}`},
		{"different", with("Mcp-Param-Region", "us"), `{"region":"eu","query":"q"}`, 400, `"message":"Header mismatch: Mcp-Param-Region header value does not match argument \"region\""`},
		{"nested different", with("Mcp-Param-Region", "eu", "Mcp-Param-Shard", "8"), `{"region":"eu","query":"q","opts":{"shard":7}}`, 400, `Mcp-Param-Shard header value does not match argument \"opts.shard\"`},
		{"stray", with("Mcp-Param-Region", "eu", "Mcp-Param-Shard", "1"), `{"region":"eu","query":"q"}`, 400, `Mcp-Param-Shard header is present but argument \"opts.shard\" is absent or null`},
		{"last repeated key counts", with("Mcp-Param-Region", "eu"), `{"region":"eu","query":"q","region":"us"}`, 400, `does not match argument`},
		{"unknown tools are not checked", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "db__nope"}, ``, 200, `Unknown tool: db__nope`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := call(tc.args)
			if tc.args == "" {
				body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"db__nope","arguments":{"region":"x"},` + statelessMetaJSON + `}}`
			}
			before := len(seen())
			status, got := statelessPost(t, url, tc.hdr, body)
			if status != tc.status || !strings.Contains(got, tc.want) {
				t.Fatalf("HTTP %d %s\nwant %d containing %s", status, got, tc.status, tc.want)
			}
			if tc.status != 200 && len(seen()) != before {
				t.Errorf("a rejected call reached the upstream")
			}
		})
	}
}

// A browser client's preflight may ask for the Mcp-Param-* names its tool
// needs; they are allowed one by one (no prefix wildcard exists in CORS).
func TestCORSAllowsParamHeaders(t *testing.T) {
	cfg, _ := paramServer(t)
	_, gw := startGatewayWith(t, Options{Config: &config.Config{AllowedOrigins: []string{"https://app.example"}, Servers: map[string]*config.Server{"db": cfg}}})
	req, _ := http.NewRequest(http.MethodOptions, gw.URL+"/mcp", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "content-type, mcp-method, mcp-name, mcp-param-region, mcp-param-bad header, x-other")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	allow := resp.Header.Get("Access-Control-Allow-Headers")
	if resp.StatusCode != http.StatusNoContent || !strings.Contains(allow, "Mcp-Method, Mcp-Name") || !strings.HasSuffix(allow, ", mcp-param-region") {
		t.Errorf("preflight: %d, Access-Control-Allow-Headers: %s", resp.StatusCode, allow)
	}
	if strings.Contains(allow, "bad") || strings.Contains(allow, "x-other") {
		t.Errorf("allowed a header it should not: %s", allow)
	}
}

// A stateless upstream's tool whose x-mcp-header breaks a rule is left out
// of every list (its HTTP clients must reject it); its other tools stay.
func TestInvalidParamHeaderToolLeftOut(t *testing.T) {
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "server/discover":
			return `{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"ttlMs":0,"cacheScope":"public"}`
		case "tools/list":
			return `{"resultType":"complete","ttlMs":0,"cacheScope":"public","tools":[
				{"name":"ratio","inputSchema":{"type":"object","properties":{"r":{"type":"number","x-mcp-header":"Ratio"}}}},
				{"name":"listed","inputSchema":{"type":"object","properties":{"l":{"type":"array","items":{"type":"string","x-mcp-header":"L"}}}}},
				{"name":"fine","inputSchema":{"type":"object","properties":{"r":{"type":"string","x-mcp-header":"R"}}}}]}`
		}
		return `{"resultType":"complete","content":[]}`
	})
	cfg := httpServer(up.URL)
	cfg.ProtocolVersion = "2026-07-28"
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"s": cfg}})
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + statelessMetaJSON + `}}`,
	} {
		status, got := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}, body)
		if status != 200 || !strings.Contains(got, `"name":"s__fine"`) || strings.Contains(got, "s__ratio") || strings.Contains(got, "s__listed") {
			t.Errorf("HTTP %d %s", status, got)
		}
	}
	status, got := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "s__ratio"},
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"s__ratio","arguments":{},`+statelessMetaJSON+`}}`)
	if status != 200 || !strings.Contains(got, "Unknown tool: s__ratio") {
		t.Errorf("calling the left-out tool: HTTP %d %s", status, got)
	}
}
