package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/state/redis"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store"
)

// batchReplies decodes a batch answer into its replies by id.
func batchReplies(t *testing.T, body []byte) map[int64]*jsonrpc.Message {
	t.Helper()
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("not a batch answer: %v: %.300s", err, body)
	}
	out := map[int64]*jsonrpc.Message{}
	for _, r := range raw {
		m, err := jsonrpc.Decode(r)
		if err != nil {
			t.Fatalf("batch reply %s: %v", r, err)
		}
		id, _ := strconv.ParseInt(m.ID.String(), 10, 64)
		out[id] = m
	}
	return out
}

// Hole 14: a key's rate limit and budget count calls, not HTTP requests.
// A key limited to 3 requests a minute and another with a budget of one
// call a day each send 20 tools/call as one JSON-RPC batch: 3 and 1 are
// answered, every other one is refused with the limit's own error (the
// rate limit's -32029, the budget's message), and only the answered ones
// reach the upstream. A key without limits sending the same batch gets
// all 20 answered.
func TestBatchCountsEachCallAgainstLimits(t *testing.T) {
	var calls atomic.Int64
	up := rawUpstream(t, exoticTool, exoticResult, &calls)
	raw := httpServer(up.URL + "/mcp")
	raw.Tools = &config.ToolPolicy{Costs: map[string]float64{"*": 1}}
	keys := &memKeys{}
	limited := keys.add(t, store.Key{Alias: "limited", RateLimitRPM: 3})
	capped := keys.add(t, store.Key{Alias: "capped", BudgetAmount: 1, BudgetPeriod: store.BudgetDay})
	free := keys.add(t, store.Key{Alias: "free"})
	usage := func(context.Context, string, time.Time) (float64, error) { return 0, nil }
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Usage: usage,
		Config: &config.Config{Servers: map[string]*config.Server{"raw": raw}}})
	hdr := func(key string) map[string]string {
		return map[string]string{"MCP-Protocol-Version": "2025-03-26", "X-Mcpgate-Api-Key": key}
	}
	now := time.Now()
	renews := store.PeriodEnd(store.BudgetDay, store.PeriodStart(store.BudgetDay, now)).Format(time.RFC3339)

	for _, tc := range []struct {
		name     string
		key      string
		answered int
		refusal  string // the error of every other call
	}{
		{"rate limit 3", limited, 3, `{"code":-32029,"message":"Too Many Requests: rate limit exceeded for this API key"}`},
		{"budget of one call", capped, 1, `{"code":-32029,"message":"Budget exceeded: key capped has spent 1 of its daily budget of 1; it renews at ` + renews + `"}`},
		{"no limit", free, 20, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := calls.Load()
			code, _, body := rpc(t, gw.URL+"/mcp", hdr(tc.key), batchOf(20))
			if code != http.StatusOK {
				t.Fatalf("batch: %d %.300s", code, body)
			}
			replies := batchReplies(t, body)
			if len(replies) != 20 {
				t.Fatalf("%d replies to a batch of 20", len(replies))
			}
			answered := 0
			for id := int64(1); id <= 20; id++ {
				m := replies[id]
				if m == nil {
					t.Fatalf("no reply for id %d", id)
				}
				if m.Error == nil {
					answered++
					continue
				}
				got, _ := json.Marshal(m.Error)
				if string(got) != tc.refusal {
					t.Errorf("id %d refused with %s, want %s", id, got, tc.refusal)
				}
			}
			if answered != tc.answered {
				t.Errorf("%d of 20 calls answered, want %d", answered, tc.answered)
			}
			if n := calls.Load() - before; n != int64(tc.answered) {
				t.Errorf("the upstream received %d calls, want %d", n, tc.answered)
			}
		})
	}

	// A lone call past the limit is the HTTP refusal of each limit.
	code, h, body := rpc(t, gw.URL+"/mcp", hdr(capped), `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"raw__weird","arguments":{}}}`)
	want := `{"jsonrpc":"2.0","id":7,"error":{"code":-32029,"message":"Budget exceeded: key capped has spent 1 of its daily budget of 1; it renews at ` + renews + `"}}`
	if ra, err := strconv.Atoi(h.Get("Retry-After")); code != http.StatusTooManyRequests || string(body) != want || err != nil || ra < 1 || ra > 86401 {
		t.Errorf("a lone call past the budget: %d Retry-After %q %s\nwant 429 %s", code, h.Get("Retry-After"), body, want)
	}
	code, h, body = rpc(t, gw.URL+"/mcp", hdr(limited), `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"raw__weird","arguments":{}}}`)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Errorf("a lone call past the rate limit: %d %q %s", code, h.Get("Retry-After"), body)
	}
	// Listing is no call: the budget leaves it alone.
	code, _, body = rpc(t, gw.URL+"/mcp", hdr(capped), `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`)
	if code != http.StatusOK || !strings.Contains(string(body), "raw__weird") {
		t.Errorf("tools/list past the budget: %d %.200s", code, body)
	}
}

// Hole 15: three gateways sharing one Redis (each its own connection and
// its own cache of the store's sum, read already: warm) and a key with a
// budget of one call a day, called four times at once on each: exactly
// one call is answered and reaches the upstream, the other 11 are refused
// with the budget's error. A key without a budget is untouched.
func TestBudgetIsSharedByReplicas(t *testing.T) {
	srv := redistest.New(t)
	var calls atomic.Int64
	up := rawUpstream(t, exoticTool, exoticResult, &calls)
	keys := &memKeys{}
	capped := keys.add(t, store.Key{Alias: "capped", BudgetAmount: 1, BudgetPeriod: store.BudgetDay})
	free := keys.add(t, store.Key{Alias: "free"})
	usage := func(context.Context, string, time.Time) (float64, error) { return 0, nil }
	var urls []string
	for range 3 {
		sb, err := redis.Open(redis.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close() })
		raw := httpServer(up.URL + "/mcp")
		raw.Tools = &config.ToolPolicy{Costs: map[string]float64{"*": 1}}
		g, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Usage: usage, Spending: sb,
			Config: &config.Config{Servers: map[string]*config.Server{"raw": raw}}})
		// Warm: this replica has read the key's spending (0) already, as
		// a call of the key does before it runs (then fails, releasing
		// its reservation).
		ctx := callers.NewContext(context.Background(), &callers.Caller{Alias: "capped", BudgetAmount: 1, BudgetPeriod: store.BudgetDay})
		rsv, e := (&call{g: g, ctx: ctx, sc: &scope{g: g}, server: "raw", params: json.RawMessage(`{"name":"weird"}`)}).reserveBudget()
		if e != nil || rsv == nil {
			t.Fatalf("warm: %v (reservation %v)", e, rsv)
		}
		rsv.Release(ctx)
		urls = append(urls, gw.URL)
	}
	hdr := func(key string) map[string]string {
		return map[string]string{"MCP-Protocol-Version": "2025-03-26", "X-Mcpgate-Api-Key": key}
	}
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"raw__weird","arguments":{}}}`
	var wg sync.WaitGroup
	var answered, refused atomic.Int64
	for _, u := range urls {
		for range 4 {
			wg.Go(func() {
				code, _, body := rpc(t, u+"/mcp", hdr(capped), call)
				switch {
				case code == http.StatusOK && strings.Contains(string(body), `"result"`):
					answered.Add(1)
				case code == http.StatusTooManyRequests && strings.Contains(string(body), `"code":-32029,"message":"Budget exceeded: key capped has spent 1 of its daily budget of 1; it renews at `):
					refused.Add(1)
				default:
					t.Errorf("a call: %d %s", code, body)
				}
			})
		}
	}
	wg.Wait()
	if answered.Load() != 1 || refused.Load() != 11 || calls.Load() != 1 {
		t.Errorf("%d answered, %d refused, %d reached the upstream; want 1, 11, 1", answered.Load(), refused.Load(), calls.Load())
	}
	for _, u := range urls {
		if code, _, body := rpc(t, u+"/mcp", hdr(free), call); code != http.StatusOK || !strings.Contains(string(body), `"result"`) {
			t.Errorf("a key without a budget: %d %s", code, body)
		}
	}
}

// Hole 14 on the stdio front: its requests count against its key's rate
// limit one by one (no HTTP request pays for any): with a limit of 3, the
// initialize and two of a batch of five calls are served, three calls are
// refused with the rate limit's error and never reach the upstream.
func TestStdioFrontCountsEachRequest(t *testing.T) {
	var calls atomic.Int64
	up := rawUpstream(t, exoticTool, exoticResult, &calls)
	keys := &memKeys{}
	key := keys.add(t, store.Key{Alias: "desk", RateLimitRPM: 3})
	g, _ := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}}})
	in := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		batchOf(5) + "\n"
	var out bytes.Buffer
	if err := g.ServeStdioAs(context.Background(), key, strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	answered, refused := 0, 0
	for line := range strings.Lines(out.String()) {
		m, err := jsonrpc.Decode([]byte(strings.TrimSpace(line)))
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		switch {
		case m.ID.String() == "0":
		case m.IsNotification():
			// A list change the upstream's late start told the
			// client: no answer to a call.
		case m.Error == nil:
			answered++
		case m.Error.Code == -32029 && m.Error.Message == "Too Many Requests: rate limit exceeded for this API key":
			refused++
		default:
			t.Errorf("reply %s", line)
		}
	}
	if answered != 2 || refused != 3 || calls.Load() != 2 {
		t.Errorf("%d answered, %d refused, %d upstream calls; want 2, 3, 2", answered, refused, calls.Load())
	}
}
