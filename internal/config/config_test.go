package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const fullExample = `
listen: 127.0.0.1:4001
allowed_origins: ["https://App.example.com/", "*"]
allowed_hosts: [gateway.local, "[::1]"]
tool_name_separator: "."
max_body_bytes: 1MiB
servers:
  notes:
    transport: stdio
    command: ./bin/notes
    args: [--db, "${HOME}/notes.db", --price, "$$5"]
    env: {NOTES_TOKEN: "${NOTES_TOKEN}", EMPTY: }
    cwd: ""
  calc:
    transport: http
    url: http://127.0.0.1:4100/mcp
    headers: {X-Team: " a ", Authorization: "Bearer ${CALC_TOKEN}"}
    timeout: 30s
    protocol_version: 2025-06-18
  legacy:
    transport: sse
    url: https://legacy.example.com/sse
  npx:
    transport: stdio
    command: npx
    args: [-y, "@modelcontextprotocol/server-everything"]
    cwd: work
    timeout: 500ms
`

func TestParseFull(t *testing.T) {
	env := envOf(map[string]string{
		"HOME":        "/home/ann",
		"NOTES_TOKEN": "n-secret",
		"CALC_TOKEN":  "c-secret",
	})
	got, err := Parse([]byte(fullExample), "/etc/mcpgate", env)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &Config{
		Listen:            "127.0.0.1:4001",
		AllowedOrigins:    []string{"https://app.example.com", "*"},
		AllowedHosts:      []string{"gateway.local", "::1"},
		ToolNameSeparator: ".",
		MaxBodyBytes:      1 << 20,
		DataDir:           "/etc/mcpgate/data",
		Store:             Store{Driver: StoreSQLite},
		Sessions:          SessionLimits{MaxPerOwner: DefaultMaxSessionsPerOwner, IdleTimeout: DefaultIdleTimeout, UnknownID: UnknownIDReject},
		Limits:            DefaultLimits(),
		State:             State{Driver: StateMemory, Replicas: 1},
		Dir:               "/etc/mcpgate",
		Servers: map[string]*Server{
			"notes": {
				Name:            "notes",
				Transport:       TransportStdio,
				Command:         "/etc/mcpgate/bin/notes",
				Args:            []string{"--db", "/home/ann/notes.db", "--price", "$5"},
				Env:             map[string]string{"NOTES_TOKEN": "n-secret", "EMPTY": ""},
				Cwd:             "/etc/mcpgate",
				Timeout:         DefaultTimeout,
				ProtocolVersion: ProtocolVersionAuto,
				SessionMode:     SessionShared,
			},
			"calc": {
				Name:            "calc",
				Transport:       TransportHTTP,
				URL:             "http://127.0.0.1:4100/mcp",
				Headers:         map[string]string{"X-Team": "a", "Authorization": "Bearer c-secret"},
				Timeout:         30 * time.Second,
				ProtocolVersion: "2025-06-18",
				SessionMode:     SessionShared,
			},
			"legacy": {
				Name:            "legacy",
				Transport:       TransportSSE,
				URL:             "https://legacy.example.com/sse",
				Timeout:         DefaultTimeout,
				ProtocolVersion: ProtocolVersionAuto,
				SessionMode:     SessionShared,
			},
			"npx": {
				Name:            "npx",
				Transport:       TransportStdio,
				Command:         "npx",
				Args:            []string{"-y", "@modelcontextprotocol/server-everything"},
				Cwd:             "/etc/mcpgate/work",
				Timeout:         500 * time.Millisecond,
				ProtocolVersion: ProtocolVersionAuto,
				SessionMode:     SessionShared,
			},
		},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Parse mismatch (-got +want):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate of parsed config: %v", err)
	}
	if diff := cmp.Diff(got.ServerNames(), []string{"calc", "legacy", "notes", "npx"}); diff != "" {
		t.Errorf("ServerNames (-got +want):\n%s", diff)
	}
}

func TestParseDefaults(t *testing.T) {
	for _, doc := range []string{"", "# only a comment\n", "---\n", "servers:\n", "servers: {}\n", "listen: ~\n"} {
		got, err := Parse([]byte(doc), "", nil)
		if err != nil {
			t.Fatalf("Parse(%q): %v", doc, err)
		}
		want := &Config{
			Listen:            DefaultListen,
			ToolNameSeparator: DefaultSeparator,
			MaxBodyBytes:      DefaultMaxBodyBytes,
			DataDir:           DefaultDataDir, // relative: Parse got no dir
			Store:             Store{Driver: StoreSQLite},
			Sessions:          SessionLimits{MaxPerOwner: DefaultMaxSessionsPerOwner, IdleTimeout: DefaultIdleTimeout, UnknownID: UnknownIDReject},
			Limits: Limits{MaxBatch: 50, MaxInflightPerSession: 32, MaxUpstreamMessage: 16 << 20, MaxStreams: 10000,
				ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, SSEWriteTimeout: 10 * time.Second, MaxBoundPerServer: 128},
			State: State{Driver: StateMemory, Replicas: 1},
		}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("Parse(%q) (-got +want):\n%s", doc, diff)
		}
	}
}

func TestParseValues(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		get  func(*Config) any
		want any
	}{
		{"max_body_bytes int", "max_body_bytes: 1024", maxBody, int64(1024)},
		{"max_body_bytes hex", "max_body_bytes: 0x100", maxBody, int64(256)},
		{"max_body_bytes MiB", `max_body_bytes: "4MiB"`, maxBody, int64(4 << 20)},
		{"max_body_bytes KiB", "max_body_bytes: 512KiB", maxBody, int64(512 << 10)},
		{"max_body_bytes MB", "max_body_bytes: 1MB", maxBody, int64(1000000)},
		{"max_body_bytes spaced kB", "max_body_bytes: 2 kB", maxBody, int64(2000)},
		{"max_body_bytes B", "max_body_bytes: 7B", maxBody, int64(7)},
		{"timeout 1m", srv("timeout: 1m"), timeout, time.Minute},
		{"timeout 1h30m", srv("timeout: 1h30m"), timeout, 90 * time.Minute},
		{"timeout null keeps default", srv("timeout:"), timeout, DefaultTimeout},
		{"numeric arg", srv("args: [--port, 8080, true]"), func(c *Config) any { return c.Servers["s"].Args }, []string{"--port", "8080", "true"}},
		{"header names and values trimmed", "servers:\n  h: {transport: http, url: 'http://x', headers: {' X-A ': \"\\tv \"}}",
			func(c *Config) any { return c.Servers["h"].Headers }, map[string]string{"X-A": "v"}},
		{"anchors and aliases", "servers:\n  a: &base {transport: stdio, command: go}\n  b: *base\n",
			func(c *Config) any { return c.Servers["b"].Command + " " + c.Servers["b"].Name }, "go b"},
		{"empty lists become nil", "allowed_origins: []\n" + srv("args: []\n    env: {}"),
			func(c *Config) any {
				return c.AllowedOrigins == nil && c.Servers["s"].Args == nil && c.Servers["s"].Env == nil
			}, true},
		{"no dir leaves relative paths", "servers:\n  s: {transport: stdio, command: ./x, cwd: sub}",
			func(c *Config) any { return c.Servers["s"].Command + " " + c.Servers["s"].Cwd }, "./x sub"},
		{"absolute command kept", "servers:\n  s: {transport: stdio, command: /usr/bin/x}", func(c *Config) any { return c.Servers["s"].Command }, "/usr/bin/x"},
		{"listen port 0", "listen: 'localhost:0'", func(c *Config) any { return c.Listen }, "localhost:0"},
		{"listen all interfaces", "listen: ':4000'", func(c *Config) any { return c.Listen }, ":4000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc), "", nil)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.get(c), tt.want); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		})
	}
}

func maxBody(c *Config) any { return c.MaxBodyBytes }
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		env  map[string]string
		want []string // each must be one error's full text, in order
	}{
		{"unknown top-level key", "lisen: x\nbogus: 1\n", nil, []string{
			"lisen: unknown field (did you mean listen?) (line 1)",
			"bogus: unknown field (line 2)",
		}},
		{"unknown server key", "servers:\n  calc:\n    transport: http\n    url: http://x\n    hedaers: {}\n", nil, []string{
			"servers.calc.hedaers: unknown field (did you mean headers?) (line 5)",
		}},
		{"duplicate key", "listen: a:1\nlisten: b:2\n", nil, []string{"listen: duplicate key (line 2)"}},
		{"merge key", "servers:\n  a:\n    <<: {transport: stdio}\n    command: x\n", nil, []string{
			"servers.a.<<: merge keys are not supported (line 3)",
		}},
		{"two documents", "listen: a:1\n---\nlisten: b:2\n", nil, []string{"more than one YAML document (line 2)"}},
		{"root not a mapping", "- a\n", nil, []string{"(root): must be a mapping (line 1)"}},
		{"syntax error", "listen: [\n", nil, nil},
		{"servers not a mapping", "servers: [a]\n", nil, []string{"servers: must be a mapping (line 1)"}},
		{"server not a mapping", "servers: {a: 1}\n", nil, []string{"servers.a: must be a mapping (line 1)"}},
		{"string field is a list", "listen: [a]\n", nil, []string{"listen: must be a string (line 1)"}},
		{"list field is a string", `allowed_origins: "*"`, nil, []string{"allowed_origins: must be a list of strings (line 1)"}},
		{"list element is a map", srv("args: [a, {b: c}]"), nil, []string{"servers.s.args[1]: must be a string (line 5)"}},
		{"map value is a list", srv("env: {A: [1]}"), nil, []string{"servers.s.env.A: must be a string (line 5)"}},
		{"non-string key", "servers:\n  ? [a]\n  : {}\n", nil, []string{"servers: keys must be strings (line 2)"}},

		{"url not http", "servers:\n  calc: {transport: http, url: 'ftp://x/'}\n", nil, []string{"servers.calc.url: must be an http or https URL"}},
		{"url without host", "servers:\n  calc: {transport: sse, url: 'http:/x'}\n", nil, []string{"servers.calc.url: must be an http or https URL"}},
		{"url missing", "servers:\n  calc: {transport: http}\n", nil, []string{"servers.calc.url: required for transport http"}},
		{"command missing", "servers:\n  notes: {transport: stdio}\n", nil, []string{"servers.notes.command: required for transport stdio"}},
		{"bad server name", "servers:\n  Bad!: {transport: stdio, command: x}\n", nil, []string{"servers.Bad!: invalid server name (want [a-z0-9][a-z0-9_-]*)"}},
		{"server name starts with dash", "servers:\n  -a: {transport: stdio, command: x}\n", nil, []string{"servers.-a: invalid server name"}},
		{"server name with dot is quoted", "servers:\n  a.b: {transport: stdio, command: x}\n", nil, []string{`servers["a.b"]: invalid server name`}},
		{"server name contains separator", "servers:\n  a__b: {transport: stdio, command: x}\n", nil, []string{`servers.a__b: name must not contain the tool name separator "__"`}},
		{"custom separator", "tool_name_separator: '-'\nservers:\n  a-b: {transport: stdio, command: x}\n", nil, []string{`servers.a-b: name must not contain the tool name separator "-"`}},
		// <server><sep><tool> must split one way only (issue 22 §4): a_ + __ + x
		// reads as a + __ + _x.
		{"server name ends with a separator character", "servers:\n  a_: {transport: stdio, command: x}\n", nil, []string{
			`servers.a_: name must not begin or end with a character of the tool name separator "__" (its tools' names would read as another server's)`}},
		{"custom separator, name ends with one of its characters", "tool_name_separator: '-_'\nservers:\n  a-: {transport: stdio, command: x}\n  b_: {transport: stdio, command: x}\n", nil, []string{
			`servers.a-: name must not begin or end with a character of the tool name separator "-_" (its tools' names would read as another server's)`,
			`servers.b_: name must not begin or end with a character of the tool name separator "-_" (its tools' names would read as another server's)`}},
		{"custom separator, name begins with one of its characters", "tool_name_separator: '-z'\nservers:\n  za: {transport: stdio, command: x}\n", nil, []string{
			`servers.za: name must not begin or end with a character of the tool name separator "-z" (its tools' names would read as another server's)`}},
		{"unknown protocol version", srv("protocol_version: 2024-01-01"), nil, []string{
			`servers.s.protocol_version: must be one of auto, 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28 (got "2024-01-01")`,
		}},
		{"empty protocol version", srv("protocol_version: ''"), nil, []string{`servers.s.protocol_version: must be one of auto, 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28 (got "")`}},
		{"listen without port", "listen: localhost\n", nil, []string{`listen: must be host:port with a numeric port (got "localhost")`}},
		{"listen named port", "listen: 'localhost:http'\n", nil, []string{"listen: must be host:port"}},
		{"listen empty", "listen: ''\n", nil, []string{"listen: must be host:port"}},
		{"separator with space", "tool_name_separator: 'a b'\n", nil, []string{"tool_name_separator: must be non-empty and use only [A-Za-z0-9_.-]"}},
		{"separator empty", "tool_name_separator: ''\n", nil, []string{"tool_name_separator: must be non-empty and use only [A-Za-z0-9_.-]"}},
		{"unknown transport", "servers:\n  x: {transport: websocket}\n", nil, []string{`servers.x.transport: must be one of stdio, sse, http, openapi (got "websocket")`}},
		{"missing transport", "servers:\n  x: {command: y}\n", nil, []string{"servers.x.transport: required; must be one of stdio, sse, http"}},
		{"null server", "servers:\n  x:\n", nil, []string{"servers.x.transport: required; must be one of stdio, sse, http"}},
		{"http fields on stdio", srv("url: http://x\n    headers: {A: b}"), nil, []string{
			"servers.s.url: not allowed for transport stdio",
			"servers.s.headers: not allowed for transport stdio",
		}},
		{"stdio fields on http", "servers:\n  h: {transport: http, url: 'http://x', command: y, args: [a], env: {A: b}, cwd: /tmp}\n", nil, []string{
			"servers.h.command: not allowed for transport http",
			"servers.h.args: not allowed for transport http",
			"servers.h.env: not allowed for transport http",
			"servers.h.cwd: not allowed for transport http",
		}},
		{"timeout zero", srv("timeout: 0s"), nil, []string{"servers.s.timeout: must be > 0"}},
		{"timeout negative", srv("timeout: -1s"), nil, []string{"servers.s.timeout: must be > 0"}},
		{"timeout bare number", srv("timeout: 30"), nil, []string{`servers.s.timeout: must be a duration with a unit, like "30s", "1m" or "500ms" (got "30") (line 5)`}},
		{"timeout garbage", srv("timeout: soon"), nil, []string{`servers.s.timeout: must be a duration with a unit`}},
		{"header name not a token", "servers:\n  h: {transport: http, url: 'http://x', headers: {'X(Team)': a}}\n", nil, []string{
			`servers.h.headers.X(Team): invalid header name (want an HTTP token)`,
		}},
		{"header name with space is quoted", "servers:\n  h: {transport: http, url: 'http://x', headers: {'X Team': a}}\n", nil, []string{
			`servers.h.headers["X Team"]: invalid header name`,
		}},
		{"header value with CRLF", "servers:\n  h: {transport: http, url: 'http://x', headers: {X-A: \"a\\r\\nB: c\"}}\n", nil, []string{
			"servers.h.headers.X-A: value must not contain CR, LF or NUL",
		}},
		{"reserved header", "servers:\n  h: {transport: http, url: 'http://x', headers: {mcp-session-id: a}}\n", nil, []string{
			"servers.h.headers.mcp-session-id: header is set by the gateway and must not be configured",
		}},
		{"header differing in case", "servers:\n  h: {transport: http, url: 'http://x', headers: {X-A: a, x-a: b}}\n", nil, []string{
			`servers.h.headers.x-a: duplicate of header "X-A" (names are case-insensitive)`,
		}},
		{"header duplicate after trim", "servers:\n  h: {transport: http, url: 'http://x', headers: {X-A: a, ' X-A': b}}\n", nil, []string{
			"servers.h.headers.X-A: duplicate header",
		}},
		{"env name with =", srv("env: {'A=B': c}"), nil, []string{`servers.s.env.A=B: invalid variable name`}},
		{"max_body_bytes zero", "max_body_bytes: 0\n", nil, []string{"max_body_bytes: must be > 0"}},
		{"max_body_bytes negative", "max_body_bytes: -1\n", nil, []string{"max_body_bytes: must be > 0"}},
		{"max_body_bytes bad unit", "max_body_bytes: 4XB\n", nil, []string{`max_body_bytes: must be a number of bytes or a size like "4MiB", "512KiB" or "1MB" (got "4XB") (line 1)`}},
		{"max_body_bytes float", "max_body_bytes: 1.5\n", nil, []string{"max_body_bytes: must be a number of bytes"}},
		{"max_body_bytes overflow", "max_body_bytes: 9999999999GiB\n", nil, []string{"max_body_bytes: must be a number of bytes"}},
		{"bad origin", "allowed_origins: ['https://a.example/path', '']\n", nil, []string{
			`allowed_origins[0]: must be "*" or an origin like "https://example.com" (got "https://a.example/path")`,
			`allowed_origins[1]: must be "*" or an origin`,
		}},
		{"host with port", "allowed_hosts: ['a.example:80']\n", nil, []string{`allowed_hosts[0]: must be a host name or IP address without port (got "a.example:80")`}},

		{"unset variable", srv("args: ['${NOPE}']"), nil, []string{"servers.s.args[0]: environment variable NOPE is not set"}},
		{"unset variable in listen", "listen: '${ADDR}'\n", nil, []string{"listen: environment variable ADDR is not set"}},
		{"lone dollar", "servers:\n  s: {transport: stdio, command: '$HOME/x'}", nil, []string{`servers.s.command: "$" must start ${NAME} or be doubled as "$$"`}},
		{"unterminated", srv("cwd: '${HOME'"), nil, []string{`servers.s.cwd: unterminated "${"`}},
		{"bad variable name", srv("env: {A: '${1X}'}"), nil, []string{"servers.s.env.A: invalid variable name in ${...}"}},
		{"variable expanding to empty listen", "listen: '${ADDR}'\n", map[string]string{"ADDR": ""}, []string{`listen: must be host:port with a numeric port (got "")`}},

		{"all problems reported", "servers:\n  Bad!: {transport: stdio}\n  calc: {transport: http, url: 'x'}\nmax_body_bytes: 0\n", nil, []string{
			"max_body_bytes: must be > 0",
			"servers.Bad!: invalid server name (want [a-z0-9][a-z0-9_-]*)",
			"servers.Bad!.command: required for transport stdio",
			"servers.calc.url: must be an http or https URL",
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
			if tt.want == nil {
				return
			}
			if len(fes) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(fes), len(tt.want), err)
			}
			for i, fe := range fes {
				// Exact text where the whole message is given, else a prefix.
				if got := fe.Error(); !strings.HasPrefix(got, tt.want[i]) {
					t.Errorf("error %d = %q, want prefix %q", i, got, tt.want[i])
				}
			}
		})
	}
}

// TestServerNameSeparatorEdges: only a separator character at either end
// of a server name is refused; inside a name, or with a separator it does
// not use, it is fine.
func TestServerNameSeparatorEdges(t *testing.T) {
	for _, doc := range []string{
		"servers:\n  a_b: {transport: stdio, command: x}\n",
		"tool_name_separator: '.'\nservers:\n  a_: {transport: stdio, command: x}\n",
		"tool_name_separator: '-'\nservers:\n  a_: {transport: stdio, command: x}\n",
	} {
		if _, err := Parse([]byte(doc), "", nil); err != nil {
			t.Errorf("Parse(%q): %v", doc, err)
		}
	}
}

func TestExpandString(t *testing.T) {
	env := envOf(map[string]string{"A": "x", "EMPTY": "", "YAML": "a: b\n- c", "_u1": "u"})
	tests := []struct {
		in, want string
		wantErr  string
	}{
		{in: "", want: ""},
		{in: "plain", want: "plain"},
		{in: "${A}", want: "x"},
		{in: "pre-${A}-${A}-post", want: "pre-x-x-post"},
		{in: "${EMPTY}", want: ""},
		{in: "${_u1}", want: "u"},
		{in: "$$", want: "$"},
		{in: "$${A}", want: "${A}"},
		{in: "$$$${A}", want: "$${A}"},
		{in: "$$${A}", want: "$x"},
		{in: "${YAML}", want: "a: b\n- c"},
		{in: "${A}}", want: "x}"},
		{in: "$", wantErr: `"$" must start ${NAME}`},
		{in: "a$b", wantErr: `"$" must start ${NAME}`},
		{in: "${", wantErr: "unterminated"},
		{in: "${A", wantErr: "unterminated"},
		{in: "${}", wantErr: "invalid variable name"},
		{in: "${A-B}", wantErr: "invalid variable name"},
		{in: "${A:-d}", wantErr: "invalid variable name"},
		{in: "${UNSET}", wantErr: "environment variable UNSET is not set"},
	}
	for _, tt := range tests {
		got, err := expandString(tt.in, env)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("expandString(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("expandString(%q): %v", tt.in, err)
		case got != tt.want:
			t.Errorf("expandString(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestExpandIsNotYAML checks that a variable's value stays data: YAML in it
// does not add keys, and fields outside the expansion list stay literal.
func TestExpandIsNotYAML(t *testing.T) {
	env := envOf(map[string]string{"CMD": "x\n    url: http://evil", "SEP": "__"})
	c, err := Parse([]byte(srv("args: ['${CMD}']")+"tool_name_separator: '$${SEP}'\n"), "", env)
	if err == nil {
		t.Fatalf("Parse succeeded with separator %q, want error", c.ToolNameSeparator)
	}
	c, err = Parse([]byte(srv("args: ['${CMD}']")), "", env)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if diff := cmp.Diff(c.Servers["s"].Args, []string{"x\n    url: http://evil"}); diff != "" {
		t.Errorf("args (-got +want):\n%s", diff)
	}
	if c.Servers["s"].URL != "" {
		t.Errorf("URL = %q, want it untouched by an expanded value", c.Servers["s"].URL)
	}
}

func TestErrorsDoNotEchoSecrets(t *testing.T) {
	const secret = "s3cr3t-Zq9"
	env := envOf(map[string]string{
		"TOKEN":    secret + "\r\nX-Evil: 1",
		"NULTOKEN": secret + "\x00",
		"URL":      "ftp://user:" + secret + "@host/",
	})
	tests := []struct {
		name string
		doc  string
	}{
		{"header value with CRLF from env", "servers:\n  h: {transport: http, url: 'http://x', headers: {Authorization: 'Bearer ${TOKEN}'}}\n"},
		{"header value with lone dollar", "servers:\n  h: {transport: http, url: 'http://x', headers: {Authorization: 'Bearer " + secret + "$x'}}\n"},
		{"header value with bad variable", "servers:\n  h: {transport: http, url: 'http://x', headers: {Authorization: '${" + secret + "'}}\n"},
		{"env value with NUL", srv("env: {TOKEN: '${NULTOKEN}'}")},
		{"arg with NUL", srv("args: ['--token=${NULTOKEN}']")},
		{"url with credentials", "servers:\n  h: {transport: http, url: '${URL}'}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", env)
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error echoes the secret: %v", err)
			}
		})
	}
}

func TestValidateProgrammatic(t *testing.T) {
	tests := []struct {
		name string
		c    *Config
		want []string
	}{
		{"zero values mean defaults", &Config{
			Servers: map[string]*Server{"a": {Transport: TransportStdio, Command: "x"}},
		}, nil},
		{"empty config", &Config{}, nil},
		{"nil config", nil, []string{"config is nil"}},
		{"nil server", &Config{Servers: map[string]*Server{"a": nil}}, []string{"servers.a: server is nil"}},
		{"name mismatch", &Config{
			Servers: map[string]*Server{"a": {Name: "b", Transport: TransportStdio, Command: "x"}},
		}, []string{`servers.a: Name "b" does not match the map key`}},
		{"negative values", &Config{
			MaxBodyBytes: -1,
			Servers:      map[string]*Server{"a": {Transport: TransportSSE, URL: "https://x", Timeout: -time.Second}},
		}, []string{"max_body_bytes: must be > 0", "servers.a.timeout: must be > 0"}},
		{"uses default separator", &Config{
			Servers: map[string]*Server{"a__b": {Transport: TransportStdio, Command: "x"}},
		}, []string{`servers.a__b: name must not contain the tool name separator "__"`}},
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

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mcpgate.yaml")
	doc := "servers:\n  notes: {transport: stdio, command: ./bin/notes, env: {T: '${MCPGATE_TEST_TOKEN}'}}\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MCPGATE_TEST_TOKEN", "tok")
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := &Server{
		Name:            "notes",
		Transport:       TransportStdio,
		Command:         filepath.Join(dir, "bin", "notes"),
		Env:             map[string]string{"T": "tok"},
		Cwd:             dir,
		Timeout:         DefaultTimeout,
		ProtocolVersion: ProtocolVersionAuto,
		SessionMode:     SessionShared,
	}
	if diff := cmp.Diff(c.Servers["notes"], want); diff != "" {
		t.Errorf("Load (-got +want):\n%s", diff)
	}
	if c.Dir != dir {
		t.Errorf("Dir = %q, want %q", c.Dir, dir)
	}
	if want := filepath.Join(dir, DefaultDataDir); c.DataDir != want {
		t.Errorf("DataDir = %q, want %q", c.DataDir, want)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want os.ErrNotExist", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("lisen: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "lisen: unknown field") {
		t.Errorf("Load(bad) = %v, want unknown field error", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(fullExample))
	f.Add([]byte(srv("args: ['${A}', '$$']")))
	f.Add([]byte("servers:\n  a: &x {b: *x}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("servers:\n  a:\n    <<: *b\n"))
	f.Add([]byte("max_body_bytes: 9223372036854775807GiB\n"))
	f.Add([]byte("listen: ''\n---\n"))
	f.Add([]byte(callersExample))
	f.Add([]byte("state: {driver: redis, url: 'redis://:p@h:6379/0?dial_timeout=1s'}\n"))
	f.Add([]byte("auth:\n  keys:\n    - {alias: a, key: '${A}', servers: [], expires: 2027-01-01, allowed_cidrs: ['::ffff:10.0.0.0/104']}\n"))
	f.Add([]byte(toolsDoc("{allow: [a, b], deny: [c], overrides: {a: {name: b}, b: {name: a}}}")))
	env := envOf(map[string]string{"A": "a", "HOME": "/h", "NOTES_TOKEN": "t", "CALC_TOKEN": "t",
		"MCPGATE_MASTER_KEY": testMasterKey, "TEAM_A_KEY": testKey})
	f.Add([]byte("servers:\n  s: {transport: http, url: 'https://h', tls: {ca_file: /etc/passwd, key: x}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// A document from the network never names a host file (§8).
		if c, err := ParseRuntime(data); err == nil {
			for name, s := range c.Servers {
				if p := hostPaths(typeOf(reflect.TypeFor[Server]()), reflect.ValueOf(s).Elem()); p != "" {
					t.Fatalf("ParseRuntime accepted servers.%s.%s", name, p)
				}
			}
		} else {
			fieldErrors(t, err)
		}
		c, err := Parse(data, "/cfg", env)
		if err != nil {
			fieldErrors(t, err)
			return
		}
		// What Parse accepts, Validate must accept.
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		// What Parse accepts, the JSON Schema must accept (editors must
		// not flag a valid file).
		if v, err := yamlValue(data); err == nil {
			if err := schemaOf(t).Validate(v); err != nil {
				t.Fatalf("Parse accepted a config that the schema rejects: %v", err)
			}
		}
	})
}

// hostPaths is the key of the first non-empty path or command field in v
// (a struct of type ti), "" when none is set.
func hostPaths(ti *typeInfo, v reflect.Value) string {
	for _, f := range ti.fields {
		fv := v.Field(f.index)
		switch {
		case f.kind == kString && (f.path || f.command) && fv.String() != "":
			return f.key
		case f.kind == kStructPtr && !fv.IsNil():
			if p := hostPaths(f.elem, fv.Elem()); p != "" {
				return f.key + "." + p
			}
		case f.kind == kStruct:
			if p := hostPaths(f.elem, fv); p != "" {
				return f.key + "." + p
			}
		}
	}
	return ""
}
