package oauth

import "strings"

// Challenge is a WWW-Authenticate Bearer challenge (RFC 6750 section 3)
// with the RFC 9728 section 5.1 resource_metadata parameter. Empty fields
// are left out.
type Challenge struct {
	ResourceMetadata string // absolute URL of the protected resource metadata
	Scope            string // space-separated scopes the resource needs
	Error            string // invalid_request, invalid_token, insufficient_scope
	ErrorDescription string // for the developer, never a token or claim value
	// AuthorizationURI is where the person goes to authorize (SPEC S9.1:
	// the gateway's connect link of a server the person has not connected).
	AuthorizationURI string
}

// String renders the header value, e.g.
//
//	Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp", error="invalid_token"
//
// Values are quoted-strings. Only printable ASCII is kept (RFC 6750
// restricts error_description to it): control characters, CR and LF
// above all, and non-ASCII bytes are dropped, so no value can split the
// header or forge another one. A value left empty is omitted.
func (c Challenge) String() string {
	var b strings.Builder
	b.WriteString("Bearer")
	sep := " "
	for _, p := range [...]struct{ name, value string }{
		{"resource_metadata", c.ResourceMetadata},
		{"scope", c.Scope},
		{"error", c.Error},
		{"error_description", c.ErrorDescription},
		{"authorization_uri", c.AuthorizationURI},
	} {
		if !hasPrintable(p.value) {
			continue
		}
		b.WriteString(sep)
		b.WriteString(p.name)
		b.WriteString(`="`)
		for i := 0; i < len(p.value); i++ {
			ch := p.value[i]
			if ch < 0x20 || ch > 0x7e {
				continue
			}
			if ch == '"' || ch == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(ch)
		}
		b.WriteByte('"')
		sep = ", "
	}
	return b.String()
}

func hasPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x20 && s[i] <= 0x7e {
			return true
		}
	}
	return false
}

// ParsedChallenge is one challenge of a WWW-Authenticate header.
type ParsedChallenge struct {
	// Scheme is the auth-scheme as written; compare it with
	// strings.EqualFold.
	Scheme string
	// Params are the auth-params by lower-cased name; the first of a
	// repeated name wins. Never nil.
	Params map[string]string
	// Token68 is the challenge's token68 (RFC 9110 section 11.2), when it
	// has one instead of parameters.
	Token68 string
}

// ParseChallenges parses a WWW-Authenticate header value holding one or
// more challenges of any scheme (RFC 9110 section 11.6.1): auth-params
// whose values are tokens or quoted-strings, or a token68. It is lenient
// where servers are sloppy (an unquoted URL as a value) and skips to the
// next comma on anything it cannot read; the work is linear in len(h).
func ParseChallenges(h string) []ParsedChallenge {
	p := challengeParser{s: h}
	var out []ParsedChallenge
	for {
		p.skipSeparators()
		if p.eof() {
			return out
		}
		scheme := p.token()
		if scheme == "" {
			p.skipElement()
			continue
		}
		c := ParsedChallenge{Scheme: scheme, Params: map[string]string{}}
		switch {
		case p.eof() || p.peek() == ',':
		case !p.whitespace():
			// "Bearer=x" or "Bearer\"": not a challenge.
			p.skipElement()
			continue
		default:
			if t, ok := p.token68(); ok {
				c.Token68 = t
			} else {
				p.params(&c)
			}
		}
		out = append(out, c)
	}
}

type challengeParser struct {
	s string
	i int
}

func (p *challengeParser) eof() bool  { return p.i >= len(p.s) }
func (p *challengeParser) peek() byte { return p.s[p.i] }

// whitespace skips SP and HTAB, reporting whether there was any.
func (p *challengeParser) whitespace() bool {
	start := p.i
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
	return p.i > start
}

// skipSeparators skips whitespace and the commas of empty list elements.
func (p *challengeParser) skipSeparators() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t' || p.peek() == ',') {
		p.i++
	}
}

// skipElement skips to the next comma (or the end).
func (p *challengeParser) skipElement() {
	for !p.eof() && p.peek() != ',' {
		p.i++
	}
}

func (p *challengeParser) token() string {
	start := p.i
	for !p.eof() && isTchar(p.peek()) {
		p.i++
	}
	return p.s[start:p.i]
}

// token68 reads a token68 that is the whole rest of the challenge (up to
// a comma or the end); otherwise it consumes nothing.
func (p *challengeParser) token68() (string, bool) {
	start := p.i
	for !p.eof() && isToken68Char(p.peek()) {
		p.i++
	}
	if p.i == start {
		return "", false
	}
	for !p.eof() && p.peek() == '=' {
		p.i++
	}
	end := p.i
	p.whitespace()
	if !p.eof() && p.peek() != ',' {
		p.i = start
		return "", false
	}
	return p.s[start:end], true
}

// params reads auth-params into c until what follows is not one (the
// next challenge's scheme) or the end.
func (p *challengeParser) params(c *ParsedChallenge) {
	for {
		start := p.i
		name := p.token()
		p.whitespace()
		if name == "" || p.eof() || p.peek() != '=' {
			p.i = start
			return
		}
		p.i++
		p.whitespace()
		if v, ok := p.value(); ok {
			if k := strings.ToLower(name); !hasKey(c.Params, k) {
				c.Params[k] = v
			}
		}
		// Whatever trails a value before the next comma is junk.
		p.skipElement()
		p.skipSeparators()
		if p.eof() {
			return
		}
	}
}

// value reads a quoted-string (unescaping quoted-pairs) or an unquoted
// value: a token, or leniently any run of visible characters but comma
// and DQUOTE, as some servers send bare URLs.
func (p *challengeParser) value() (string, bool) {
	if p.eof() {
		return "", false
	}
	if p.peek() != '"' {
		start := p.i
		for !p.eof() && p.peek() > 0x20 && p.peek() < 0x7f && p.peek() != ',' && p.peek() != '"' {
			p.i++
		}
		return p.s[start:p.i], p.i > start
	}
	p.i++
	var b strings.Builder
	for !p.eof() {
		ch := p.peek()
		p.i++
		switch {
		case ch == '"':
			return b.String(), true
		case ch == '\\':
			if p.eof() {
				return "", false
			}
			ch = p.peek()
			p.i++
		}
		if (ch < 0x20 && ch != '\t') || ch == 0x7f {
			return "", false
		}
		b.WriteByte(ch)
	}
	return "", false
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isToken68Char(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~+/", c) >= 0
}
