package config

import (
	"maps"
	"net"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// reservedHeaders are set by the gateway's HTTP transports (framing,
// session and protocol negotiation) or are hop-by-hop; a configured value
// would be ignored or would break the session, so it is rejected.
var reservedHeaders = map[string]bool{
	"Connection":           true,
	"Content-Length":       true,
	"Content-Type":         true,
	"Host":                 true,
	"Keep-Alive":           true,
	"Last-Event-Id":        true,
	"Mcp-Protocol-Version": true,
	"Mcp-Session-Id":       true,
	"Proxy-Connection":     true,
	"Te":                   true,
	"Trailer":              true,
	"Transfer-Encoding":    true,
	"Upgrade":              true,
}

// validate checks c. In strict mode, used by Parse after defaults were
// filled in, a zero value in a defaulted field was written explicitly and
// is an error; otherwise it means the default.
func (c *Config) validate(strict bool) error {
	var errs errorList
	if c == nil {
		errs.add("", 0, "config is nil")
		return errs.err()
	}

	if c.Listen != "" || strict {
		if !validListen(c.Listen) {
			errs.add("listen", 0, "must be host:port with a numeric port (got %q)", c.Listen)
		}
	}

	sep := c.ToolNameSeparator
	if sep == "" && !strict {
		sep = DefaultSeparator
	} else if !validSeparator(sep) {
		errs.add("tool_name_separator", 0, "must be non-empty and use only [A-Za-z0-9_.-]")
		sep = "" // don't judge server names against a bad separator
	}

	if c.MaxBodyBytes < 0 || (c.MaxBodyBytes == 0 && strict) {
		errs.add("max_body_bytes", 0, "must be > 0")
	}

	for i, o := range c.AllowedOrigins {
		if o != "*" && !validOrigin(o) {
			errs.add(indexPath("allowed_origins", i), 0, `must be "*" or an origin like "https://example.com" (got %q)`, o)
		}
	}
	for i, h := range c.AllowedHosts {
		if !validHost(h) {
			errs.add(indexPath("allowed_hosts", i), 0, "must be a host name or IP address without port (got %q)", h)
		}
	}

	for _, name := range c.ServerNames() {
		c.Servers[name].validate(&errs, name, sep, strict)
	}
	return errs.err()
}

func (s *Server) validate(errs *errorList, name, sep string, strict bool) {
	p := joinPath("servers", name)
	if s == nil {
		errs.add(p, 0, "server is nil")
		return
	}
	if !validServerName(name) {
		errs.add(p, 0, "invalid server name (want [a-z0-9][a-z0-9_-]*)")
	}
	if sep != "" && strings.Contains(name, sep) {
		errs.add(p, 0, "name must not contain the tool name separator %q", sep)
	}
	if s.Name != "" && s.Name != name {
		errs.add(p, 0, "Name %q does not match the map key", s.Name)
	}

	switch s.Transport {
	case TransportStdio:
		if s.Command == "" {
			errs.add(p+".command", 0, "required for transport stdio")
		}
		notFor := func(field string, set bool) {
			if set {
				errs.add(p+"."+field, 0, "not allowed for transport stdio")
			}
		}
		notFor("url", s.URL != "")
		notFor("headers", len(s.Headers) > 0)
	case TransportSSE, TransportHTTP:
		if s.URL == "" {
			errs.add(p+".url", 0, "required for transport %s", s.Transport)
		} else if !validURL(s.URL) {
			// The URL may carry credentials: don't echo it.
			errs.add(p+".url", 0, "must be an http or https URL")
		}
		notFor := func(field string, set bool) {
			if set {
				errs.add(p+"."+field, 0, "not allowed for transport %s", s.Transport)
			}
		}
		notFor("command", s.Command != "")
		notFor("args", len(s.Args) > 0)
		notFor("env", len(s.Env) > 0)
		notFor("cwd", s.Cwd != "")
	case "":
		errs.add(p+".transport", 0, "required; must be one of stdio, sse, http")
	default:
		errs.add(p+".transport", 0, "must be one of stdio, sse, http (got %q)", s.Transport)
	}

	// Values below may hold secrets; messages name the field, never the value.
	if strings.ContainsRune(s.Command, 0) {
		errs.add(p+".command", 0, "must not contain NUL")
	}
	for i, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			errs.add(indexPath(p+".args", i), 0, "must not contain NUL")
		}
	}
	if strings.ContainsRune(s.Cwd, 0) {
		errs.add(p+".cwd", 0, "must not contain NUL")
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		fp := joinPath(p+".env", k)
		if k == "" || strings.ContainsAny(k, "=\x00") {
			errs.add(fp, 0, `invalid variable name (must be non-empty, without "=" or NUL)`)
		}
		if strings.ContainsRune(s.Env[k], 0) {
			errs.add(fp, 0, "value must not contain NUL")
		}
	}
	seen := make(map[string]string, len(s.Headers))
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		fp := joinPath(p+".headers", k)
		canon := textproto.CanonicalMIMEHeaderKey(k)
		switch {
		case !validToken(k):
			errs.add(fp, 0, "invalid header name (want an HTTP token)")
		case reservedHeaders[canon]:
			errs.add(fp, 0, "header is set by the gateway and must not be configured")
		case seen[canon] != "":
			errs.add(fp, 0, "duplicate of header %q (names are case-insensitive)", seen[canon])
		default:
			seen[canon] = k
		}
		if strings.ContainsAny(s.Headers[k], "\r\n\x00") {
			errs.add(fp, 0, "value must not contain CR, LF or NUL")
		}
	}

	if s.Timeout < 0 || (s.Timeout == 0 && strict) {
		errs.add(p+".timeout", 0, "must be > 0")
	}
	if (s.ProtocolVersion != "" || strict) && !slices.Contains(protocolVersions, s.ProtocolVersion) {
		errs.add(p+".protocol_version", 0, "unknown revision %q (want %s)", s.ProtocolVersion, strings.Join(protocolVersions, ", "))
	}
}

func validListen(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

func validSeparator(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !isAlnum(r) && r != '_' && r != '.' && r != '-' {
			return false
		}
	}
	return true
}

func validServerName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		lowerAlnum := ('a' <= r && r <= 'z') || ('0' <= r && r <= '9')
		if !lowerAlnum && (i == 0 || (r != '_' && r != '-')) {
			return false
		}
	}
	return true
}

func validURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// validOrigin accepts scheme://host[:port] as browsers send it in Origin,
// for any scheme (extensions and webviews use their own).
func validOrigin(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && u.Host != "" && u.User == nil &&
		u.Path == "" && u.RawQuery == "" && !u.ForceQuery && u.Fragment == ""
}

func validHost(s string) bool {
	if net.ParseIP(s) != nil {
		return true
	}
	if s == "" || len(s) > 253 || s[0] == '.' || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !isAlnum(r) && r != '.' && r != '-' && r != '_' {
			return false
		}
	}
	return true
}

// validToken reports whether s is an HTTP token (RFC 9110 section 5.6.2),
// the syntax of a header field name.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !isAlnum(r) && !strings.ContainsRune("!#$%&'*+-.^_`|~", r) {
			return false
		}
	}
	return true
}

func isAlnum(r rune) bool {
	return ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
}
