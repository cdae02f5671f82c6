package gateway

import (
	"bufio"
	"context"
	"encoding/json"
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
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Secrets the guard test upstream hands out; each must come back redacted.
const (
	testEmail   = "alice@example.com"
	testJWT     = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX2hlcmU"
	testCard    = "4111 1111 1111 1111" // Luhn-valid
	testNotCard = "4111 1111 1111 1112" // Luhn-invalid: stays
	testAPIKey  = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345"
)

// guardUpstream is a real go-sdk server whose tools record the arguments
// they received: echo, leak (secrets in text, an embedded resource and
// structuredContent), stream (progress, then a secret) and big.
type guardUpstream struct {
	mu   sync.Mutex
	args []string // raw arguments of each call received, in order
	url  string
}

func (u *guardUpstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.args)
}

func startGuardUpstream(t *testing.T) *guardUpstream {
	t.Helper()
	u := &guardUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "guarded", Version: "1"}, nil)
	add := func(name string, h func(ctx context.Context, req *mcp.CallToolRequest) *mcp.CallToolResult) {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.mu.Lock()
			u.args = append(u.args, string(req.Params.Arguments))
			u.mu.Unlock()
			return h(ctx, req), nil
		})
	}
	add("echo", func(_ context.Context, req *mcp.CallToolRequest) *mcp.CallToolResult {
		return textResult("echo " + string(req.Params.Arguments))
	})
	add("danger_zone", func(context.Context, *mcp.CallToolRequest) *mcp.CallToolResult { return textResult("done") })
	add("leak", func(context.Context, *mcp.CallToolRequest) *mcp.CallToolResult {
		return &mcp.CallToolResult{
			Content: []mcp.Content{
				&mcp.TextContent{Text: "mail " + testEmail + " token " + testJWT + " card " + testCard + " other " + testNotCard + " key " + testAPIKey},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "mem://doc", MIMEType: "text/plain", Text: "owner: " + testEmail}},
			},
			StructuredContent: map[string]any{"owner": map[string]any{"contacts": []any{testEmail}, "count": 3}},
		}
	})
	add("stream", func(ctx context.Context, req *mcp.CallToolRequest) *mcp.CallToolResult {
		if tok := req.Params.GetProgressToken(); tok != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2})
			time.Sleep(20 * time.Millisecond)
		}
		return textResult("streamed " + testEmail)
	})
	add("big", func(context.Context, *mcp.CallToolRequest) *mcp.CallToolResult {
		return textResult(strings.Repeat("x", 5000))
	})
	u.url = serveSDK(t, srv).URL
	return u
}

// guardConfig parses YAML the way a config file is read, so the
// contract's shape is what the test exercises.
func guardConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), t.TempDir(), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

const guardYAML = `
servers:
  up:
    transport: http
    url: %s
    guardrails:
      pre:
        - {kind: deny, name: no-sql, pattern: "(?i)drop\\s+table", tools: ["*"]}
        - {kind: deny, name: no-danger, pattern: "^danger_", tools: ["dan*"]}
        - {kind: max_bytes, name: small-args, limit: 300}
        - {kind: redact, name: args-email, patterns: [email], arguments: true, tools: [echo]}
      post:
        - {kind: redact, name: secrets, patterns: [email, jwt, card, api_key]}
        - {kind: max_bytes, name: big-result, limit: 4KiB}
routes:
  /mcp/up:
    guardrails:
      pre:
        - {kind: deny, name: route-deny, pattern: "route-only"}
`

// guardScrape returns the guardrail series of the gateway's /metrics.
func guardScrape(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "mcpgate_guardrail_") {
			i := strings.LastIndexByte(line, ' ')
			out[line[:i]] = line[i+1:]
		}
	}
	return out
}

// toolText is the text of a tools/call result's first content item, and
// whether the result is a tool error.
func toolText(t *testing.T, r *eraReply) (string, bool) {
	t.Helper()
	if r.Error != nil || r.Result == nil {
		t.Fatalf("not a result: %s", r)
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil || len(res.Content) == 0 {
		t.Fatalf("result %s: %v", r.Result, err)
	}
	return res.Content[0].Text, res.IsError
}

// Guardrails (S21) in both eras: deny by a nested argument and by tool
// name, max_bytes before and after, a blocked call is a tool error naming
// the guardrail and not the text, audited with its name, counted, and
// never reaches the upstream; redaction of arguments (before they go
// upstream) and of text, embedded resources and structuredContent, card
// numbers only when Luhn-valid; route guardrails only on their route.
func TestGuardrails(t *testing.T) {
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			up := startGuardUpstream(t)
			keys := &memKeys{}
			key := keys.add(t, store.Key{Alias: "guarded-key", User: "u1", Team: "t1"})
			audit := &memAudit{}
			_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Audit: audit, Metrics: metrics.New(), MetricsOnMain: true,
				Config: guardConfig(t, fmt.Sprintf(guardYAML, up.url+"/mcp"))})
			c := e.client(t, gw.URL+"/mcp", withKey(key))

			blocked := func(t *testing.T, r *eraReply, guardrail string, secret string) {
				t.Helper()
				text, isErr := toolText(t, r)
				if !isErr || !strings.Contains(text, `"`+guardrail+`"`) {
					t.Errorf("blocked call: %s, want a tool error naming %s", r.Result, guardrail)
				}
				if secret != "" && strings.Contains(string(r.raw), secret) {
					t.Errorf("the error shows the matched text %q: %s", secret, r.raw)
				}
			}

			// deny by a nested string argument.
			r := c.call("1", "tools/call", `{"name":"up__echo","arguments":{"q":{"deep":["ok","x; DROP  TABLE users"]}}}`)
			blocked(t, r, "no-sql", "DROP")
			// deny by tool name (and only on the tools it names).
			blocked(t, c.call("2", "tools/call", `{"name":"up__danger_zone","arguments":{}}`), "no-danger", "")
			// max_bytes of the arguments.
			blocked(t, c.call("3", "tools/call", `{"name":"up__echo","arguments":{"q":"`+strings.Repeat("y", 400)+`"}}`), "small-args", "")
			if got := up.received(); len(got) != 0 {
				t.Fatalf("the upstream received blocked calls: %q", got)
			}

			// Arguments redacted before they go upstream.
			text, _ := toolText(t, c.call("4", "tools/call", `{"name":"up__echo","arguments":{"to":"write to `+testEmail+` <now>"}}`))
			if got := up.received(); len(got) != 1 || strings.Contains(got[0], testEmail) || !strings.Contains(got[0], "[REDACTED:email]") || !strings.Contains(got[0], "<now>") {
				t.Errorf("upstream received %q, want the email redacted and the rest kept", got)
			}
			if strings.Contains(text, testEmail) {
				t.Errorf("echo %q shows the email", text)
			}

			// Results: text, embedded resource, structuredContent.
			r = c.call("5", "tools/call", `{"name":"up__leak","arguments":{}}`)
			for _, s := range []string{testEmail, testJWT, testCard, testAPIKey} {
				if strings.Contains(string(r.raw), s) {
					t.Errorf("result shows %q: %s", s, r.raw)
				}
			}
			var leak struct {
				Content []struct {
					Text     string `json:"text"`
					Resource struct {
						Text string `json:"text"`
					} `json:"resource"`
				} `json:"content"`
				Structured struct {
					Owner struct {
						Contacts []string `json:"contacts"`
						Count    int      `json:"count"`
					} `json:"owner"`
				} `json:"structuredContent"`
			}
			if err := json.Unmarshal(r.Result, &leak); err != nil || len(leak.Content) != 2 {
				t.Fatalf("leak result %s: %v", r.Result, err)
			}
			wantText := "mail [REDACTED:email] token [REDACTED:jwt] card [REDACTED:card] other " + testNotCard + " key [REDACTED:api_key]"
			if leak.Content[0].Text != wantText {
				t.Errorf("text %q, want %q", leak.Content[0].Text, wantText)
			}
			if leak.Content[1].Resource.Text != "owner: [REDACTED:email]" {
				t.Errorf("embedded resource %q", leak.Content[1].Resource.Text)
			}
			if o := leak.Structured.Owner; !slices.Equal(o.Contacts, []string{"[REDACTED:email]"}) || o.Count != 3 {
				t.Errorf("structuredContent %+v", o)
			}

			// max_bytes of the result.
			blocked(t, c.call("6", "tools/call", `{"name":"up__big","arguments":{}}`), "big-result", "")

			// Route guardrails: on /mcp/up only.
			if text, isErr := toolText(t, c.call("7", "tools/call", `{"name":"up__echo","arguments":{"q":"route-only"}}`)); isErr {
				t.Errorf("route guardrail applied on /mcp: %s", text)
			}
			cu := e.client(t, gw.URL+"/mcp/up", withKey(key))
			blocked(t, cu.call("8", "tools/call", `{"name":"echo","arguments":{"q":"route-only"}}`), "route-deny", "route-only")

			// Audit: blocked calls carry the guardrail's name.
			var got []string
			for _, rec := range audit.records() {
				got = append(got, rec.Tool+"/"+rec.Outcome+"/"+rec.Guardrail)
				if rec.KeyAlias != "guarded-key" {
					t.Errorf("record %+v: caller", rec)
				}
			}
			want := []string{"echo/blocked/no-sql", "danger_zone/blocked/no-danger", "echo/blocked/small-args", "echo/ok/",
				"leak/ok/", "big/blocked/big-result", "echo/ok/", "echo/blocked/route-deny"}
			if !slices.Equal(got, want) {
				t.Errorf("audit\n got %v\nwant %v", got, want)
			}
			m := guardScrape(t, gw.URL)
			for series, n := range map[string]string{
				`mcpgate_guardrail_blocks_total{guardrail="no-sql",phase="pre",server="up"}`:         "1",
				`mcpgate_guardrail_blocks_total{guardrail="no-danger",phase="pre",server="up"}`:      "1",
				`mcpgate_guardrail_blocks_total{guardrail="small-args",phase="pre",server="up"}`:     "1",
				`mcpgate_guardrail_blocks_total{guardrail="big-result",phase="post",server="up"}`:    "1",
				`mcpgate_guardrail_blocks_total{guardrail="route-deny",phase="pre",server="up"}`:     "1",
				`mcpgate_guardrail_redactions_total{guardrail="args-email",phase="pre",server="up"}`: "1",
				`mcpgate_guardrail_redactions_total{guardrail="secrets",phase="post",server="up"}`:   "6",
			} {
				if m[series] != n {
					t.Errorf("%s = %q, want %s (all: %v)", series, m[series], n, m)
				}
			}
		})
	}
}

// A streamed result (progress first, so the answer is an SSE stream) is
// redacted like any other: its final result passes the same checks.
func TestGuardrailsStreamedResult(t *testing.T) {
	up := startGuardUpstream(t)
	_, gw := startGateway(t, guardConfig(t, fmt.Sprintf(guardYAML, up.url+"/mcp")))
	url := gw.URL + "/mcp"
	sid := initSession(t, url)
	var events [][]byte
	last := rpcEvents(t, url, map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"},
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"up__stream","arguments":{},"_meta":{"progressToken":"p1"}}}`,
		func(b []byte) { events = append(events, slices.Clone(b)) })
	if len(events) < 2 || !strings.Contains(string(events[0]), "notifications/progress") {
		t.Fatalf("not streamed with progress first: %q", events)
	}
	if strings.Contains(string(last), testEmail) || !strings.Contains(string(last), "streamed [REDACTED:email]") {
		t.Errorf("final streamed result %s", last)
	}
}

// A reload (the state swap) applies changed guardrails at once.
func TestGuardrailsReload(t *testing.T) {
	up := startGuardUpstream(t)
	g, gw := startGateway(t, guardConfig(t, fmt.Sprintf(guardYAML, up.url+"/mcp")))
	c := eras[0].client(t, gw.URL+"/mcp", nil)
	if _, isErr := toolText(t, c.call("1", "tools/call", `{"name":"up__echo","arguments":{"q":"harmless"}}`)); isErr {
		t.Fatal("harmless call blocked before the reload")
	}
	next := guardConfig(t, fmt.Sprintf(`
servers:
  up:
    transport: http
    url: %s
    guardrails:
      pre: [{kind: deny, name: no-harm, pattern: harmless}]
`, up.url+"/mcp"))
	for _, s := range next.Servers {
		s.Timeout, s.ProtocolVersion = 20*time.Second, config.ProtocolVersionAuto
	}
	if _, err := g.Reload(next); err != nil {
		t.Fatal(err)
	}
	if text, isErr := toolText(t, c.call("2", "tools/call", `{"name":"up__echo","arguments":{"q":"harmless"}}`)); !isErr || !strings.Contains(text, "no-harm") {
		t.Errorf("after the reload: %q, want blocked by no-harm", text)
	}
	// The old guardrail is gone with the reload.
	if _, isErr := toolText(t, c.call("3", "tools/call", `{"name":"up__echo","arguments":{"q":"drop table x"}}`)); isErr {
		t.Error("a guardrail removed by the reload still blocks")
	}
}

// Webhook guardrails against a real service: allow, block with its
// reason, a rewrite of the result, and a service that does not answer in
// time, with fail_open true and false.
func TestGuardrailWebhook(t *testing.T) {
	up := startGuardUpstream(t)
	var mu sync.Mutex
	var seen []map[string]any
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		seen = append(seen, req)
		mu.Unlock()
		if r.Header.Get("X-Guard-Token") != "s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		args, _ := json.Marshal(req["arguments"])
		switch {
		case strings.Contains(string(args), "slow"):
			time.Sleep(500 * time.Millisecond)
			fmt.Fprint(w, `{"allow":true}`)
		case strings.Contains(string(args), "forbidden"):
			fmt.Fprint(w, `{"allow":false,"reason":"policy 7 says no"}`)
		case req["phase"] == "post" && strings.Contains(fmt.Sprint(req["result"]), "rewrite"):
			fmt.Fprint(w, `{"allow":true,"redacted":{"content":[{"type":"text","text":"rewritten"}]}}`)
		default:
			fmt.Fprint(w, `{"allow":true}`)
		}
	}))
	t.Cleanup(svc.Close)
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail_open=%v", failOpen), func(t *testing.T) {
			keys := &memKeys{}
			key := keys.add(t, store.Key{Alias: "hooked", User: "u9"})
			_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Metrics: metrics.New(), MetricsOnMain: true,
				Config: guardConfig(t, fmt.Sprintf(`
servers:
  up:
    transport: http
    url: %s
    guardrails:
      pre: [{kind: webhook, name: hook-pre, url: %q, timeout: 200ms, fail_open: %v, headers: {X-Guard-Token: s3cret}}]
      post: [{kind: webhook, name: hook-post, url: %q, headers: {X-Guard-Token: s3cret}}]
`, up.url+"/mcp", svc.URL, failOpen, svc.URL))})
			c := eras[0].client(t, gw.URL+"/mcp", withKey(key))
			if text, isErr := toolText(t, c.call("1", "tools/call", `{"name":"up__echo","arguments":{"q":"fine"}}`)); isErr || !strings.Contains(text, "fine") {
				t.Errorf("allowed call: %q", text)
			}
			text, isErr := toolText(t, c.call("2", "tools/call", `{"name":"up__echo","arguments":{"q":"forbidden"}}`))
			if !isErr || !strings.Contains(text, "hook-pre") || !strings.Contains(text, "policy 7 says no") {
				t.Errorf("refused call: %q", text)
			}
			if text, _ := toolText(t, c.call("3", "tools/call", `{"name":"up__echo","arguments":{"q":"rewrite"}}`)); text != "rewritten" {
				t.Errorf("rewritten result: %q", text)
			}
			start := time.Now()
			text, isErr = toolText(t, c.call("4", "tools/call", `{"name":"up__echo","arguments":{"q":"slow"}}`))
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("timeout not applied: %v", el)
			}
			if failOpen == isErr {
				t.Errorf("timed-out service with fail_open=%v: %q (isError %v)", failOpen, text, isErr)
			}
			if !failOpen && !strings.Contains(text, "hook-pre") {
				t.Errorf("fail-closed error %q does not name the guardrail", text)
			}
			mu.Lock()
			first := seen[len(seen)-1]
			mu.Unlock()
			if first["server"] != "up" || first["tool"] != "echo" || fmt.Sprint(first["caller"]) != "map[alias:hooked user:u9]" {
				t.Errorf("service got %v", first)
			}
			if failOpen {
				if m := guardScrape(t, gw.URL); m[`mcpgate_guardrail_webhook_failures_total{guardrail="hook-pre",server="up"}`] != "1" {
					t.Errorf("webhook failure not counted: %v", m)
				}
			}
		})
	}
	// The upstream saw "fine" and "rewrite" twice, "slow" once (fail
	// open), never "forbidden".
	for _, a := range up.received() {
		if strings.Contains(a, "forbidden") {
			t.Errorf("a refused call reached the upstream: %s", a)
		}
	}
}

// The legacy HTTP+SSE endpoints of the whole gateway (/sse, /mcp/sse)
// are the /mcp route: its guardrails hold there too, so an older
// transport is no way around them.
func TestGuardrailsLegacySSE(t *testing.T) {
	up := startGuardUpstream(t)
	_, gw := startGateway(t, guardConfig(t, fmt.Sprintf(`
servers:
  up: {transport: http, url: %s}
routes:
  /mcp:
    guardrails:
      pre: [{kind: deny, name: whole-gateway, pattern: forbidden}]
`, up.url+"/mcp")))
	for _, path := range []string{"/sse", "/mcp/sse"} {
		t.Run(path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var d downstream
			cs, err := d.client(t).Connect(ctx, &mcp.SSEClientTransport{Endpoint: gw.URL + path}, &mcp.ClientSessionOptions{ProtocolVersion: mcpwire.Rev20241105})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__echo", Arguments: map[string]any{"q": "forbidden"}})
			if err != nil {
				t.Fatal(err)
			}
			if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || !strings.Contains(text, "whole-gateway") {
				t.Errorf("over %s: %q (isError %v), want blocked", path, text, res.IsError)
			}
		})
	}
	if got := up.received(); len(got) != 0 {
		t.Errorf("the upstream received %q", got)
	}
}

// Tool costs are in each audit record: the tool's price (or *'s) plus
// cost_per_kb of the result; a call a pre guardrail stopped costs nothing.
func TestToolCostsAudited(t *testing.T) {
	up := startGuardUpstream(t)
	audit := &memAudit{}
	_, gw := startGatewayWith(t, Options{Audit: audit, Config: guardConfig(t, fmt.Sprintf(`
servers:
  up:
    transport: http
    url: %s
    tools: {costs: {leak: 0.002, "*": 0.0001}, cost_per_kb: 0.00001}
    guardrails:
      pre: [{kind: deny, name: no-sql, pattern: "(?i)drop\\s+table"}]
`, up.url+"/mcp"))})
	c := eras[0].client(t, gw.URL+"/mcp", nil)
	c.call("1", "tools/call", `{"name":"up__leak","arguments":{}}`)
	c.call("2", "tools/call", `{"name":"up__big","arguments":{}}`)
	c.call("3", "tools/call", `{"name":"up__echo","arguments":{"q":"drop table t"}}`)
	recs := audit.records()
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	for i, want := range []float64{
		0.002 + 0.00001*float64(recs[0].ResponseBytes)/1000,
		0.0001 + 0.00001*float64(recs[1].ResponseBytes)/1000,
		0,
	} {
		if got := recs[i].Cost; got < want-1e-12 || got > want+1e-12 || (want > 0 && recs[i].ResponseBytes == 0) {
			t.Errorf("record %d (%s, %d bytes): cost %g, want %g", i, recs[i].Tool, recs[i].ResponseBytes, got, want)
		}
	}
}
