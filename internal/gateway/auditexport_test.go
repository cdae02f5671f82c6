package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/audit"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
)

// collectLog is a store.AuditLog keeping what it is given.
type collectLog struct {
	store.AuditLog // nil: other methods panic
	mu             sync.Mutex
	calls          []store.ToolCall
}

func (c *collectLog) AppendToolCalls(_ context.Context, calls []store.ToolCall) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, calls...)
	return nil
}

// A server with audit.arguments: its calls' arguments reach the exporter,
// redacted at any depth by the default and the configured patterns, the
// rest kept; a server without: no arguments. Plain and durable records
// alike; the store never sees them (store.ToolCall has no field for them).
func TestAuditExportArguments(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(map[bool]string{false: "batched", true: "durable"}[durable], func(t *testing.T) {
			srv := mcp.NewServer(&mcp.Implementation{Name: "e", Version: "1"}, nil)
			srv.AddTool(&mcp.Tool{Name: "do", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return textResult("done"), nil
			})
			up := serveSDK(t, srv).URL
			withArgs := httpServer(up)
			withArgs.Audit = &config.ServerAudit{Arguments: true, Redact: []string{"OTP"}}
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			sink, err := audit.NewJSONL(path, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			st := &collectLog{}
			w := audit.NewWriter(st, audit.Options{Exporters: []*audit.Exporter{audit.NewExporter(sink, audit.ExportOptions{Name: "jsonl"})}})
			_, gw := startGatewayWith(t, Options{Audit: w, Config: &config.Config{
				Audit:   config.Audit{Durable: new(durable)},
				Servers: map[string]*config.Server{"a": withArgs, "b": httpServer(up)}}})
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			args := map[string]any{
				"query": "find me", "Password": "hunter2", "otp": 123456,
				"nested": map[string]any{"auth": map[string]any{"refresh_token": "r", "scope": "read"}, "list": []any{map[string]any{"client_secret": "s", "id": 7}}},
			}
			for _, tool := range []string{"a__do", "b__do"} {
				if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args}); err != nil || res.IsError {
					t.Fatalf("%s: %+v %v", tool, res, err)
				}
			}
			cs.Close()
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := map[string]string{}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var r struct {
					Server    string
					Arguments json.RawMessage
				}
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					t.Fatal(err)
				}
				got[r.Server] = string(r.Arguments)
				if r.Server == "b" && strings.Contains(sc.Text(), "arguments") {
					t.Errorf("server b exported arguments: %s", sc.Text())
				}
			}
			want := map[string]string{
				"a": `{"Password":"[REDACTED]","nested":{"auth":{"refresh_token":"[REDACTED]","scope":"read"},"list":[{"client_secret":"[REDACTED]","id":7}]},"otp":"[REDACTED]","query":"find me"}`,
				"b": "",
			}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("exported arguments by server (-got +want):\n%s", diff)
			}
			if len(st.calls) != 2 {
				t.Errorf("the store got %d records, want 2", len(st.calls))
			}
		})
	}
}
