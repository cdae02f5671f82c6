package config

import (
	"strings"
	"testing"
	"time"
)

// The guardrails shape (a contract) parses, on a server and on a
// route, with limits as sizes and the webhook's defaults.
func TestParseGuardrails(t *testing.T) {
	doc := `
servers:
  db:
    transport: http
    url: https://db.example.com/mcp
    guardrails:
      pre:  [{kind: deny, pattern: "(?i)drop\\s+table", tools: ["*"]}]
      post: [{kind: redact, patterns: [email, jwt, card, api_key]}, {kind: max_bytes, limit: 1MiB}]
routes:
  /mcp:
    guardrails:
      pre: [{kind: webhook, name: hook, url: "https://guard.example.com/check", timeout: 500ms, fail_open: true}]
`
	c, err := Parse([]byte(doc), "", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	g := c.Servers["db"].Guardrails
	if len(g.Pre) != 1 || g.Pre[0].Kind != GuardDeny || g.Pre[0].GuardrailName(0) != "deny-1" {
		t.Errorf("pre %+v", g.Pre)
	}
	if len(g.Post) != 2 || g.Post[1].Limit != 1<<20 || g.Post[1].GuardrailName(1) != "max_bytes-2" {
		t.Errorf("post %+v", g.Post)
	}
	h := c.Routes["/mcp"].Guardrails.Pre[0]
	if h.URL != "https://guard.example.com/check" || h.Timeout != 500*time.Millisecond || !h.FailOpen {
		t.Errorf("webhook %+v", h)
	}
}

func TestGuardrailErrors(t *testing.T) {
	for _, tt := range []struct{ guard, want string }{
		{`{kind: redact, patterns: [phone]}`, `unknown pattern "phone"`},
		{`{kind: redact, patterns: ["regex:("]}`, "not a regular expression"},
		{`{kind: deny, pattern: "("}`, "not a regular expression"},
		{`{kind: webhook, url: "http://guard.example.com/x"}`, "https (or http to a loopback host)"},
		{`{kind: webhook, url: "ftp://127.0.0.1/x"}`, "https (or http to a loopback host)"},
		{`{kind: max_bytes}`, "limit"},
	} {
		doc := "servers:\n  s:\n    transport: http\n    url: https://s.example.com\n    guardrails:\n      pre: [" + tt.guard + "]\n"
		_, err := Parse([]byte(doc), "", envOf(nil))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "guardrails.pre[0]") {
			t.Errorf("%s: error %v, want %q at guardrails.pre[0]", tt.guard, err, tt.want)
		}
	}
	for _, ok := range []string{"http://127.0.0.1:9000/x", "http://localhost/x", "http://[::1]:1/x", "https://g.example.com"} {
		doc := "servers:\n  s:\n    transport: http\n    url: https://s.example.com\n    guardrails:\n      pre: [{kind: webhook, url: \"" + ok + "\"}]\n"
		if _, err := Parse([]byte(doc), "", envOf(nil)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// Tool costs: per tool, * for the rest, and per 1,000 result bytes;
// negative prices are refused.
func TestToolCosts(t *testing.T) {
	doc := `
servers:
  s:
    transport: http
    url: https://s.example.com
    tools: {costs: {search: 0.002, "*": 0.0001}, cost_per_kb: 0.00001}
`
	c, err := Parse([]byte(doc), "", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Servers["s"].Tools
	for _, tt := range []struct {
		tool  string
		bytes int64
		want  float64
	}{{"search", 0, 0.002}, {"other", 0, 0.0001}, {"search", 2000, 0.002 + 0.00002}} {
		if got := p.CallCost(tt.tool, tt.bytes); got < tt.want-1e-12 || got > tt.want+1e-12 {
			t.Errorf("CallCost(%s, %d) = %g, want %g", tt.tool, tt.bytes, got, tt.want)
		}
	}
	if got := (*ToolPolicy)(nil).CallCost("x", 10); got != 0 {
		t.Errorf("nil policy costs %g", got)
	}
	for _, bad := range []string{`{costs: {search: -1}}`, `{costs: {search: "cheap"}}`, `{cost_per_kb: -0.1}`} {
		doc := "servers:\n  s:\n    transport: http\n    url: https://s.example.com\n    tools: " + bad + "\n"
		if _, err := Parse([]byte(doc), "", envOf(nil)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
