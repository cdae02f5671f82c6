package config

import (
	"encoding/base64"
	"errors"
	"maps"
	"net"
	"net/textproto"
	"net/url"
	"os"
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
	switch s.SessionMode {
	case SessionShared, SessionPerCall:
	case "":
		if strict {
			errs.add(p+".session_mode", 0, "must be %s or %s", SessionShared, SessionPerCall)
		}
	default:
		errs.add(p+".session_mode", 0, "must be %s or %s (got %q)", SessionShared, SessionPerCall, s.SessionMode)
	}
	if s.Auth != nil {
		s.Auth.validate(errs, p+".auth", s.Transport)
	}
	if s.TLS != nil {
		s.TLS.validate(errs, p+".tls", s)
	}
}

// validate checks an auth block. Values are credentials: messages name
// the field, never the value.
func (a *Auth) validate(errs *errorList, p, transport string) {
	if transport == TransportStdio && a.Type != AuthNone {
		errs.add(p, 0, "not allowed for transport stdio (pass credentials in env)")
		return
	}
	only := func(field string, set bool, types ...string) {
		if set && !slices.Contains(types, a.Type) {
			errs.add(p+"."+field, 0, "not used by auth type %q", a.Type)
		}
	}
	switch a.Type {
	case AuthNone, AuthPassthrough:
	case AuthAPIKey, AuthBearer, AuthToken, AuthAuthorization:
		if strings.TrimSpace(a.Value) == "" {
			errs.add(p+".value", 0, "required for auth type %s", a.Type)
		}
	case AuthBasic:
		if strings.TrimSpace(a.Value) == "" {
			errs.add(p+".value", 0, "required for auth type basic")
		} else if !ValidBasicCredential(a.Value) {
			errs.add(p+".value", 0, `must be "user:password" (no colon found) or "Basic <base64 of user:password>"`)
		}
	case AuthOAuth2:
		if a.TokenURL == "" {
			errs.add(p+".token_url", 0, "required for auth type oauth2 (the client-credentials token endpoint)")
		} else if !validURL(a.TokenURL) {
			errs.add(p+".token_url", 0, "must be an http or https URL")
		}
		if a.ClientID == "" {
			errs.add(p+".client_id", 0, "required for auth type oauth2")
		}
		if a.ClientSecret == "" {
			errs.add(p+".client_secret", 0, "required for auth type oauth2")
		}
	case "":
		errs.add(p+".type", 0, "required; must be one of %s", strings.Join(AuthTypes, ", "))
	default:
		errs.add(p+".type", 0, "unknown auth type %q (want one of %s)", truncate(a.Type, 32), strings.Join(AuthTypes, ", "))
		return
	}
	only("value", a.Value != "", AuthAPIKey, AuthBearer, AuthToken, AuthBasic, AuthAuthorization)
	only("token_url", a.TokenURL != "", AuthOAuth2)
	only("client_id", a.ClientID != "", AuthOAuth2)
	only("client_secret", a.ClientSecret != "", AuthOAuth2)
	only("scopes", len(a.Scopes) > 0, AuthOAuth2)
	only("audience", a.Audience != "", AuthOAuth2)
	only("header_name", a.HeaderName != "", AuthAPIKey, AuthBearer, AuthToken, AuthBasic, AuthAuthorization, AuthOAuth2, AuthPassthrough)
	for i, sc := range a.Scopes {
		if sc == "" || strings.ContainsAny(sc, " \t\r\n\"\\") {
			errs.add(indexPath(p+".scopes", i), 0, "must be one non-empty scope token without spaces or quotes")
		}
	}
	if a.HeaderName != "" {
		canon := textproto.CanonicalMIMEHeaderKey(a.HeaderName)
		switch {
		case !validToken(a.HeaderName):
			errs.add(p+".header_name", 0, "invalid header name (want an HTTP token)")
		case reservedHeaders[canon]:
			errs.add(p+".header_name", 0, "header is set by the gateway and must not be used as the credential slot")
		}
	}
	if strings.ContainsAny(a.Value, "\r\n\x00") {
		errs.add(p+".value", 0, "must not contain CR, LF or NUL")
	}
}

// ValidBasicCredential reports whether v can make a Basic header: a
// user:password pair, optionally behind the "Basic" scheme, or an
// already-encoded base64 user:password behind the scheme. "Basic " alone
// is accepted (C3.3: a visibly wrong header still goes out).
func ValidBasicCredential(v string) bool {
	v = strings.TrimSpace(v)
	if rest, ok := cutScheme(v, "Basic"); ok {
		if strings.Contains(rest, ":") {
			return true
		}
		dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
		return err == nil && strings.Contains(string(dec), ":")
	}
	return strings.Contains(v, ":") || strings.EqualFold(v, "Basic")
}

// cutScheme reports whether v starts with scheme (case-insensitive)
// followed by at least one space or tab and a credential.
func cutScheme(v, scheme string) (string, bool) {
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	if c := v[len(scheme)]; c != ' ' && c != '\t' {
		return "", false
	}
	rest := strings.TrimLeft(v[len(scheme):], " \t")
	return rest, rest != ""
}

func (t *TLS) validate(errs *errorList, p string, s *Server) {
	if s.Transport == TransportStdio {
		errs.add(p, 0, "not allowed for transport stdio")
		return
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		errs.add(p, 0, "cert_file and key_file must be set together")
	}
	for _, f := range []struct{ field, path string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if f.path == "" {
			continue
		}
		// Paths are not secrets; naming the missing file is what makes
		// the message actionable.
		if st, err := os.Stat(f.path); err != nil {
			errs.add(p+"."+f.field, 0, "cannot read %s: %v", f.path, errors.Unwrap(err))
		} else if st.IsDir() {
			errs.add(p+"."+f.field, 0, "%s is a directory, not a PEM file", f.path)
		}
	}
	if s.URL != "" && !strings.HasPrefix(strings.ToLower(s.URL), "https://") && (t.CAFile != "" || t.CertFile != "") {
		errs.add(p, 0, "set for a server whose url is not https")
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
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
