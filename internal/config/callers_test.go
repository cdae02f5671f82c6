package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// callersExample is the documented callers, policy and sessions shape,
// plus a second key for the cases the first does not show.
const callersExample = `
data_dir: ./data
metrics_listen: "127.0.0.1:9090"
auth:
  master_key: ${MCPGATE_MASTER_KEY}
  anonymous: false
  allowed_clients:
    header: X-Client-Name
    values: [claude-code, " Cursor "]
  keys:
    - alias: team-a-bot
      key: ${TEAM_A_KEY}
      user: alice
      team: team-a
      servers: [everything]
      tools: {everything: [echo, get-sum]}
      deny_tools: {everything: [get-env]}
      toolsets: [support]
      access_groups: [readonly]
      allowed_cidrs: [127.0.0.0/8, 10.1.2.3, "::1", 192.168.1.7/24, "::ffff:172.16.0.0/108"]
      rate_limit_rpm: 600
      expires: 2027-01-01T00:00:00Z
      admin: false
      no_mcp: false
    - alias: ops@example.com
      key: " sk-ops-0123456789abcdef "
      servers: []
      tools: {calc: []}
      expires: "2026-06-30T12:00:00+02:00"
      admin: true
      no_mcp: true
access_groups: {readonly: [calc]}
toolsets: {support: {servers: {everything: [echo], calc: [add]}}}
sessions: {max_per_owner: 5, idle_timeout: 10m}
servers:
  everything:
    transport: stdio
    command: npx
    args: [-y, "@modelcontextprotocol/server-everything"]
  calc:
    transport: http
    url: http://127.0.0.1:4100/mcp
    tools:
      allow: [add, sub]
      deny: [drop_db]
      overrides:
        add: {name: plus, description: "Adds two numbers"}
        sub: {description: "Subtracts"}
`

const (
	testMasterKey = "mk-0123456789abcdef"
	testKey       = "k1-0123456789abcdef"
)

var callersEnv = map[string]string{"MCPGATE_MASTER_KEY": testMasterKey, "TEAM_A_KEY": testKey}

func TestParseCallersFull(t *testing.T) {
	got, err := Parse([]byte(callersExample), "/etc/mcpgate", envOf(callersEnv))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &Config{
		Listen:            DefaultListen,
		ToolNameSeparator: DefaultSeparator,
		MaxBodyBytes:      DefaultMaxBodyBytes,
		DataDir:           "/etc/mcpgate/data",
		Store:             Store{Driver: StoreSQLite},
		MetricsListen:     "127.0.0.1:9090",
		Dir:               "/etc/mcpgate",
		Auth: &CallerAuth{
			MasterKey: testMasterKey,
			AllowedClients: &ClientAllowlist{
				Header: "X-Client-Name",
				Values: []string{"claude-code", "cursor"},
			},
			Keys: []KeyConfig{
				{
					Alias:        "team-a-bot",
					Key:          testKey,
					User:         "alice",
					Team:         "team-a",
					Servers:      []string{"everything"},
					Tools:        map[string][]string{"everything": {"echo", "get-sum"}},
					DenyTools:    map[string][]string{"everything": {"get-env"}},
					Toolsets:     []string{"support"},
					AccessGroups: []string{"readonly"},
					AllowedCIDRs: []string{"127.0.0.0/8", "10.1.2.3/32", "::1/128", "192.168.1.0/24", "172.16.0.0/12"},
					RateLimitRPM: 600,
					Expires:      time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
					Line:         11,
				},
				{
					Alias:   "ops@example.com",
					Key:     "sk-ops-0123456789abcdef",
					Servers: []string{},
					Tools:   map[string][]string{"calc": {}},
					Expires: time.Date(2026, 6, 30, 10, 0, 0, 0, time.UTC),
					Admin:   true,
					NoMCP:   true,
					Line:    25,
				},
			},
		},
		AccessGroups: map[string][]string{"readonly": {"calc"}},
		Toolsets: map[string]*Toolset{
			"support": {Servers: map[string][]string{"everything": {"echo"}, "calc": {"add"}}},
		},
		Sessions: SessionLimits{MaxPerOwner: 5, IdleTimeout: 10 * time.Minute, UnknownID: UnknownIDReject},
		Limits:   DefaultLimits(),
		State:    State{Driver: StateMemory, Replicas: 1},
		Servers: map[string]*Server{
			"everything": {
				Name:            "everything",
				Transport:       TransportStdio,
				Command:         "npx",
				Args:            []string{"-y", "@modelcontextprotocol/server-everything"},
				Cwd:             "/etc/mcpgate",
				Timeout:         DefaultTimeout,
				ProtocolVersion: ProtocolVersionAuto,
				SessionMode:     SessionShared,
			},
			"calc": {
				Name:            "calc",
				Transport:       TransportHTTP,
				URL:             "http://127.0.0.1:4100/mcp",
				Timeout:         DefaultTimeout,
				ProtocolVersion: ProtocolVersionAuto,
				SessionMode:     SessionShared,
				Tools: &ToolPolicy{
					Allow: []string{"add", "sub"},
					Deny:  []string{"drop_db"},
					Overrides: map[string]ToolOverride{
						"add": {Name: "plus", Description: "Adds two numbers"},
						"sub": {Description: "Subtracts"},
					},
				},
			},
		},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Parse mismatch (-got +want):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate of parsed config: %v", err)
	}
	if got.AnonymousOnly() || got.ExposedWithoutAuth("0.0.0.0:4000") {
		t.Errorf("AnonymousOnly = %v, ExposedWithoutAuth = %v; want false with keys", got.AnonymousOnly(), got.ExposedWithoutAuth("0.0.0.0:4000"))
	}
}

func TestParseCallerDefaults(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		dir  string
		get  func(*Config) any
		want any
	}{
		{"data_dir default is next to the file", "", "/cfg", func(c *Config) any { return c.DataDir }, "/cfg/data"},
		{"data_dir default without dir", "", "", func(c *Config) any { return c.DataDir }, "data"},
		{"data_dir null keeps default", "data_dir:\n", "/cfg", func(c *Config) any { return c.DataDir }, "/cfg/data"},
		{"data_dir relative", "data_dir: ' var/state '\n", "/cfg", func(c *Config) any { return c.DataDir }, "/cfg/var/state"},
		{"data_dir absolute", "data_dir: /var/lib/mcpgate\n", "/cfg", func(c *Config) any { return c.DataDir }, "/var/lib/mcpgate"},
		{"data_dir expanded", "data_dir: '${STATE}/db'\n", "/cfg", func(c *Config) any { return c.DataDir }, "/srv/db"},
		{"metrics_listen default", "", "", func(c *Config) any { return c.MetricsListen }, ""},
		{"metrics_listen empty", "metrics_listen: ''\n", "", func(c *Config) any { return c.MetricsListen }, ""},
		{"metrics_listen port 0 like listen", "listen: '127.0.0.1:0'\nmetrics_listen: '127.0.0.1:0'\n", "", func(c *Config) any { return c.MetricsListen }, "127.0.0.1:0"},
		{"sessions default", "", "", sessions, SessionLimits{MaxPerOwner: DefaultMaxSessionsPerOwner, IdleTimeout: DefaultIdleTimeout, UnknownID: UnknownIDReject}},
		{"sessions empty", "sessions: {}\n", "", sessions, SessionLimits{MaxPerOwner: DefaultMaxSessionsPerOwner, IdleTimeout: DefaultIdleTimeout, UnknownID: UnknownIDReject}},
		{"sessions partial", "sessions: {idle_timeout: 5m}\n", "", sessions, SessionLimits{MaxPerOwner: DefaultMaxSessionsPerOwner, IdleTimeout: 5 * time.Minute, UnknownID: UnknownIDReject}},
		{"sessions max only", "sessions: {max_per_owner: 1}\n", "", sessions, SessionLimits{MaxPerOwner: 1, IdleTimeout: DefaultIdleTimeout, UnknownID: UnknownIDReject}},
		{"sessions unknown_id serve", "sessions: {unknown_id: ' Serve '}\n", "", func(c *Config) any { return c.Sessions.UnknownID }, UnknownIDServe},
		{"no auth block", "", "", func(c *Config) any { return c.Auth == nil }, true},
		{"null auth block", "auth:\n", "", func(c *Config) any { return c.Auth == nil }, true},
		{"empty auth block", "auth: {}\n", "", func(c *Config) any { return c.Auth }, &CallerAuth{}},
		{"no tools policy", srv("timeout: 1s"), "", func(c *Config) any { return c.Servers["s"].Tools == nil }, true},
		{"empty tools policy", srv("tools: {}"), "", func(c *Config) any { return c.Servers["s"].Tools }, &ToolPolicy{}},
		{"empty maps stay nil", "access_groups: {}\ntoolsets: {}\n", "", func(c *Config) any { return c.AccessGroups == nil && c.Toolsets == nil }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc), tt.dir, envOf(map[string]string{"STATE": "/srv"}))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.get(c), tt.want); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		})
	}
}

// TestParseNilVersusEmpty checks the lists where omitted means "all" and
// empty means "none": the distinction must survive decoding.
func TestParseNilVersusEmpty(t *testing.T) {
	key := func(fields string) string {
		return "auth:\n  keys:\n    - {alias: a, key: " + testKey + fields + "}\nservers:\n  s: {transport: stdio, command: x}\n"
	}
	tests := []struct {
		name string
		doc  string
		get  func(*Config) any
		want any
	}{
		{"servers omitted", key(""), keyServers, []string(nil)},
		{"servers null", key(", servers: ~"), keyServers, []string(nil)},
		{"servers empty", key(", servers: []"), keyServers, []string{}},
		{"servers listed", key(", servers: [s]"), keyServers, []string{"s"}},
		{"servers empty by alias", "access_groups: {empty: &none []}\n" + key(", servers: *none"), keyServers, []string{}},
		{"tools omitted", key(""), func(c *Config) any { return c.Auth.Keys[0].Tools }, map[string][]string(nil)},
		{"tools for a server empty", key(", tools: {s: []}"), func(c *Config) any { return c.Auth.Keys[0].Tools }, map[string][]string{"s": {}}},
		{"allow omitted", srv("tools: {deny: [a]}"), allow, []string(nil)},
		{"allow null", srv("tools: {allow: ~}"), allow, []string(nil)},
		{"allow empty", srv("tools: {allow: []}"), allow, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc), "", nil)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			// Without cmpopts.EquateEmpty, cmp tells nil from empty.
			if diff := cmp.Diff(tt.get(c), tt.want); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		})
	}
}

func keyServers(c *Config) any { return c.Auth.Keys[0].Servers }
func TestParseCallerValues(t *testing.T) {
	key := func(fields string) string {
		return "auth:\n  keys:\n    - {alias: a, key: " + testKey + ", " + fields + "}\n"
	}
	k0 := func(c *Config) *KeyConfig { return &c.Auth.Keys[0] }
	tests := []struct {
		name string
		doc  string
		get  func(*Config) any
		want any
	}{
		{"expires timestamp", key("expires: 2027-01-01T00:00:00Z"), func(c *Config) any { return k0(c).Expires }, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"expires YAML date", key("expires: 2027-01-01"), func(c *Config) any { return k0(c).Expires }, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"expires quoted RFC 3339 with offset", key("expires: '2027-01-01T01:30:00+01:30'"), func(c *Config) any { return k0(c).Expires }, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"expires fractional seconds", key("expires: '2027-01-01T00:00:00.5Z'"), func(c *Config) any { return k0(c).Expires }, time.Date(2027, 1, 1, 0, 0, 0, 5e8, time.UTC)},
		{"expires omitted is never", key("user: u"), func(c *Config) any { return k0(c).Expires.IsZero() }, true},
		{"rate limit zero", key("rate_limit_rpm: 0"), func(c *Config) any { return k0(c).RateLimitRPM }, 0},
		{"rate limit hex", key("rate_limit_rpm: 0x10"), func(c *Config) any { return k0(c).RateLimitRPM }, 16},
		{"owner fields expanded and trimmed", "auth:\n  keys:\n    - {alias: '${ALIAS}', key: " + testKey + ", user: ' ${U} ', team: t}\n",
			func(c *Config) any { return k0(c).Alias + "/" + k0(c).User + "/" + k0(c).Team }, "bot-1/ann/t"},
		{"ipv6 prefix masked", key("allowed_cidrs: ['2001:db8::1/32', 'fd00::']"), func(c *Config) any { return k0(c).AllowedCIDRs }, []string{"2001:db8::/32", "fd00::/128"}},
		{"cidr trimmed", key("allowed_cidrs: [' 10.0.0.0/8 ']"), func(c *Config) any { return k0(c).AllowedCIDRs }, []string{"10.0.0.0/8"}},
		{"anonymous", "auth: {anonymous: true}\n", func(c *Config) any { return c.Auth.Anonymous }, true},
		{"allowed client values expanded", "auth:\n  allowed_clients: {header: x-client, values: ['${CLIENT}']}\n",
			func(c *Config) any { return c.Auth.AllowedClients.Values }, []string{"my-agent"}},
		{"override names swapped", "servers:\n  s:\n    transport: stdio\n    command: x\n    tools:\n      allow: [a, b]\n      overrides: {a: {name: b}, b: {name: a}}\n",
			func(c *Config) any { return c.Servers["s"].Tools.Overrides }, map[string]ToolOverride{"a": {Name: "b"}, "b": {Name: "a"}}},
		{"override keeps its own name", srv("tools: {allow: [a], overrides: {a: {name: a, description: d}}}"),
			func(c *Config) any { return c.Servers["s"].Tools.Overrides["a"] }, ToolOverride{Name: "a", Description: "d"}},
		{"override with allow omitted", srv("tools: {overrides: {a: {name: b}}}"),
			func(c *Config) any { return c.Servers["s"].Tools.Allows("a") }, true},
		{"deny without allow", srv("tools: {deny: [a]}"),
			func(c *Config) any { return []bool{c.Servers["s"].Tools.Allows("a"), c.Servers["s"].Tools.Allows("b")} }, []bool{false, true}},
		{"aliases are case-sensitive", "auth:\n  keys:\n    - {alias: bot, key: " + testKey + "}\n    - {alias: Bot, key: " + testKey + "x}\n",
			func(c *Config) any { return len(c.Auth.Keys) }, 2},
		{"master key alone", "auth: {master_key: '" + testMasterKey + "'}\n", func(c *Config) any { return c.AnonymousOnly() }, false},
	}
	env := envOf(map[string]string{"ALIAS": "bot-1", "U": "ann", "CLIENT": "My-Agent"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc), "", env)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.get(c), tt.want); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		})
	}
}

func TestParseCallerErrors(t *testing.T) {
	long := strings.Repeat("a", 129)
	tests := []struct {
		name string
		doc  string
		env  map[string]string
		want []string // each one error's full text or a prefix of it, in order
	}{
		// decoding
		{"unknown auth key", "auth: {master_kye: x}\n", nil, []string{"auth.master_kye: unknown field (did you mean master_key?) (line 1)"}},
		{"unknown key field", keyDoc(", alais: b"), nil, []string{"auth.keys[0].alais: unknown field (did you mean alias?) (line 3)"}},
		{"unknown key field deny_tool", keyDoc(", deny_tool: {}"), nil, []string{"auth.keys[0].deny_tool: unknown field (did you mean deny_tools?) (line 3)"}},
		{"unknown allowlist field", "auth: {allowed_clients: {headers: x}}\n", nil, []string{"auth.allowed_clients.headers: unknown field (did you mean header?) (line 1)"}},
		{"unknown sessions field", "sessions: {idle_timout: 1m}\n", nil, []string{"sessions.idle_timout: unknown field (did you mean idle_timeout?) (line 1)"}},
		{"unknown toolset field", "toolsets: {ts: {server: {}}}\n", nil, []string{"toolsets.ts.server: unknown field (did you mean servers?) (line 1)"}},
		{"unknown tools field", toolsDoc("{alow: [a]}"), nil, []string{"servers.calc.tools.alow: unknown field (did you mean allow?) (line 2)"}},
		{"unknown override field", toolsDoc("{overrides: {a: {nmae: b}}}"), nil, []string{"servers.calc.tools.overrides.a.nmae: unknown field (did you mean name?) (line 2)"}},
		{"keys not a list", "auth: {keys: {a: b}}\n", nil, []string{"auth.keys: must be a list of mappings (line 1)"}},
		{"key not a mapping", "auth:\n  keys: [bot]\n", nil, []string{"auth.keys[0]: must be a mapping (line 2)"}},
		{"key null", "auth:\n  keys:\n    -\n", nil, []string{"auth.keys[0]: must be a mapping (line 3)"}},
		{"anonymous not bool", "auth: {anonymous: 'yes'}\n", nil, []string{"auth.anonymous: must be true or false (line 1)"}},
		{"admin not bool", keyDoc(", admin: 1"), nil, []string{"auth.keys[0].admin: must be true or false (line 3)"}},
		{"rate limit string", keyDoc(", rate_limit_rpm: '600'"), nil, []string{"auth.keys[0].rate_limit_rpm: must be an integer (line 3)"}},
		{"rate limit float", keyDoc(", rate_limit_rpm: 1.5"), nil, []string{"auth.keys[0].rate_limit_rpm: must be an integer (line 3)"}},
		{"rate limit list", keyDoc(", rate_limit_rpm: [1]"), nil, []string{"auth.keys[0].rate_limit_rpm: must be an integer (line 3)"}},
		{"rate limit overflow", keyDoc(", rate_limit_rpm: 99999999999999999999"), nil, []string{"auth.keys[0].rate_limit_rpm: must be an integer (line 3)"}},
		{"unknown_id value", "sessions: {unknown_id: allow}\n", nil, []string{`sessions.unknown_id: must be one of reject, serve (got "allow")`}},
		{"unknown_id empty", "sessions: {unknown_id: ''}\n", nil, []string{`sessions.unknown_id: must be one of reject, serve (got "")`}},
		{"max_per_owner string", "sessions: {max_per_owner: '10'}\n", nil, []string{"sessions.max_per_owner: must be an integer (line 1)"}},
		{"max_per_owner float", "sessions: {max_per_owner: 2.0}\n", nil, []string{"sessions.max_per_owner: must be an integer (line 1)"}},
		{"idle_timeout bare number", "sessions: {idle_timeout: 30}\n", nil, []string{`sessions.idle_timeout: must be a duration with a unit, like "30s", "1m" or "500ms" (got "30") (line 1)`}},
		{"expires quoted date", keyDoc(", expires: '2027-01-01'"), nil, []string{`auth.keys[0].expires: must be an RFC 3339 time like 2027-01-01T00:00:00Z (got "2027-01-01") (line 3)`}},
		{"expires word", keyDoc(", expires: tomorrow"), nil, []string{`auth.keys[0].expires: must be an RFC 3339 time like 2027-01-01T00:00:00Z (got "tomorrow") (line 3)`}},
		{"expires number", keyDoc(", expires: 1767225600"), nil, []string{`auth.keys[0].expires: must be an RFC 3339 time like 2027-01-01T00:00:00Z (got "1767225600") (line 3)`}},
		{"expires mapping", keyDoc(", expires: {}"), nil, []string{"auth.keys[0].expires: must be an RFC 3339 time like 2027-01-01T00:00:00Z (line 3)"}},
		{"key servers not a list", keyDoc(", servers: calc"), nil, []string{"auth.keys[0].servers: must be a list of strings (line 3)"}},
		{"key tools null list", keyDoc(", tools: {calc: ~}"), nil, []string{"auth.keys[0].tools.calc: must be a list of strings (line 3)"}},
		{"toolset null list", "toolsets: {ts: {servers: {calc: }}}\n", nil, []string{"toolsets.ts.servers.calc: must be a list of strings (line 1)"}},
		{"access group not a list", "access_groups: {ro: calc}\n", nil, []string{"access_groups.ro: must be a list of strings (line 1)"}},

		// expansion
		{"master key unset variable", "auth: {master_key: '${MK}'}\n", nil, []string{"auth.master_key: environment variable MK is not set"}},
		{"key unset variable", callers("auth:\n  keys:\n    - {alias: bot, key: '${K}'}\n"), nil, []string{"auth.keys[0].key: environment variable K is not set (line 3)"}},
		{"alias unset variable", callers("auth:\n  keys:\n    - {alias: '${A}', key: " + testKey + "}\n"), nil, []string{"auth.keys[0].alias: environment variable A is not set (line 3)"}},
		{"user lone dollar", keyDoc(", user: $U"), nil, []string{`auth.keys[0].user: "$" must start ${NAME} or be doubled as "$$" (line 3)`}},
		{"team unset variable", keyDoc(", team: '${T}'"), nil, []string{"auth.keys[0].team: environment variable T is not set (line 3)"}},
		{"allowed client unset variable", "auth: {allowed_clients: {header: X-C, values: [a, '${C}']}}\n", nil, []string{"auth.allowed_clients.values[1]: environment variable C is not set"}},
		{"data_dir unset variable", "data_dir: '${D}'\n", nil, []string{"data_dir: environment variable D is not set"}},
		{"metrics_listen unset variable", "metrics_listen: '${M}'\n", nil, []string{"metrics_listen: environment variable M is not set"}},

		// validation: auth
		{"master key short", "auth: {master_key: short-key}\n", nil, []string{"auth.master_key: must be at least 16 characters"}},
		{"master key 15 characters", "auth: {master_key: 0123456789abcde}\n", nil, []string{"auth.master_key: must be at least 16 characters"}},
		{"master key control character", "auth: {master_key: \"0123456789abcdef\\t\\u0007\"}\n", nil, []string{"auth.master_key: must not contain control characters"}},
		{"key missing", callers("auth:\n  keys:\n    - {alias: bot}\n"), nil, []string{"auth.keys[0].key: required (line 3)"}},
		{"key empty from variable", callers("auth:\n  keys:\n    - {alias: bot, key: '${K}'}\n"), map[string]string{"K": " "}, []string{"auth.keys[0].key: required (line 3)"}},
		{"key short", callers("auth:\n  keys:\n    - {alias: bot, key: sk-short}\n"), nil, []string{"auth.keys[0].key: must be at least 16 characters (line 3)"}},
		{"key reused", callers("auth:\n  keys:\n    - {alias: a, key: " + testKey + "}\n    - {alias: b, key: " + testKey + "}\n    - {alias: c, key: ' " + testKey + "'}\n"), nil, []string{
			"auth.keys[1].key: same secret as keys[0] (line 4)",
			"auth.keys[2].key: same secret as keys[0] (line 5)",
		}},
		{"key equal to master key", callers("auth:\n  master_key: " + testKey + "\n  keys:\n    - {alias: a, key: " + testKey + "}\n"), nil, []string{
			"auth.keys[0].key: same secret as the master key (line 4)",
		}},
		{"alias missing", callers("auth:\n  keys:\n    - {key: " + testKey + "}\n"), nil, []string{"auth.keys[0].alias: required (line 3)"}},
		{"alias leading dash", callers("auth:\n  keys:\n    - {alias: -bot, key: " + testKey + "}\n"), nil, []string{"auth.keys[0].alias: must match [A-Za-z0-9][A-Za-z0-9_.@-]{0,127} (line 3)"}},
		{"alias with space", callers("auth:\n  keys:\n    - {alias: 'a b', key: " + testKey + "}\n"), nil, []string{"auth.keys[0].alias: must match [A-Za-z0-9][A-Za-z0-9_.@-]{0,127} (line 3)"}},
		{"alias too long", callers("auth:\n  keys:\n    - {alias: " + long + ", key: " + testKey + "}\n"), nil, []string{"auth.keys[0].alias: must match"}},
		{"alias duplicate", callers("auth:\n  keys:\n    - {alias: bot, key: " + testKey + "}\n    - {alias: bot, key: " + testMasterKey + "}\n"), nil, []string{
			"auth.keys[1].alias: duplicate of keys[0].alias (line 4)",
		}},
		{"user control character", keyDoc(`, user: "a\u0000b"`), nil, []string{"auth.keys[0].user: must not contain control characters (line 3)"}},
		{"team too long", keyDoc(", team: " + strings.Repeat("t", 257)), nil, []string{"auth.keys[0].team: must be at most 256 bytes (line 3)"}},
		{"key unknown server", keyDoc(", servers: [calc, nope]"), nil, []string{`auth.keys[0].servers[1]: unknown server "nope" (line 3)`}},
		{"key tools unknown server", keyDoc(", tools: {nope: [a]}, deny_tools: {gone: [b]}"), nil, []string{
			`auth.keys[0].tools.nope: unknown server "nope" (line 3)`,
			`auth.keys[0].deny_tools.gone: unknown server "gone" (line 3)`,
		}},
		{"key tools empty name", keyDoc(", tools: {calc: ['']}"), nil, []string{"auth.keys[0].tools.calc[0]: must not be empty (line 3)"}},
		{"key unknown toolset", keyDoc(", toolsets: [nope]"), nil, []string{`auth.keys[0].toolsets[0]: unknown toolset "nope" (line 3)`}},
		{"key unknown access group", keyDoc(", access_groups: [nope]"), nil, []string{`auth.keys[0].access_groups[0]: unknown access group "nope" (line 3)`}},
		{"key bad cidrs", keyDoc(", allowed_cidrs: [10.0.0.0/33, 'fe80::1%eth0', not-an-ip, '']"), nil, []string{
			`auth.keys[0].allowed_cidrs[0]: invalid CIDR "10.0.0.0/33" (line 3)`,
			`auth.keys[0].allowed_cidrs[1]: invalid CIDR "fe80::1%eth0" (line 3)`,
			`auth.keys[0].allowed_cidrs[2]: invalid CIDR "not-an-ip" (line 3)`,
			`auth.keys[0].allowed_cidrs[3]: invalid CIDR "" (line 3)`,
		}},
		{"key negative rate limit", keyDoc(", rate_limit_rpm: -1"), nil, []string{"auth.keys[0].rate_limit_rpm: must be >= 0 (line 3)"}},
		{"allowed clients without header", "auth: {allowed_clients: {values: [a]}}\n", nil, []string{"auth.allowed_clients.header: required"}},
		{"allowed clients bad header", "auth: {allowed_clients: {header: 'X Client', values: [a]}}\n", nil, []string{"auth.allowed_clients.header: invalid header name (want an HTTP token)"}},
		{"allowed clients without values", "auth: {allowed_clients: {header: X-Client}}\n", nil, []string{"auth.allowed_clients.values: must list at least one value"}},
		{"allowed clients empty values", "auth: {allowed_clients: {header: X-Client, values: []}}\n", nil, []string{"auth.allowed_clients.values: must list at least one value"}},
		{"allowed clients empty value", "auth: {allowed_clients: {header: X-Client, values: [a, ' ']}}\n", nil, []string{"auth.allowed_clients.values[1]: must not be empty"}},

		// validation: groups, toolsets, sessions, top level
		{"access group unknown server", callers("access_groups: {ro: [calc, nope]}\n"), nil, []string{`access_groups.ro[1]: unknown server "nope"`}},
		{"access group empty name", callers("access_groups: {'': [calc]}\n"), nil, []string{`access_groups[""]: invalid access group name (must be non-empty, without control characters)`}},
		{"toolset unknown server", callers("toolsets: {ts: {servers: {calc: [a], nope: [b]}}}\n"), nil, []string{`toolsets.ts.servers.nope: unknown server "nope"`}},
		{"toolset bad name", callers("toolsets: {Support: {servers: {calc: [a]}}}\n"), nil, []string{"toolsets.Support: invalid toolset name (want [a-z0-9][a-z0-9_-]*)"}},
		{"toolset without servers", callers("toolsets: {ts: {}, tz: ~, ty: {servers: {}}}\n"), nil, []string{
			"toolsets.ts.servers: must name at least one server",
			"toolsets.ty.servers: must name at least one server",
			"toolsets.tz.servers: must name at least one server",
		}},
		{"toolset server without tools", callers("toolsets: {ts: {servers: {calc: []}}}\n"), nil, []string{"toolsets.ts.servers.calc: must list at least one tool"}},
		{"toolset empty tool name", callers("toolsets: {ts: {servers: {calc: [a, '']}}}\n"), nil, []string{"toolsets.ts.servers.calc[1]: must not be empty"}},
		{"max_per_owner zero", "sessions: {max_per_owner: 0}\n", nil, []string{"sessions.max_per_owner: must be >= 1"}},
		{"max_per_owner negative", "sessions: {max_per_owner: -1}\n", nil, []string{"sessions.max_per_owner: must be >= 1"}},
		{"idle_timeout zero", "sessions: {idle_timeout: 0s}\n", nil, []string{"sessions.idle_timeout: must be > 0"}},
		{"idle_timeout negative", "sessions: {idle_timeout: -1m}\n", nil, []string{"sessions.idle_timeout: must be > 0"}},
		{"metrics_listen without port", "metrics_listen: localhost\n", nil, []string{`metrics_listen: must be host:port with a numeric port (got "localhost")`}},
		{"metrics_listen same as listen", "listen: '127.0.0.1:4000'\nmetrics_listen: '127.0.0.1:4000'\n", nil, []string{"metrics_listen: must differ from listen (leave it empty to serve /metrics on listen)"}},
		{"metrics_listen same as default listen", "metrics_listen: '" + DefaultListen + "'\n", nil, []string{"metrics_listen: must differ from listen"}},
		{"data_dir empty", "data_dir: ''\n", nil, []string{"data_dir: must not be empty"}},
		{"data_dir blank", "data_dir: '  '\n", nil, []string{"data_dir: must not be empty"}},
		{"data_dir empty variable", "data_dir: '${D}'\n", map[string]string{"D": ""}, []string{"data_dir: must not be empty"}},

		// validation: server tool policy
		{"allow empty name", toolsDoc("{allow: [a, '']}"), nil, []string{"servers.calc.tools.allow[1]: must not be empty"}},
		{"deny empty name", toolsDoc("{deny: ['']}"), nil, []string{"servers.calc.tools.deny[0]: must not be empty"}},
		{"allow and deny", toolsDoc("{allow: [add, sub], deny: [sub]}"), nil, []string{`servers.calc.tools.deny[0]: tool "sub" is also in allow`}},
		{"override bad name", toolsDoc("{overrides: {add: {name: 'a b'}}}"), nil, []string{
			"servers.calc.tools.overrides.add.name: must be 1-128 characters of [A-Za-z0-9_.-] (the MCP tool-name rule)",
		}},
		{"override long name", toolsDoc("{overrides: {add: {name: " + long + "}}}"), nil, []string{"servers.calc.tools.overrides.add.name: must be 1-128 characters"}},
		{"override same display name", toolsDoc("{overrides: {add: {name: calc}, sub: {name: calc}}}"), nil, []string{
			`servers.calc.tools.overrides.sub.name: display name "calc" is also the name of overrides.add`,
		}},
		{"override takes an allowed name", toolsDoc("{allow: [add, sub], overrides: {add: {name: sub}}}"), nil, []string{
			`servers.calc.tools.overrides.add.name: display name "sub" is the name of another allowed tool`,
		}},
		{"override for a tool not allowed", toolsDoc("{allow: [add], overrides: {mul: {name: times}}}"), nil, []string{
			"servers.calc.tools.overrides.mul: override for a tool the policy hides",
		}},
		{"override for a denied tool", toolsDoc("{deny: [drop_db], overrides: {drop_db: {description: x}}}"), nil, []string{
			"servers.calc.tools.overrides.drop_db: override for a tool the policy hides",
		}},
		{"override for a tool with allow empty", toolsDoc("{allow: [], overrides: {add: {description: x}}}"), nil, []string{
			"servers.calc.tools.overrides.add: override for a tool the policy hides",
		}},
		{"override sets nothing", toolsDoc("{overrides: {add: {}, sub: ~}}"), nil, []string{
			"servers.calc.tools.overrides.add: must set name or description",
			"servers.calc.tools.overrides.sub: must set name or description",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc), "/cfg", envOf(tt.env))
			if err == nil {
				t.Fatalf("Parse succeeded, want errors %q; got %+v", tt.want, c)
			}
			if c != nil {
				t.Errorf("Parse returned a config with an error")
			}
			fes := fieldErrors(t, err)
			if len(fes) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(fes), len(tt.want), err)
			}
			for i, fe := range fes {
				if got := fe.Error(); !strings.HasPrefix(got, tt.want[i]) {
					t.Errorf("error %d = %q, want prefix %q", i, got, tt.want[i])
				}
			}
		})
	}
}

func TestCallerErrorsDoNotEchoSecrets(t *testing.T) {
	const secret = "s3cr3t-Zq9"
	long := secret + "-0123456789"
	env := envOf(map[string]string{
		"SHORT":  secret,
		"LONG":   long,
		"CTRL":   long + "\x00\r\n",
		"SPACED": " " + long + " ",
	})
	tests := []struct {
		name string
		doc  string
	}{
		{"short master key", "auth: {master_key: '${SHORT}'}\n"},
		{"short master key literal", "auth: {master_key: " + secret + "}\n"},
		{"master key with control characters", "auth: {master_key: '${CTRL}'}\n"},
		{"master key with lone dollar", "auth: {master_key: '" + long + "$x'}\n"},
		{"master key with bad variable", "auth: {master_key: '${" + secret + "}'}\n"},
		{"master key unterminated", "auth: {master_key: '" + long + "${X'}\n"},
		{"short key", "auth:\n  keys:\n    - {alias: a, key: '${SHORT}'}\n"},
		{"key with control characters", "auth:\n  keys:\n    - {alias: a, key: '${CTRL}'}\n"},
		{"key with lone dollar", "auth:\n  keys:\n    - {alias: a, key: '$" + long + "'}\n"},
		{"key equal to master", "auth:\n  master_key: '${LONG}'\n  keys:\n    - {alias: a, key: '${SPACED}'}\n"},
		{"key reused", "auth:\n  keys:\n    - {alias: a, key: '${LONG}'}\n    - {alias: b, key: " + long + "}\n"},
		{"key reused and alias duplicate", "auth:\n  keys:\n    - {alias: a, key: '${LONG}'}\n    - {alias: a, key: '${LONG}', servers: [x]}\n"},
		{"key of a broken entry", "auth:\n  keys:\n    - {alias: '', key: '${LONG}', rate_limit_rpm: -1, allowed_cidrs: [x]}\n"},
		{"key entry with unknown field", "auth:\n  keys:\n    - {alias: a, key: '${LONG}', secret: x}\n"},
		{"key not a mapping", "auth:\n  keys: ['${LONG}']\n"},
		{"key list", "auth:\n  keys:\n    - {alias: a, key: ['${LONG}']}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", env)
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			fieldErrors(t, err)
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error echoes the secret: %v", err)
			}
		})
	}
}

func TestExposedWithoutAuth(t *testing.T) {
	noAuth := &Config{}
	emptyAuth := &Config{Auth: &CallerAuth{}}
	anon := &Config{Auth: &CallerAuth{Anonymous: true}}
	master := &Config{Auth: &CallerAuth{MasterKey: testMasterKey}}
	keys := &Config{Auth: &CallerAuth{Keys: []KeyConfig{{Alias: "a", Key: testKey}}}}
	tests := []struct {
		name   string
		c      *Config
		listen string
		want   bool
	}{
		{"no auth, all interfaces", noAuth, "0.0.0.0:4000", true},
		{"no auth, empty host", noAuth, ":4000", true},
		{"no auth, ipv6 any", noAuth, "[::]:4000", true},
		{"no auth, public address", noAuth, "192.0.2.7:4000", true},
		{"no auth, host name", noAuth, "gateway.example.com:4000", true},
		{"no auth, unparsable", noAuth, "localhost", true},
		{"no auth, loopback", noAuth, "127.0.0.1:4000", false},
		{"no auth, other loopback", noAuth, "127.1.2.3:4000", false},
		{"no auth, ipv6 loopback", noAuth, "[::1]:4000", false},
		{"no auth, ipv4-mapped loopback", noAuth, "[::ffff:127.0.0.1]:4000", false},
		{"no auth, localhost", noAuth, "localhost:4000", false},
		{"no auth, LOCALHOST", noAuth, "LOCALHOST:0", false},
		{"empty auth block, all interfaces", emptyAuth, "0.0.0.0:4000", true},
		{"anonymous, all interfaces", anon, "0.0.0.0:4000", false},
		{"anonymous, loopback", anon, "127.0.0.1:4000", false},
		{"master key, all interfaces", master, "0.0.0.0:4000", false},
		{"keys, all interfaces", keys, "0.0.0.0:4000", false},
		{"keys, loopback", keys, "[::1]:4000", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.ExposedWithoutAuth(tt.listen); got != tt.want {
				t.Errorf("ExposedWithoutAuth(%q) = %v, want %v", tt.listen, got, tt.want)
			}
		})
	}
}

func TestAnonymousOnly(t *testing.T) {
	tests := []struct {
		name string
		c    *Config
		want bool
	}{
		{"no auth block", &Config{}, true},
		{"empty auth block", &Config{Auth: &CallerAuth{}}, true},
		{"anonymous only", &Config{Auth: &CallerAuth{Anonymous: true}}, true},
		{"allowlist only", &Config{Auth: &CallerAuth{AllowedClients: &ClientAllowlist{Header: "X-C", Values: []string{"a"}}}}, true},
		{"master key", &Config{Auth: &CallerAuth{MasterKey: testMasterKey}}, false},
		{"keys", &Config{Auth: &CallerAuth{Keys: []KeyConfig{{Alias: "a", Key: testKey}}}}, false},
		{"anonymous and keys", &Config{Auth: &CallerAuth{Anonymous: true, Keys: []KeyConfig{{Alias: "a", Key: testKey}}}}, false},
	}
	for _, tt := range tests {
		if got := tt.c.AnonymousOnly(); got != tt.want {
			t.Errorf("%s: AnonymousOnly() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestValidateCallersProgrammatic(t *testing.T) {
	servers := map[string]*Server{"calc": {Transport: TransportStdio, Command: "x"}}
	tests := []struct {
		name string
		c    *Config
		want []string
	}{
		{"zero values mean defaults", &Config{Auth: &CallerAuth{}, Servers: servers}, nil},
		{"key built in code", &Config{
			Servers:      servers,
			AccessGroups: map[string][]string{"ro": {"calc"}},
			Toolsets:     map[string]*Toolset{"ts": {Servers: map[string][]string{"calc": {"add"}}}},
			Auth: &CallerAuth{Keys: []KeyConfig{{
				Alias: "a", Key: testKey, Servers: []string{}, Toolsets: []string{"ts"}, AccessGroups: []string{"ro"},
				AllowedCIDRs: []string{"10.1.2.3/8", "::1"},
			}}},
		}, nil},
		{"negative session limits", &Config{Sessions: SessionLimits{MaxPerOwner: -1, IdleTimeout: -time.Second}}, []string{
			"sessions.max_per_owner: must be >= 1",
			"sessions.idle_timeout: must be > 0",
		}},
		{"nil toolset", &Config{Toolsets: map[string]*Toolset{"ts": nil}}, []string{"toolsets.ts: toolset is nil"}},
		{"key errors have no line", &Config{Auth: &CallerAuth{Keys: []KeyConfig{{Alias: "a"}}}}, []string{"auth.keys[0].key: required"}},
		{"key line when known", &Config{Auth: &CallerAuth{Keys: []KeyConfig{{Alias: "a", Line: 7}}}}, []string{"auth.keys[0].key: required (line 7)"}},
		{"server tool policy", &Config{Servers: map[string]*Server{"calc": {Transport: TransportStdio, Command: "x",
			Tools: &ToolPolicy{Allow: []string{"a"}, Deny: []string{"a"}}}}}, []string{`servers.calc.tools.deny[0]: tool "a" is also in allow`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, fe := range fieldErrors(t, tt.c.Validate()) {
				got = append(got, fe.Error())
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Validate (-got +want):\n%s", diff)
			}
		})
	}
}
