package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ${VAR} expansion runs on decoded string values, never on the YAML text,
// so a variable's value is data and cannot add keys or change structure.
//
// Expanded fields: listen, allowed_origins, allowed_hosts, data_dir,
// metrics_listen; per server command, args, env values, cwd, url, header
// values, and the auth and tls values; under auth the master key, the
// allowed_clients values, and per key alias, key, user and team. Names
// (server, toolset and access group names, env and header names, tool
// names), enumerations (transport, protocol_version, timeout,
// tool_name_separator) and non-strings (rate_limit_rpm, expires, flags)
// are taken literally.
//
// In an expanded field "$$" is a literal "$" and every other "$" must start
// ${NAME} with NAME matching [A-Za-z_][A-Za-z0-9_]*. A lone "$" is an error
// rather than a literal so that "$HOME" fails loudly instead of reaching a
// server unexpanded. Expanding an unset variable is an error; one set to ""
// expands to "".

func (c *Config) expand(lookupEnv func(string) (string, bool)) error {
	var errs errorList
	at := func(path string, line int, s *string) {
		v, err := expandString(*s, lookupEnv)
		if err != nil {
			errs = append(errs, &FieldError{Path: path, Line: line, Err: err})
			return
		}
		*s = v
	}
	one := func(path string, s *string) { at(path, 0, s) }
	list := func(path string, l []string) {
		for i := range l {
			one(indexPath(path, i), &l[i])
		}
	}
	values := func(path string, m map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v := m[k]
			one(joinPath(path, k), &v)
			m[k] = v
		}
	}

	one("listen", &c.Listen)
	list("allowed_origins", c.AllowedOrigins)
	list("allowed_hosts", c.AllowedHosts)
	one("data_dir", &c.DataDir)
	one("metrics_listen", &c.MetricsListen)
	if a := c.Auth; a != nil {
		one("auth.master_key", &a.MasterKey)
		if l := a.AllowedClients; l != nil {
			list("auth.allowed_clients.values", l.Values)
		}
		for i := range a.Keys {
			k, kp := &a.Keys[i], indexPath("auth.keys", i)
			at(kp+".alias", k.Line, &k.Alias)
			at(kp+".key", k.Line, &k.Key)
			at(kp+".user", k.Line, &k.User)
			at(kp+".team", k.Line, &k.Team)
		}
	}
	for _, name := range c.ServerNames() {
		s, p := c.Servers[name], joinPath("servers", name)
		one(p+".command", &s.Command)
		list(p+".args", s.Args)
		values(p+".env", s.Env)
		one(p+".cwd", &s.Cwd)
		one(p+".url", &s.URL)
		values(p+".headers", s.Headers)
		if a := s.Auth; a != nil {
			ap := p + ".auth"
			one(ap+".type", &a.Type)
			one(ap+".value", &a.Value)
			one(ap+".header_name", &a.HeaderName)
			one(ap+".token_url", &a.TokenURL)
			one(ap+".client_id", &a.ClientID)
			one(ap+".client_secret", &a.ClientSecret)
			list(ap+".scopes", a.Scopes)
			one(ap+".audience", &a.Audience)
		}
		if t := s.TLS; t != nil {
			one(p+".tls.ca_file", &t.CAFile)
			one(p+".tls.cert_file", &t.CertFile)
			one(p+".tls.key_file", &t.KeyFile)
		}
	}
	return errs.err()
}

var errDollar = errors.New(`"$" must start ${NAME} or be doubled as "$$"`)

// expandString expands s. Its errors never quote s, which may hold secrets.
func expandString(s string, lookupEnv func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		s = s[i+1:]
		switch {
		case strings.HasPrefix(s, "$"):
			b.WriteByte('$')
			s = s[1:]
		case strings.HasPrefix(s, "{"):
			end := strings.IndexByte(s, '}')
			if end < 0 {
				return "", errors.New(`unterminated "${"`)
			}
			name := s[1:end]
			if !validVarName(name) {
				return "", errors.New("invalid variable name in ${...} (want [A-Za-z_][A-Za-z0-9_]*)")
			}
			v, ok := lookupEnv(name)
			if !ok {
				return "", fmt.Errorf("environment variable %s is not set", name)
			}
			b.WriteString(v)
			s = s[end+1:]
		default:
			return "", errDollar
		}
	}
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'A' <= r && r <= 'Z', 'a' <= r && r <= 'z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
