package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
)

// metaUpstream is an handshake-era upstream that records the params _meta of
// every tools/call it gets.
func metaUpstream(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var metas []string
	ts := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"resources":{}},"serverInfo":{"name":"old","version":"0"},"instructions":"An handshake-era server."}`
		case "tools/list":
			return `{"tools":[{"name":"hello","inputSchema":{"type":"object"}}]}`
		case "resources/list":
			return `{"resources":[]}`
		case "server/discover":
			// An handshake-era server: the gateway's probe of the new era fails.
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`, m.ID.Raw())
			return ""
		}
		meta, _ := jsonrpc.Get(m.Params, "_meta")
		mu.Lock()
		metas = append(metas, string(meta))
		mu.Unlock()
		return `{"content":[{"type":"text","text":"hello from the handshake era"}]}`
	})
	return ts, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string{}, metas...) }
}

const statelessMetaJSON = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

func statelessPost(t *testing.T, url string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The official go-sdk client, unpinned, speaks 2026-07-28 to the gateway,
// which serves it statelessly in front of an handshake-era upstream; the
// upstream never sees the stateless era's _meta keys.
func TestStatelessClientHandshakeUpstream(t *testing.T) {
	up, metas := metaUpstream(t)
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{"old": httpServer(up.URL + "/mcp")}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := connectTo(t, ctx, gw.URL+"/mcp", nil, nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Errorf("negotiated %q, want the stateless era", v)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "old__hello" {
		t.Fatalf("tools: %+v %v", tools, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "old__hello", Arguments: map[string]any{}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "hello from the handshake era" {
		t.Fatalf("call: %+v %v", res, err)
	}
	for _, m := range metas() {
		if strings.Contains(m, "io.modelcontextprotocol/") {
			t.Errorf("the handshake-era upstream got stateless-era _meta: %s", m)
		}
	}
}

// Raw transcripts of the stateless era's rules at the edge (S17).
func TestStatelessEdge(t *testing.T) {
	up, _ := metaUpstream(t)
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{"old": httpServer(up.URL + "/mcp")}}})
	url := gw.URL + "/mcp"
	ok := map[string]string{"MCP-Protocol-Version": "2026-07-28"}
	with := func(method, name string) map[string]string {
		h := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
		if name != "" {
			h["Mcp-Name"] = name
		}
		return h
	}
	_ = ok

	// server/discover.
	code, body := statelessPost(t, url, with("server/discover", ""), `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+statelessMetaJSON+`}}`)
	var disc struct {
		Result struct {
			ResultType        string          `json:"resultType"`
			SupportedVersions []string        `json:"supportedVersions"`
			Capabilities      json.RawMessage `json:"capabilities"`
			Instructions      string          `json:"instructions"`
			Meta              map[string]struct {
				Name string `json:"name"`
			} `json:"_meta"`
			TTL   *int64 `json:"ttlMs"`
			Scope string `json:"cacheScope"`
		} `json:"result"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &disc) != nil {
		t.Fatalf("discover: %d %s", code, body)
	}
	d := disc.Result
	if d.ResultType != "complete" || d.SupportedVersions[0] != "2026-07-28" || !strings.Contains(string(d.Capabilities), `"tools":{"listChanged":true}`) || !strings.Contains(d.Instructions, "An handshake-era server.") ||
		d.Meta["io.modelcontextprotocol/serverInfo"].Name != "mcpgate" || d.TTL == nil || d.Scope != "private" {
		t.Errorf("discover result: %s", body)
	}

	// A list carries resultType and cache hints; a call carries resultType.
	code, body = statelessPost(t, url, with("tools/list", ""), `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+statelessMetaJSON+`}}`)
	if code != 200 || !strings.Contains(body, `"resultType":"complete"`) || !strings.Contains(body, `"cacheScope":"private"`) || !strings.Contains(body, `"ttlMs":`) || !strings.Contains(body, `"old__hello"`) {
		t.Errorf("tools/list: %d %s", code, body)
	}
	code, body = statelessPost(t, url, with("tools/call", "old__hello"), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"old__hello","arguments":{},`+statelessMetaJSON+`}}`)
	if code != 200 || !strings.Contains(body, `"resultType":"complete"`) || !strings.Contains(body, "hello from the handshake era") || strings.Contains(body, "ttlMs") {
		t.Errorf("tools/call: %d %s", code, body)
	}

	for _, tc := range []struct {
		name   string
		hdr    map[string]string
		body   string
		status int
		code   int64
		msg    string
	}{
		{"name header mismatch", with("tools/call", "old__other"), `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"old__hello",` + statelessMetaJSON + `}}`,
			400, -32020, "Header mismatch: Mcp-Name header value 'old__other' does not match body value 'old__hello'"},
		{"missing Mcp-Method", map[string]string{"MCP-Protocol-Version": "2026-07-28"}, `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{` + statelessMetaJSON + `}}`,
			400, -32020, "missing required Mcp-Method header"},
		{"version header differs from _meta", map[string]string{"MCP-Protocol-Version": "2025-11-25", "Mcp-Method": "tools/list"}, `{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{` + statelessMetaJSON + `}}`,
			400, -32020, "MCP-Protocol-Version header value '2025-11-25' does not match"},
		{"unsupported version", map[string]string{"MCP-Protocol-Version": "1900-01-01", "Mcp-Method": "tools/list"}, `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}`,
			400, -32022, "Unsupported protocol version"},
		{"unsupported version in _meta alone", with("tools/list", ""), `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}}}`,
			400, -32020, "MCP-Protocol-Version header value '2026-07-28' does not match body value 'v999.0.0'"},
		{"no version header", map[string]string{"Mcp-Method": "tools/list"}, `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{` + statelessMetaJSON + `}}`,
			400, -32020, "missing required MCP-Protocol-Version header"},
		{"the header says 2026-07-28, the body has no _meta", with("server/discover", ""), `{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{}}`,
			400, -32602, "missing _meta"},
		{"the header says 2026-07-28, _meta has no version", with("server/discover", ""), `{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}}`,
			400, -32602, "protocolVersion"},
		{"missing client capabilities", with("tools/list", ""), `{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
			400, -32602, "clientCapabilities"},
		{"removed method", with("logging/setLevel", ""), `{"jsonrpc":"2.0","id":9,"method":"logging/setLevel","params":{"level":"info",` + statelessMetaJSON + `}}`,
			404, -32601, "Method not found"},
		{"unknown method", with("frobnicate", ""), `{"jsonrpc":"2.0","id":10,"method":"frobnicate","params":{` + statelessMetaJSON + `}}`,
			404, -32601, "Method not found"},
		{"batch", with("tools/list", ""), `[{"jsonrpc":"2.0","id":11,"method":"tools/list","params":{` + statelessMetaJSON + `}}]`,
			400, -32600, "batches are not part of MCP 2026-07-28"},
	} {
		code, body := statelessPost(t, url, tc.hdr, tc.body)
		var resp struct {
			Error *struct {
				Code    int64           `json:"code"`
				Message string          `json:"message"`
				Data    json.RawMessage `json:"data"`
			} `json:"error"`
		}
		if code != tc.status || json.Unmarshal([]byte(body), &resp) != nil || resp.Error == nil || resp.Error.Code != tc.code || !strings.Contains(resp.Error.Message, tc.msg) {
			t.Errorf("%s: %d %s", tc.name, code, body)
			continue
		}
		if tc.code == -32022 && !strings.Contains(string(resp.Error.Data), `"supported":["2026-07-28","2025-11-25"`) {
			t.Errorf("unsupported version data: %s", resp.Error.Data)
		}
	}

	// The era has no GET stream and no session to DELETE.
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequest(method, url, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" || !strings.Contains(string(b), "subscriptions/listen") {
			t.Errorf("%s: %d Allow=%q %s", method, resp.StatusCode, resp.Header.Get("Allow"), b)
		}
	}
}

// subscriptions/listen: the go-sdk client (2026-07-28) opens it by itself
// for its list-changed handler, and a tool added upstream reaches it; a
// raw listener gets the acknowledgement and the change, each with its
// subscription id.
// pendingQuestions is how many upstream questions g's 2026-07-28 calls
// hold for their clients' next retry.
func pendingQuestions(g *Gateway) int {
	n := 0
	g.exchanges.each(func(ex *exchange) {
		ex.mu.Lock()
		n += len(ex.pending)
		ex.mu.Unlock()
	})
	return n
}

// callsOver is how many of g's 2026-07-28 calls have their reply, waiting
// for the client's retry to take it.
func callsOver(g *Gateway) int {
	n := 0
	g.exchanges.each(func(ex *exchange) { n += len(ex.done) })
	return n
}

// openListeners is how many subscriptions/listen streams g holds open: a
// test that needs a client listening waits for its stream with it.
func openListeners(g *Gateway) int {
	g.listen.mu.Lock()
	defer g.listen.mu.Unlock()
	return len(g.listen.m)
}

func TestStatelessListen(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A raw listener.
	events := openListen(t, ctx, gw.URL+"/mcp", `"L1"`, `{"toolsListChanged":true,"promptsListChanged":true}`)
	ev, err := events.Next()
	if err != nil || !strings.Contains(string(ev.Data), `"method":"notifications/subscriptions/acknowledged"`) ||
		!strings.Contains(string(ev.Data), `"io.modelcontextprotocol/subscriptionId":"L1"`) || !strings.Contains(string(ev.Data), `"toolsListChanged":true`) {
		t.Fatalf("first event: %s %v", ev.Data, err)
	}

	// The official client, listening by itself.
	changed := make(chan struct{}, 4)
	client := mcp.NewClient(&mcp.Implementation{Name: "stateless", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client's listen stream", func() bool { return openListeners(g) == 2 }) // the raw one and the client's
	mcp.AddTool(alpha.server, &mcp.Tool{Name: "fresh"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return textResult("new"), nil, nil
	})
	ev, err = events.Next()
	if err != nil || !strings.Contains(string(ev.Data), `"method":"notifications/tools/list_changed"`) || !strings.Contains(string(ev.Data), `"io.modelcontextprotocol/subscriptionId":"L1"`) {
		t.Errorf("raw listener: %s %v", ev.Data, err)
	}
	// A change announced before this one (the upstream's session coming
	// up under load) may be heard first: wait for the one that brings
	// the new tool.
	for found := false; !found; {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the go-sdk client never saw alpha__fresh: no list change brought it")
		}
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range tools.Tools {
			found = found || tl.Name == "alpha__fresh"
		}
	}
}

// A 2026-07-28 upstream (the go-sdk server in stateless mode), pinned in
// the config: the gateway talks server/discover and per-request _meta to
// it, and clients of both eras use it through the gateway (C1.4).
// With auto, the gateway probes server/discover and finds the era itself.
func TestStatelessUpstream(t *testing.T) {
	for _, pv := range []string{"2026-07-28", "auto"} {
		t.Run(pv, func(t *testing.T) { testStatelessUpstream(t, pv) })
	}
}

func testStatelessUpstream(t *testing.T, pv string) {
	srv := newSDKServer("stateless")
	cfg := statelessUpstream(t, srv)
	cfg.ProtocolVersion = pv
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"stateless": cfg}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, opts := range []*mcp.ClientSessionOptions{handshakeEra, nil} {
		cs := connectTo(t, ctx, gw.URL+"/mcp", nil, opts)
		rev := cs.InitializeResult().ProtocolVersion
		tools, err := cs.ListTools(ctx, nil)
		if err != nil || len(tools.Tools) == 0 {
			t.Fatalf("%s client: tools %v %v", rev, tools, err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "stateless__add", Arguments: map[string]any{"a": 2, "b": 40}})
		if err != nil || res.IsError {
			t.Fatalf("%s client: add: %+v %v", rev, res, err)
		}
		if got := res.Content[0].(*mcp.TextContent).Text; got != "42" {
			t.Errorf("%s client: add = %q", rev, got)
		}
		cs.Close()
	}
	if h := g.Upstreams().Health()["stateless"]; h.State != "ready" {
		t.Errorf("health %+v", h)
	}
	s, err := g.Upstreams().Session(ctx, "stateless")
	if err != nil || s.Info().ProtocolVersion != "2026-07-28" {
		t.Errorf("upstream session: %v %+v", err, s)
	}
}

// S18.2: a 2026-07-28 upstream answers input_required (it needs an
// elicitation); an handshake-era client behind the gateway is asked on its own
// session, and sees one ordinary result built from its answer.
func TestInputRequiredBridgedToOldClient(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "confirm"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if req.Params.InputResponses == nil {
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"go": &mcp.ElicitParams{Message: "Proceed?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}},
				RequestState: "state-1",
			}, nil, nil
		}
		ans, _ := req.Params.InputResponses["go"].(*mcp.ElicitResult)
		action := "none"
		if ans != nil {
			action = ans.Action
		}
		return textResult("confirmed:" + action + ":" + req.Params.RequestState), nil, nil
	})
	cfg := statelessUpstream(t, srv)
	audit := &memAudit{}
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{"asker": cfg}}, Audit: audit})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var asked []string
	client := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, handshakeEra)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "asker__confirm", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("call: %+v %v", res, err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != "confirmed:accept:state-1" {
		t.Errorf("result %q", got)
	}
	if len(asked) != 1 || asked[0] != "Proceed?" {
		t.Errorf("the client was asked %q", asked)
	}
	// A client that cannot answer gets a clear error, not a hang.
	plain := connectTo(t, ctx, gw.URL+"/mcp", nil, handshakeEra)
	if _, err := plain.CallTool(ctx, &mcp.CallToolParams{Name: "asker__confirm", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), "elicitation/create, which this client does not support") {
		t.Errorf("client without elicitation: %v", err)
	}
	// The audit counts that against the client, not the upstream.
	var outcomes []string
	for _, r := range audit.records() {
		outcomes = append(outcomes, r.Outcome+"/"+r.ErrorClass)
	}
	if strings.Join(outcomes, ",") != "ok/,client_error/client_error" {
		t.Errorf("audit outcomes %v", outcomes)
	}
}

// S18.1: an handshake-era upstream elicits (and samples) during a 2026-07-28
// client's call: the client gets input_required, answers through its own
// handler on the retry, and the call completes with the answer. A forged,
// foreign or replayed requestState is refused.
func TestServerRequestsBridgedToStatelessClient(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "stateless", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "pong"}}, nil
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q", v)
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__ask", Arguments: map[string]any{"text": "Your name?"}}); got != "accept:Ada" {
		t.Errorf("elicitation bridged: %q", got)
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__sample", Arguments: map[string]any{"text": "ping"}}); got != "sampled:pong" {
		t.Errorf("sampling bridged: %q", got)
	}

	// The raw exchange: the first answer is input_required with the
	// gateway's requestState.
	call := func(_, extra string) (int, string) {
		return statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "alpha__ask"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"alpha__ask","arguments":{"text":"Who?"}`+extra+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`)
	}
	code, body := call("", "")
	var first struct {
		Result struct {
			ResultType    string                     `json:"resultType"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  string                     `json:"requestState"`
		} `json:"result"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &first) != nil || first.Result.ResultType != "input_required" || len(first.Result.InputRequests) != 1 {
		t.Fatalf("first round: %d %s", code, body)
	}
	var key string
	for k, v := range first.Result.InputRequests {
		key = k
		if !strings.Contains(string(v), `"method":"elicitation/create"`) || !strings.Contains(string(v), "Who?") {
			t.Errorf("input request %s", v)
		}
	}
	state := first.Result.RequestState
	forged := state[:len(state)-2] + "AA"
	answer := `,"inputResponses":{"` + key + `":{"action":"accept","content":{"name":"Bob"}}}`
	if code, body := call("", answer+`,"requestState":"`+forged+`"`); code != http.StatusBadRequest || !strings.Contains(body, "requestState was not issued to this caller") {
		t.Errorf("forged state: HTTP %d %s", code, body)
	}
	// The state belongs to the request that asked: other arguments, or
	// another method, cannot take its answers.
	if _, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "alpha__ask"},
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"alpha__ask","arguments":{"text":"Someone else?"}`+answer+`,"requestState":"`+state+`","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`); !strings.Contains(body, "must repeat the original request") {
		t.Errorf("retry with other arguments: %s", body)
	}
	if _, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "prompts/get", "Mcp-Name": "alpha__ask"},
		`{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"alpha__ask","arguments":{"text":"Who?"}`+answer+`,"requestState":"`+state+`","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`); !strings.Contains(body, "must repeat the original request") {
		t.Errorf("retry as another method: %s", body)
	}
	// Spelling does not matter: keys in another order, other whitespace.
	if _, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "alpha__ask"},
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"requestState":"`+state+`" , "arguments": {"text":"Who?"},"name":"alpha__ask"`+answer+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`); !strings.Contains(body, "accept:Bob") {
		t.Errorf("retry: %s", body)
	}
	if code, body := call("", answer+`,"requestState":"`+state+`"`); code != http.StatusBadRequest || !strings.Contains(body, "expired or already used") {
		t.Errorf("replayed state: HTTP %d %s", code, body)
	}
}

// A requestState is bound to the caller it was issued to and names one
// round of one exchange.
func TestRequestStateBoundToOwner(t *testing.T) {
	ex := &exchange{id: "abc123", owner: "key:alice"}
	state := mintState(ex)
	if id, round, ok := openState(state, "key:alice"); !ok || id != "abc123" || round != 1 {
		t.Errorf("owner: %q %d %v", id, round, ok)
	}
	next := mintState(ex)
	if _, round, ok := openState(next, "key:alice"); next == state || !ok || round != 2 {
		t.Errorf("second round: %q (first %q) %d %v", next, state, round, ok)
	}
	for _, s := range []string{state + "x", "mcpg1.abc123", "mcpg1.abc123.1", "other",
		strings.Replace(state, "abc123", "abc124", 1), strings.Replace(state, ".1.", ".2.", 1), strings.Replace(state, ".1.", ".0.", 1)} {
		if _, _, ok := openState(s, "key:alice"); ok {
			t.Errorf("accepted %q", s)
		}
	}
	if _, _, ok := openState(state, "key:mallory"); ok {
		t.Error("another caller's requestState was accepted")
	}
}

// A 2026-07-28 upstream's list changes (on the subscriptions/listen stream
// the gateway keeps open to it) reach an handshake-era client as
// notifications/tools/list_changed, and the new tool is callable.
func TestStatelessUpstreamListChanged(t *testing.T) {
	srv := newSDKServer("stateless")
	cfg := statelessUpstream(t, srv)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"stateless": cfg}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	changed := make(chan struct{}, 4)
	cs := connectTo(t, ctx, gw.URL+"/mcp", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}, handshakeEra)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// The change must come once the gateway's listen stream and the
	// client's GET stream are open, which nothing here can observe: the
	// tool is (re)added until a change gets through (a fixed wait flaked
	// on a loaded machine). A change the client hears may also be the
	// gateway's own, sent when its upstream session (re)starts, before
	// the upstream's change reached it: then the new tool is not known
	// yet, and the next change is waited for.
	var lastErr error
	for {
		mcp.AddTool(srv, &mcp.Tool{Name: "fresh"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return textResult("new"), nil, nil
		})
		select {
		case <-changed:
		case <-time.After(300 * time.Millisecond):
			continue
		case <-ctx.Done():
			t.Fatalf("no tools/list_changed after which the new tool was callable reached the handshake-era client (last call: %v)", lastErr)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "stateless__fresh"})
		if err != nil {
			lastErr = err
			continue
		}
		if res.IsError || res.Content[0].(*mcp.TextContent).Text != "new" {
			t.Fatalf("fresh = %+v", res.Content)
		}
		return
	}
}

// A subscriptions/listen stream hears the tools list change that an
// upstream restart causes (the restarted server may offer other tools).
func TestListenHearsUpstreamRestart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"fragile": {Transport: config.TransportStdio, Command: exe, Env: map[string]string{stdioServerEnv: "fragile", extraToolsEnv: "1"}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The first session's announcement must not be mistaken for the
	// restart's: listen only once the upstream is up.
	waitFor(t, "upstream ready", func() bool { return g.Upstreams().Health()["fragile"].State == "ready" })
	events := openListen(t, ctx, gw.URL+"/mcp", `7`, `{"toolsListChanged":true}`)
	if ev, err := events.Next(); err != nil || !strings.Contains(string(ev.Data), "subscriptions/acknowledged") {
		t.Fatalf("ack: %s %v", ev.Data, err)
	}
	// Kill the upstream through a call; the gateway restarts it.
	code, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "fragile__crash"},
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"fragile__crash","arguments":{},`+statelessMetaJSON+`}}`)
	if code != 200 || !strings.Contains(body, `"error"`) {
		t.Errorf("crash call: %d %s", code, body)
	}
	ev, err := events.Next()
	if err != nil || !strings.Contains(string(ev.Data), `"method":"notifications/tools/list_changed"`) || !strings.Contains(string(ev.Data), `"io.modelcontextprotocol/subscriptionId":7`) {
		t.Errorf("after the restart: %s %v", ev.Data, err)
	}
}

// statelessUpstream serves srv as a 2026-07-28 (stateless) streamable-HTTP
// upstream and returns its config, pinned to that revision.
func statelessUpstream(t *testing.T, srv *mcp.Server) *config.Server {
	t.Helper()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	cfg := httpServer(up.URL)
	cfg.ProtocolVersion = "2026-07-28"
	return cfg
}

// openListen opens a raw subscriptions/listen stream (request id id, a
// JSON value; filter, the notifications object) and returns its events;
// the stream ends with ctx.
func openListen(t *testing.T, ctx context.Context, url, id, filter string) *jsonrpc.SSEReader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":`+id+`,"method":"subscriptions/listen","params":{"notifications":`+filter+`,`+statelessMetaJSON+`}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return jsonrpc.NewSSEReader(resp.Body, 0)
}

// Progress a call makes while it waits for its client's input reaches that
// client on whichever request of the exchange is open: before the
// question on the first one, after it on the retry (S18.1).
func TestProgressAcrossInputRounds(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "chatty", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "chatty", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		tok := req.Params.GetProgressToken()
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "before-question"})
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Go on?", RequestedSchema: map[string]any{"type": "object"}})
		if err != nil {
			return nil, err
		}
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 2, Message: "after-answer"})
		return textResult("done:" + res.Action), nil
	})
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"c": httpServer(serveSDK(t, srv).URL)}})
	call := func(extra string) string {
		_, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "c__chatty"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"c__chatty","arguments":{}`+extra+`,"_meta":{"progressToken":"p-7","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`)
		return body
	}
	first := call("")
	i, j := strings.Index(first, "before-question"), strings.Index(first, `"resultType":"input_required"`)
	if i < 0 || j < i || !strings.Contains(first, `"progressToken":"p-7"`) {
		t.Fatalf("first round: %s", first)
	}
	state := regexp.MustCompile(`"requestState":"([^"]+)"`).FindStringSubmatch(first)
	key := regexp.MustCompile(`"inputRequests":\{"([^"]+)"`).FindStringSubmatch(first)
	if state == nil || key == nil {
		t.Fatalf("first round: %s", first)
	}
	second := call(`,"inputResponses":{"` + key[1] + `":{"action":"accept","content":{}}},"requestState":"` + state[1] + `"`)
	i, j = strings.Index(second, "after-answer"), strings.Index(second, "done:accept")
	if i < 0 || j < i || strings.Contains(second, "before-question") {
		t.Errorf("retry: %s", second)
	}
}

// A 2026-07-28 upstream has no resources/subscribe: the gateway carries
// its downstreams' subscriptions in the resourceSubscriptions of its own
// listen stream to it, so that the upstream's resource updates reach an
// handshake-era client that subscribed and a new-era listener, each with
// nothing of the gateway's own stream in them.
func TestStatelessUpstreamResourceUpdates(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "files", Version: "1"}, &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	const uri = "file:///etc/app.conf"
	srv.AddResource(&mcp.Resource{URI: uri, Name: "conf"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: "x=1"}}}, nil
	})
	cfg := statelessUpstream(t, srv)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"files": cfg}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	updated := make(chan *mcp.ResourceUpdatedNotificationParams, 4)
	cs := connectTo(t, ctx, gw.URL+"/mcp/files", &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params },
	}, handshakeEra)
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	events := openListen(t, ctx, gw.URL+"/mcp/files", `"l-1"`, `{"resourceSubscriptions":["`+uri+`"]}`)
	if ev, err := events.Next(); err != nil || !strings.Contains(string(ev.Data), `"resourceSubscriptions":["`+uri+`"]`) {
		t.Fatalf("ack: %s %v", ev.Data, err)
	}
	// The upstream hears of the subscription on a reopened listen stream;
	// it updates until the gateway's stream carries it.
	got := make(chan string, 1)
	go func() {
		ev, err := events.Next()
		if err == nil {
			got <- string(ev.Data)
		}
	}()
	var listened string
	var old *mcp.ResourceUpdatedNotificationParams
	for tick := time.NewTicker(100 * time.Millisecond); listened == "" || old == nil; {
		select {
		case <-tick.C:
			_ = srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
		case p := <-updated:
			old = p
		case listened = <-got:
		case <-ctx.Done():
			t.Fatalf("updates: handshake-era %+v, listener %q", old, listened)
		}
	}
	if old.URI != uri || old.Meta[mcpwire.MetaKeySubscriptionID] != nil {
		t.Errorf("handshake-era client got %+v", old)
	}
	if !strings.Contains(listened, `"method":"notifications/resources/updated"`) || !strings.Contains(listened, `"io.modelcontextprotocol/subscriptionId":"l-1"`) || strings.Contains(listened, "mcpgate-listen") {
		t.Errorf("listener got %s", listened)
	}
}

// A 2026-07-28 upstream logs only for requests that carry a log level: the
// gateway passes on the level its own client asked for, per request
// (2026-07-28) or per session (logging/setLevel), and none otherwise.
func TestLogLevelReachesStatelessUpstream(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "talker", Version: "1"}, &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}}})
	srv.AddTool(&mcp.Tool{Name: "talk", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "debug", Data: "debug-line"})
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Data: "warning-line"})
		return textResult("said"), nil
	})
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"t": statelessUpstream(t, srv)}})
	call := func(level string) string {
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}` + level + `}`
		_, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "t__talk"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t__talk","arguments":{},`+meta+`}}`)
		return body
	}
	if got := call(`,"io.modelcontextprotocol/logLevel":"info"`); !strings.Contains(got, "warning-line") || strings.Contains(got, "debug-line") || !strings.Contains(got, `"text":"said"`) {
		t.Errorf("logLevel info: %s", got)
	}
	if got := call(""); strings.Contains(got, "-line") || !strings.Contains(got, `"text":"said"`) {
		t.Errorf("no logLevel: %s", got)
	}
	// The result speaks for the gateway, not for the upstream behind it.
	if got := call(""); strings.Contains(got, `"talker"`) || !strings.Contains(got, `"io.modelcontextprotocol/serverInfo":{"name":"mcpgate"`) {
		t.Errorf("serverInfo: %s", got)
	}

	// An handshake-era client's session level does the same.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logs := make(chan string, 4)
	cs := connectTo(t, ctx, gw.URL+"/mcp", &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) { logs <- fmt.Sprint(req.Params.Data) },
	}, handshakeEra)
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "t__talk"}); got != "said" {
		t.Fatalf("call: %q", got)
	}
	var heard []string
	for len(heard) < 2 {
		select {
		case l := <-logs:
			heard = append(heard, l)
		case <-ctx.Done():
			t.Fatalf("handshake-era client heard %v", heard)
		}
	}
	if heard[0] != "debug-line" || heard[1] != "warning-line" {
		t.Errorf("handshake-era client heard %v", heard)
	}
}

// A question a 2026-07-28 client never answers does not hold up shutdown:
// Close fails it, the upstream's call ends, and nothing is left in flight.
// The input request is well-formed even when the upstream's had no params.
func TestUnansweredQuestionEndsOnShutdown(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "r", Version: "1"}, nil)
	failed := make(chan error, 1)
	srv.AddTool(&mcp.Tool{Name: "roots", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_, err := req.Session.ListRoots(ctx, nil)
		select {
		case failed <- err:
		default:
		}
		return textResult("unreachable"), nil
	})
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"r": httpServer(serveSDK(t, srv).URL)}})
	_, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "r__roots"},
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"r__roots","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{}}}}}`)
	if !regexp.MustCompile(`"inputRequests":\{"q1":\{"method":"roots/list","params":\{[^}]*\}\}\}`).MatchString(body) {
		t.Fatalf("first round: %s", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	select {
	case err := <-failed:
		if err == nil || !strings.Contains(err.Error(), "shutting down") {
			t.Errorf("the upstream's roots/list ended with %v", err)
		}
	case <-ctx.Done():
		t.Error("the upstream's roots/list never ended")
	}
}

// The stdio front serves the stateless era too: the go-sdk client, over a
// pipe, speaks 2026-07-28 to `mcpgate stdio`'s gateway, with an handshake-era
// upstream's elicitation bridged as input_required rounds and a list
// change reaching the client's own subscriptions/listen request.
func TestStdioFrontStateless(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	g, _ := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	toGateway, clientOut := io.Pipe()
	clientIn, fromGateway := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- g.ServeStdioAs(ctx, "", toGateway, fromGateway); fromGateway.Close() }()

	changed := make(chan struct{}, 4)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Grace"}}, nil
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(ctx, &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q over stdio, want the stateless era", v)
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__ask", Arguments: map[string]any{"text": "Name?"}}); got != "accept:Grace" {
		t.Errorf("elicitation over stdio: %q", got)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client's listen request", func() bool { return openListeners(g) == 1 })
	mcp.AddTool(alpha.server, &mcp.Tool{Name: "late"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return textResult("late"), nil, nil
	})
	for found := false; !found; {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no list change brought alpha__late to the stdio client")
		}
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range tools.Tools {
			found = found || tl.Name == "alpha__late"
		}
	}
	// Closing the client cancels its listen request; the front ends with
	// its input.
	cs.Close()
	clientOut.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeStdioAs: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("ServeStdioAs did not end with its input")
	}
}

// An handshake-era upstream that needs a capability the 2026-07-28 client did not
// declare in this request: the call fails with -32021 (HTTP 400) naming it
// as a ClientCapabilities object, and the same call with it declared works.
func TestMissingClientCapability(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	call := func(caps string) (int, string) {
		return statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "alpha__sample"},
			`{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"alpha__sample","arguments":{"text":"ping"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":`+caps+`}}}`)
	}
	code, body := call(`{"elicitation":{}}`)
	var resp struct {
		ID    int64 `json:"id"`
		Error struct {
			Code int64 `json:"code"`
			Data struct {
				Required map[string]json.RawMessage `json:"requiredCapabilities"`
			} `json:"data"`
		} `json:"error"`
	}
	if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &resp) != nil || resp.ID != 41 || resp.Error.Code != -32021 ||
		len(resp.Error.Data.Required) != 1 || string(resp.Error.Data.Required["sampling"]) != "{}" {
		t.Fatalf("undeclared sampling: HTTP %d %s", code, body)
	}
	if code, body := call(`{"sampling":{}}`); code != 200 || !strings.Contains(body, `"resultType":"input_required"`) || !strings.Contains(body, "sampling/createMessage") {
		t.Errorf("declared sampling: HTTP %d %s", code, body)
	}
}

// Questions an handshake-era upstream asks at the same time reach the 2026-07-28
// client in one input_required result; a retry that leaves one unanswered
// gets input_required again with just that one (mrtr.md), and the call
// completes once all are answered.
func TestConcurrentQuestionsInOneRound(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "both", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "both", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var wg sync.WaitGroup
		var name, said string
		wg.Go(func() {
			if r, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Name?", RequestedSchema: map[string]any{"type": "object"}}); err == nil {
				name = fmt.Sprint(r.Content["name"])
			}
		})
		wg.Go(func() {
			r, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 5, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
			if err == nil {
				said = r.Content.(*mcp.TextContent).Text
			}
		})
		wg.Wait()
		return textResult(name + "/" + said), nil
	})
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"b": httpServer(serveSDK(t, srv).URL)}})
	// The two questions reach the gateway over HTTP from two goroutines of
	// the upstream; on a loaded machine (CI, -race) the second can come
	// more than the 20ms gatherWindow after the first, and then rightly
	// goes in a round of its own. What is tested is that questions that
	// arrive within the window share a round, so the window is made wide
	// enough for "at the same time" to hold under load (set before any
	// request reads it).
	g.gather = time.Second
	call := func(extra string) string {
		_, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "b__both"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"b__both","arguments":{}`+extra+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"sampling":{}}}}}`)
		return body
	}
	var round struct {
		Result struct {
			ResultType    string                     `json:"resultType"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  string                     `json:"requestState"`
		} `json:"result"`
	}
	body := call("")
	if json.Unmarshal([]byte(body), &round) != nil || len(round.Result.InputRequests) != 2 {
		t.Fatalf("first round: %s", body)
	}
	answers := map[string]string{}
	for k, v := range round.Result.InputRequests {
		if strings.Contains(string(v), "elicitation/create") {
			answers[k] = `{"action":"accept","content":{"name":"Lin"}}`
		} else {
			answers[k] = `{"role":"assistant","model":"m","content":{"type":"text","text":"yo"}}`
		}
	}
	state := round.Result.RequestState
	var first, second string
	for k := range answers {
		if first == "" {
			first = k
		} else {
			second = k
		}
	}
	body = call(`,"inputResponses":{"` + first + `":` + answers[first] + `},"requestState":"` + state + `"`)
	round.Result.InputRequests = nil
	if json.Unmarshal([]byte(body), &round) != nil || round.Result.ResultType != "input_required" || len(round.Result.InputRequests) != 1 || round.Result.InputRequests[second] == nil {
		t.Fatalf("partial answer: %s", body)
	}
	// Each round has its own state; the first one is spent.
	if round.Result.RequestState == state {
		t.Errorf("the second round reuses the first round's requestState")
	}
	if body = call(`,"inputResponses":{"` + second + `":` + answers[second] + `},"requestState":"` + state + `"`); !strings.Contains(body, "expired or already used") {
		t.Errorf("the spent state: %s", body)
	}
	if body = call(`,"inputResponses":{"` + second + `":` + answers[second] + `},"requestState":"` + round.Result.RequestState + `"`); !strings.Contains(body, `"text":"Lin/yo"`) {
		t.Errorf("last round: %s", body)
	}

	// Asked together with a capability the request did not declare, the
	// undeclared one decides, whichever question arrives first, and at
	// once: the round does not wait out the window for other questions.
	for range 5 {
		start := time.Now()
		code, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "b__both"},
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b__both","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}}`)
		if code != http.StatusBadRequest || !strings.Contains(body, `"code":-32021`) || !strings.Contains(body, `"requiredCapabilities":{"elicitation":{}}`) {
			t.Fatalf("undeclared elicitation beside declared sampling: HTTP %d %s", code, body)
		}
		if d := time.Since(start); d >= g.gather {
			t.Errorf("the undeclared need was answered after %s, the whole gather window", d)
		}
	}
}

// A 2026-07-28 upstream over stdio: its list changes come on the listen
// request the gateway keeps open on the process's stdout, and reach a
// new-era listener.
func TestStatelessStdioUpstreamListChanged(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"kid": {Transport: config.TransportStdio, Command: exe, ProtocolVersion: "2026-07-28", Env: map[string]string{stdioServerEnv: "kid", extraToolsEnv: "1"}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitFor(t, "upstream ready", func() bool { return g.Upstreams().Health()["kid"].State == "ready" })
	s, err := g.Upstreams().Session(ctx, "kid")
	if err != nil || s.Info().ProtocolVersion != "2026-07-28" {
		t.Fatalf("upstream session: %v %+v", err, s)
	}
	time.Sleep(200 * time.Millisecond) // the session's own announcement has passed
	events := openListen(t, ctx, gw.URL+"/mcp", `9`, `{"toolsListChanged":true}`)
	if ev, err := events.Next(); err != nil || !strings.Contains(string(ev.Data), "subscriptions/acknowledged") {
		t.Fatalf("ack: %s %v", ev.Data, err)
	}
	code, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "kid__grow"},
		`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"kid__grow","arguments":{},`+statelessMetaJSON+`}}`)
	if code != 200 || !strings.Contains(body, "grew") {
		t.Fatalf("grow: %d %s", code, body)
	}
	if ev, err := events.Next(); err != nil || !strings.Contains(string(ev.Data), "notifications/tools/list_changed") {
		t.Errorf("listener: %s %v", ev.Data, err)
	}

	// A resource subscription rides on a new listen request to the
	// process; the upstream's updates reach the listener that asked.
	const uri = "mem://kid/readme"
	res := openListen(t, ctx, gw.URL+"/mcp", `11`, `{"resourceSubscriptions":["`+uri+`"]}`)
	if ev, err := res.Next(); err != nil || !strings.Contains(string(ev.Data), `"resourceSubscriptions":["`+uri+`"]`) {
		t.Fatalf("resource ack: %s %v", ev.Data, err)
	}
	got := make(chan string, 1)
	go func() {
		for {
			ev, err := res.Next()
			if err != nil {
				return
			}
			if strings.Contains(string(ev.Data), "notifications/resources/updated") {
				got <- string(ev.Data)
				return
			}
		}
	}()
	for tick := time.NewTicker(100 * time.Millisecond); ; {
		statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "kid__touch"},
			`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"kid__touch","arguments":{"uri":"`+uri+`"},`+statelessMetaJSON+`}}`)
		select {
		case data := <-got:
			if !strings.Contains(data, `"uri":"`+uri+`"`) || !strings.Contains(data, `"io.modelcontextprotocol/subscriptionId":11`) || strings.Contains(data, "mcpgate-listen") {
				t.Errorf("resource update: %s", data)
			}
			return
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("no resource update reached the listener")
		}
	}
}

// The go-sdk server pinned to 2025-11-25, reached with auto (which probes
// server/discover first): the gateway speaks 2025-11-25 to it and serves a
// 2026-07-28 client in front of it, elicitation bridged.
func TestPinnedHandshakeUpstreamStatelessClient(t *testing.T) {
	pinned := func() *mcp.Server {
		srv := mcp.NewServer(&mcp.Implementation{Name: "pinned", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
		srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Who?", RequestedSchema: map[string]any{"type": "object"}})
			if err != nil {
				return nil, err
			}
			return textResult("pinned:" + fmt.Sprint(r.Content["name"]) + ":" + req.Session.InitializeParams().ProtocolVersion), nil
		})
		return srv
	}
	cfg := httpServer(serveSDK(t, pinned()).URL)
	cfg.ProtocolVersion = "auto"
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"p": cfg}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := connectTo(t, ctx, gw.URL+"/mcp", &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ida"}}, nil
		},
	}, nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("client negotiated %q", v)
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "p__ask", Arguments: map[string]any{}}); got != "pinned:Ida:2025-11-25" {
		t.Errorf("call through the pinned upstream: %q", got)
	}
	if s, err := g.Upstreams().Session(ctx, "p"); err != nil || s.Info().ProtocolVersion != "2025-11-25" {
		t.Errorf("upstream session: %v %+v", err, s)
	}
}

// The stdio front refuses what HTTP refuses, minus the headers: an
// unreadable _meta, an unsupported version, a removed method.
func TestStdioFrontStatelessRefusals(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	g, _ := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999","io.modelcontextprotocol/clientCapabilities":{}}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"ping","params":{` + statelessMetaJSON + `}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{` + statelessMetaJSON + `}}`,
	}, "\n") + "\n"
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.ServeStdioAs(ctx, "", strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		id, _ := jsonrpc.Get([]byte(line), "id")
		got[string(id)] = line
	}
	for id, want := range map[string]string{
		"1": `"code":-32602`,
		"2": `"code":-32022`,
		"3": `"code":-32601`,
		"4": `"resultType":"complete"`,
	} {
		if !strings.Contains(got[id], want) {
			t.Errorf("request %s: %q, want %s", id, got[id], want)
		}
	}
}

// An upstream that asks a second question and finishes without waiting
// for its answer (server-everything's own roots/list beside the tool's):
// the client already holds that round's requestState, and its retry gets
// the call's result, not "expired or already used".
//
// The order is waited for, not paused for: the tool returns once the
// gateway holds its second question for the client (pendingQuestions),
// and the retry comes once the call's reply is in (callsOver).
func TestRetryAfterTheCallFinishedGetsItsResult(t *testing.T) {
	var g *Gateway // set before the first call
	srv := mcp.NewServer(&mcp.Implementation{Name: "ask-twice", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Name?", RequestedSchema: map[string]any{"type": "object"}})
		if err != nil {
			return nil, err
		}
		// A question nobody waits for, then the result once the gateway
		// has surely passed it on as the next round.
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			defer cancel()
			_, _ = req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Again?", RequestedSchema: map[string]any{"type": "object"}})
		}()
		for deadline := time.Now().Add(10 * time.Second); pendingQuestions(g) == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		return textResult("hello " + fmt.Sprint(r.Content["name"])), nil
	})
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"a": httpServer(serveSDK(t, srv).URL)}})
	call := func(extra string) string {
		_, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "a__ask"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__ask","arguments":{}`+extra+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`)
		return body
	}
	var round struct {
		Result struct {
			ResultType    string                     `json:"resultType"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  string                     `json:"requestState"`
		} `json:"result"`
	}
	answer := func(body string) string {
		round.Result.InputRequests = nil
		if json.Unmarshal([]byte(body), &round) != nil || round.Result.ResultType != "input_required" || len(round.Result.InputRequests) != 1 {
			t.Fatalf("want one question: %s", body)
		}
		var extra string
		for k := range round.Result.InputRequests {
			extra = `,"inputResponses":{"` + k + `":{"action":"accept","content":{"name":"Lin"}}},"requestState":"` + round.Result.RequestState + `"`
		}
		return extra
	}
	second := call(answer(call("")))
	waitFor(t, "the call to be over before the retry", func() bool { return callsOver(g) == 1 })
	if body := call(answer(second)); !strings.Contains(body, `"text":"hello Lin"`) {
		t.Fatalf("the retry of a round whose call had finished: %s", body)
	}
}

// blockingAudit is a durable audit sink whose commits wait for release.
type blockingAudit struct {
	release chan struct{}
	records atomic.Int32
}

func (b *blockingAudit) Record(store.ToolCall) { b.records.Add(1) }
func (b *blockingAudit) RecordDurable(ctx context.Context, _ store.ToolCall) error {
	select {
	case <-b.release:
		b.records.Add(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// audit.durable: a tools/call is answered only once its audit record is
// committed; a commit that takes longer than durable_timeout lets the
// answer go and is counted.
func TestDurableAuditHoldsTheAnswer(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "e", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("hi"), nil
	})
	sink := &blockingAudit{release: make(chan struct{})}
	m := metrics.New()
	_, gw := startGatewayWith(t, Options{Audit: sink, Metrics: m, MetricsOnMain: true, Config: &config.Config{
		Audit:   config.Audit{Durable: new(true), Timeout: 300 * time.Millisecond},
		Servers: map[string]*config.Server{"a": httpServer(serveSDK(t, srv).URL)}}})
	call := func() (string, time.Duration) {
		start := time.Now()
		_, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "a__echo"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
		return body, time.Since(start)
	}
	// The commit never comes: the answer waits out durable_timeout, then
	// goes, and the metric says so.
	body, took := call()
	if !strings.Contains(body, `"text":"hi"`) || took < 300*time.Millisecond {
		t.Fatalf("answered in %s (want after the 300ms wait): %s", took, body)
	}
	resp, err := http.Get(gw.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), "mcpgate_audit_unconfirmed_total 1") {
		t.Errorf("the unconfirmed answer is not counted")
	}
	// The commit comes 100 ms after the call: the answer follows it.
	go func() { time.Sleep(100 * time.Millisecond); close(sink.release) }()
	body, took = call()
	if !strings.Contains(body, `"text":"hi"`) || took < 100*time.Millisecond || took >= 300*time.Millisecond {
		t.Fatalf("answered in %s (want once the commit came, ~100ms): %s", took, body)
	}
	if n := sink.records.Load(); n != 1 {
		t.Errorf("%d records committed, want 1 (the plain Record path must not be used)", n)
	}
}
