package security

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// Hole 3: a call made over the legacy HTTP+SSE transport (GET /sse, POST
// /messages), through the admin API's "call as" or through the stdio
// front must run as the caller who made it, exactly as the same call over
// streamable HTTP: its audit row names the key and the user, the key's
// budget is charged and enforced, the person's own credential is found,
// and guardrail webhooks see the caller.

// vaultKey is a vault key of the suite's own (32 bytes, base64).
const vaultKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

// Keys of the caller cases beside alice's.
const (
	budgetHTTPKey      = "mcpg_sec-budget-http-0123456789"
	budgetSSEKey       = "mcpg_sec-budget-sse-0123456789"
	budgetAdminKey     = "mcpg_sec-budget-admin-0123456789"
	budgetStdioKey     = "mcpg_sec-budget-stdio-0123456789"
	budgetStatelessKey = "mcpg_sec-budget-stateless-0123456789"
	aliceByokValue     = "alice-own-tickets-credential-7f3a"
)

// callerFixture is a gateway whose server alpha prices every call at 1,
// sends each call to a guardrail webhook first, and whose server byok
// takes each person's own stored credential.
type callerFixture struct {
	g       *gateway
	cfg     string // the config, for a stdio front on the same store
	alpha   *upstream
	byok    *upstream
	webhook *recorder
}

func newCallerFixture(t *testing.T) *callerFixture {
	t.Helper()
	f := &callerFixture{
		alpha: newUpstream(t, "alpha", "audited_streamable", "audited_legacy", "audited_admin-call-as", "audited_stdio", "audited_stateless",
			"guarded_streamable", "guarded_legacy", "guarded_admin-call-as", "guarded_stdio", "guarded_stateless"),
		byok: newUpstream(t, "byok"),
		webhook: newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"allow":true}`))
		}),
	}
	f.cfg = fmt.Sprintf(`vault: {keys: [{id: k1, key: %q}]}
auth:
  master_key: %q
  keys:
    - {alias: alice, key: %q, user: alice, team: red}
    - {alias: budget-http, key: %q, user: bert, budget: {amount: 1, period: day}}
    - {alias: budget-sse, key: %q, user: bert, budget: {amount: 1, period: day}}
    - {alias: budget-admin, key: %q, user: bert, budget: {amount: 1, period: day}}
    - {alias: budget-stdio, key: %q, user: bert, budget: {amount: 1, period: day}}
    - {alias: budget-stateless, key: %q, user: bert, budget: {amount: 1, period: day}}
servers:
  alpha:
    transport: http
    url: %q
    tools: {costs: {"*": 1}}
    guardrails:
      pre: [{kind: webhook, name: who, url: %q, timeout: 5s}]
  byok:
    transport: http
    url: %q
    auth: {type: user_api_key, header_name: X-Person-Key}
`, vaultKey, masterKey, aliceKey, budgetHTTPKey, budgetSSEKey, budgetAdminKey, budgetStdioKey, budgetStatelessKey, f.alpha.url(), f.webhook.srv.URL+"/check", f.byok.url())
	f.g = startGateway(t, f.cfg)
	return f
}

// front is one way a caller reaches a route: streamable HTTP or the
// legacy transport (and, once it takes a caller, the stdio front).
type front struct {
	name string
	open func(t *testing.T, f *callerFixture, path, key string) func(id, tool, args string) (int, *rpcMsg)
}

var callerFronts = []front{
	{name: "streamable", open: func(t *testing.T, f *callerFixture, path, key string) func(id, tool, args string) (int, *rpcMsg) {
		g := f.g
		c := g.client(t, path, key)
		c.initialize("")
		return func(id, tool, args string) (int, *rpcMsg) {
			cl := c.start(id, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, tool, args))
			return cl.status, cl.result(t, 15*time.Second)
		}
	}},
	{name: "legacy", open: func(t *testing.T, f *callerFixture, path, key string) func(id, tool, args string) (int, *rpcMsg) {
		g := f.g
		l := openLegacyStream(t, g, path, keyHeader(key))
		return func(id, tool, args string) (int, *rpcMsg) {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args)
			if st, b := l.post(t, body); st != http.StatusAccepted {
				var m rpcMsg
				if json.Unmarshal([]byte(b), &m) != nil || m.Error == nil {
					m = rpcMsg{Error: &rpcError{Code: int64(-st), Message: b}}
				}
				return st, &m
			}
			// The legacy transport acknowledges every POST (its clients
			// drop the connection on anything else): a refusal is the
			// JSON-RPC error on the stream, where its code says 429.
			m := l.waitReply(t, id)
			if m.Error != nil && m.Error.Code == -32029 {
				return http.StatusTooManyRequests, m
			}
			return http.StatusAccepted, m
		}
	}},
	{name: "stateless", open: func(t *testing.T, f *callerFixture, path, key string) func(id, tool, args string) (int, *rpcMsg) {
		// 2026-07-28: no session, the key on every request.
		return func(id, tool, args string) (int, *rpcMsg) {
			c := f.g.client(t, path, key)
			c.hdr.Set("MCP-Protocol-Version", "2026-07-28")
			c.hdr.Set("Mcp-Method", "tools/call")
			c.hdr.Set("Mcp-Name", tool)
			cl := c.start(id, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s,%s}`, tool, args, statelessMetaJSON))
			return cl.status, cl.result(t, 15*time.Second)
		}
	}},
	{name: "admin-call-as", open: func(t *testing.T, f *callerFixture, path, key string) func(id, tool, args string) (int, *rpcMsg) {
		g := f.g
		alias := keyAliases[key]
		return func(id, tool, args string) (int, *rpcMsg) {
			st, body := g.admin(t, http.MethodPost, "/tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s,"key":%q,"route":%q}`, tool, args, alias, path))
			if st == http.StatusOK {
				return st, &rpcMsg{ID: json.RawMessage(`"` + id + `"`), Result: json.RawMessage(body)}
			}
			var e struct {
				Details string `json:"details"`
				Code    int64  `json:"code"`
			}
			_ = json.Unmarshal([]byte(body), &e)
			if e.Code == 0 {
				e.Code = int64(-st)
			}
			return st, &rpcMsg{Error: &rpcError{Code: e.Code, Message: e.Details + " (" + body + ")"}}
		}
	}},
	{name: "stdio", open: func(t *testing.T, f *callerFixture, path, key string) func(id, tool, args string) (int, *rpcMsg) {
		// The stdio front serves the merged view: names are prefixed.
		front := startStdio(t, "data_dir: "+f.g.dataDir+"\n"+f.cfg, stdioCallerArgs(key)...)
		prefix := strings.TrimPrefix(path, "/mcp/") + "__"
		return func(id, tool, args string) (int, *rpcMsg) {
			m := front.call(id, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, prefix+tool, args))
			st := http.StatusOK
			if m.Error != nil && m.Error.Code == -32029 {
				st = http.StatusTooManyRequests // no HTTP status on stdio: the code says it
			}
			return st, m
		}
	}},
}

// statelessMetaJSON is the _meta of a 2026-07-28 request.
const statelessMetaJSON = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"security-suite","version":"1"}}`

// keyAliases names the keys of the caller cases, for the admin API's
// "call as".
var keyAliases = map[string]string{aliceKey: "alice", budgetHTTPKey: "budget-http", budgetSSEKey: "budget-sse", budgetAdminKey: "budget-admin", budgetStdioKey: "budget-stdio"}

// waitReply waits for the reply to id on the legacy stream.
func (l *legacyStream) waitReply(t *testing.T, id string) *rpcMsg {
	t.Helper()
	want, _ := json.Marshal(id)
	deadline := time.After(15 * time.Second)
	for {
		select {
		case m, ok := <-l.msgs:
			if !ok {
				t.Fatalf("legacy stream ended before the reply to %s", id)
			}
			if m.isResponse() && string(m.ID) == string(want) {
				return m
			}
		case <-deadline:
			t.Fatalf("legacy stream: no reply to %s within 15s", id)
		}
	}
}

// overBudgetRefusal checks the refusal of a call past its key's budget:
// HTTP 429 and JSON-RPC -32029 saying the budget is spent (README, Cost).
func overBudgetRefusal(t *testing.T, who string, status int, m *rpcMsg) {
	t.Helper()
	if m.Error == nil {
		t.Errorf("%s: a call past the key's budget was served: %s", who, m.Result)
		return
	}
	if status != http.StatusTooManyRequests || m.Error.Code != -32029 || !strings.Contains(m.Error.Message, "Budget exceeded") {
		t.Errorf("%s: HTTP %d, JSON-RPC %d %q; want 429, -32029 \"Budget exceeded: ...\"", who, status, m.Error.Code, m.Error.Message)
	}
}

// TestEveryFrontCarriesCaller is hole 3: the same four observations of
// who called, through every front: streamable HTTP and the stateless
// 2026-07-28 requests (which hold today),
// the legacy transport (which loses the caller today), the admin API's
// "call as" (which today neither charges nor enforces the key's budget
// nor finds the person's credential) and the stdio front acting as a
// configured key (hole 13).
func TestEveryFrontCarriesCaller(t *testing.T) {
	f := newCallerFixture(t)
	if st, body := f.g.adminAs(t, aliceKey, http.MethodPut, "/me/credentials/byok", fmt.Sprintf(`{"value":%q}`, aliceByokValue)); st != http.StatusOK {
		t.Fatalf("alice stores her credential: HTTP %d %s", st, body)
	}
	for _, fr := range callerFronts {
		t.Run(fr.name, func(t *testing.T) {
			call := fr.open(t, f, "/mcp/alpha", aliceKey)

			t.Run("audit row names the caller", func(t *testing.T) {
				tool := "audited_" + fr.name
				if st, m := call("a1", tool, `{"text":"x"}`); isToolError(m) {
					t.Fatalf("call: HTTP %d %s", st, describe(m))
				}
				rows := f.g.auditRows(t, "server=alpha&tool="+tool, 1, 5*time.Second)
				if len(rows) != 1 {
					t.Fatalf("audit rows of %s: %+v, want 1", tool, rows)
				}
				if r := rows[0]; r.KeyAlias != "alice" || r.User != "alice" || r.Team != "red" {
					t.Errorf("audit row of alice's %s call: key %q user %q team %q, want alice, alice, red", fr.name, r.KeyAlias, r.User, r.Team)
				}
			})

			t.Run("guardrail webhook sees the caller", func(t *testing.T) {
				tool := "guarded_" + fr.name
				if st, m := call("g1", tool, `{"text":"x"}`); isToolError(m) {
					t.Fatalf("call: HTTP %d %s", st, describe(m))
				}
				var seen []string
				for _, h := range f.webhook.all() {
					var req struct {
						Tool   string `json:"tool"`
						Caller struct {
							Alias string `json:"alias"`
							User  string `json:"user"`
						} `json:"caller"`
					}
					if json.Unmarshal([]byte(h.Body), &req) == nil && req.Tool == tool {
						seen = append(seen, req.Caller.Alias+"/"+req.Caller.User)
					}
				}
				if !slices.Equal(seen, []string{"alice/alice"}) {
					t.Errorf("the webhook saw the %s call's caller as %q, want [alice/alice]", fr.name, seen)
				}
			})

			t.Run("budget is charged and enforced", func(t *testing.T) {
				key := map[string]string{"streamable": budgetHTTPKey, "legacy": budgetSSEKey, "admin-call-as": budgetAdminKey, "stdio": budgetStdioKey, "stateless": budgetStatelessKey}[fr.name]
				spend := fr.open(t, f, "/mcp/alpha", key)
				text := "budget-" + fr.name
				if st, m := spend("b1", "echo", fmt.Sprintf(`{"text":%q}`, text)); isToolError(m) {
					t.Fatalf("the first call within the budget: HTTP %d %s", st, describe(m))
				}
				st, m := spend("b2", "echo", fmt.Sprintf(`{"text":%q}`, text))
				overBudgetRefusal(t, fr.name+" call past a budget of 1", st, m)
				if n := countPrefix(f.alpha.received(), "echo "+text); n != 1 {
					t.Errorf("the upstream ran %d calls of a key with a budget of one call, want 1", n)
				}
			})

			t.Run("per-person credential is found", func(t *testing.T) {
				byok := fr.open(t, f, "/mcp/byok", aliceKey)
				st, m := byok("p1", "echo", fmt.Sprintf(`{"text":%q}`, "byok-"+fr.name))
				if isToolError(m) {
					t.Fatalf("alice's %s call to her own-credential server: HTTP %d %s", fr.name, st, describe(m))
				}
				if !slices.Contains(f.byok.received(), "echo byok-"+fr.name) {
					t.Errorf("the upstream did not run alice's %s call: %q", fr.name, f.byok.received())
				}
				for _, v := range f.byok.receivedHeader("X-Person-Key") {
					if v != aliceByokValue {
						t.Errorf("the upstream received X-Person-Key %q, want only alice's own", v)
					}
				}
			})
		})
	}
}

func countPrefix(list []string, prefix string) int {
	n := 0
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// Hole 14: a JSON-RPC batch is one HTTP request but many calls; a rate
// limit and a budget count calls.

// batchOf is a batch of n tools/call of tool with texts prefix-1..n.
func batchOf(n int, tool, prefix string) string {
	var parts []string
	for i := 1; i <= n; i++ {
		parts = append(parts, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"text":"%s-%d"}}}`, i, tool, prefix, i))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// batchRefusals checks the answer to a batch of n calls of which at most
// allowed may run: every other element is a JSON-RPC error with code
// (-32029 for a rate limit or budget); ran is how many the upstream ran.
// A whole-batch refusal (one error, HTTP 429) is accepted when allowed is
// 0.
func batchRefusals(t *testing.T, who string, status int, body string, n, allowed, ran int) {
	t.Helper()
	if ran > allowed {
		t.Errorf("%s: the upstream ran %d of the batch's %d calls, want at most %d", who, ran, n, allowed)
	}
	var replies []rpcMsg
	if err := json.Unmarshal([]byte(body), &replies); err != nil {
		t.Errorf("%s: HTTP %d, the answer is not a batch of replies: %.300s", who, status, body)
		return
	}
	ok, refused := 0, 0
	for _, r := range replies {
		switch {
		case r.Error == nil:
			ok++
		case r.Error.Code == -32029:
			refused++
		default:
			t.Errorf("%s: a refused element has JSON-RPC %d %q, want -32029", who, r.Error.Code, r.Error.Message)
		}
	}
	if ok != ran || ok+refused != n {
		t.Errorf("%s: HTTP %d, %d results and %d refusals (-32029) for %d calls of which the upstream ran %d; want %d results, the rest refused",
			who, status, ok, refused, n, ran, ran)
	}
}

// TestBatchCountsEveryCall is hole 14.
func TestBatchCountsEveryCall(t *testing.T) {
	const (
		limitedKey = "mcpg_sec-limited-0123456789"
		frugalKey  = "mcpg_sec-frugal-0123456789"
		// frugalLegacyKey is frugal's twin for the legacy transport.
		frugalLegacyKey = "mcpg_sec-frugal-legacy-0123456789"
	)
	up := newUpstream(t, "alpha", "limited", "frugal")
	g := startGateway(t, fmt.Sprintf(`auth:
  master_key: %q
  keys:
    - {alias: limited, key: %q, user: lim, rate_limit_rpm: 3}
    - {alias: frugal, key: %q, user: fru, budget: {amount: 1, period: day}}
    - {alias: frugal-legacy, key: %q, user: fru, budget: {amount: 1, period: day}}
servers:
  alpha:
    transport: http
    url: %q
    tools: {costs: {"*": 1}}
`, masterKey, limitedKey, frugalKey, frugalLegacyKey, up.url()))
	post := func(key, body string) (int, string) {
		h := keyHeader(key)
		h.Set("Content-Type", "application/json")
		h.Set("Accept", "application/json, text/event-stream")
		h.Set("Mcp-Protocol-Version", "2025-03-26")
		st, _, b := g.request(t, http.MethodPost, "/mcp/alpha", h, body)
		return st, b
	}

	t.Run("rate limit of 3 a minute", func(t *testing.T) {
		st, body := post(limitedKey, batchOf(20, "limited", "rl"))
		batchRefusals(t, "a batch of 20 calls on a key limited to 3 a minute", st, body, 20, 3, countPrefix(up.received(), "limited rl-"))
		// The key's limit is spent: its next single call is refused too.
		st, body = post(limitedKey, `{"jsonrpc":"2.0","id":"after","method":"tools/call","params":{"name":"limited","arguments":{"text":"after"}}}`)
		if st != http.StatusTooManyRequests {
			t.Errorf("the call after the batch: HTTP %d %.200s, want 429", st, body)
		}
	})

	t.Run("budget of one call a day", func(t *testing.T) {
		st, body := post(frugalKey, batchOf(20, "frugal", "bd"))
		ran := countPrefix(up.received(), "frugal bd-")
		if ran != 1 {
			t.Errorf("the upstream ran %d of a batch of 20 calls on a budget of one call, want exactly 1", ran)
		}
		batchRefusals(t, "a batch of 20 calls on a budget of one call", st, body, 20, 1, ran)
	})

	t.Run("budget of one call a day, legacy transport", func(t *testing.T) {
		l := openLegacyStream(t, g, "/mcp/alpha", keyHeader(frugalLegacyKey))
		st, body := l.post(t, batchOf(20, "frugal", "lg"))
		if st != http.StatusAccepted {
			batchRefusals(t, "a legacy batch of 20 calls on a budget of one call", st, body, 20, 1, countPrefix(up.received(), "frugal lg-"))
			return
		}
		// The replies travel on the stream.
		var replies []string
		deadline := time.After(10 * time.Second)
	collect:
		for len(replies) < 20 {
			select {
			case m, ok := <-l.msgs:
				if !ok {
					break collect
				}
				if m.isResponse() {
					b, _ := json.Marshal(m)
					replies = append(replies, string(b))
				}
			case <-deadline:
				break collect
			}
		}
		ran := countPrefix(up.received(), "frugal lg-")
		if ran != 1 {
			t.Errorf("the upstream ran %d of a legacy batch of 20 calls on a budget of one call, want exactly 1", ran)
		}
		batchRefusals(t, "a legacy batch of 20 calls on a budget of one call", st, "["+strings.Join(replies, ",")+"]", 20, 1, ran)
	})
}

// Hole 12: on a route of several servers a caller's Authorization header
// is a token for no server in particular, so it goes to none; each
// passthrough server gets only its own X-Mcp-<server>-Authorization. On a
// server's own route Authorization is that server's.

const (
	callerToken = "caller-generic-token-4b1d9e"
	p1Token     = "p1-own-token-88c2aa"
)

// sprayedToken checks that an upstream got no Authorization but want
// (every value it received).
func sprayedToken(t *testing.T, who string, got []string, want string) {
	t.Helper()
	seen := map[string]bool{}
	for _, v := range got {
		if v != want && !seen[v] {
			seen[v] = true
			if want == "" {
				t.Errorf("%s received Authorization %q, want none", who, v)
			} else {
				t.Errorf("%s received Authorization %q, want only %q", who, v, want)
			}
		}
	}
}

// TestPassthroughMergedRouteNoSpray is hole 12.
func TestPassthroughMergedRouteNoSpray(t *testing.T) {
	p1 := newUpstream(t, "p1")
	p2 := newUpstream(t, "p2")
	g := startGateway(t, fmt.Sprintf(`auth:
  master_key: %q
  keys:
    - {alias: alice, key: %q, user: alice}
servers:
  p1: {transport: http, url: %q, auth: {type: passthrough}}
  p2: {transport: http, url: %q, auth: {type: passthrough}}
`, masterKey, aliceKey, p1.url(), p2.url()))
	hdr := func() http.Header {
		h := http.Header{}
		h.Set("X-Mcpgate-Api-Key", aliceKey)
		h.Set("Authorization", "Bearer "+callerToken)
		return h
	}

	for _, path := range []string{"/mcp", "/mcp/p1,p2"} {
		t.Run("merged route "+path, func(t *testing.T) {
			c := g.client(t, path, "")
			c.hdr = hdr()
			c.hdr.Set("X-Mcp-p1-Authorization", "Bearer "+p1Token)
			c.initialize("")
			names := c.toolNames()
			if res := c.callTool("c1", "p1__echo", `{"text":"merged"}`); isToolError(res) {
				t.Fatalf("p1__echo on %s: %s", path, describe(res))
			}
			// p2's token was never sent: p2 is out of the caller's view.
			res := c.callTool("c2", "p2__echo", `{"text":"merged"}`)
			if res.Error == nil || res.Error.Code != -32602 {
				t.Errorf("p2__echo on %s without a p2 token: %s, want -32602 Unknown tool (tools listed: %q)", path, describe(res), names)
			}
			sprayedToken(t, "p1 on "+path, p1.receivedHeader("Authorization"), "Bearer "+p1Token)
			sprayedToken(t, "p2 on "+path, p2.receivedHeader("Authorization"), "")
			if got := p2.received(); len(got) != 0 {
				t.Errorf("p2 ran %q with the caller's generic token", got)
			}
		})
	}

	t.Run("single-server route", func(t *testing.T) {
		c := g.client(t, "/mcp/p2", "")
		c.hdr = hdr()
		c.initialize("")
		if res := c.callTool("s1", "echo", `{"text":"single"}`); isToolError(res) {
			t.Fatalf("echo on /mcp/p2: %s", describe(res))
		}
		got := p2.receivedHeader("Authorization")
		if !slices.Contains(got, "Bearer "+callerToken) {
			t.Errorf("p2 on its own route received Authorization %q, want the caller's token", got)
		}
	})
}

// Hole 13: the stdio front is a front like any other: the servers' tool
// policy holds, its calls are audited, budgets apply.

// stdioCallerArgs is how `mcpgate stdio` is told which configured key it
// acts as (issue 22: "a key named on its command line or in the config").
func stdioCallerArgs(key string) []string { return []string{"--key", key} }

// deniedRefusal checks that a call of a tool the policy hides fails like
// an unknown tool (S6.2): -32602 "Unknown tool: <name>".
func deniedRefusal(t *testing.T, who string, m *rpcMsg, name string) {
	t.Helper()
	if m.Error == nil {
		t.Errorf("%s: a denied tool was called: %s", who, m.Result)
		return
	}
	if m.Error.Code != -32602 || m.Error.Message != "Unknown tool: "+name {
		t.Errorf("%s: JSON-RPC %d %q, want -32602 \"Unknown tool: %s\"", who, m.Error.Code, m.Error.Message, name)
	}
}

// TestStdioFrontPolicy is hole 13: the servers' tool policy, the audit
// log, key scoping and budgets through `mcpgate stdio`. The front shares
// the serving gateway's store (its data_dir), whose admin API then reads
// the front's audit rows.
func TestStdioFrontPolicy(t *testing.T) {
	up := newUpstream(t, "alpha", "drop_all", "audited", "budgeted")
	beta := newUpstream(t, "beta")
	servers := fmt.Sprintf(`servers:
  alpha:
    transport: http
    url: %q
    tools: {deny: [drop_all], costs: {budgeted: 1}}
  beta: {transport: http, url: %q}
`, up.url(), beta.url())

	t.Run("no keys", func(t *testing.T) {
		g := startGateway(t, servers)
		stdioCfg := "data_dir: " + g.dataDir + "\n" + servers

		// Over HTTP: hidden and refused.
		c := g.client(t, "/mcp", "")
		c.initialize("")
		if slices.Contains(c.toolNames(), "alpha__drop_all") {
			t.Fatalf("HTTP lists the denied tool")
		}
		deniedRefusal(t, "HTTP", c.callTool("h1", "alpha__drop_all", `{"text":"http"}`), "alpha__drop_all")

		f := startStdio(t, stdioCfg)
		t.Run("tools.deny", func(t *testing.T) {
			res := f.call("l1", "tools/list", `{}`)
			if strings.Contains(string(res.Result), "drop_all") {
				t.Errorf("mcpgate stdio lists the denied tool alpha__drop_all")
			}
			deniedRefusal(t, "mcpgate stdio", f.call("c1", "tools/call", `{"name":"alpha__drop_all","arguments":{"text":"stdio"}}`), "alpha__drop_all")
			if got := up.received(); slices.Contains(got, "drop_all stdio") {
				t.Errorf("the upstream ran the denied tool for the stdio front: %q", got)
			}
		})
		t.Run("audit", func(t *testing.T) {
			if res := f.call("a1", "tools/call", `{"name":"alpha__audited","arguments":{"text":"stdio"}}`); isToolError(res) {
				t.Fatalf("stdio call: %s", describe(res))
			}
			f.stop() // its records are flushed by now
			rows := g.auditRowsAs(t, "", "server=alpha&tool=audited", 1, 3*time.Second)
			if len(rows) != 1 || rows[0].Outcome != "ok" {
				t.Errorf("audit rows of the stdio front's call: %+v, want one with outcome ok", rows)
			}
		})
	})

	t.Run("keys required", func(t *testing.T) {
		cfg := fmt.Sprintf(`auth:
  master_key: %q
  keys:
    - {alias: desk, key: %q, user: dana, servers: [alpha], budget: {amount: 1, period: day}}
`, masterKey, aliceKey) + servers
		g := startGateway(t, cfg)
		f := startStdio(t, "data_dir: "+g.dataDir+"\n"+cfg, stdioCallerArgs(aliceKey)...)

		t.Run("the key's servers only", func(t *testing.T) {
			res := f.call("l1", "tools/list", `{}`)
			if strings.Contains(string(res.Result), "beta__") {
				t.Errorf("mcpgate stdio as desk lists beta's tools, which desk may not use")
			}
			deniedRefusal(t, "mcpgate stdio as desk", f.call("c1", "tools/call", `{"name":"beta__echo","arguments":{"text":"stdio"}}`), "beta__echo")
			if got := beta.received(); len(got) != 0 {
				t.Errorf("beta ran %q for a front whose key may not use it", got)
			}
		})
		t.Run("budget and audit", func(t *testing.T) {
			first := f.call("b1", "tools/call", `{"name":"alpha__budgeted","arguments":{"text":"stdio-1"}}`)
			if isToolError(first) {
				t.Fatalf("the first call within the budget: %s", describe(first))
			}
			second := f.call("b2", "tools/call", `{"name":"alpha__budgeted","arguments":{"text":"stdio-2"}}`)
			if second.Error == nil || second.Error.Code != -32029 || !strings.Contains(second.Error.Message, "Budget exceeded") {
				t.Errorf("the stdio front's call past a budget of one call: %s, want -32029 \"Budget exceeded: ...\"", describe(second))
			}
			if n := countPrefix(up.received(), "budgeted stdio-"); n != 1 {
				t.Errorf("the upstream ran %d calls of the stdio front on a budget of one call, want 1", n)
			}
			f.stop() // its records are flushed by now
			rows := g.auditRows(t, "server=alpha&tool=budgeted", 1, 3*time.Second)
			if len(rows) == 0 {
				t.Fatalf("the stdio front's calls left no audit row")
			}
			for _, r := range rows {
				if r.KeyAlias != "desk" || r.User != "dana" {
					t.Errorf("the stdio front's audit row: key %q user %q, want desk, dana", r.KeyAlias, r.User)
				}
			}
		})
	})
}
