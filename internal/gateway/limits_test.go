package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
)

// batchOf is a JSON-RPC batch of n tools/call requests of raw__weird.
func batchOf(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"raw__weird","arguments":{"n":1}}}`, i+1)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// S23: a batch larger than limits.max_batch gets one -32600 naming the
// limit and makes no upstream call; a batch at the limit is served.
func TestBatchLimit(t *testing.T) {
	var calls atomic.Int64
	up := rawUpstream(t, exoticTool, exoticResult, &calls)
	cfg := func(l config.Limits) *config.Config {
		return &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}, Limits: l}
	}
	_, gw := startGateway(t, cfg(config.Limits{}))
	hdr := map[string]string{"MCP-Protocol-Version": "2025-03-26"}

	code, _, body := rpc(t, gw.URL+"/mcp", hdr, batchOf(51))
	const want = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: batch of 51 requests exceeds limits.max_batch (50)"}}`
	if code != http.StatusBadRequest || string(body) != want {
		t.Errorf("batch of 51: %d %s\nwant 400 %s", code, body, want)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("a refused batch made %d upstream calls", n)
	}
	code, _, body = rpc(t, gw.URL+"/mcp", hdr, batchOf(50))
	if code != http.StatusOK || strings.Count(string(body), `"result"`) != 50 {
		t.Errorf("batch of 50: %d %.200s", code, body)
	}
	if n := calls.Load(); n != 50 {
		t.Errorf("a batch of 50 made %d upstream calls", n)
	}

	// The configured limit, on the stdio front too.
	calls.Store(0)
	g2, gw2 := startGateway(t, cfg(config.Limits{MaxBatch: 2}))
	code, _, body = rpc(t, gw2.URL+"/mcp", hdr, batchOf(3))
	const want3 = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: batch of 3 requests exceeds limits.max_batch (2)"}}`
	if code != http.StatusBadRequest || string(body) != want3 {
		t.Errorf("batch of 3 over 2: %d %s", code, body)
	}
	var out bytes.Buffer
	if err := g2.ServeStdio(context.Background(), strings.NewReader(batchOf(3)+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != want3 {
		t.Errorf("stdio batch of 3 over 2: %s", got)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("refused batches made %d upstream calls", n)
	}
}

// Valid JSON nested deeper than the decoder allows is a -32700 that says
// so (it was "invalid JSON"), over HTTP and stdio.
func TestNestingTooDeep(t *testing.T) {
	g, gw := startGateway(t, &config.Config{})
	deep := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}}`
	const want = `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: JSON nested deeper than 10000 levels"}}`
	code, _, body := rpc(t, gw.URL+"/mcp", nil, deep)
	if code != http.StatusBadRequest || string(body) != want {
		t.Errorf("deep body: %d %s", code, body)
	}
	var out bytes.Buffer
	if err := g.ServeStdio(context.Background(), strings.NewReader(deep+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != want {
		t.Errorf("stdio deep line: %s", got)
	}
}
