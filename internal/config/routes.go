package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/netaddr"
)

// RouteConfig is what one route path does beyond its servers (SPEC S20,
// S21): how it lists tools, and the guardrails of every call on it.
type RouteConfig struct {
	// Tools is ToolsAll ("" too), ToolsSearch or ToolsHybrid.
	Tools string `config:"tools,enum=all|search|hybrid,trim,lower" doc:"How the route lists tools (SPEC S20): all (the default) lists the catalog; search lists two gateway tools instead, search_tools(query, limit), which returns the best-matching tools the caller may see with their input schemas, and call_tool(name, arguments), which calls one exactly as tools/call would; hybrid lists the hybrid_top most used tools beside those two. A tools/call of a real tool name works in every mode."`
	// HybridTop: 0 means DefaultHybridTop.
	HybridTop int `config:"hybrid_top,min=1" doc:"In hybrid mode, how many of the most used tools are listed beside search_tools and call_tool. Default: 10."`
	// Guardrails apply to every call on the route, after the server's own.
	Guardrails *Guardrails `config:"guardrails" doc:"Guardrails of every tool call on this route, checked after those of the server called (SPEC S21)."`
}

// Tool listing modes of a route (RouteConfig.Tools).
const (
	ToolsAll    = "all"
	ToolsSearch = "search"
	ToolsHybrid = "hybrid"
)

// DefaultHybridTop is hybrid_top's default.
const DefaultHybridTop = 10

// ToolsMode is the route's listing mode, ToolsAll when unset.
func (r *RouteConfig) ToolsMode() string {
	if r == nil || r.Tools == "" {
		return ToolsAll
	}
	return r.Tools
}

// HybridTopOrDefault is hybrid_top, or its default.
func (r *RouteConfig) HybridTopOrDefault() int {
	if r == nil || r.HybridTop <= 0 {
		return DefaultHybridTop
	}
	return r.HybridTop
}

// Guardrails are the checks before (pre) and after (post) a tool call
// (SPEC S21), in order; the first that blocks ends the call.
type Guardrails struct {
	Pre  []Guardrail `config:"pre" doc:"Checked before the call goes upstream, on the tool name and arguments: deny, redact (of arguments, with arguments: true), max_bytes (of the arguments), webhook."`
	Post []Guardrail `config:"post" doc:"Checked on the result before the client gets it: redact, max_bytes, deny (of result text), webhook."`
}

// Guardrail kinds.
const (
	GuardDeny     = "deny"
	GuardRedact   = "redact"
	GuardMaxBytes = "max_bytes"
	GuardWebhook  = "webhook"
)

// Guardrail is one check.
type Guardrail struct {
	Kind string `config:"kind,required,enum=deny|redact|max_bytes|webhook,disc=guardrail kind,trim,lower" doc:"deny (a regular expression on the tool name and on every string of the arguments, or of the result in post), redact (secrets and personal data replaced with [REDACTED:<kind>]), max_bytes (a size limit) or webhook (an external guardrail service decides)."`
	// Name names the guardrail in errors, audit records and metrics; ""
	// means "<kind>-<index>" (GuardrailName).
	Name    string   `config:"name,trim" doc:"The guardrail's name in the tool error, the audit record and the metrics. Default: <kind>-<position>, e.g. deny-1."`
	Pattern string   `config:"pattern,required,when=deny" doc:"The regular expression (Go RE2 syntax) that blocks a call when it matches the tool name or any string value."`
	Tools   []string `config:"tools" doc:"The tools it applies to, by upstream name, * as a wildcard; absent: every tool."`
	// Patterns are built-in names (email, jwt, card, api_key, ...) or
	// "regex:<expression>".
	Patterns  []string          `config:"patterns,required,when=redact" doc:"What to redact: built-in patterns (email, jwt, card (with a Luhn check), api_key (common providers' key formats), bearer, private_key) or regex:<expression> for your own."`
	Arguments bool              `config:"arguments,when=redact" doc:"In pre, redact the arguments before they go upstream (in post the result is always redacted)."`
	Limit     int64             `config:"limit,required,when=max_bytes,size,positive" doc:"The most bytes the arguments (pre) or the result (post) may have; more blocks the call."`
	URL       string            `config:"url,required,when=webhook,expand,trim,secret" doc:"The guardrail service: it gets a POST of {phase, server, tool, caller, arguments or result} as JSON and answers {allow: bool, reason, redacted} (https, or http on loopback)."`
	Headers   map[string]string `config:"headers,when=webhook,expand,secret" doc:"Headers sent to the service (its credentials)."`
	Timeout   time.Duration     `config:"timeout,when=webhook,positive" doc:"How long the service may take. Default: 2s."`
	FailOpen  bool              `config:"fail_open,when=webhook" doc:"When the service fails or times out, let the call go on (true) or block it (false, the default)."`
}

// RedactPatterns are the built-in patterns of a redact guardrail
// (internal/guard implements them).
var RedactPatterns = []string{"api_key", "bearer", "card", "email", "jwt", "private_key"}

// checkGuardURL accepts https, or http to a loopback host: the payload
// carries arguments and results.
func checkGuardURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return errors.New("must be an absolute URL")
	}
	if u.Scheme == "https" {
		return nil
	}
	if u.Scheme == "http" && netaddr.IsLoopbackHost(u.Hostname()) {
		return nil
	}
	return errors.New("must be https (or http to a loopback host)")
}

// GuardrailName is the name of the i-th (from 0) guardrail of a phase.
func (g *Guardrail) GuardrailName(i int) string {
	if g.Name != "" {
		return g.Name
	}
	return fmt.Sprintf("%s-%d", g.Kind, i+1)
}

var routePathRE = regexp.MustCompile(`^/[A-Za-z0-9_./,-]*$`)

// validateRoutes checks the routes map: keys are route paths.
func (c *Config) validateRoutes(errs *errorList, strict bool) {
	for _, path := range slices.Sorted(func(yield func(string) bool) {
		for k := range c.Routes {
			if !yield(k) {
				return
			}
		}
	}) {
		p := "routes." + path
		if !routePathRE.MatchString(path) || strings.Contains(path, "//") {
			errs.add(p, 0, "must be a route path such as /mcp, /mcp/<server> or /toolset/<name>/mcp")
			continue
		}
		rc := c.Routes[path]
		if rc == nil {
			continue
		}
		checkFields(errs, p, rc, strict)
		if rc.Guardrails != nil {
			rc.Guardrails.validate(errs, p+".guardrails", strict)
		}
	}
}

// validate checks each guardrail's tags and compiles its expressions.
func (gs *Guardrails) validate(errs *errorList, p string, strict bool) {
	for phase, list := range map[string][]Guardrail{"pre": gs.Pre, "post": gs.Post} {
		for i := range list {
			g := &list[i]
			gp := fmt.Sprintf("%s.%s[%d]", p, phase, i)
			checkFields(errs, gp, g, strict)
			if g.Kind == GuardDeny && g.Pattern != "" {
				if _, err := regexp.Compile(g.Pattern); err != nil {
					errs.add(gp+".pattern", 0, "not a regular expression: %v", err)
				}
			}
			if g.Kind == GuardRedact {
				for j, pat := range g.Patterns {
					if expr, ok := strings.CutPrefix(pat, "regex:"); ok {
						if _, err := regexp.Compile(expr); err != nil {
							errs.add(fmt.Sprintf("%s.patterns[%d]", gp, j), 0, "not a regular expression: %v", err)
						}
					} else if !slices.Contains(RedactPatterns, strings.ToLower(strings.TrimSpace(pat))) {
						errs.add(fmt.Sprintf("%s.patterns[%d]", gp, j), 0, "unknown pattern %q: built in are %s, or regex:<expression>", pat, strings.Join(RedactPatterns, ", "))
					}
				}
			}
			if g.Kind == GuardWebhook && g.URL != "" {
				if err := checkGuardURL(g.URL); err != nil {
					errs.add(gp+".url", 0, "%v", err)
				}
			}
		}
	}
}
