package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// frontCall makes tools/call per__whoami (request id) as key through one
// front and returns its reply.
type frontCall func(t *testing.T, key string, id int) *jsonrpc.Message

// Hole 3 and its class: every transport and front carries the same
// caller. One scenario runs through each: streamable HTTP, legacy
// HTTP+SSE, the stdio front, a 2026-07-28 request, a hop from another
// replica of the fleet, and an operator's call as the key. Each front's
// key has a budget of one call a day on a user_api_key server with a
// pre webhook guardrail; the first call reaches the upstream with the
// person's own credential from the vault, the guardrail webhook is told
// the caller, and the audit records it under the key and its user; the
// second call is refused with the budget's error, reaches nothing, and is
// recorded as refused at no cost.
func TestEveryFrontCarriesTheCaller(t *testing.T) {
	// The upstream answers with the credential it received.
	var upMu sync.Mutex
	upCalls := map[string]int{} // Authorization of each tools/call
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			return `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"per","version":"0"}}`
		case "tools/list":
			return `{"tools":[{"name":"whoami","inputSchema":{"type":"object"}}]}`
		}
		if m.Method != "tools/call" {
			return `{}`
		}
		upMu.Lock()
		upCalls[r.Header.Get("Authorization")]++
		upMu.Unlock()
		return `{"content":[{"type":"text","text":"credential ` + r.Header.Get("Authorization") + `"}]}`
	})
	// The guardrail webhook records whom each call is for.
	var hookMu sync.Mutex
	hooked := map[string]int{} // "alias/user"
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Caller struct{ Alias, User string } `json:"caller"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		hookMu.Lock()
		hooked[req.Caller.Alias+"/"+req.Caller.User]++
		hookMu.Unlock()
		fmt.Fprint(w, `{"allow":true}`)
	}))
	t.Cleanup(hook.Close)
	vkey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	cfg := guardConfig(t, fmt.Sprintf(`
vault:
  keys: [{id: k1, key: %s}]
servers:
  per:
    transport: http
    url: %s/mcp
    auth: {type: user_api_key}
    tools: {costs: {"*": 1}}
    guardrails:
      pre: [{kind: webhook, name: hook, url: %q}]
`, vkey, up.URL, hook.URL))
	// A replica of a fleet, so that it serves hops from the others.
	cfg.Fleet = &config.Fleet{Advertise: "http://10.0.0.5:4000", SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))}}
	st, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	vlt, err := vault.New(st, cfg.Vault.Keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := &memKeys{}
	auth := newAuth(t, keys, nil)
	audit := &memAudit{}
	usage := func(context.Context, string, time.Time) (float64, error) { return 0, nil }
	g, gw := startGatewayWith(t, Options{Config: cfg, Authenticator: auth, Vault: vlt, Audit: audit, Usage: usage,
		Replicas: state.NewMemory(state.MemoryOptions{})})

	callBody := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"per__whoami","arguments":{}}}`, id)
	}
	decode := func(t *testing.T, b []byte) *jsonrpc.Message {
		t.Helper()
		m, err := jsonrpc.Decode(bytes.TrimSpace(b))
		if err != nil {
			t.Fatalf("reply %q: %v", b, err)
		}
		return m
	}
	handshakeEra := func(key string) map[string]string {
		return map[string]string{callers.HeaderAPIKey: key, mcpwire.HeaderProtocolVersion: "2025-06-18"}
	}
	fronts := []struct {
		name string
		call frontCall
	}{
		{"streamable", func(t *testing.T, key string, id int) *jsonrpc.Message {
			_, _, b := rpc(t, gw.URL+"/mcp", handshakeEra(key), callBody(id))
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
		{"fleet-hop", func(t *testing.T, key string, id int) *jsonrpc.Message {
			// What another replica forwards: signed with the fleet's keys,
			// the client's own credentials beside.
			body := callBody(id)
			hdr := handshakeEra(key)
			hdr[fleetrelay.HeaderPeerClient] = "127.0.0.1:5555"
			hdr[fleetrelay.HeaderPeer] = g.ring.SignPeer(fleet.PeerRequest{Method: http.MethodPost, Target: "/mcp", Client: "127.0.0.1:5555", Body: []byte(body)}, time.Now())
			_, _, b := rpc(t, gw.URL+"/mcp", hdr, body)
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
	renews := store.PeriodEnd(store.BudgetDay, store.PeriodStart(store.BudgetDay, time.Now())).Format(time.RFC3339)
	for _, fr := range fronts {
		t.Run(fr.name, func(t *testing.T) {
			alias, user := "k-"+fr.name, "u-"+fr.name
			key := keys.add(t, store.Key{Alias: alias, User: user, BudgetAmount: 1, BudgetPeriod: store.BudgetDay})
			cred := "cred-" + fr.name
			if err := vlt.Put(context.Background(), vault.Entry{Person: "key:" + alias, Server: "per", AccessToken: cred, Kind: vault.KindStatic}); err != nil {
				t.Fatal(err)
			}

			first := fr.call(t, key, 1)
			if first.Error != nil || !strings.Contains(string(first.Result), `"credential Bearer `+cred+`"`) {
				t.Fatalf("first call: %s; want the person's own credential upstream", jsonrpc.Encode(first))
			}
			second := fr.call(t, key, 2)
			want := "Budget exceeded: key " + alias + " has spent 1 of its daily budget of 1; it renews at " + renews
			if second.Error == nil || second.Error.Code != callers.CodeRateLimited || second.Error.Message != want {
				t.Errorf("second call: %s; want %d %q", jsonrpc.Encode(second), callers.CodeRateLimited, want)
			}

			var recs []store.ToolCall
			waitFor(t, "the audit record", func() bool {
				recs = recs[:0]
				for _, r := range audit.records() {
					if r.KeyAlias == alias {
						recs = append(recs, r)
					}
				}
				return len(recs) > 1
			})
			if len(recs) != 2 || recs[0].User != user || recs[0].Server != "per" || recs[0].Tool != "whoami" || recs[0].Outcome != "ok" || recs[0].Cost != 1 {
				t.Errorf("audit records of %s: %+v; want one ok call of per/whoami by %s costing 1, then the refused one", alias, recs, user)
			} else if r := recs[1]; r.User != user || r.Server != "per" || r.Outcome != store.FaultRefused || r.ErrorClass != store.FaultRefused || r.Cost != 0 {
				t.Errorf("the refused call's record: %+v; want refused, at no cost, by %s", r, user)
			}
			hookMu.Lock()
			if n := hooked[alias+"/"+user]; n != 1 {
				t.Errorf("the guardrail webhook saw %d calls of %s/%s, want 1 (seen: %v)", n, alias, user, hooked)
			}
			hookMu.Unlock()
			upMu.Lock()
			if n := upCalls["Bearer "+cred]; n != 1 {
				t.Errorf("the upstream received %d calls with %s's credential, want 1", n, alias)
			}
			upMu.Unlock()
		})
	}
	upMu.Lock()
	defer upMu.Unlock()
	if n := upCalls[""]; n != 0 {
		t.Errorf("%d calls reached the upstream without a person's credential", n)
	}
}

// namedCall makes tools/call of tool name (no arguments) as key through
// one front and returns its reply.
type namedCall func(t *testing.T, key string, id int, name string) *jsonrpc.Message

// whoami is a front's namedCall for per__whoami.
func whoami(call namedCall) frontCall {
	return func(t *testing.T, key string, id int) *jsonrpc.Message { return call(t, key, id, "per__whoami") }
}

// legacyCaller calls per__whoami through a legacy HTTP+SSE session of
// key's (legacyNamedCaller).
func legacyCaller(base string) frontCall { return whoami(legacyNamedCaller(base)) }

// legacyNamedCaller calls through a legacy HTTP+SSE session of key's (one
// per key, opened on its first call).
func legacyNamedCaller(base string) namedCall {
	type conn struct {
		endpoint string
		events   *jsonrpc.SSEReader
	}
	var mu sync.Mutex
	conns := map[string]*conn{}
	return func(t *testing.T, key string, id int, name string) *jsonrpc.Message {
		t.Helper()
		mu.Lock()
		c := conns[key]
		mu.Unlock()
		if c == nil {
			req, _ := http.NewRequest(http.MethodGet, base+"/sse", nil)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set(callers.HeaderAPIKey, key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { resp.Body.Close() })
			events := jsonrpc.NewSSEReader(resp.Body, 1<<20)
			ev, err := events.Next()
			if err != nil || ev.Name != "endpoint" {
				t.Fatalf("first event %+v, %v; want the endpoint", ev, err)
			}
			c = &conn{endpoint: base + strings.TrimSpace(string(ev.Data)), events: events}
			mu.Lock()
			conns[key] = c
			mu.Unlock()
		}
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, id, name)
		req, _ := http.NewRequest(http.MethodPost, c.endpoint, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(callers.HeaderAPIKey, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("legacy POST: %d", resp.StatusCode)
		}
		for {
			ev, err := c.events.Next()
			if err != nil {
				t.Fatalf("legacy stream: %v", err)
			}
			m, err := jsonrpc.Decode(ev.Data)
			if err == nil && m.IsResponse() && m.ID.String() == fmt.Sprint(id) {
				return m
			}
		}
	}
}

// stdioCaller calls per__whoami through a stdio front of g acting as key
// (stdioNamedCaller).
func stdioCaller(g *Gateway) frontCall { return whoami(stdioNamedCaller(g)) }

// stdioNamedCaller calls through a stdio front of g acting as key (one
// per key, started on its first call).
func stdioNamedCaller(g *Gateway) namedCall {
	type conn struct {
		in  io.Writer
		out *bufio.Reader
	}
	var mu sync.Mutex
	conns := map[string]*conn{}
	return func(t *testing.T, key string, id int, name string) *jsonrpc.Message {
		t.Helper()
		mu.Lock()
		c := conns[key]
		mu.Unlock()
		if c == nil {
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- g.ServeStdioAs(ctx, key, inR, outW); outW.Close() }()
			t.Cleanup(func() {
				inW.Close()
				cancel()
				// Drain what the front still writes (a list_changed
				// notification no call read): a write nobody reads
				// blocks, and the front would never return. The copy
				// ends when the front closes its output.
				go func() { _, _ = io.Copy(io.Discard, outR) }()
				if err := <-done; err != nil {
					t.Errorf("stdio front: %v", err)
				}
			})
			c = &conn{in: inW, out: bufio.NewReader(outR)}
			mu.Lock()
			conns[key] = c
			mu.Unlock()
			fmt.Fprintln(c.in, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
			if line, err := c.out.ReadBytes('\n'); err != nil || !bytes.Contains(line, []byte(`"result"`)) {
				t.Fatalf("stdio initialize: %s %v", line, err)
			}
			fmt.Fprintln(c.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		}
		fmt.Fprintf(c.in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`+"\n", id, name)
		for {
			line, err := c.out.ReadBytes('\n')
			if err != nil {
				t.Fatalf("stdio front: %v", err)
			}
			m, err := jsonrpc.Decode(bytes.TrimSpace(line))
			if err == nil && m.IsResponse() && m.ID.String() == fmt.Sprint(id) {
				return m
			}
		}
	}
}
