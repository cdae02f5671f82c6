// Package guard owns the guardrails of tool calls (SPEC S21), the checks a
// call passes before it goes upstream (pre) and its result passes before
// the client gets it (post), and the keys' budgets their calls spend.
//
//	config.Guardrails -> Compile -> *Set (immutable, one per server and route)
//	gateway: Chain{server set, route set}.Pre(call, arguments) -> upstream
//	         Chain.Post(call, result) -> client
//
// Kinds: deny (a regular expression on the tool name and every string),
// redact (secrets and personal data replaced with [REDACTED:<kind>]),
// max_bytes (a size limit) and webhook (an external service decides).
// Checks run in order, the server's then the route's; the first that
// blocks ends the call and is named in the Block, never what it matched.
//
// Budgets (budget.go) own what keys spend on tool calls: a call reserves
// its expected cost before it runs and settles its actual cost after.
//
// The package does no I/O except the webhook's POST and the budgets'
// reads and writes of spending through the UsageFunc and state.Spending
// it is given, and never logs: matched text, arguments and results stay
// out of every error and report; the gateway says what a refusal or a
// failure looks like to the client and the operator.
package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Phases.
const (
	PhasePre  = "pre"
	PhasePost = "post"
)

// Call is what a check knows of the call besides its payload.
type Call struct {
	Server string // the upstream server called
	Tool   string // the tool's upstream name
	Alias  string // the caller's key alias, "" when none
	User   string // the caller's user, "" when none
}

// Block says which guardrail refused the call. Reason is the guardrail's
// own safe words (a fixed phrase, or a webhook's reason), never the text
// that matched.
type Block struct {
	Guardrail string
	Kind      string
	Phase     string
	Reason    string
}

// Message is the text of the tool error a client gets for a blocked call.
func (b *Block) Message() string {
	msg := fmt.Sprintf("Blocked by guardrail %q (%s, %s)", b.Guardrail, b.Kind, b.Phase)
	if b.Reason != "" {
		msg += ": " + b.Reason
	}
	return msg
}

// Report is what one phase of checks did.
type Report struct {
	Block *Block // nil: the call goes on
	// Redactions counts replacements by guardrail name.
	Redactions map[string]int
	// Failed names the webhooks that failed and let the call go on
	// (fail_open).
	Failed []string
}

func (r *Report) redacted(name string, n int) {
	if n == 0 {
		return
	}
	if r.Redactions == nil {
		r.Redactions = map[string]int{}
	}
	r.Redactions[name] += n
}

// check is one compiled guardrail.
type check struct {
	name  string
	kind  string
	tools []string // nil: every tool
	deny  *regexp.Regexp
	red   *Redactor
	args  bool // redact arguments (pre)
	limit int64
	hook  *webhook
	// broken: the guardrail did not compile (a config that skipped
	// validation); it blocks rather than silently not checking.
	broken string
}

// Set is the compiled guardrails of one server or route. It is immutable
// and safe for concurrent use; nil is an empty set.
type Set struct {
	pre, post []check
}

// Compile builds the checks of gs; nil when there are none.
func Compile(gs *config.Guardrails) *Set {
	if gs == nil || len(gs.Pre)+len(gs.Post) == 0 {
		return nil
	}
	return &Set{pre: compileList(gs.Pre), post: compileList(gs.Post)}
}

func compileList(list []config.Guardrail) []check {
	out := make([]check, 0, len(list))
	for i := range list {
		g := &list[i]
		c := check{name: g.GuardrailName(i), kind: g.Kind, tools: g.Tools, args: g.Arguments, limit: g.Limit}
		var err error
		switch g.Kind {
		case config.GuardDeny:
			c.deny, err = regexp.Compile(g.Pattern)
		case config.GuardRedact:
			c.red, err = NewRedactor(g.Patterns)
		case config.GuardMaxBytes:
			if g.Limit <= 0 {
				err = fmt.Errorf("limit must be positive")
			}
		case config.GuardWebhook:
			c.hook, err = newWebhook(g)
		default:
			err = fmt.Errorf("unknown kind %q", g.Kind)
		}
		if err != nil {
			c.broken = "misconfigured"
		}
		out = append(out, c)
	}
	return out
}

// applies reports whether c checks calls of tool.
func (c *check) applies(tool string) bool {
	if len(c.tools) == 0 {
		return true
	}
	for _, t := range c.tools {
		if glob(t, tool) {
			return true
		}
	}
	return false
}

// glob matches name against pattern, where * stands for any run of
// characters.
func glob(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(name, p)
		if i < 0 {
			return false
		}
		name = name[i+len(p):]
	}
	return strings.HasSuffix(name, parts[len(parts)-1])
}

// Chain is the sets a call passes, in order: its server's, then its
// route's. nil entries are skipped.
type Chain []*Set

// Empty reports whether no set of the chain checks anything.
func (ch Chain) Empty() bool {
	for _, s := range ch {
		if s != nil {
			return false
		}
	}
	return true
}

// Pre checks a call's arguments (a JSON object, or nil) before it goes
// upstream; it returns the arguments to send (redacted, or as a webhook
// rewrote them) and what it did.
func (ch Chain) Pre(ctx context.Context, call Call, args json.RawMessage) (json.RawMessage, Report) {
	var rep Report
	for _, s := range ch {
		if s == nil {
			continue
		}
		for i := range s.pre {
			c := &s.pre[i]
			if !c.applies(call.Tool) {
				continue
			}
			args = c.run(ctx, PhasePre, call, args, &rep)
			if rep.Block != nil {
				return args, rep
			}
		}
	}
	return args, rep
}

// Post checks a tools/call result before the client gets it; it returns
// the result to send and what it did.
func (ch Chain) Post(ctx context.Context, call Call, res json.RawMessage) (json.RawMessage, Report) {
	var rep Report
	for _, s := range ch {
		if s == nil {
			continue
		}
		for i := range s.post {
			c := &s.post[i]
			if !c.applies(call.Tool) {
				continue
			}
			res = c.run(ctx, PhasePost, call, res, &rep)
			if rep.Block != nil {
				return res, rep
			}
		}
	}
	return res, rep
}

func (c *check) block(phase, reason string, rep *Report) {
	rep.Block = &Block{Guardrail: c.name, Kind: c.kind, Phase: phase, Reason: reason}
}

// run applies c to payload (arguments in pre, the result in post).
func (c *check) run(ctx context.Context, phase string, call Call, payload json.RawMessage, rep *Report) json.RawMessage {
	if c.broken != "" {
		c.block(phase, c.broken, rep)
		return payload
	}
	switch c.kind {
	case config.GuardDeny:
		if c.deny.MatchString(call.Tool) {
			c.block(phase, "tool name refused", rep)
			return payload
		}
		if matchStrings(phase, payload, c.deny.MatchString) {
			if phase == PhasePre {
				c.block(phase, "arguments refused", rep)
			} else {
				c.block(phase, "result refused", rep)
			}
		}
	case config.GuardRedact:
		if phase == PhasePre && !c.args {
			return payload
		}
		out, n := rewriteStrings(phase, payload, c.red.Redact)
		rep.redacted(c.name, n)
		return out
	case config.GuardMaxBytes:
		if int64(len(payload)) > c.limit {
			what := "arguments"
			if phase == PhasePost {
				what = "result"
			}
			c.block(phase, fmt.Sprintf("%s larger than %d bytes", what, c.limit), rep)
		}
	case config.GuardWebhook:
		return c.hook.check(ctx, c, phase, call, payload, rep)
	}
	return payload
}

// decode parses JSON keeping numbers exact.
func decode(b []byte) (any, bool) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

// encode writes v back without HTML escaping (the text stays as sent).
func encode(v any) (json.RawMessage, bool) {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, false
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), true
}

// matchStrings reports whether match holds for a string of payload: in
// pre every string value of the arguments at any depth; in
// post the result's text: text content, embedded resources' text and
// every string of structuredContent. A payload that does not parse is
// matched as raw text, so it cannot slip through by being malformed.
func matchStrings(phase string, payload json.RawMessage, match func(string) bool) bool {
	v, ok := decode(payload)
	if !ok {
		return len(payload) > 0 && match(string(payload))
	}
	found := false
	visit := func(s string) string {
		if !found && match(s) {
			found = true
		}
		return s
	}
	if phase == PhasePre {
		walk(v, visit)
	} else {
		walkResult(v, visit)
	}
	return found
}

// rewriteStrings applies f to the strings matchStrings would look at
// and returns the payload re-encoded when something changed (unchanged
// bytes otherwise), with the number of replacements.
func rewriteStrings(phase string, payload json.RawMessage, f func(string) (string, int)) (json.RawMessage, int) {
	v, ok := decode(payload)
	if !ok {
		return payload, 0
	}
	n := 0
	visit := func(s string) string {
		out, k := f(s)
		n += k
		return out
	}
	if phase == PhasePre {
		v = walk(v, visit)
	} else {
		v = walkResult(v, visit)
	}
	if n == 0 {
		return payload, 0
	}
	out, ok := encode(v)
	if !ok {
		return payload, 0
	}
	return out, n
}

// walk applies f to every string value in v at any depth and returns v
// with the strings replaced.
func walk(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case []any:
		for i := range x {
			x[i] = walk(x[i], f)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = walk(e, f)
		}
	}
	return v
}

// walkResult applies f to the text of a tools/call result: content[].text,
// content[].resource.text and all of structuredContent.
func walkResult(v any, f func(string) string) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if content, ok := m["content"].([]any); ok {
		for _, it := range content {
			item, ok := it.(map[string]any)
			if !ok {
				continue
			}
			if s, ok := item["text"].(string); ok {
				item["text"] = f(s)
			}
			if r, ok := item["resource"].(map[string]any); ok {
				if s, ok := r["text"].(string); ok {
					r["text"] = f(s)
				}
			}
		}
	}
	if sc, ok := m["structuredContent"]; ok {
		m["structuredContent"] = walk(sc, f)
	}
	return m
}
