package config

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// The config is decoded by walking the yaml.Node tree rather than with
// yaml's struct decoding: KnownFields errors name a Go type and a line, not
// the key's path, and cannot report more than the first problem well.
//
// A YAML null (`key:` or `key: ~`) means the key is absent, so the default
// stays. Merge keys (<<) are rejected rather than half supported; anchors
// and aliases for whole values work.

var (
	topKeys = []string{"listen", "allowed_origins", "allowed_hosts", "tool_name_separator", "max_body_bytes", "servers",
		"data_dir", "metrics_listen", "auth", "access_groups", "toolsets", "sessions", "limits"}
	serverKeys     = []string{"transport", "command", "args", "env", "cwd", "url", "headers", "timeout", "protocol_version", "auth", "tls", "session_mode", "tools"}
	authKeys       = []string{"type", "value", "header_name", "token_url", "client_id", "client_secret", "scopes", "audience"}
	tlsKeys        = []string{"verify", "ca_file", "cert_file", "key_file"}
	toolPolicyKeys = []string{"allow", "deny", "overrides"}
	overrideKeys   = []string{"name", "description"}
	callerAuthKeys = []string{"master_key", "anonymous", "allowed_clients", "keys"}
	allowlistKeys  = []string{"header", "values"}
	keyKeys        = []string{"alias", "key", "user", "team", "servers", "tools", "deny_tools", "toolsets", "access_groups",
		"allowed_cidrs", "rate_limit_rpm", "expires", "admin", "no_mcp"}
	toolsetKeys = []string{"servers"}
	sessionKeys = []string{"max_per_owner", "idle_timeout", "unknown_id"}
	limitKeys   = []string{"max_batch", "max_inflight_per_session", "max_upstream_message", "max_streams",
		"read_header_timeout", "idle_timeout", "sse_write_timeout", "max_bound_sessions_per_server"}
)

func decode(data []byte, c *Config) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty document: all defaults
		}
		return &FieldError{Err: err}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return &FieldError{Err: err}
		}
		return &FieldError{Line: extra.Line, Err: errors.New("more than one YAML document")}
	}
	var errs errorList
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	eachKey(&errs, "", root, func(key string, k, v *yaml.Node) {
		p := joinPath("", key)
		switch key {
		case "listen":
			decodeString(&errs, p, v, &c.Listen)
		case "allowed_origins":
			decodeStrings(&errs, p, v, &c.AllowedOrigins)
		case "allowed_hosts":
			decodeStrings(&errs, p, v, &c.AllowedHosts)
		case "tool_name_separator":
			decodeString(&errs, p, v, &c.ToolNameSeparator)
		case "max_body_bytes":
			decodeByteSize(&errs, p, v, &c.MaxBodyBytes)
		case "servers":
			decodeServers(&errs, p, v, c)
		case "data_dir":
			decodeString(&errs, p, v, &c.DataDir)
		case "metrics_listen":
			decodeString(&errs, p, v, &c.MetricsListen)
		case "auth":
			decodeCallerAuth(&errs, p, v, c)
		case "access_groups":
			decodeStringListMap(&errs, p, v, &c.AccessGroups)
		case "toolsets":
			decodeToolsets(&errs, p, v, c)
		case "sessions":
			decodeSessions(&errs, p, v, &c.Sessions)
		case "limits":
			decodeLimits(&errs, p, v, &c.Limits)
		default:
			unknownField(&errs, p, k, key, topKeys)
		}
	})
	return errs.err()
}

func decodeServers(errs *errorList, path string, n *yaml.Node, c *Config) {
	eachKey(errs, path, n, func(name string, _, v *yaml.Node) {
		s := &Server{
			Name:            name,
			Timeout:         DefaultTimeout,
			ProtocolVersion: ProtocolVersionAuto,
			SessionMode:     SessionShared,
		}
		if c.Servers == nil {
			c.Servers = make(map[string]*Server)
		}
		c.Servers[name] = s
		sp := joinPath(path, name)
		eachKey(errs, sp, v, func(key string, k, v *yaml.Node) {
			p := joinPath(sp, key)
			switch key {
			case "transport":
				decodeString(errs, p, v, &s.Transport)
			case "command":
				decodeString(errs, p, v, &s.Command)
			case "args":
				decodeStrings(errs, p, v, &s.Args)
			case "env":
				decodeStringMap(errs, p, v, &s.Env)
			case "cwd":
				decodeString(errs, p, v, &s.Cwd)
			case "url":
				decodeString(errs, p, v, &s.URL)
			case "headers":
				decodeStringMap(errs, p, v, &s.Headers)
			case "timeout":
				decodeDuration(errs, p, v, &s.Timeout)
			case "protocol_version":
				decodeString(errs, p, v, &s.ProtocolVersion)
			case "auth":
				decodeAuth(errs, p, v, s)
			case "tls":
				decodeTLS(errs, p, v, s)
			case "session_mode":
				decodeString(errs, p, v, &s.SessionMode)
			case "tools":
				decodeToolPolicy(errs, p, v, s)
			default:
				unknownField(errs, p, k, key, serverKeys)
			}
		})
	})
}

func decodeAuth(errs *errorList, path string, n *yaml.Node, s *Server) {
	if isNull(resolve(n)) {
		return
	}
	a := &Auth{}
	s.Auth = a
	eachKey(errs, path, n, func(key string, k, v *yaml.Node) {
		p := joinPath(path, key)
		switch key {
		case "type":
			decodeString(errs, p, v, &a.Type)
		case "value":
			decodeString(errs, p, v, &a.Value)
		case "header_name":
			decodeString(errs, p, v, &a.HeaderName)
		case "token_url":
			decodeString(errs, p, v, &a.TokenURL)
		case "client_id":
			decodeString(errs, p, v, &a.ClientID)
		case "client_secret":
			decodeString(errs, p, v, &a.ClientSecret)
		case "scopes":
			decodeStrings(errs, p, v, &a.Scopes)
		case "audience":
			decodeString(errs, p, v, &a.Audience)
		default:
			unknownField(errs, p, k, key, authKeys)
		}
	})
}

func decodeTLS(errs *errorList, path string, n *yaml.Node, s *Server) {
	if isNull(resolve(n)) {
		return
	}
	t := &TLS{}
	s.TLS = t
	eachKey(errs, path, n, func(key string, k, v *yaml.Node) {
		p := joinPath(path, key)
		switch key {
		case "verify":
			decodeBool(errs, p, v, &t.Verify)
		case "ca_file":
			decodeString(errs, p, v, &t.CAFile)
		case "cert_file":
			decodeString(errs, p, v, &t.CertFile)
		case "key_file":
			decodeString(errs, p, v, &t.KeyFile)
		default:
			unknownField(errs, p, k, key, tlsKeys)
		}
	})
}

func decodeToolPolicy(errs *errorList, path string, n *yaml.Node, s *Server) {
	if isNull(resolve(n)) {
		return
	}
	tp := &ToolPolicy{}
	s.Tools = tp
	eachKey(errs, path, n, func(key string, k, v *yaml.Node) {
		p := joinPath(path, key)
		switch key {
		case "allow":
			decodeStringsOrNone(errs, p, v, &tp.Allow)
		case "deny":
			decodeStrings(errs, p, v, &tp.Deny)
		case "overrides":
			decodeOverrides(errs, p, v, tp)
		default:
			unknownField(errs, p, k, key, toolPolicyKeys)
		}
	})
}

func decodeOverrides(errs *errorList, path string, n *yaml.Node, tp *ToolPolicy) {
	eachKey(errs, path, n, func(tool string, _, v *yaml.Node) {
		var o ToolOverride
		op := joinPath(path, tool)
		eachKey(errs, op, v, func(key string, k, v *yaml.Node) {
			p := joinPath(op, key)
			switch key {
			case "name":
				decodeString(errs, p, v, &o.Name)
			case "description":
				decodeString(errs, p, v, &o.Description)
			default:
				unknownField(errs, p, k, key, overrideKeys)
			}
		})
		if tp.Overrides == nil {
			tp.Overrides = make(map[string]ToolOverride)
		}
		tp.Overrides[tool] = o
	})
}

func decodeCallerAuth(errs *errorList, path string, n *yaml.Node, c *Config) {
	if isNull(resolve(n)) {
		return
	}
	a := &CallerAuth{}
	c.Auth = a
	eachKey(errs, path, n, func(key string, k, v *yaml.Node) {
		p := joinPath(path, key)
		switch key {
		case "master_key":
			decodeString(errs, p, v, &a.MasterKey)
		case "anonymous":
			decodeFlag(errs, p, v, &a.Anonymous)
		case "allowed_clients":
			decodeAllowlist(errs, p, v, a)
		case "keys":
			decodeKeys(errs, p, v, a)
		default:
			unknownField(errs, p, k, key, callerAuthKeys)
		}
	})
}

func decodeAllowlist(errs *errorList, path string, n *yaml.Node, a *CallerAuth) {
	if isNull(resolve(n)) {
		return
	}
	l := &ClientAllowlist{}
	a.AllowedClients = l
	eachKey(errs, path, n, func(key string, k, v *yaml.Node) {
		p := joinPath(path, key)
		switch key {
		case "header":
			decodeString(errs, p, v, &l.Header)
		case "values":
			decodeStrings(errs, p, v, &l.Values)
		default:
			unknownField(errs, p, k, key, allowlistKeys)
		}
	})
}

// decodeKeys decodes auth.keys, a list of mappings. Every entry gets a
// KeyConfig, even a broken one, so that indexes in paths match the file.
func decodeKeys(errs *errorList, path string, n *yaml.Node, a *CallerAuth) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		errs.add(path, n.Line, "must be a list of mappings")
		return
	}
	for i, e := range n.Content {
		kp := indexPath(path, i)
		k := KeyConfig{Line: e.Line}
		if r := resolve(e); isNull(r) {
			errs.add(kp, e.Line, "must be a mapping")
		}
		eachKey(errs, kp, e, func(key string, kn, v *yaml.Node) {
			p := joinPath(kp, key)
			switch key {
			case "alias":
				decodeString(errs, p, v, &k.Alias)
			case "key":
				decodeString(errs, p, v, &k.Key)
			case "user":
				decodeString(errs, p, v, &k.User)
			case "team":
				decodeString(errs, p, v, &k.Team)
			case "servers":
				decodeStringsOrNone(errs, p, v, &k.Servers)
			case "tools":
				decodeStringListMap(errs, p, v, &k.Tools)
			case "deny_tools":
				decodeStringListMap(errs, p, v, &k.DenyTools)
			case "toolsets":
				decodeStrings(errs, p, v, &k.Toolsets)
			case "access_groups":
				decodeStrings(errs, p, v, &k.AccessGroups)
			case "allowed_cidrs":
				decodeStrings(errs, p, v, &k.AllowedCIDRs)
			case "rate_limit_rpm":
				decodeInt(errs, p, v, &k.RateLimitRPM)
			case "expires":
				decodeTime(errs, p, v, &k.Expires)
			case "admin":
				decodeFlag(errs, p, v, &k.Admin)
			case "no_mcp":
				decodeFlag(errs, p, v, &k.NoMCP)
			default:
				unknownField(errs, p, kn, key, keyKeys)
			}
		})
		a.Keys = append(a.Keys, k)
	}
}

func decodeToolsets(errs *errorList, path string, n *yaml.Node, c *Config) {
	eachKey(errs, path, n, func(name string, _, v *yaml.Node) {
		ts := &Toolset{}
		if c.Toolsets == nil {
			c.Toolsets = make(map[string]*Toolset)
		}
		c.Toolsets[name] = ts
		tp := joinPath(path, name)
		eachKey(errs, tp, v, func(key string, k, v *yaml.Node) {
			p := joinPath(tp, key)
			switch key {
			case "servers":
				decodeStringListMap(errs, p, v, &ts.Servers)
			default:
				unknownField(errs, p, k, key, toolsetKeys)
			}
		})
	})
}

func decodeSessions(errs *errorList, path string, n *yaml.Node, s *SessionLimits) {
	eachKey(errs, path, n, func(key string, k, v *yaml.Node) {
		p := joinPath(path, key)
		switch key {
		case "max_per_owner":
			decodeInt(errs, p, v, &s.MaxPerOwner)
		case "idle_timeout":
			decodeDuration(errs, p, v, &s.IdleTimeout)
		case "unknown_id":
			decodeString(errs, p, v, &s.UnknownID)
		default:
			unknownField(errs, p, k, key, sessionKeys)
		}
	})
}

func decodeLimits(errs *errorList, path string, n *yaml.Node, l *Limits) {
	eachKey(errs, path, n, func(key string, k, v *yaml.Node) {
		p := joinPath(path, key)
		switch key {
		case "max_batch":
			decodeInt(errs, p, v, &l.MaxBatch)
		case "max_inflight_per_session":
			decodeInt(errs, p, v, &l.MaxInflightPerSession)
		case "max_upstream_message":
			decodeByteSize(errs, p, v, &l.MaxUpstreamMessage)
		case "max_streams":
			decodeInt(errs, p, v, &l.MaxStreams)
		case "read_header_timeout":
			decodeDuration(errs, p, v, &l.ReadHeaderTimeout)
		case "idle_timeout":
			decodeDuration(errs, p, v, &l.IdleTimeout)
		case "sse_write_timeout":
			decodeDuration(errs, p, v, &l.SSEWriteTimeout)
		case "max_bound_sessions_per_server":
			decodeInt(errs, p, v, &l.MaxBoundPerServer)
		default:
			unknownField(errs, p, k, key, limitKeys)
		}
	})
}

// decodeFlag is decodeBool for fields where absent and false mean the
// same.
func decodeFlag(errs *errorList, path string, n *yaml.Node, dst *bool) {
	var b *bool
	decodeBool(errs, path, n, &b)
	if b != nil {
		*dst = *b
	}
}

func decodeBool(errs *errorList, path string, n *yaml.Node, dst **bool) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		errs.add(path, n.Line, "must be true or false")
		return
	}
	*dst = &b
}

// resolve follows aliases. An anchor cannot sit on an alias, so one step
// is enough; the loop bound only guards against malformed trees.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; i < 8 && n != nil && n.Kind == yaml.AliasNode; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// eachKey calls fn for every key of the mapping n, in document order,
// reporting non-mappings, non-scalar keys, merge keys and duplicates.
func eachKey(errs *errorList, path string, n *yaml.Node, fn func(key string, k, v *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		errs.add(displayPath(path), n.Line, "must be a mapping")
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			errs.add(displayPath(path), n.Content[i].Line, "keys must be strings")
			continue
		}
		if k.ShortTag() == "!!merge" {
			errs.add(joinPath(path, k.Value), k.Line, "merge keys are not supported")
			continue
		}
		if seen[k.Value] {
			errs.add(joinPath(path, k.Value), k.Line, "duplicate key")
			continue
		}
		seen[k.Value] = true
		fn(k.Value, k, v)
	}
}

func decodeString(errs *errorList, path string, n *yaml.Node, dst *string) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		errs.add(path, n.Line, "must be a string")
		return
	}
	*dst = n.Value
}

func decodeStrings(errs *errorList, path string, n *yaml.Node, dst *[]string) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		errs.add(path, n.Line, "must be a list of strings")
		return
	}
	var out []string
	for i, e := range n.Content {
		e = resolve(e)
		if e == nil || e.Kind != yaml.ScalarNode || isNull(e) {
			errs.add(indexPath(path, i), n.Content[i].Line, "must be a string")
			continue
		}
		out = append(out, e.Value)
	}
	*dst = out
}

// decodeStringsOrNone is decodeStrings for lists where omitted means
// "all" and empty means "none": [] decodes to a non-nil empty slice, while
// an absent or null value leaves dst nil.
func decodeStringsOrNone(errs *errorList, path string, n *yaml.Node, dst *[]string) {
	r := resolve(n)
	if isNull(r) {
		return
	}
	decodeStrings(errs, path, n, dst)
	if *dst == nil && r.Kind == yaml.SequenceNode {
		*dst = []string{}
	}
}

// decodeStringListMap decodes a mapping of names to lists of strings.
// Every key gets a non-nil list, so an empty list ("none of them") stays
// distinct from an absent key; a null list is an error rather than a
// guess between the two.
func decodeStringListMap(errs *errorList, path string, n *yaml.Node, dst *map[string][]string) {
	eachKey(errs, path, n, func(key string, _, v *yaml.Node) {
		p := joinPath(path, key)
		if r := resolve(v); isNull(r) {
			errs.add(p, v.Line, "must be a list of strings")
			return
		}
		var l []string
		decodeStringsOrNone(errs, p, v, &l)
		if *dst == nil {
			*dst = make(map[string][]string)
		}
		(*dst)[key] = l
	})
}

func decodeStringMap(errs *errorList, path string, n *yaml.Node, dst *map[string]string) {
	eachKey(errs, path, n, func(key string, _, v *yaml.Node) {
		v = resolve(v)
		val := ""
		if !isNull(v) {
			if v.Kind != yaml.ScalarNode {
				errs.add(joinPath(path, key), v.Line, "must be a string")
				return
			}
			val = v.Value
		}
		if *dst == nil {
			*dst = make(map[string]string)
		}
		(*dst)[key] = val
	})
}

// decodeDuration accepts Go durations ("30s", "1m", "500ms"). A bare
// number is an error rather than seconds: "timeout: 30" is as likely meant
// as milliseconds, and a unit costs one character.
func decodeDuration(errs *errorList, path string, n *yaml.Node, dst *time.Duration) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	const want = `must be a duration with a unit, like "30s", "1m" or "500ms"`
	if n.Kind != yaml.ScalarNode {
		errs.add(path, n.Line, want)
		return
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		errs.add(path, n.Line, "%s (got %q)", want, n.Value)
		return
	}
	*dst = d
}

// decodeInt accepts a YAML integer only: a quoted number or a float is an
// error rather than a guess.
func decodeInt(errs *errorList, path string, n *yaml.Node, dst *int) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		errs.add(path, n.Line, "must be an integer")
		return
	}
	*dst = v
}

// decodeTime accepts a YAML timestamp (2027-01-01T00:00:00Z, unquoted) or
// an RFC 3339 string, and returns it in UTC.
func decodeTime(errs *errorList, path string, n *yaml.Node, dst *time.Time) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	const want = "must be an RFC 3339 time like 2027-01-01T00:00:00Z"
	if n.Kind != yaml.ScalarNode {
		errs.add(path, n.Line, want)
		return
	}
	var t time.Time
	err := errors.New("not a time")
	switch n.ShortTag() {
	case "!!timestamp":
		err = n.Decode(&t)
	case "!!str":
		t, err = time.Parse(time.RFC3339, n.Value)
	}
	if err != nil {
		errs.add(path, n.Line, "%s (got %q)", want, truncate(n.Value, 40))
		return
	}
	*dst = t.UTC()
}

// decodeByteSize accepts an integer number of bytes or a string with a
// unit: B, kB/KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024).
func decodeByteSize(errs *errorList, path string, n *yaml.Node, dst *int64) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	const want = `must be a number of bytes or a size like "4MiB", "512KiB" or "1MB"`
	if n.Kind != yaml.ScalarNode {
		errs.add(path, n.Line, want)
		return
	}
	if n.ShortTag() == "!!int" {
		var v int64
		if err := n.Decode(&v); err != nil {
			errs.add(path, n.Line, "%s (got %q)", want, n.Value)
			return
		}
		*dst = v
		return
	}
	v, ok := parseByteSize(n.Value)
	if !ok {
		errs.add(path, n.Line, "%s (got %q)", want, n.Value)
		return
	}
	*dst = v
}

var byteUnits = map[string]int64{
	"b":   1,
	"kb":  1000,
	"mb":  1000 * 1000,
	"gb":  1000 * 1000 * 1000,
	"kib": 1 << 10,
	"mib": 1 << 20,
	"gib": 1 << 30,
}

func parseByteSize(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i == 0 {
		return 0, false
	}
	num, unit := s, ""
	if i > 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, false
	}
	mult := int64(1)
	if unit != "" {
		m, ok := byteUnits[strings.ToLower(unit)]
		if !ok {
			return 0, false
		}
		mult = m
	}
	if v > math.MaxInt64/mult {
		return 0, false
	}
	return v * mult, true
}

func unknownField(errs *errorList, path string, k *yaml.Node, key string, known []string) {
	if s := suggest(key, known); s != "" {
		errs.add(path, k.Line, "unknown field (did you mean %s?)", s)
		return
	}
	errs.add(path, k.Line, "unknown field")
}

// suggest returns the known key closest to key, if it is a likely typo.
func suggest(key string, known []string) string {
	if len(key) > 64 {
		return ""
	}
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance (Levenshtein plus
// adjacent transpositions, so "hedaers" is one edit from "headers").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// joinPath appends key to a dotted field path, quoting keys that would make
// the path ambiguous or unreadable (dots, brackets, spaces, control runes).
func joinPath(path, key string) string {
	plain := key != "" && !strings.ContainsFunc(key, func(r rune) bool {
		return strings.ContainsRune(`.[]"':`, r) || unicode.IsSpace(r) || !unicode.IsPrint(r)
	})
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	default:
		return path + "." + key
	}
}

func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// displayPath names the document root, which has an empty path, in
// messages that are about the root itself.
func displayPath(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}
