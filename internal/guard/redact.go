package guard

import (
	"regexp"
	"strings"
	"sync"
)

// Built-in redaction patterns (config: redact.patterns).
const (
	PatternEmail      = "email"
	PatternJWT        = "jwt"
	PatternCard       = "card"
	PatternAPIKey     = "api_key"
	PatternBearer     = "bearer"
	PatternPrivateKey = "private_key"
	// PatternCustom is the kind of a "regex:<expression>" entry.
	PatternCustom = "custom"
	// customPrefix introduces an operator's own expression.
	customPrefix = "regex:"
)

// BuiltinPatterns are the names a redact guardrail accepts besides
// "regex:<expression>".
var BuiltinPatterns = []string{PatternAPIKey, PatternBearer, PatternCard, PatternEmail, PatternJWT, PatternPrivateKey}

// builtin holds each built-in's expression. The order of builtinOrder is
// the order they apply in, whatever order the config lists them in: a
// private key block or a JWT goes whole before a looser pattern could
// take a piece of it. Compiled on first use: only a redact guardrail
// reads them, and compiled at init they were ~80 KB of heap in every
// gateway.
var builtin = sync.OnceValue(func() map[string]*regexp.Regexp {
	return map[string]*regexp.Regexp{
		PatternPrivateKey: regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----`),
		PatternJWT:        regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{2,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*`),
		PatternBearer:     regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{8,}=*`),
		PatternAPIKey: regexp.MustCompile(strings.Join([]string{
			`\bsk-ant-[A-Za-z0-9_-]{20,}`,                       // Anthropic
			`\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}`, // OpenAI
			`\bgh[pousr]_[A-Za-z0-9]{36,}`,                      // GitHub tokens
			`\bgithub_pat_[A-Za-z0-9_]{22,}`,                    // GitHub fine-grained
			`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`,                     // AWS access key ids
			`\bxox[abposr]-[A-Za-z0-9-]{10,}`,                   // Slack
			`\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}`,            // Stripe
			// A Google key is 39 characters, but a match that stopped
			// there could end inside a run of word characters; the
			// next key in that run was then missed, and found by a
			// second pass (FuzzRedact). The whole run goes.
			`\bAIza[0-9A-Za-z_-]{35,}`, // Google
		}, "|")),
		// Candidates only: a run of 13-19 digits, with single spaces or dashes
		// between them; Luhn decides.
		PatternCard:  regexp.MustCompile(`\b\d(?:[ -]?\d){12,18}\b`),
		PatternEmail: regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`),
	}
})

var builtinOrder = []string{PatternPrivateKey, PatternJWT, PatternBearer, PatternAPIKey, PatternCard, PatternEmail}

// rule is one compiled pattern of a redactor.
type rule struct {
	kind string
	re   *regexp.Regexp
	luhn bool
}

// Redactor replaces secrets and personal data in text with
// [REDACTED:<kind>]. It is immutable and safe for concurrent use.
type Redactor struct {
	rules    []rule // the built-in rules first, in builtinOrder
	builtins int    // how many of rules are built in
}

// NewRedactor compiles patterns: built-in names and "regex:<expression>".
func NewRedactor(patterns []string) (*Redactor, error) {
	r := &Redactor{}
	want := map[string]bool{}
	var custom []rule
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if expr, ok := strings.CutPrefix(p, customPrefix); ok {
			re, err := regexp.Compile(expr)
			if err != nil {
				return nil, &PatternError{Pattern: p, Err: err}
			}
			custom = append(custom, rule{kind: PatternCustom, re: re})
			continue
		}
		if builtin()[strings.ToLower(p)] == nil {
			return nil, &PatternError{Pattern: p}
		}
		want[strings.ToLower(p)] = true
	}
	for _, k := range builtinOrder {
		if want[k] {
			r.rules = append(r.rules, rule{kind: k, re: builtin()[k], luhn: k == PatternCard})
		}
	}
	r.builtins = len(r.rules)
	r.rules = append(r.rules, custom...)
	return r, nil
}

// PatternError is a redact pattern that is neither built in nor a valid
// regex: entry.
type PatternError struct {
	Pattern string
	Err     error // the expression's compile error; nil for an unknown name
}

func (e *PatternError) Error() string {
	if e.Err != nil {
		return "redact pattern " + e.Pattern + ": " + e.Err.Error()
	}
	return "unknown redact pattern " + e.Pattern + " (built in: " + strings.Join(BuiltinPatterns, ", ") + ", or regex:<expression>)"
}

func (e *PatternError) Unwrap() error { return e.Err }

// CheckPattern reports whether p is a pattern NewRedactor accepts.
func CheckPattern(p string) error {
	_, err := NewRedactor([]string{p})
	return err
}

// Redact returns s with every match replaced, and how many replacements
// were made.
//
// A replacement can expose a match a built-in pattern could not see: the
// marker starts a word where the text it replaced did not, so a card
// written right after an e-mail address ("a@b.co4111…") is a card only
// once the address is gone, and the card rule ran before the e-mail one.
// The built-in rules therefore run again while their last pass replaced
// something, at most maxPasses times in all (the chain known is two
// long: an e-mail, then a card). A marker matches no built-in pattern,
// so a pass that finds nothing new ends it. An operator's own patterns
// run once: one might match the markers themselves.
func (r *Redactor) Redact(s string) (string, int) {
	n := 0
	for pass := 0; pass < maxPasses; pass++ {
		before := n
		for _, ru := range r.rules[:r.builtins] {
			s = ru.replace(s, &n)
		}
		if n == before {
			break
		}
	}
	for _, ru := range r.rules[r.builtins:] {
		s = ru.replace(s, &n)
	}
	return s, n
}

// maxPasses bounds the built-in rules' passes over one text.
const maxPasses = 3

// replace replaces ru's matches in s, counting them in *n.
func (ru rule) replace(s string, n *int) string {
	if !ru.re.MatchString(s) {
		return s
	}
	kind := "[REDACTED:" + ru.kind + "]"
	return ru.re.ReplaceAllStringFunc(s, func(m string) string {
		if ru.luhn && !luhnValid(m) {
			return m
		}
		*n++
		return kind
	})
}

// luhnValid reports whether the digits of s (13 to 19 of them, spaces and
// dashes ignored) pass the Luhn check.
func luhnValid(s string) bool {
	sum, digits := 0, 0
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if c == ' ' || c == '-' {
			continue
		}
		if c < '0' || c > '9' {
			return false
		}
		d := int(c - '0')
		if digits%2 == 1 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		digits++
	}
	return digits >= 13 && digits <= 19 && sum%10 == 0
}
