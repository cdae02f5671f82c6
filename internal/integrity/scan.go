package integrity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Severities of a rule (Finding.Severity).
const (
	// SeverityWarn reports the finding in the review and the audit; the
	// definition is served as its mode says.
	SeverityWarn = "warn"
	// SeverityQuarantine holds the definition until an administrator
	// approves it, in pin and in warn mode.
	SeverityQuarantine = "quarantine"
)

// Finding is one thing the scanner found in a definition.
type Finding struct {
	Rule     string `json:"rule"`
	Severity string `json:"severity"`
	// Path is where, as a JSON path into the canonical definition
	// (description, inputSchema.properties.note.description, ...).
	Path string `json:"path"`
	// Excerpt is the text around the match, with every invisible,
	// bidirectional or control character written as \u{XXXX}, so that
	// a reviewer sees what the model would have read.
	Excerpt string `json:"excerpt"`
}

// Rule describes one built-in rule (docs/security.md lists them).
type Rule struct {
	Name, Severity, What string
}

// Rules are the built-in rules, in the order they are checked. The set is
// bounded and documented on purpose: each rule is a known shape of tool
// poisoning (OWASP MCP Top 10), not a guess at intent. Patterns from the
// config (integrity.patterns) are added after them.
var Rules = []Rule{
	{"invisible_unicode", SeverityQuarantine, "zero-width and other invisible format characters (U+200B, U+200C, U+200E, U+200F, U+2060-U+2064, U+FEFF, U+180E, U+034F, Hangul fillers); U+200D, which joins emoji, is allowed"},
	{"bidi_control", SeverityQuarantine, "bidirectional embedding, override and isolate characters (U+202A-U+202E, U+2066-U+2069, U+061C)"},
	{"tag_characters", SeverityQuarantine, "Unicode tag characters (U+E0000-U+E007F) and the variation selectors supplement (U+E0100-U+E01EF), which carry text a human does not see"},
	{"ansi_escape", SeverityQuarantine, "terminal escape sequences (ESC, CSI)"},
	{"control_characters", SeverityWarn, "other C0 and C1 control characters and DEL (tab, line feed and carriage return are allowed)"},
	{"ignore_instructions", SeverityQuarantine, `"ignore/disregard/forget (all) previous/prior/above instructions"`},
	{"hidden_tag", SeverityQuarantine, `pseudo-tags addressed to the model: <IMPORTANT>, <system>, <instructions>, <secret>, <hidden>`},
	{"before_any_tool", SeverityQuarantine, `"before/prior to using/calling/invoking any/every/each/other/another/all tool..."`},
	{"conceal_from_user", SeverityQuarantine, `"do not/don't/never/without tell/inform/mention/reveal/show/notify/alert the user"`},
	{"sensitive_path", SeverityQuarantine, "credential files: ~/.ssh, id_rsa and other private keys, .aws/credentials, /etc/passwd|shadow|sudoers, .netrc, .kube/config, .docker/config.json, .git-credentials, .npmrc, .pypirc, .gnupg, wallet.dat"},
	{"model_directive", SeverityWarn, `directives aimed at the model: "system prompt", "you are now", "new instructions", "override your instructions", "you must always/never"`},
	{"shadowing", SeverityQuarantine, "another server's tool named in this server's text (a distinctive name: with _ - . or camelCase, at least 5 characters, or its prefixed name; not as a segment of a path or method such as sampling/createMessage)"},
	{"foreign_url", SeverityWarn, "an http(s) URL whose host is not in the server's own domain ($schema, $id and $ref values excepted)"},
	{"foreign_path", SeverityWarn, "an absolute file path (~/..., /etc, /home, /root, /var, /usr, /Users, /tmp, /proc, /sys, /dev, /opt, /private)"},
}

// Pattern is an operator's own rule (integrity.patterns): a regular
// expression checked against every text, with its severity.
type Pattern struct {
	Name     string
	Match    string
	Severity string
}

type textRule struct {
	name, severity string
	re             *regexp.Regexp
}

var builtinText = []textRule{
	{"ignore_instructions", SeverityQuarantine, regexp.MustCompile(`(?i)\b(ignore|disregard|forget|override)\s+(all\s+|any\s+)?(the\s+|your\s+)?(previous|prior|above|earlier|preceding|former)\s+(instructions?|prompts?|rules|directions|directives|context)`)},
	{"hidden_tag", SeverityQuarantine, regexp.MustCompile(`(?i)<\s*/?\s*(important|system|instructions?|secret|hidden)\s*>`)},
	{"before_any_tool", SeverityQuarantine, regexp.MustCompile(`(?i)\b(before|prior\s+to)\s+(using|calling|invoking|running|executing)\s+(any|every|each|other|another|all)\b`)},
	{"conceal_from_user", SeverityQuarantine, regexp.MustCompile(`(?i)\b(do\s+not|don'?t|never|without)\s+(tell|telling|inform|informing|mention|mentioning|reveal|revealing|show|showing|notify|notifying|alert|alerting|letting)\s+(it\s+to\s+|this\s+to\s+|anything\s+to\s+)?(the\s+)?users?\b`)},
	{"sensitive_path", SeverityQuarantine, regexp.MustCompile(`(?i)~/\.ssh\b|\bid_(rsa|dsa|ecdsa|ed25519)\b|\.aws/credentials|/etc/(passwd|shadow|sudoers)\b|\.netrc\b|\.kube/config|\.docker/config\.json|\.git-credentials|\.npmrc\b|\.pypirc\b|\.gnupg\b|\bwallet\.dat\b`)},
	{"model_directive", SeverityWarn, regexp.MustCompile(`(?i)\bsystem\s+prompt\b|\byou\s+are\s+now\b|\bnew\s+instructions\b|\boverride\s+(your|the)\s+instructions\b|\byou\s+must\s+(always|never)\b`)},
}

var (
	urlRE  = regexp.MustCompile(`(?i)\bhttps?://[^\s"'<>()\x60\\]+`)
	pathRE = regexp.MustCompile(`(?:^|[\s"'(\x60=:])((?:~/|/(?:etc|home|root|var|usr|Users|tmp|proc|sys|dev|opt|private)/)[^\s"')\x60]*)`)
)

// Scanner checks definitions against the built-in rules and an
// operator's patterns. It is safe for concurrent use.
type Scanner struct {
	extra []textRule
}

// NewScanner compiles the operator's patterns after the built-in rules.
func NewScanner(extra []Pattern) (*Scanner, error) {
	s := &Scanner{}
	for i, p := range extra {
		re, err := regexp.Compile(p.Match)
		if err != nil {
			return nil, fmt.Errorf("integrity.patterns[%d]: not a regular expression: %v", i, err)
		}
		sev := p.Severity
		if sev == "" {
			sev = SeverityWarn
		}
		if sev != SeverityWarn && sev != SeverityQuarantine {
			return nil, fmt.Errorf("integrity.patterns[%d].severity: want warn or quarantine", i)
		}
		s.extra = append(s.extra, textRule{p.Name, sev, re})
	}
	return s, nil
}

// Context is what the scan of one server's definition knows besides the
// definition.
type Context struct {
	// Server is the server whose definition this is.
	Server string
	// Hosts are the server's own host names (its url, an openapi
	// server's base_url); a URL in its domain is not foreign. None (a
	// stdio server): every URL is reported.
	Hosts []string
	// Others maps distinctive tool names of the other servers (and
	// their prefixed names) to the server that offers them.
	Others map[string]string
}

// maxFindings bounds one definition's findings: a hostile description
// must not grow the review or the audit record without bound.
const maxFindings = 32

// Scan returns the findings in a canonical definition (Canonical), one
// per rule and path at most, ordered by path then rule.
func (s *Scanner) Scan(canonical []byte, c Context) []Finding {
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	w := walker{s: s, c: c, seen: map[string]bool{}, own: ownDomains(c.Hosts)}
	w.walk("", "", v)
	sort.SliceStable(w.out, func(i, j int) bool {
		if w.out[i].Path != w.out[j].Path {
			return w.out[i].Path < w.out[j].Path
		}
		return w.out[i].Rule < w.out[j].Rule
	})
	return w.out
}

// Quarantines reports whether one of fs has quarantine severity.
func Quarantines(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == SeverityQuarantine {
			return true
		}
	}
	return false
}

type walker struct {
	s    *Scanner
	c    Context
	own  []string
	seen map[string]bool
	out  []Finding
}

func (w *walker) add(rule, sev, path, text string, at, end int) {
	if len(w.out) >= maxFindings || w.seen[rule+"\x00"+path] {
		return
	}
	w.seen[rule+"\x00"+path] = true
	w.out = append(w.out, Finding{Rule: rule, Severity: sev, Path: path, Excerpt: excerpt(text, at, end)})
}

func joinPath(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

func (w *walker) walk(path, key string, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			kp := joinPath(path, k)
			// A property name reaches the model as much as a
			// description does.
			w.text(kp, "", k, true)
			w.walk(kp, k, x[k])
		}
	case []any:
		for i, e := range x {
			w.walk(path+"["+strconv.Itoa(i)+"]", key, e)
		}
	case string:
		w.text(path, key, x, false)
	}
}

// text checks one string. key is the member it is the value of; isKey:
// the string is itself a member name.
func (w *walker) text(path, key, s string, isKey bool) {
	w.chars(path, s)
	if isKey {
		return
	}
	meta := key == "$schema" || key == "$id" || key == "$ref"
	for _, r := range builtinText {
		if loc := r.re.FindStringIndex(s); loc != nil {
			w.add(r.name, r.severity, path, s, loc[0], loc[1])
		}
	}
	for _, r := range w.s.extra {
		if loc := r.re.FindStringIndex(s); loc != nil {
			w.add(r.name, r.severity, path, s, loc[0], loc[1])
		}
	}
	if path != "name" && path != "uriTemplate" {
		w.shadowing(path, s)
	}
	if !meta {
		for _, loc := range urlRE.FindAllStringIndex(s, 8) {
			if !w.ownURL(s[loc[0]:loc[1]]) {
				w.add("foreign_url", SeverityWarn, path, s, loc[0], loc[1])
				break
			}
		}
		if loc := pathRE.FindStringSubmatchIndex(s); loc != nil {
			w.add("foreign_path", SeverityWarn, path, s, loc[2], loc[3])
		}
	}
}

// chars checks a string's characters.
func (w *walker) chars(path, s string) {
	for i, r := range s {
		if r == utf8.RuneError {
			continue
		}
		if rule, sev := charRule(r); rule != "" {
			w.add(rule, sev, path, s, i, i+utf8.RuneLen(r))
		}
	}
}

func charRule(r rune) (string, string) {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return "", ""
	case r == 0x1b || r == 0x9b:
		return "ansi_escape", SeverityQuarantine
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
		return "control_characters", SeverityWarn
	case r == 0x200b || r == 0x200c || r == 0x200e || r == 0x200f || (r >= 0x2060 && r <= 0x2064) ||
		r == 0xfeff || r == 0x180e || r == 0x034f || r == 0x115f || r == 0x1160 || r == 0x3164 || r == 0xffa0:
		return "invisible_unicode", SeverityQuarantine
	case (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x061c:
		return "bidi_control", SeverityQuarantine
	case (r >= 0xe0000 && r <= 0xe007f) || (r >= 0xe0100 && r <= 0xe01ef):
		return "tag_characters", SeverityQuarantine
	}
	return "", ""
}

// shadowing reports a token of s that names another server's tool.
func (w *walker) shadowing(path, s string) {
	if len(w.c.Others) == 0 {
		return
	}
	start := -1
	for i := 0; i <= len(s); i++ {
		tokenChar := i < len(s) && (s[i] == '_' || s[i] == '-' || s[i] == '.' || s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z')
		if tokenChar {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			tok := strings.Trim(s[start:i], ".-")
			// A segment of a path or a method name (sampling/createMessage,
			// /v1/threads) names no tool.
			inPath := start > 0 && s[start-1] == '/' || i < len(s) && s[i] == '/'
			if srv, ok := w.c.Others[tok]; ok && srv != w.c.Server && !inPath {
				at := start + strings.Index(s[start:i], tok)
				w.add("shadowing", SeverityQuarantine, path, s, at, at+len(tok))
				return
			}
			start = -1
		}
	}
}

// Distinctive reports whether a tool name is unlikely to occur in prose
// by chance, so that naming it in another server's text is shadowing: it
// has a _ - or ., or is camelCase, and has at least 5 characters. "echo"
// or "add" are not (docs/security.md says what this misses).
func Distinctive(name string) bool {
	if len(name) < 5 {
		return false
	}
	if strings.ContainsAny(name, "_-.") {
		return true
	}
	for i := 1; i < len(name); i++ {
		if name[i-1] >= 'a' && name[i-1] <= 'z' && name[i] >= 'A' && name[i] <= 'Z' {
			return true
		}
	}
	return false
}

// ownDomains are the domains a server's hosts belong to: the host's last
// two labels (api.example.com -> example.com), an IP address or a one
// label host as it is.
func ownDomains(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if h == "" {
			continue
		}
		if net.ParseIP(h) != nil {
			out = append(out, h)
			continue
		}
		labels := strings.Split(h, ".")
		if len(labels) > 2 {
			h = strings.Join(labels[len(labels)-2:], ".")
		}
		out = append(out, h)
	}
	return out
}

func (w *walker) ownURL(u string) bool {
	rest := u[strings.Index(u, "://")+3:]
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	host := rest
	if h, _, err := net.SplitHostPort(rest); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	for _, d := range w.own {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

// excerpt is up to 40 bytes either side of s[at:end], with what a
// reviewer could not see made visible.
func excerpt(s string, at, end int) string {
	from, to := max(0, at-40), min(len(s), end+40)
	for from > 0 && !utf8.RuneStart(s[from]) {
		from--
	}
	for to < len(s) && !utf8.RuneStart(s[to]) {
		to++
	}
	var b strings.Builder
	if from > 0 {
		b.WriteString("…")
	}
	for _, r := range s[from:to] {
		if rule, _ := charRule(r); rule != "" || r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' {
			fmt.Fprintf(&b, `\u{%04X}`, r)
			continue
		}
		b.WriteRune(r)
	}
	if to < len(s) {
		b.WriteString("…")
	}
	return b.String()
}
