package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Every front runs a tools/call through the one pipeline, stage by stage
// in the documented order: streamable HTTP, legacy HTTP+SSE, the stdio
// front, a 2026-07-28 request and an operator's call as a key. A call the
// budget refuses stops there: nothing after it runs but the audit stage,
// which records it as refused.
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
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s,"name":"per__whoami","arguments":{}}}`, id, statelessMetaJSON)
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
			if got, refused := stages(), []string{"policy", "budget", "audit"}; !slices.Equal(got, refused) {
				t.Errorf("a call the budget refused passed %v, want %v", got, refused)
			}
		})
	}
}

// toolCalls is mcpgate_tool_calls_total summed over tools for server and
// outcome.
func toolCalls(t *testing.T, m *metrics.Metrics, server, outcome string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != metrics.Namespace+"_tool_calls_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			var s, o string
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "server":
					s = l.GetValue()
				case "outcome":
					o = l.GetValue()
				}
			}
			if s == server && o == outcome {
				n += mt.GetCounter().GetValue()
			}
		}
	}
	return n
}

// Issue 24 §1: an outage is visible. On every front, a call that fails in
// each way a call can (a hanging upstream, one answering garbage, 500,
// 401, 429, a closed port, a stdio process that exits, an unknown name, a
// guardrail, a spent budget) ends with exactly one audit record and one
// mcpgate_tool_calls_total sample, both with its fault class, recorded
// against the server that failed; the client's error names that class.
func TestEveryFrontRecordsEveryFault(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	faulty := faultyUpstream(t)
	per := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	cfg := guardConfig(t, fmt.Sprintf(`
servers:
  f: {transport: http, url: %[1]s/mcp, timeout: 300ms}
  guarded:
    transport: http
    url: %[1]s/mcp
    guardrails:
      pre: [{kind: deny, name: no-ok, pattern: "^ok$"}]
  gone: {transport: http, url: http://%[2]s/mcp}
  fragile: {transport: stdio, command: %[3]q, env: {%[4]s: fragile, %[5]s: "1"}}
  per:
    transport: http
    url: %[6]s/mcp
    tools: {costs: {"*": 1}}
`, faulty.URL, closed, exe, stdioServerEnv, extraToolsEnv, per.URL))
	cfg.Fleet = &config.Fleet{Advertise: "http://10.0.0.5:4000", SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))}}
	keys := &memKeys{}
	auth := newAuth(t, keys, nil)
	audit := &memAudit{}
	m := metrics.New()
	usage := func(context.Context, string, time.Time) (float64, error) { return 0, nil }
	g, gw := startGatewayWith(t, Options{Config: cfg, Authenticator: auth, Audit: audit, Metrics: m, Usage: usage,
		Replicas: state.NewMemory(state.MemoryOptions{})})
	var mu sync.Mutex
	var seen []string
	hook := func(method, stage string) {
		if method == mcpwire.MethodToolsCall {
			mu.Lock()
			seen = append(seen, stage)
			mu.Unlock()
		}
	}
	g.stageSeen.Store(&hook)
	stages := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}

	decode := func(t *testing.T, b []byte) *jsonrpc.Message {
		t.Helper()
		msg, err := jsonrpc.Decode(bytes.TrimSpace(b))
		if err != nil {
			t.Fatalf("reply %q: %v", b, err)
		}
		return msg
	}
	body := func(id int, name string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, id, name)
	}
	handshakeEra := func(key string) map[string]string {
		return map[string]string{callers.HeaderAPIKey: key, mcpwire.HeaderProtocolVersion: "2025-06-18"}
	}
	fronts := []struct {
		name string
		call namedCall
	}{
		{"streamable", func(t *testing.T, key string, id int, name string) *jsonrpc.Message {
			_, _, b := rpc(t, gw.URL+"/mcp", handshakeEra(key), body(id, name))
			return decode(t, b)
		}},
		{"legacy-sse", legacyNamedCaller(gw.URL)},
		{"stdio", stdioNamedCaller(g)},
		{"2026-07-28", func(t *testing.T, key string, id int, name string) *jsonrpc.Message {
			b := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s,"name":%q,"arguments":{}}}`, id, statelessMetaJSON, name)
			_, _, out := rpc(t, gw.URL+"/mcp", map[string]string{callers.HeaderAPIKey: key, mcpwire.HeaderProtocolVersion: mcpwire.Rev20260728,
				mcpwire.HeaderMethod: "tools/call", mcpwire.HeaderName: name}, b)
			return decode(t, out)
		}},
		{"fleet-hop", func(t *testing.T, key string, id int, name string) *jsonrpc.Message {
			b := body(id, name)
			hdr := handshakeEra(key)
			hdr[fleetrelay.HeaderPeerClient] = "127.0.0.1:5555"
			hdr[fleetrelay.HeaderPeer] = g.ring.SignPeer(fleet.PeerRequest{Method: http.MethodPost, Target: "/mcp", Client: "127.0.0.1:5555", Body: []byte(b)}, time.Now())
			_, _, out := rpc(t, gw.URL+"/mcp", hdr, b)
			return decode(t, out)
		}},
		{"call-as", func(t *testing.T, key string, id int, name string) *jsonrpc.Message {
			r := httptest.NewRequest(http.MethodPost, "/admin/v1/tools/call", nil)
			r.Header.Set(callers.HeaderAPIKey, key)
			c, f := auth.Authenticate(r)
			if f != nil {
				t.Fatalf("the key: %s", f.Body)
			}
			res, rpcErr, err := g.CallAs(context.Background(), c, "/mcp", name, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rpcErr != nil {
				return jsonrpc.NewErrorResponse(jsonrpc.Int64ID(int64(id)), rpcErr)
			}
			return jsonrpc.NewResult(jsonrpc.Int64ID(int64(id)), res)
		}},
	}
	// In this order: the budget of one call is spent by the last but one.
	cases := []struct {
		tool   string
		server string // the record's and the metric's
		class  string // outcome and fault class; "ok" for none
		data   bool   // the client's error carries the class as data.fault
	}{
		{"f__slow", "f", store.FaultTimeout, true},                  // a hanging server
		{"f__badjson", "f", store.FaultInvalidResponse, true},       // garbage
		{"f__broken", "f", store.FaultUpstreamError, true},          // 500
		{"f__unauth", "f", store.FaultAuth, true},                   // 401
		{"f__limited", "f", store.FaultRateLimited, true},           // 429
		{"gone__anything", "gone", store.FaultUnreachable, true},    // a closed port: not even listed
		{"fragile__crash", "fragile", store.FaultUnreachable, true}, // the process exits
		{"per__nope", "", store.FaultDenied, false},                 // unknown: no server named
		{"guarded__ok", "guarded", store.FaultBlocked, false},       // a guardrail: a tool error
		{"per__whoami", "per", store.OutcomeOK, false},
		{"per__whoami", "per", store.FaultRefused, false}, // the budget is spent
	}
	for _, fr := range fronts {
		t.Run(fr.name, func(t *testing.T) {
			alias := "k-" + fr.name
			key := keys.add(t, store.Key{Alias: alias, BudgetAmount: 1, BudgetPeriod: store.BudgetDay})
			mine := func() []store.ToolCall {
				var out []store.ToolCall
				for _, r := range audit.records() {
					if r.KeyAlias == alias {
						out = append(out, r)
					}
				}
				return out
			}
			for i, tc := range cases {
				before, samples := len(mine()), toolCalls(t, m, tc.server, tc.class)
				stages()
				reply := fr.call(t, key, i+1, tc.tool)
				// The audit stage once: the last stage, or the last but
				// trace (an answered call).
				got := stages()
				audits := 0
				for _, st := range got {
					if st == "audit" {
						audits++
					}
				}
				if tail := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s == "trace" }); audits != 1 || len(tail) == 0 || tail[len(tail)-1] != "audit" {
					t.Errorf("%s passed the stages %v, want the audit stage once, last or before trace", tc.tool, got)
				}
				switch {
				case tc.class == store.OutcomeOK:
					if reply.Error != nil {
						t.Fatalf("%s: %s", tc.tool, jsonrpc.Encode(reply))
					}
				case tc.class == store.FaultBlocked:
					if reply.Error != nil || !toolError(reply.Result) {
						t.Errorf("%s: %s; want a tool error naming the guardrail", tc.tool, jsonrpc.Encode(reply))
					}
				case reply.Error == nil:
					t.Errorf("%s: %s; want an error", tc.tool, jsonrpc.Encode(reply))
				case tc.data && !strings.Contains(string(reply.Error.Data), `"fault":"`+tc.class+`"`):
					t.Errorf("%s: %s; want fault %s", tc.tool, jsonrpc.Encode(reply), tc.class)
				}
				recs := mine()
				if len(recs) != before+1 {
					t.Errorf("%s: %d audit records, want exactly 1: %+v", tc.tool, len(recs)-before, recs[before:])
					continue
				}
				r := recs[before]
				wantClass := tc.class
				if tc.class == store.OutcomeOK {
					wantClass = ""
				}
				if r.Server != tc.server || r.Outcome != tc.class || r.ErrorClass != wantClass {
					t.Errorf("%s: record %s/%s outcome %q class %q, want %s outcome %q class %q", tc.tool, r.Server, r.Tool, r.Outcome, r.ErrorClass, tc.server, tc.class, wantClass)
				}
				if d := toolCalls(t, m, tc.server, tc.class) - samples; d != 1 {
					t.Errorf("%s: %v samples of mcpgate_tool_calls_total{server=%q,outcome=%q}, want 1", tc.tool, d, tc.server, tc.class)
				}
			}
		})
	}
}
