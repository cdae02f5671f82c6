package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Every front runs a tools/call through the one pipeline, stage by stage
// in the documented order: streamable HTTP, legacy HTTP+SSE, the stdio
// front, a 2026-07-28 request and an operator's call as a key. A call the budget refuses stops there:
// nothing after it runs (and nothing is audited).
func TestEveryFrontRunsTheCallPipeline(t *testing.T) {
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			return `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"per","version":"0"}}`
		case "tools/list":
			return `{"tools":[{"name":"whoami","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			return `{"content":[{"type":"text","text":"me"}]}`
		}
		return `{}`
	})
	cfg := guardConfig(t, fmt.Sprintf(`
servers:
  per:
    transport: http
    url: %s/mcp
    tools: {costs: {"*": 1}}
`, up.URL))
	keys := &memKeys{}
	usage := func(context.Context, string, time.Time) (float64, error) { return 0, nil }
	auth := newAuth(t, keys, nil)
	g, gw := startGatewayWith(t, Options{Config: cfg, Authenticator: auth, Usage: usage})
	var mu sync.Mutex
	var seen []string
	hook := func(method, stage string) {
		if method != mcpwire.MethodToolsCall {
			return
		}
		mu.Lock()
		seen = append(seen, stage)
		mu.Unlock()
	}
	g.stageSeen.Store(&hook)
	stages := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}

	var want []string
	for _, s := range toolCallStages {
		want = append(want, s.String())
	}
	if documented := []string{"policy", "budget", "guard_pre", "upstream", "guard_post", "cost", "audit", "trace"}; !slices.Equal(want, documented) {
		t.Fatalf("the pipeline's stages: %v, want %v", want, documented)
	}
	decode := func(t *testing.T, b []byte) *jsonrpc.Message {
		t.Helper()
		m, err := jsonrpc.Decode(bytes.TrimSpace(b))
		if err != nil {
			t.Fatalf("reply %q: %v", b, err)
		}
		return m
	}
	fronts := []struct {
		name string
		call frontCall
	}{
		{"streamable", func(t *testing.T, key string, id int) *jsonrpc.Message {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"per__whoami","arguments":{}}}`, id)
			_, _, b := rpc(t, gw.URL+"/mcp", map[string]string{callers.HeaderAPIKey: key, mcpwire.HeaderProtocolVersion: "2025-06-18"}, body)
			return decode(t, b)
		}},
		{"legacy-sse", legacyCaller(gw.URL)},
		{"stdio", stdioCaller(g)},
		{"2026-07-28", func(t *testing.T, key string, id int) *jsonrpc.Message {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s,"name":"per__whoami","arguments":{}}}`, id, modernMeta)
			_, _, b := rpc(t, gw.URL+"/mcp", map[string]string{callers.HeaderAPIKey: key, mcpwire.HeaderProtocolVersion: mcpwire.Rev20260728,
				mcpwire.HeaderMethod: "tools/call", mcpwire.HeaderName: "per__whoami"}, body)
			return decode(t, b)
		}},
		{"call-as", func(t *testing.T, key string, id int) *jsonrpc.Message {
			r := httptest.NewRequest(http.MethodPost, "/admin/v1/tools/call", nil)
			r.Header.Set(callers.HeaderAPIKey, key)
			c, f := auth.Authenticate(r)
			if f != nil {
				t.Fatalf("the key: %s", f.Body)
			}
			res, rpcErr, err := g.CallAs(context.Background(), c, "/mcp", "per__whoami", nil)
			if err != nil {
				t.Fatal(err)
			}
			if rpcErr != nil {
				return jsonrpc.NewErrorResponse(jsonrpc.Int64ID(int64(id)), rpcErr)
			}
			return jsonrpc.NewResult(jsonrpc.Int64ID(int64(id)), res)
		}},
	}
	for _, fr := range fronts {
		t.Run(fr.name, func(t *testing.T) {
			key := keys.add(t, store.Key{Alias: "k-" + fr.name, BudgetAmount: 1, BudgetPeriod: store.BudgetDay})
			stages() // the front's own setup
			if m := fr.call(t, key, 1); m.Error != nil {
				t.Fatalf("first call: %s", jsonrpc.Encode(m))
			}
			if got := stages(); !slices.Equal(got, want) {
				t.Errorf("an answered call passed %v, want %v", got, want)
			}
			if m := fr.call(t, key, 2); m.Error == nil || m.Error.Code != callers.CodeRateLimited {
				t.Fatalf("second call: %s; want the budget's refusal", jsonrpc.Encode(m))
			}
			if got := stages(); !slices.Equal(got, want[:2]) {
				t.Errorf("a call the budget refused passed %v, want %v", got, want[:2])
			}
		})
	}
}
