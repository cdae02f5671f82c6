package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"go.yaml.in/yaml/v3"
)

// The JSON Schema is checked with a JSON Schema implementation we did not
// write (jsonschema-go, draft 2020-12), against the repository's example
// configs and against Parse itself.

var resolvedSchema = sync.OnceValues(func() (*jsonschema.Resolved, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(JSONSchema(), &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
})

func nodeValue(n *yaml.Node, depth int) (any, error) {
	if depth > 100 {
		return nil, errors.New("too deep")
	}
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := nodeValue(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			m[resolve(n.Content[i]).Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := []any{}
		for _, e := range n.Content {
			v, err := nodeValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			return b, n.Decode(&b)
		case "!!int":
			var i int64
			if err := n.Decode(&i); err != nil {
				// Too big for int64: a number all the same.
				f, ferr := strconv.ParseFloat(n.Value, 64)
				return f, ferr
			}
			return float64(i), nil
		case "!!float":
			var f float64
			return f, n.Decode(&f)
		}
		return n.Value, nil
	}
	return nil, errors.New("unexpected node")
}

func schemaValidate(tb testing.TB, doc string) error {
	tb.Helper()
	v, err := yamlValue([]byte(doc))
	if err != nil {
		tb.Fatalf("YAML: %v", err)
	}
	return schemaOf(tb).Validate(v)
}

func TestSchemaIsDraft202012(t *testing.T) {
	var top struct {
		Schema string         `json:"$schema"`
		ID     string         `json:"$id"`
		Defs   map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(JSONSchema(), &top); err != nil {
		t.Fatal(err)
	}
	if top.Schema != "https://json-schema.org/draft/2020-12/schema" || top.ID != SchemaID {
		t.Errorf("$schema %q, $id %q", top.Schema, top.ID)
	}
	for _, d := range []string{"server", "auth", "tLS", "callerAuth", "keyConfig", "toolset", "limits", "sessionLimits"} {
		if top.Defs[d] == nil {
			t.Errorf("no $defs/%s", d)
		}
	}
	schemaOf(t)
}

// yamlBlocks returns the ```yaml blocks of a Markdown file.
func yamlBlocks(tb testing.TB, path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?ms)^```ya?ml\\n(.*?)^```").FindAllSubmatch(data, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// Every example config in the repository is valid against the schema: the
// example files, which Parse accepts too, and the README's and the docs'
// YAML blocks, which are fragments (a key may name a server another block
// defines) and so are held to the schema only.
func TestExampleConfigsMatchSchema(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example configs found")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemaValidate(t, string(data)); err != nil {
			t.Errorf("%s: schema: %v", f, err)
		}
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	docs = append(docs, "../../README.md")
	blocks := 0
	for _, d := range docs {
		for i, b := range yamlBlocks(t, d) {
			blocks++
			if err := schemaValidate(t, b); err != nil {
				t.Errorf("%s, YAML block %d: schema: %v\n%s", d, i+1, err, b)
			}
		}
	}
	if blocks < 5 {
		t.Errorf("found %d YAML blocks in the README and docs, want at least 5", blocks)
	}
}

// The schema and Parse agree: on documents both accept, on documents
// both reject (one or more per rule kind and per section), and on the
// rules only Parse can check, where the schema accepts what Parse rejects.
func TestSchemaAgreesWithParse(t *testing.T) {
	env := map[string]string{"T": "oauth2", "K": testKey, "HOME": "/h", "NOTES_TOKEN": "t", "CALC_TOKEN": "t",
		"MCPGATE_MASTER_KEY": testMasterKey, "TEAM_A_KEY": testKey}
	http := func(extra string) string {
		return "servers:\n  up: {transport: http, url: 'http://x/mcp', " + extra + "}\n"
	}
	tests := []struct {
		name string
		doc  string
		// parse and schema are whether each accepts the document.
		parse, schema bool
	}{
		// accepted by both
		{"full example", fullExample, true, true},
		{"callers example", callersExample, true, true},
		{"empty document", "", true, true},
		{"null sections", "servers:\nauth:\nlimits:\nsessions: ~\n", true, true},
		{"numeric and boolean strings", srv("args: [--port, 8080, true]\n    env: {N: 1, E: }"), true, true},
		{"auth type in another case, with spaces", http("auth: {type: ' Bearer_Token ', value: x}"), true, true},
		{"auth type from a variable", http("auth: {type: '${T}', token_url: 'https://i/t', client_id: a, client_secret: b}"), true, true},
		{"oauth2 with a pinned authorization server", http("auth: {type: oauth2, client_id: a, client_secret: b, client_auth: client_secret_post, authorization_server: 'https://as.example.com/tenant'}"), true, true},
		{"sizes", "max_body_bytes: 0x100\nlimits: {max_upstream_message: 2 kB}\n", true, true},
		{"durations", srv("timeout: 1h30m") + "sessions: {idle_timeout: 1.5h}\n", true, true},
		{"unknown_id in capitals", "sessions: {unknown_id: SERVE}\n", true, true},
		{"tls without verification", http("tls: {verify: false}"), true, true},
		{"empty fields of another transport", srv("url: ''\n    headers: {}"), true, true},
		{"auth none on stdio", srv("auth: {type: none}"), true, true},
		{"rate limit zero", keyDoc(", rate_limit_rpm: 0"), true, true},

		// rejected by both: decoding
		{"unknown top-level key", "lisen: x\n", false, false},
		{"unknown server key", srv("hedaers: {}"), false, false},
		{"unknown auth key", http("auth: {type: none, vaule: x}"), false, false},
		{"unknown tls key", http("tls: {cafile: x}"), false, false},
		{"unknown key field", keyDoc(", alais: b"), false, false},
		{"unknown limits key", "limits: {max_batches: 5}\n", false, false},
		{"unknown sessions key", "sessions: {idle_timout: 1m}\n", false, false},
		{"unknown toolset key", "toolsets: {ts: {server: {calc: [a]}}}\n", false, false},
		{"unknown override key", toolsDoc("{overrides: {a: {nmae: b}}}"), false, false},
		{"unknown allowed_clients key", "auth: {allowed_clients: {header: X, values: [a], headers: x}}\n", false, false},
		{"merge key", "servers:\n  a:\n    <<: {transport: stdio}\n    command: x\n", false, false},
		{"root a list", "- a\n", false, false},
		{"string field a list", "listen: [a]\n", false, false},
		{"list field a string", `allowed_origins: "*"`, false, false},
		{"list element a mapping", srv("args: [a, {b: c}]"), false, false},
		{"list element null", srv("args: [a, ~]"), false, false},
		{"map value a list", srv("env: {A: [1]}"), false, false},
		{"timeout bare number", srv("timeout: 30"), false, false},
		{"timeout negative", srv("timeout: -1s"), false, false},
		{"size with a bad unit", "max_body_bytes: 4XB\n", false, false},
		{"size float", "max_body_bytes: 1.5\n", false, false},
		{"size zero", "max_body_bytes: 0\n", false, false},
		{"size zero with unit", "limits: {max_upstream_message: 0MiB}\n", false, false},
		{"bool a string", "auth: {anonymous: 'yes'}\n", false, false},
		{"verify not bool", http("tls: {verify: maybe}"), false, false},
		{"int a string", keyDoc(", rate_limit_rpm: '600'"), false, false},
		{"int negative", keyDoc(", rate_limit_rpm: -1"), false, false},
		{"int zero over a default", "sessions: {max_per_owner: 0}\n", false, false},
		{"limits zero", "limits: {max_streams: 0}\n", false, false},
		{"time a mapping", keyDoc(", expires: {}"), false, false},
		{"keys not a list", "auth: {keys: {a: b}}\n", false, false},
		{"key not a mapping", "auth:\n  keys: [bot]\n", false, false},
		{"key null", "auth:\n  keys:\n    -\n", false, false},
		{"key tools null list", keyDoc(", tools: {calc: ~}"), false, false},

		// rejected by both: tag rules
		{"transport missing", "servers:\n  x: {command: y}\n", false, false},
		{"transport unknown", "servers:\n  x: {transport: websocket}\n", false, false},
		{"server null", "servers:\n  x:\n", false, false},
		{"stdio without command", "servers:\n  x: {transport: stdio}\n", false, false},
		{"stdio with a blank command", "servers:\n  x: {transport: stdio, command: ' '}\n", false, false},
		{"http without url", "servers:\n  x: {transport: http}\n", false, false},
		{"url on stdio", srv("url: http://x"), false, false},
		{"headers on stdio", srv("headers: {A: b}"), false, false},
		{"tls on stdio", srv("tls: {}"), false, false},
		{"command on http", http("command: y"), false, false},
		{"args on sse", "servers:\n  x: {transport: sse, url: 'http://x', args: [a]}\n", false, false},
		{"protocol version unknown", srv("protocol_version: 2024-01-01"), false, false},
		{"session mode unknown", http("session_mode: sticky"), false, false},
		{"auth without type", http("auth: {value: x}"), false, false},
		{"auth type unknown", http("auth: {type: kerberos, value: x}"), false, false},
		{"bearer without value", http("auth: {type: bearer_token}"), false, false},
		{"oauth2 without client_id", http("auth: {type: oauth2, client_secret: b}"), false, false},
		{"oauth2 bad client_auth", http("auth: {type: oauth2, client_id: a, client_secret: b, client_auth: tls_client_auth}"), false, false},
		{"signing_alg unknown", http("auth: {type: oauth2, client_id: a, client_auth: private_key_jwt, private_key_file: k.pem, signing_alg: HS256}"), false, false},
		{"private_key on bearer", http("auth: {type: bearer_token, value: x, private_key: x}"), false, false},
		{"token_url on bearer", http("auth: {type: bearer_token, value: x, token_url: 'https://i/t'}"), false, false},
		{"scopes on api_key", http("auth: {type: api_key, value: x, scopes: [a]}"), false, false},
		{"header_name on none", http("auth: {type: none, header_name: X-A}"), false, false},
		{"key without alias", callers("auth:\n  keys:\n    - {key: " + testKey + "}\n"), false, false},
		{"key without key", callers("auth:\n  keys:\n    - {alias: bot}\n"), false, false},
		{"unknown_id unknown", "sessions: {unknown_id: allow}\n", false, false},
		{"unknown_id empty", "sessions: {unknown_id: ''}\n", false, false},
		{"allowed_clients without header", "auth: {allowed_clients: {values: [a]}}\n", false, true},
		{"allowed_clients without values", "auth: {allowed_clients: {header: X-Client}}\n", false, true},
		{"allowed_clients empty values", "auth: {allowed_clients: {header: X-Client, values: []}}\n", false, true},
		{"toolset without servers", callers("toolsets: {ts: {}}\n"), false, false},
		{"toolset null", callers("toolsets: {ts: ~}\n"), false, false},
		{"toolset with no server", callers("toolsets: {ts: {servers: {}}}\n"), false, false},
		{"bad server name", "servers:\n  Bad!: {transport: stdio, command: x}\n", false, false},
		{"bad toolset name", callers("toolsets: {Support: {servers: {calc: [a]}}}\n"), false, false},
		{"access group name empty", callers("access_groups: {'': [calc]}\n"), false, false},

		// Parse alone: rules across fields, files, formats and names
		{"key names an unknown server", keyDoc(", servers: [nope]"), false, true},
		{"name contains the separator", "servers:\n  a__b: {transport: stdio, command: x}\n", false, true},
		{"missing ca_file", http("tls: {ca_file: /nonexistent/ca.pem}"), false, true},
		{"oauth2 without client_secret", http("auth: {type: oauth2, token_url: 'https://i/t', client_id: a}"), false, true},
		{"private_key_jwt without a key", http("auth: {type: oauth2, client_id: a, client_auth: private_key_jwt}"), false, true},
		{"private_key_jwt with a missing key file", http("auth: {type: oauth2, client_id: a, client_auth: private_key_jwt, private_key_file: /nonexistent/k.pem}"), false, true},
		{"duplicate key", "listen: a:1\nlisten: b:2\n", false, true},
		{"expires not a time", keyDoc(", expires: tomorrow"), false, true},
		{"timeout zero", srv("timeout: 0s"), false, true},
		{"override sets nothing", toolsDoc("{overrides: {add: {}}}"), false, true},
		{"reserved header", http("headers: {mcp-session-id: a}"), false, true},
		{"url not http", "servers:\n  calc: {transport: http, url: 'ftp://x/'}\n", false, true},
		{"alias with a space", callers("auth:\n  keys:\n    - {alias: 'a b', key: " + testKey + "}\n"), false, true},
		{"master key short", "auth: {master_key: short-key}\n", false, true},
		{"listen without port", "listen: localhost\n", false, true},
		{"unset variable", srv("args: ['${NOPE}']"), false, true},
		{"toolset server without tools", callers("toolsets: {ts: {servers: {calc: []}}}\n"), false, true},
		{"two documents", "listen: a:1\n---\nlisten: b:2\n", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, perr := Parse([]byte(tt.doc), "/cfg", envOf(env))
			// The schema sees the first document, as editors do.
			first := tt.doc
			if i := strings.Index(first, "\n---\n"); i >= 0 {
				first = first[:i+1]
			}
			serr := schemaValidate(t, first)
			if (perr == nil) != tt.parse {
				t.Errorf("Parse: %v, want accepted=%v", perr, tt.parse)
			}
			if (serr == nil) != tt.schema {
				t.Errorf("schema: %v, want accepted=%v", serr, tt.schema)
			}
		})
	}
}

// The reference and the schema in docs/ are what go generate writes from
// the types now.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	for _, f := range []struct {
		path string
		want []byte
	}{
		{"../../docs/config.md", Reference()},
		{"../../docs/config.schema.json", JSONSchema()},
	} {
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatalf("%v (run go generate ./internal/config)", err)
		}
		if !bytes.Equal(got, f.want) {
			t.Errorf("%s is stale: run go generate ./internal/config", f.path)
		}
	}
}

// Every link of the reference points at a section it has.
func TestReferenceLinks(t *testing.T) {
	ref := string(Reference())
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`<a id="([^"]+)"></a>`).FindAllStringSubmatch(ref, -1) {
		anchors[m[1]] = true
	}
	links := regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(ref, -1)
	if len(links) < 10 {
		t.Fatalf("only %d links found", len(links))
	}
	for _, m := range links {
		if !anchors[m[1]] {
			t.Errorf("link to #%s, which the reference does not have", m[1])
		}
	}
}
