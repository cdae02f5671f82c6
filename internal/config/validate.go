package config

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"maps"
	"net"
	"net/textproto"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/netaddr"
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

// IsReservedHeader reports whether a server's static header of this name
// would be refused (the gateway sets it itself, or it is hop-by-hop).
func IsReservedHeader(name string) bool {
	return reservedHeaders[textproto.CanonicalMIMEHeaderKey(name)]
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
	checkFields(&errs, "", c, strict)
	c.validateRoutes(&errs, strict)

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

	if c.DataDir == "" && strict {
		errs.add("data_dir", 0, "must not be empty")
	} else if strings.ContainsRune(c.DataDir, 0) {
		errs.add("data_dir", 0, "must not contain NUL")
	}
	if c.PublicURL != "" && !validPublicURL(c.PublicURL) {
		errs.add("public_url", 0, "must be an http or https URL (an optional path prefix, no query)")
	}
	listen := cmp.Or(c.Listen, DefaultListen)
	if err := c.CheckPublicURL(netaddr.ListenIsLoopback(listen)); err != nil {
		errs.add("public_url", 0, "%s", err.Error())
	}
	if c.ClientMetadataURL != "" {
		if _, err := c.clientMetadataPath(c.ClientMetadataURL); err != nil {
			errs.add("client_metadata_url", 0, "%s", err.Error())
		}
	}
	if c.MetricsListen != "" {
		listen := c.Listen
		if listen == "" {
			listen = DefaultListen
		}
		_, port, _ := net.SplitHostPort(c.MetricsListen)
		switch {
		case !validListen(c.MetricsListen):
			errs.add("metrics_listen", 0, "must be host:port with a numeric port (got %q)", c.MetricsListen)
		case c.MetricsListen == listen && port != "0":
			errs.add("metrics_listen", 0, "must differ from listen (leave it empty to serve /metrics on listen)")
		}
	}

	for _, name := range c.ServerNames() {
		c.Servers[name].validate(&errs, name, sep, strict)
		if s := c.Servers[name]; s != nil && s.Auth != nil && s.Auth.Type == AuthUserAPIKey && c.Vault == nil {
			errs.add(joinPath("servers", name)+".auth.type", 0, "user_api_key needs the vault section (vault.keys), where each person's credential is sealed")
		}
		if s := c.Servers[name]; s != nil && s.Auth != nil && ExchangesCallerToken(s.Auth.Type) && (c.Auth == nil || len(c.Auth.OIDC) == 0) {
			errs.add(joinPath("servers", name)+".auth.type", 0, "%s needs auth.oidc: it exchanges the caller's own token, a JWT of a trusted issuer", s.Auth.Type)
		}
		if s := c.Servers[name]; s != nil && s.Auth != nil && s.Auth.Type == AuthOAuth2User && c.Vault == nil {
			errs.add(joinPath("servers", name)+".auth.type", 0, "oauth2_user needs the vault section (vault.keys), where each person's tokens are sealed")
		}
	}
	c.validateAccessGroups(&errs)
	c.validateToolsets(&errs)
	if c.Auth != nil {
		c.Auth.validate(&errs, c)
	}
	if c.Vault != nil {
		c.Vault.validate(&errs, strict)
	}
	if c.Fleet != nil {
		c.Fleet.validate(&errs, strict)
	}
	if c.Telemetry.Tracing != nil {
		c.Telemetry.Tracing.validate(&errs, strict)
	}
	c.Audit.validate(&errs, strict)
	c.State.validate(&errs)
	if c.Integrity != nil {
		c.Integrity.validate(&errs, "integrity", true, strict)
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
	} else if sep != "" && name != "" && (strings.ContainsRune(sep, rune(name[0])) || strings.ContainsRune(sep, rune(name[len(name)-1]))) {
		// <server><sep><tool> must split one way only: with sep "__",
		// server "a_" and tool "x" would be named like server "a" and
		// tool "_x" (a___x).
		errs.add(p, 0, "name must not begin or end with a character of the tool name separator %q (its tools' names would read as another server's)", sep)
	}
	if s.Name != "" && s.Name != name {
		errs.add(p, 0, "Name %q does not match the map key", s.Name)
	}

	checkFields(errs, p, s, strict)
	if s.Guardrails != nil {
		s.Guardrails.validate(errs, p+".guardrails", strict)
	}
	if s.Integrity != nil {
		s.Integrity.validate(errs, p+".integrity", false, strict)
	}
	if (s.Transport == TransportSSE || s.Transport == TransportHTTP) && s.URL != "" && !validURL(s.URL) {
		// The URL may carry credentials: don't echo it.
		errs.add(p+".url", 0, "must be an http or https URL")
	}

	if s.Transport == TransportOpenAPI {
		s.validateOpenAPI(errs, p)
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
		if s.Auth != nil && s.Auth.Type == AuthAWSSigV4 && sigV4Headers[canon] {
			errs.add(fp, 0, "header is set by the aws_sigv4 signer and must not be configured")
		}
	}

	if s.Auth != nil {
		s.Auth.validate(errs, p+".auth", s.Transport)
	}
	if s.Tasks != nil {
		checkFields(errs, p+".tasks", s.Tasks, strict)
		if s.Tasks.AnswerWithin < 0 || s.Tasks.AnswerWithin > time.Minute {
			errs.add(p+".tasks.answer_within", 0, "must be between 0 and 1m (got %s)", s.Tasks.AnswerWithin)
		}
	}
	if s.Audit != nil {
		checkFields(errs, p+".audit", s.Audit, strict)
		for i, r := range s.Audit.Redact {
			if _, err := path.Match(strings.ToLower(strings.TrimSpace(r)), ""); err != nil || strings.TrimSpace(r) == "" {
				errs.add(indexPath(p+".audit.redact", i), 0, "must be a glob pattern (path.Match syntax) (got %q)", truncate(r, 40))
			}
		}
	}
	if s.TLS != nil {
		s.TLS.validate(errs, p+".tls", s)
	}
	if s.Tools != nil {
		checkFields(errs, p+".tools", s.Tools, strict)
		s.Tools.validate(errs, p+".tools")
	}
}

// IsSpecURL reports whether an openapi server's spec is a URL (http or
// https) rather than a file.
func IsSpecURL(spec string) bool {
	l := strings.ToLower(spec)
	return strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://")
}

// validateOpenAPI checks what only an openapi server has (SPEC C12).
func (s *Server) validateOpenAPI(errs *errorList, p string) {
	if IsSpecURL(s.Spec) && !validURL(s.Spec) {
		errs.add(p+".spec", 0, "must be a file or an http or https URL")
	}
	if strings.ContainsRune(s.Spec, 0) {
		errs.add(p+".spec", 0, "must not contain NUL")
	}
	if s.BaseURL != "" && !validURL(s.BaseURL) {
		errs.add(p+".base_url", 0, "must be an http or https URL") // may carry credentials: not echoed
	}
	if s.Auth != nil {
		switch s.Auth.Type {
		case AuthOAuth2User, AuthTokenExchange, AuthEnterpriseManaged:
			errs.add(p+".auth.type", 0, "%s is not supported for transport openapi", s.Auth.Type)
		case AuthOAuth2:
			if s.BaseURL == "" {
				errs.add(p+".base_url", 0, "required with auth oauth2 (the token request's resource)")
			}
		}
	}
	if o := s.Operations; o != nil {
		for key, list := range map[string][]string{"include": o.Include, "exclude": o.Exclude} {
			for i, pat := range list {
				if !ValidOperationPattern(pat) {
					errs.add(indexPath(p+".operations."+key, i), 0, `must be an operationId or "METHOD /path" (got %q)`, truncate(pat, 60))
				}
			}
		}
	}
}

// ValidOperationPattern reports whether pat is an operationId or a
// "METHOD /path" pattern whose path is a valid path.Match pattern.
func ValidOperationPattern(pat string) bool {
	pat = strings.TrimSpace(pat)
	if pat == "" {
		return false
	}
	method, rest, ok := strings.Cut(pat, " ")
	if !ok {
		return !strings.ContainsAny(pat, "\x00\r\n")
	}
	rest = strings.TrimSpace(rest)
	if method == "" || !strings.HasPrefix(rest, "/") {
		return false
	}
	_, err := path.Match(rest, "")
	return err == nil
}

// validate checks an auth block. Values are credentials: messages name
// the field, never the value.
func (a *Auth) validate(errs *errorList, p, transport string) {
	if transport == TransportStdio && a.Type != AuthNone {
		errs.add(p, 0, "not allowed for transport stdio (pass credentials in env)")
		return
	}
	checkFields(errs, p, a, true)
	if a.Type != "" && !slices.Contains(AuthTypes, a.Type) {
		return // reported; the rest depends on the type
	}
	if a.Type == AuthBasic && strings.TrimSpace(a.Value) != "" && !ValidBasicCredential(a.Value) {
		errs.add(p+".value", 0, `must be "user:password" (no colon found) or "Basic <base64 of user:password>"`)
	}
	if a.TokenURL != "" && !validURL(a.TokenURL) {
		errs.add(p+".token_url", 0, "must be an http or https URL")
	}
	a.validateAuthorizationServer(errs, p)
	if a.Type == AuthOAuth2 || ExchangesCallerToken(a.Type) {
		a.validateClientAuth(errs, p)
	}
	if a.Resource != "" && !validResource(a.Resource) {
		errs.add(p+".resource", 0, "must be an absolute URI without fragment (RFC 8707)")
	}
	if a.IdPTokenURL != "" && !validURL(a.IdPTokenURL) {
		errs.add(p+".idp_token_url", 0, "must be an http or https URL")
	}
	if a.Type == AuthOAuth2User && a.ClientSecret != "" && a.ClientID == "" {
		errs.add(p+".client_secret", 0, "only with client_id (the pre-registered client it belongs to)")
	}
	for i, sc := range a.Scopes {
		if sc == "" || strings.ContainsAny(sc, " \t\r\n\"\\") {
			errs.add(indexPath(p+".scopes", i), 0, "must be one non-empty scope token without spaces or quotes")
		}
	}
	if a.Header != "" {
		if a.HeaderName != "" && !strings.EqualFold(a.HeaderName, a.Header) {
			errs.add(p+".header", 0, "header and header_name name different headers; use one")
		} else {
			a.HeaderName, a.Header = a.Header, ""
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
	// Region and service are not secrets, but neither is echoing them
	// needed: the rule says what is wrong.
	if a.Region != "" && !validAWSName(a.Region) {
		errs.add(p+".region", 0, "must be an AWS region name: lowercase letters, digits and dashes (eu-west-1)")
	}
	if a.Service != "" && !validAWSName(a.Service) {
		errs.add(p+".service", 0, "must be an AWS service signing name: lowercase letters, digits and dashes (execute-api)")
	}
}

// validateAuthorizationServer checks where the gateway's own client
// credentials may go. They go only to a token endpoint the config names:
// token_url, or the one the pinned authorization_server's metadata
// names. An upstream's protected resource metadata may name any
// authorization server, which would then receive the client secret or
// assertion (and, for a token exchange, the caller's token): discovery
// from it is never used for a credential of the gateway's.
func (a *Auth) validateAuthorizationServer(errs *errorList, p string) {
	if as := a.AuthorizationServer; as != "" && !validIssuer(as) {
		errs.add(p+".authorization_server", 0, "must be an https URL (http only on a loopback host) without query, fragment or user info")
	}
	switch a.Type {
	case AuthOAuth2, AuthTokenExchange:
		switch {
		case a.TokenURL == "" && a.AuthorizationServer == "":
			errs.add(p+".token_url", 0, "token_url or authorization_server is required: the gateway sends its client credentials only to a token endpoint the config names (one discovered from the server's metadata would let the server choose who receives them)")
		case a.TokenURL != "" && a.AuthorizationServer != "":
			errs.add(p+".authorization_server", 0, "token_url and authorization_server are both set; give one")
		}
	case AuthEnterpriseManaged:
		if a.AuthorizationServer == "" {
			errs.add(p+".authorization_server", 0, "required for enterprise_managed: the issuer of the server's authorization server, the ID-JAG's audience and the only one the gateway's client credentials go to")
		}
	case AuthOAuth2User:
		if a.ClientSecret != "" && a.AuthorizationServer == "" {
			errs.add(p+".authorization_server", 0, "required with client_secret: the pre-registered client's secret goes only to the authorization server the config names")
		}
	}
}

// validIssuer reports whether s is an authorization server issuer
// identifier the gateway may fetch metadata for: https (RFC 8414 2), or
// http on a loopback host (test rigs); no query, fragment or user info.
func validIssuer(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return false
	}
	return u.Scheme == "https" || (u.Scheme == "http" && loopbackListen(net.JoinHostPort(u.Hostname(), "0")))
}

// validAWSName reports whether s is a region or service signing name:
// lowercase letters, digits and dashes, starting and ending with a letter
// or digit, at most 64 characters.
func validAWSName(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// sigV4Headers are set by the SigV4 signer on every request of an
// aws_sigv4 server: a static header of these names would be overwritten
// or break the signature.
var sigV4Headers = map[string]bool{
	"Authorization":        true,
	"X-Amz-Date":           true,
	"X-Amz-Security-Token": true,
	"X-Amz-Content-Sha256": true,
}

// validateClientAuth checks the credential of an oauth2 block against its
// client_auth method: a secret for the secret methods, exactly one form of
// a private key, which must load, for private_key_jwt.
func (a *Auth) validateClientAuth(errs *errorList, p string) {
	method := a.ClientAuthMethod()
	switch method {
	case ClientSecretBasic, ClientSecretPost:
		if strings.TrimSpace(a.ClientSecret) == "" {
			errs.add(p+".client_secret", 0, "required for client_auth %s", method)
		}
		for _, f := range []struct{ key, v string }{{"private_key", a.PrivateKey}, {"private_key_file", a.PrivateKeyFile}, {"signing_alg", a.SigningAlg}} {
			if f.v != "" {
				errs.add(p+"."+f.key, 0, "not allowed for client_auth %s (only for private_key_jwt)", method)
			}
		}
	case PrivateKeyJWT:
		if a.ClientSecret != "" {
			errs.add(p+".client_secret", 0, "not allowed for client_auth private_key_jwt (the private key authenticates)")
		}
		var data []byte
		field := p + ".private_key"
		switch {
		case a.PrivateKey != "" && a.PrivateKeyFile != "":
			errs.add(p, 0, "private_key and private_key_file are both set; give one")
			return
		case a.PrivateKey != "":
			data = []byte(a.PrivateKey)
		case a.PrivateKeyFile != "":
			field = p + ".private_key_file"
			b, err := os.ReadFile(a.PrivateKeyFile)
			if err != nil {
				errs.add(field, 0, "cannot read %s: %v", a.PrivateKeyFile, errors.Unwrap(err))
				return
			}
			data = b
		default:
			errs.add(p+".private_key", 0, "required for client_auth private_key_jwt (or private_key_file)")
			return
		}
		key, err := ParsePrivateKey(data)
		if err != nil {
			// The messages describe the format, never the key.
			errs.add(field, 0, "%v", err)
			return
		}
		if a.SigningAlg == "" || slices.Contains(enumOf[Auth]("SigningAlg"), a.SigningAlg) {
			if _, err := SigningAlgFor(key, a.SigningAlg); err != nil {
				errs.add(p+".signing_alg", 0, "%v", err)
			}
		}
	}
}

// ValidBasicCredential reports whether v can make a Basic header: a
// user:password pair, optionally behind the "Basic" scheme, or an
// already-encoded base64 user:password behind the scheme. "Basic " alone
// is accepted (C3.3: a visibly wrong header still goes out).
func ValidBasicCredential(v string) bool {
	v = strings.TrimSpace(v)
	if rest, ok := CutScheme(v, "Basic"); ok {
		if strings.Contains(rest, ":") {
			return true
		}
		dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
		return err == nil && strings.Contains(string(dec), ":")
	}
	return strings.Contains(v, ":") || strings.EqualFold(v, "Basic")
}

// CutScheme splits "scheme<blanks>credential": ok is false when v does
// not start with scheme (case-insensitive) followed by at least one space
// or tab, or when nothing follows them. It is the one reading of a schemed
// credential, for validation here and egress in upstream (SPEC C3.2).
func CutScheme(v, scheme string) (rest string, ok bool) {
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	if c := v[len(scheme)]; c != ' ' && c != '\t' {
		return "", false
	}
	rest = strings.TrimLeft(v[len(scheme):], " \t")
	return rest, rest != ""
}

func (t *TLS) validate(errs *errorList, p string, s *Server) {
	if s.Transport == TransportStdio {
		return // reported by checkFields (when=sse|http)
	}
	for _, f := range []struct{ value, file, v, path string }{
		{"ca", "ca_file", t.CA, t.CAFile}, {"cert", "cert_file", t.Cert, t.CertFile}, {"key", "key_file", t.Key, t.KeyFile},
	} {
		if f.v != "" && f.path != "" {
			errs.add(p, 0, "%s and %s are both set; give one", f.value, f.file)
		}
	}
	if (t.Cert == "" && t.CertFile == "") != (t.Key == "" && t.KeyFile == "") {
		errs.add(p, 0, "a client certificate (cert or cert_file) and its key (key or key_file) must be set together")
	}
	for _, f := range []struct{ field, path string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if f.path == "" {
			continue
		}
		// Paths are not secrets; naming the missing file is what makes
		// the message actionable. Only the config file names files
		// (ParseRuntime refuses them in documents from the network).
		if st, err := os.Stat(f.path); err != nil {
			errs.add(p+"."+f.field, 0, "cannot read %s: %v", f.path, errors.Unwrap(err))
		} else if st.IsDir() {
			errs.add(p+"."+f.field, 0, "%s is a directory, not a PEM file", f.path)
		}
	}
	// Values are checked here, files when they are read (upstream): the
	// messages describe the format, never the content.
	if t.CA != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(t.CA)) {
		errs.add(p+".ca", 0, "no PEM certificate found")
	}
	switch {
	case t.Cert != "" && t.Key != "":
		if _, err := tls.X509KeyPair([]byte(t.Cert), []byte(t.Key)); err != nil {
			errs.add(p+".cert", 0, "cert and key do not make a certificate and its key: %v", err)
		}
	case t.Cert != "":
		if b, _ := pem.Decode([]byte(t.Cert)); b == nil || b.Type != "CERTIFICATE" {
			errs.add(p+".cert", 0, "no PEM certificate found")
		}
	case t.Key != "":
		if b, _ := pem.Decode([]byte(t.Key)); b == nil || !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			errs.add(p+".key", 0, "no PEM private key found")
		}
	}
	if u := cmp.Or(s.URL, s.BaseURL); u != "" && !strings.HasPrefix(strings.ToLower(u), "https://") && (t.CA != "" || t.CAFile != "" || t.Cert != "" || t.CertFile != "") {
		errs.add(p, 0, "set for a server whose url is not https")
	}
}

// validate checks a server's tool policy. Tool names are not secrets.
func (tp *ToolPolicy) validate(errs *errorList, p string) {
	for i, n := range tp.Allow {
		if n == "" {
			errs.add(indexPath(p+".allow", i), 0, "must not be empty")
		}
	}
	for i, n := range tp.Deny {
		fp := indexPath(p+".deny", i)
		switch {
		case n == "":
			errs.add(fp, 0, "must not be empty")
		case slices.Contains(tp.Allow, n):
			errs.add(fp, 0, "tool %q is also in allow", n)
		}
	}
	shown := make(map[string]string, len(tp.Overrides)) // display name -> upstream name
	for _, tool := range slices.Sorted(maps.Keys(tp.Overrides)) {
		o, fp := tp.Overrides[tool], joinPath(p+".overrides", tool)
		switch {
		case tool == "":
			errs.add(fp, 0, "tool name must not be empty")
		case !tp.Allows(tool):
			errs.add(fp, 0, "override for a tool the policy hides")
		case o.Name == "" && o.Description == "":
			errs.add(fp, 0, "must set name or description")
		}
		if o.Name == "" {
			continue
		}
		if !validToolName(o.Name) {
			errs.add(fp+".name", 0, "must be 1-128 characters of [A-Za-z0-9_.-] (the MCP tool-name rule)")
			continue
		}
		if prev, dup := shown[o.Name]; dup {
			errs.add(fp+".name", 0, "display name %q is also the name of %s", o.Name, joinPath("overrides", prev))
			continue
		}
		shown[o.Name] = tool
		// Upstream names the policy lists are known to exist; one that
		// keeps its own name would collide with the renamed tool.
		if o.Name != tool && slices.Contains(tp.Allow, o.Name) && tp.Allows(o.Name) && tp.Overrides[o.Name].Name == "" {
			errs.add(fp+".name", 0, "display name %q is the name of another allowed tool", o.Name)
		}
	}
}

func (c *Config) validateAccessGroups(errs *errorList) {
	for _, g := range slices.Sorted(maps.Keys(c.AccessGroups)) {
		gp := joinPath("access_groups", g)
		if g == "" || strings.ContainsFunc(g, unicode.IsControl) {
			errs.add(gp, 0, "invalid access group name (must be non-empty, without control characters)")
		}
		for i, s := range c.AccessGroups[g] {
			if _, ok := c.Servers[s]; !ok {
				errs.add(indexPath(gp, i), 0, "unknown server %q", s)
			}
		}
	}
}

func (c *Config) validateToolsets(errs *errorList) {
	for _, name := range slices.Sorted(maps.Keys(c.Toolsets)) {
		tp, ts := joinPath("toolsets", name), c.Toolsets[name]
		// The name is a URL path segment: /toolset/<name>/mcp.
		if !validServerName(name) {
			errs.add(tp, 0, "invalid toolset name (want [a-z0-9][a-z0-9_-]*)")
		}
		if ts == nil {
			errs.add(tp, 0, "toolset is nil")
			continue
		}
		checkFields(errs, tp, ts, true)
		for _, s := range slices.Sorted(maps.Keys(ts.Servers)) {
			sp := joinPath(tp+".servers", s)
			if _, ok := c.Servers[s]; !ok {
				errs.add(sp, 0, "unknown server %q", s)
			}
			if len(ts.Servers[s]) == 0 {
				errs.add(sp, 0, "must list at least one tool")
			}
			for i, t := range ts.Servers[s] {
				if t == "" {
					errs.add(indexPath(sp, i), 0, "must not be empty")
				}
			}
		}
	}
}

// MinSecretLen is the shortest master key or key secret accepted.
const MinSecretLen = 16

// validate checks the callers' auth block. The master key and key secrets
// are never quoted, nor compared in messages other than by index.
func (a *CallerAuth) validate(errs *errorList, c *Config) {
	if a.MasterKey != "" {
		checkSecret(errs, "auth.master_key", 0, a.MasterKey)
	}
	a.validateIdentity(errs, c)
	if l := a.AllowedClients; l != nil {
		lp := "auth.allowed_clients"
		checkFields(errs, lp, l, true)
		switch {
		case l.Header == "" && len(l.ClientIDs) == 0:
			errs.add(lp+".header", 0, "required (or client_ids, for JWT callers)")
		case l.Header != "" && !validToken(l.Header):
			errs.add(lp+".header", 0, "invalid header name (want an HTTP token)")
		}
		if l.Header != "" && len(l.Values) == 0 {
			errs.add(lp+".values", 0, "must list at least one value")
		}
		for i, v := range l.ClientIDs {
			if v == "" {
				errs.add(indexPath(lp+".client_ids", i), 0, "must not be empty")
			}
		}
		for i, v := range l.Values {
			if v == "" {
				errs.add(indexPath(lp+".values", i), 0, "must not be empty")
			}
		}
	}
	aliases := make(map[string]int, len(a.Keys))
	secrets := make(map[string]int, len(a.Keys))
	for i := range a.Keys {
		k, kp := &a.Keys[i], indexPath("auth.keys", i)
		k.validate(errs, kp, c)
		if k.Alias != "" {
			if j, dup := aliases[k.Alias]; dup {
				errs.add(kp+".alias", k.Line, "duplicate of keys[%d].alias", j)
			} else {
				aliases[k.Alias] = i
			}
		}
		if k.Key != "" {
			switch j, dup := secrets[k.Key]; {
			case dup:
				errs.add(kp+".key", k.Line, "same secret as keys[%d]", j)
			case k.Key == a.MasterKey:
				errs.add(kp+".key", k.Line, "same secret as the master key")
			default:
				secrets[k.Key] = i
			}
		}
	}
}

func (k *KeyConfig) validate(errs *errorList, kp string, c *Config) {
	line := k.Line
	checkFields(errs, kp, k, true)
	if k.Alias != "" && !validAlias(k.Alias) {
		errs.add(kp+".alias", line, "must match [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")
	}
	if k.Key != "" {
		checkSecret(errs, kp+".key", line, k.Key)
	}
	// The store bounds owner ids the same way; failing here names the line.
	for _, f := range []struct{ field, v string }{{"user", k.User}, {"team", k.Team}} {
		switch {
		case len(f.v) > maxOwnerLen:
			errs.add(kp+"."+f.field, line, "must be at most %d bytes", maxOwnerLen)
		case strings.ContainsFunc(f.v, unicode.IsControl):
			errs.add(kp+"."+f.field, line, "must not contain control characters")
		}
	}
	k.validateGrants(errs, kp, c)
	for i, s := range k.AllowedCIDRs {
		if _, ok := parseCIDR(strings.TrimSpace(s)); !ok {
			errs.add(indexPath(kp+".allowed_cidrs", i), line, "invalid CIDR %q", truncate(s, 64))
		}
	}
}

// validateGrants checks what a key (or an auth.grants entry) grants
// against the servers, toolsets and access groups of c.
func (k *KeyConfig) validateGrants(errs *errorList, kp string, c *Config) {
	line := k.Line
	for i, s := range k.Servers {
		if _, ok := c.Servers[s]; !ok {
			errs.add(indexPath(kp+".servers", i), line, "unknown server %q", s)
		}
	}
	for _, f := range []struct {
		field string
		m     map[string][]string
	}{{"tools", k.Tools}, {"deny_tools", k.DenyTools}} {
		for _, s := range slices.Sorted(maps.Keys(f.m)) {
			sp := joinPath(kp+"."+f.field, s)
			if _, ok := c.Servers[s]; !ok {
				errs.add(sp, line, "unknown server %q", s)
			}
			for i, t := range f.m[s] {
				if t == "" {
					errs.add(indexPath(sp, i), line, "must not be empty")
				}
			}
		}
	}
	for i, ts := range k.Toolsets {
		if _, ok := c.Toolsets[ts]; !ok {
			errs.add(indexPath(kp+".toolsets", i), line, "unknown toolset %q", ts)
		}
	}
	for i, g := range k.AccessGroups {
		if _, ok := c.AccessGroups[g]; !ok {
			errs.add(indexPath(kp+".access_groups", i), line, "unknown access group %q", g)
		}
	}
}

// maxOwnerLen bounds user and team ids, as the store does.
const maxOwnerLen = 256

// checkSecret checks a master key or key secret without quoting it.
func checkSecret(errs *errorList, path string, line int, s string) {
	if utf8.RuneCountInString(s) < MinSecretLen {
		errs.add(path, line, "must be at least %d characters", MinSecretLen)
	}
	// It travels in a header, where control characters cannot.
	if strings.ContainsFunc(s, unicode.IsControl) {
		errs.add(path, line, "must not contain control characters")
	}
}

// validAlias reports whether s matches [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}.
func validAlias(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i, r := range s {
		if !isAlnum(r) && (i == 0 || !strings.ContainsRune("_.@-", r)) {
			return false
		}
	}
	return true
}

// validToolName reports whether s satisfies the MCP tool-name rule: 1 to
// 128 characters of [A-Za-z0-9_.-].
func validToolName(s string) bool {
	return len(s) <= 128 && validSeparator(s)
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

// validResource accepts a resource indicator (RFC 8707 2): an absolute
// URI without a fragment.
func validResource(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.IsAbs() && u.Fragment == "" && !strings.ContainsAny(s, " \t\r\n")
}
