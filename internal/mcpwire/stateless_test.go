package mcpwire_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// The examples below are copied from the 2026-07-28 specification
// (shared/reference/mcp-spec/2026-07-28/...); each names its page.

// basic/transports/streamable-http.md, "tools/call request".
const specToolsCall = `{
  "jsonrpc": "2.0",
  "id": 1,
  "method": "tools/call",
  "params": {
    "name": "get_weather",
    "arguments": {
      "location": "Seattle, WA"
    },
    "_meta": {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientInfo": {
        "name": "ExampleClient",
        "version": "1.0.0"
      },
      "io.modelcontextprotocol/clientCapabilities": {}
    }
  }
}`

// server/discover.md, "Request".
const specDiscover = `{
  "jsonrpc": "2.0",
  "id": "discover-1",
  "method": "server/discover",
  "params": {
    "_meta": {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientInfo": {
        "name": "ExampleClient",
        "version": "1.0.0"
      },
      "io.modelcontextprotocol/clientCapabilities": {}
    }
  }
}`

// basic/patterns/subscriptions.md, "Opening a Stream".
const specListen = `{
  "jsonrpc": "2.0",
  "id": 1,
  "method": "subscriptions/listen",
  "params": {
    "_meta": {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientInfo": {
        "name": "ExampleClient",
        "version": "1.0.0"
      },
      "io.modelcontextprotocol/clientCapabilities": {}
    },
    "notifications": {
      "toolsListChanged": true,
      "resourceSubscriptions": ["file:///project/config.json"]
    }
  }
}`

// basic/transports/streamable-http.md, the x-mcp-header example request
// (members in a different order: _meta first).
const specExecuteSQL = `{
  "jsonrpc": "2.0",
  "id": 1,
  "method": "tools/call",
  "params": {
    "_meta": {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientInfo": {
        "name": "ExampleClient",
        "version": "1.0.0"
      },
      "io.modelcontextprotocol/clientCapabilities": {}
    },
    "name": "execute_sql",
    "arguments": {
      "region": "us-west1",
      "query": "SELECT * FROM users"
    }
  }
}`

// decode returns the method and params of a JSON-RPC request.
func decode(t testing.TB, msg string) (string, json.RawMessage) {
	t.Helper()
	m, err := jsonrpc.Decode([]byte(msg))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return m.Method, m.Params
}

func TestStatelessConstants(t *testing.T) {
	// Values as spelled by schema-2026-07-28.json and basic/index.md.
	got := map[string]any{
		"MethodServerDiscover":                mcpwire.MethodServerDiscover,
		"MethodSubscriptionsListen":           mcpwire.MethodSubscriptionsListen,
		"NotifySubscriptionsAcknowledged":     mcpwire.NotifySubscriptionsAcknowledged,
		"MetaKeyProtocolVersion":              mcpwire.MetaKeyProtocolVersion,
		"MetaKeyClientInfo":                   mcpwire.MetaKeyClientInfo,
		"MetaKeyClientCapabilities":           mcpwire.MetaKeyClientCapabilities,
		"MetaKeyLogLevel":                     mcpwire.MetaKeyLogLevel,
		"MetaKeyServerInfo":                   mcpwire.MetaKeyServerInfo,
		"MetaKeySubscriptionID":               mcpwire.MetaKeySubscriptionID,
		"HeaderMethod":                        mcpwire.HeaderMethod,
		"HeaderName":                          mcpwire.HeaderName,
		"HeaderParamPrefix":                   mcpwire.HeaderParamPrefix,
		"ResultComplete":                      mcpwire.ResultComplete,
		"ResultInputRequired":                 mcpwire.ResultInputRequired,
		"CacheScopePublic":                    mcpwire.CacheScopePublic,
		"CacheScopePrivate":                   mcpwire.CacheScopePrivate,
		"CodeHeaderMismatch":                  mcpwire.CodeHeaderMismatch,
		"CodeMissingRequiredClientCapability": mcpwire.CodeMissingRequiredClientCapability,
		"CodeUnsupportedProtocolVersion":      mcpwire.CodeUnsupportedProtocolVersion,
	}
	want := map[string]any{
		"MethodServerDiscover":                "server/discover",
		"MethodSubscriptionsListen":           "subscriptions/listen",
		"NotifySubscriptionsAcknowledged":     "notifications/subscriptions/acknowledged",
		"MetaKeyProtocolVersion":              "io.modelcontextprotocol/protocolVersion",
		"MetaKeyClientInfo":                   "io.modelcontextprotocol/clientInfo",
		"MetaKeyClientCapabilities":           "io.modelcontextprotocol/clientCapabilities",
		"MetaKeyLogLevel":                     "io.modelcontextprotocol/logLevel",
		"MetaKeyServerInfo":                   "io.modelcontextprotocol/serverInfo",
		"MetaKeySubscriptionID":               "io.modelcontextprotocol/subscriptionId",
		"HeaderMethod":                        "Mcp-Method",
		"HeaderName":                          "Mcp-Name",
		"HeaderParamPrefix":                   "Mcp-Param-",
		"ResultComplete":                      "complete",
		"ResultInputRequired":                 "input_required",
		"CacheScopePublic":                    "public",
		"CacheScopePrivate":                   "private",
		"CodeHeaderMismatch":                  -32020,
		"CodeMissingRequiredClientCapability": -32021,
		"CodeUnsupportedProtocolVersion":      -32022,
	}
	for k, w := range want {
		if g := got[k]; g != w {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
	for _, code := range []int64{-32020, -32021, -32022} {
		if !mcpwire.IsStatelessErrorCode(code) {
			t.Errorf("IsStatelessErrorCode(%d) = false", code)
		}
	}
	for _, code := range []int64{-32000, -32001, -32002, -32023, -32042, -32601, -32602} {
		if mcpwire.IsStatelessErrorCode(code) {
			t.Errorf("IsStatelessErrorCode(%d) = true", code)
		}
	}
}

func TestMethodSets(t *testing.T) {
	type props struct{ Client, Cacheable, InputRequired, InputRequest, Name bool }
	tests := map[string]props{
		"server/discover":          {Client: true, Cacheable: true},
		"tools/list":               {Client: true, Cacheable: true},
		"prompts/list":             {Client: true, Cacheable: true},
		"resources/list":           {Client: true, Cacheable: true},
		"resources/templates/list": {Client: true, Cacheable: true},
		"resources/read":           {Client: true, Cacheable: true, InputRequired: true, Name: true},
		"tools/call":               {Client: true, InputRequired: true, Name: true},
		"prompts/get":              {Client: true, InputRequired: true, Name: true},
		"completion/complete":      {Client: true},
		"subscriptions/listen":     {Client: true},
		"elicitation/create":       {InputRequest: true},
		"sampling/createMessage":   {InputRequest: true},
		"roots/list":               {InputRequest: true},
		// Removed by 2026-07-28.
		"initialize":            {},
		"ping":                  {},
		"logging/setLevel":      {},
		"resources/subscribe":   {},
		"resources/unsubscribe": {},
		"":                      {},
		// The tasks extension's methods (tasks/result and tasks/list
		// are 2025-11-25's only).
		"tasks/get":    {Client: true},
		"tasks/update": {Client: true},
		"tasks/cancel": {Client: true},
		"tasks/result": {},
		"tasks/list":   {},
	}
	for m, want := range tests {
		_, name := mcpwire.NameParam(m)
		got := props{
			Client:        mcpwire.IsStatelessClientMethod(m),
			Cacheable:     mcpwire.CacheableMethod(m),
			InputRequired: mcpwire.AllowsInputRequired(m),
			InputRequest:  mcpwire.IsInputRequestMethod(m),
			Name:          name,
		}
		if got != want {
			t.Errorf("%q: got %+v, want %+v", m, got, want)
		}
	}
	for m, field := range map[string]string{"tools/call": "name", "prompts/get": "name", "resources/read": "uri"} {
		if got, _ := mcpwire.NameParam(m); got != field {
			t.Errorf("NameParam(%q) = %q, want %q", m, got, field)
		}
	}
}

func TestStatelessRevisions(t *testing.T) {
	if !reflect.DeepEqual(mcpwire.StatelessRevisions, []string{"2026-07-28"}) {
		t.Errorf("StatelessRevisions = %v", mcpwire.StatelessRevisions)
	}
	for _, rev := range mcpwire.Revisions {
		// Every revision is exactly one of handshake or stateless.
		if mcpwire.IsHandshake(rev) == mcpwire.IsStatelessRevision(rev) {
			t.Errorf("revision %s: handshake %v, stateless %v", rev, mcpwire.IsHandshake(rev), mcpwire.IsStatelessRevision(rev))
		}
	}
	if got := mcpwire.ResourceNotFoundCode("2026-07-28"); got != -32602 {
		t.Errorf("ResourceNotFoundCode(2026-07-28) = %d, want -32602", got)
	}
	if got := mcpwire.ResourceNotFoundCode("2025-11-25"); got != -32002 {
		t.Errorf("ResourceNotFoundCode(2025-11-25) = %d, want -32002", got)
	}
	for _, l := range []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"} {
		if !mcpwire.ValidLogLevel(l) {
			t.Errorf("ValidLogLevel(%q) = false", l)
		}
	}
	for _, l := range []string{"", "DEBUG", "warn", "fatal", "trace"} {
		if mcpwire.ValidLogLevel(l) {
			t.Errorf("ValidLogLevel(%q) = true", l)
		}
	}
}

func TestRequestMetaSpecExamples(t *testing.T) {
	for name, msg := range map[string]string{
		"tools/call": specToolsCall, "server/discover": specDiscover,
		"subscriptions/listen": specListen, "execute_sql": specExecuteSQL,
	} {
		t.Run(name, func(t *testing.T) {
			_, params := decode(t, msg)
			info, err := mcpwire.RequestMeta(params)
			if err != nil {
				t.Fatalf("RequestMeta: %v", err)
			}
			if info.ProtocolVersion != "2026-07-28" || info.ClientName != "ExampleClient" || info.ClientVersion != "1.0.0" || info.LogLevel != "" {
				t.Errorf("RequestMeta = %+v", info)
			}
			if string(info.Capabilities.Raw) != "{}" || info.Capabilities.Sampling || info.Capabilities.Elicitation || info.Capabilities.Roots {
				t.Errorf("Capabilities = %+v", info.Capabilities)
			}
			wantInfo := "{\n        \"name\": \"ExampleClient\",\n        \"version\": \"1.0.0\"\n      }"
			if string(info.ClientInfo) != wantInfo {
				t.Errorf("ClientInfo = %s, want the raw object %s", info.ClientInfo, wantInfo)
			}
			if !mcpwire.IsStateless(params) {
				t.Error("IsStateless = false")
			}
			if v, ok := mcpwire.StatelessVersion(params); !ok || v != "2026-07-28" {
				t.Errorf("StatelessVersion = %q, %v", v, ok)
			}
		})
	}
}

func TestRequestMeta(t *testing.T) {
	const v = `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`
	const c = `"io.modelcontextprotocol/clientCapabilities":{}`
	tests := []struct {
		name, params string
		want         mcpwire.RequestInfo // Capabilities.Raw is compared as capsRaw
		capsRaw      string
		errPart      string // "" for success
	}{
		{name: "minimal", params: `{"_meta":{` + v + `,` + c + `}}`,
			want: mcpwire.RequestInfo{ProtocolVersion: "2026-07-28"}, capsRaw: `{}`},
		// basic/index.md: logLevel is a LoggingLevel; client/*.md declare
		// capabilities per request in _meta.
		{name: "log level and capabilities", params: `{"_meta":{` + v + `,"io.modelcontextprotocol/logLevel":"warning",` +
			`"io.modelcontextprotocol/clientCapabilities":{"roots":{},"sampling":{},"elicitation":{"form":{},"url":{}}}}}`,
			want: mcpwire.RequestInfo{ProtocolVersion: "2026-07-28", LogLevel: "warning", Capabilities: mcpwire.ClientCaps{
				Roots: true, Sampling: true, Elicitation: true, ElicitationForm: true, ElicitationURL: true}},
			capsRaw: `{"roots":{},"sampling":{},"elicitation":{"form":{},"url":{}}}`},
		{name: "future version is read, not judged", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01",` + c + `}}`,
			want: mcpwire.RequestInfo{ProtocolVersion: "2099-01-01"}, capsRaw: `{}`},
		{name: "null optional fields are absent", params: `{"_meta":{` + v + `,` + c + `,"io.modelcontextprotocol/clientInfo":null,"io.modelcontextprotocol/logLevel":null}}`,
			want: mcpwire.RequestInfo{ProtocolVersion: "2026-07-28"}, capsRaw: `{}`},
		{name: "client info without version", params: `{"_meta":{` + v + `,` + c + `,"io.modelcontextprotocol/clientInfo":{"name":"x"}}}`,
			want: mcpwire.RequestInfo{ProtocolVersion: "2026-07-28", ClientInfo: json.RawMessage(`{"name":"x"}`), ClientName: "x"}, capsRaw: `{}`},
		{name: "last duplicate wins", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25",` + v + `,` + c + `}}`,
			want: mcpwire.RequestInfo{ProtocolVersion: "2026-07-28"}, capsRaw: `{}`},
		{name: "other _meta keys are ignored", params: `{"_meta":{"progressToken":7,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",` + v + `,` + c + `}}`,
			want: mcpwire.RequestInfo{ProtocolVersion: "2026-07-28"}, capsRaw: `{}`},

		{name: "no params", params: ``, errPart: "missing _meta"},
		{name: "null params", params: `null`, errPart: "missing _meta"},
		{name: "no _meta", params: `{"name":"x"}`, errPart: "missing _meta"},
		{name: "_meta not an object", params: `{"_meta":[1]}`, errPart: "missing _meta"},
		{name: "no version", params: `{"_meta":{` + c + `}}`, errPart: "protocolVersion"},
		{name: "empty version", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"",` + c + `}}`, errPart: "protocolVersion"},
		{name: "version not a string", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728,` + c + `}}`, errPart: "protocolVersion"},
		// Required even when empty (basic/index.md: "Yes").
		{name: "no capabilities", params: `{"_meta":{` + v + `}}`, errPart: "clientCapabilities"},
		{name: "null capabilities", params: `{"_meta":{` + v + `,"io.modelcontextprotocol/clientCapabilities":null}}`, errPart: "clientCapabilities"},
		{name: "capabilities not an object", params: `{"_meta":{` + v + `,"io.modelcontextprotocol/clientCapabilities":"all"}}`, errPart: "clientCapabilities"},
		{name: "capabilities invalid JSON", params: `{"_meta":{` + v + `,"io.modelcontextprotocol/clientCapabilities":{"a":}}}`, errPart: "clientCapabilities"},
		{name: "client info not an object", params: `{"_meta":{` + v + `,` + c + `,"io.modelcontextprotocol/clientInfo":"me"}}`, errPart: "clientInfo"},
		// server/utilities/logging.md: unknown level -> -32602.
		{name: "unknown log level", params: `{"_meta":{` + v + `,` + c + `,"io.modelcontextprotocol/logLevel":"verbose"}}`, errPart: "log level"},
		{name: "log level not a string", params: `{"_meta":{` + v + `,` + c + `,"io.modelcontextprotocol/logLevel":3}}`, errPart: "log level"},
		{name: "key names are exact", params: `{"_meta":{"io.modelcontextprotocol/ProtocolVersion":"2026-07-28",` + c + `}}`, errPart: "protocolVersion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := mcpwire.RequestMeta(json.RawMessage(tt.params))
			if tt.errPart != "" {
				var rpcErr *jsonrpc.Error
				if !errors.As(err, &rpcErr) {
					t.Fatalf("RequestMeta(%s) error = %v, want a *jsonrpc.Error", tt.params, err)
				}
				if rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, tt.errPart) {
					t.Errorf("RequestMeta(%s) = %d %q, want -32602 mentioning %q", tt.params, rpcErr.Code, rpcErr.Message, tt.errPart)
				}
				return
			}
			if err != nil {
				t.Fatalf("RequestMeta(%s): %v", tt.params, err)
			}
			if string(info.Capabilities.Raw) != tt.capsRaw {
				t.Errorf("Capabilities.Raw = %s, want %s", info.Capabilities.Raw, tt.capsRaw)
			}
			info.Capabilities.Raw = nil
			if !reflect.DeepEqual(info, tt.want) {
				t.Errorf("RequestMeta(%s)\n got %+v\nwant %+v", tt.params, info, tt.want)
			}
		})
	}
}

func TestIsStateless(t *testing.T) {
	tests := []struct {
		params    string
		stateless bool
		selects   string // StatelessVersion's version, "" when it selects nothing
	}{
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, true, "2026-07-28"},
		// basic/versioning.md answers "1900-01-01" with
		// UnsupportedProtocolVersion: a per-request version selects the
		// stateless path even when it is unknown.
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01"}}`, false, "1900-01-01"},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}`, false, "2099-01-01"},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}`, false, ""},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":""}}`, false, ""},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":null}}`, false, ""},
		{`{"_meta":{"progressToken":1}}`, false, ""},
		{`{"protocolVersion":"2026-07-28","capabilities":{}}`, false, ""}, // initialize params
		{`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`, false, ""},
		{`{"_meta":{"x":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, false, ""},
		{``, false, ""},
		{`[]`, false, ""},
		{`{`, false, ""},
	}
	for _, tt := range tests {
		if got := mcpwire.IsStateless(json.RawMessage(tt.params)); got != tt.stateless {
			t.Errorf("IsStateless(%s) = %v, want %v", tt.params, got, tt.stateless)
		}
		v, ok := mcpwire.StatelessVersion(json.RawMessage(tt.params))
		if v != tt.selects || ok != (tt.selects != "") {
			t.Errorf("StatelessVersion(%s) = %q, %v, want %q", tt.params, v, ok, tt.selects)
		}
	}
}

func errJSON(t *testing.T, e *jsonrpc.Error) string {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUnsupportedProtocolVersion(t *testing.T) {
	// basic/versioning.md, "Protocol Version Negotiation".
	const spec = `{
    "code": -32022,
    "message": "Unsupported protocol version",
    "data": {
      "supported": ["2026-07-28", "2025-11-25"],
      "requested": "1900-01-01"
    }
  }`
	got := mcpwire.UnsupportedProtocolVersion("1900-01-01", []string{"2026-07-28", "2025-11-25"})
	if g, w := errJSON(t, got), compact(t, spec); g != w {
		t.Errorf("UnsupportedProtocolVersion:\n got %s\nwant %s", g, w)
	}
	if e := mcpwire.CheckStatelessVersion("2026-07-28"); e != nil {
		t.Errorf("CheckStatelessVersion(2026-07-28) = %v", e)
	}
	for _, rev := range []string{"2025-11-25", "1900-01-01", "", `quo"te`} {
		e := mcpwire.CheckStatelessVersion(rev)
		if e == nil || e.Code != -32022 {
			t.Fatalf("CheckStatelessVersion(%q) = %v", rev, e)
		}
		var data struct {
			Supported []string
			Requested string
		}
		if err := json.Unmarshal(e.Data, &data); err != nil {
			t.Fatalf("data %s: %v", e.Data, err)
		}
		if data.Requested != rev || !reflect.DeepEqual(data.Supported, mcpwire.Revisions) {
			t.Errorf("CheckStatelessVersion(%q) data = %+v", rev, data)
		}
	}
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestCheckHeaders(t *testing.T) {
	_, toolsCall := decode(t, specToolsCall)
	// basic/transports/streamable-http.md, "resources/read request".
	readParams := json.RawMessage(`{"uri":"file:///projects/myapp/config.json","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`)
	// A name outside the header-safe set travels Base64-encoded (Value Encoding).
	uniParams := json.RawMessage(`{"name":"Hello, 世界"}`)
	tests := []struct {
		name               string
		method             string
		params             json.RawMessage
		hdrMethod, hdrName string
		wantMsg            string // "" means nil
	}{
		{"spec tools/call", "tools/call", toolsCall, "tools/call", "get_weather", ""},
		{"spec resources/read", "resources/read", readParams, "resources/read", "file:///projects/myapp/config.json", ""},
		{"prompts/get", "prompts/get", json.RawMessage(`{"name":"code_review"}`), "prompts/get", "code_review", ""},
		{"no Mcp-Name needed", "tools/list", json.RawMessage(`{}`), "tools/list", "", ""},
		{"Mcp-Name ignored where not defined", "tools/list", json.RawMessage(`{}`), "tools/list", "whatever", ""},
		{"discover", "server/discover", json.RawMessage(`{"_meta":{}}`), "server/discover", "", ""},
		{"base64 name", "tools/call", uniParams, "tools/call", "=?base64?SGVsbG8sIOS4lueVjA==?=", ""},
		{"base64 of a plain name", "tools/call", toolsCall, "tools/call", mcpwireB64("get_weather"), ""},

		// The spec's own example message (Server Validation).
		{"spec mismatch", "tools/call", json.RawMessage(`{"name":"bar"}`), "tools/call", "foo",
			"Header mismatch: Mcp-Name header value 'foo' does not match body value 'bar'"},
		{"missing Mcp-Method", "tools/list", nil, "", "", "Header mismatch: missing required Mcp-Method header"},
		{"Mcp-Method differs", "tools/call", toolsCall, "tools/list", "get_weather",
			"Header mismatch: Mcp-Method header value 'tools/list' does not match body value 'tools/call'"},
		{"Mcp-Method is case-sensitive", "tools/call", toolsCall, "Tools/Call", "get_weather",
			"Header mismatch: Mcp-Method header value 'Tools/Call' does not match body value 'tools/call'"},
		{"Mcp-Method control character", "tools/call", toolsCall, "tools/call\x00", "get_weather",
			"Header mismatch: Mcp-Method header value contains invalid characters"},
		{"missing Mcp-Name", "tools/call", toolsCall, "tools/call", "",
			"Header mismatch: missing required Mcp-Name header for method tools/call"},
		{"missing Mcp-Name for resources/read", "resources/read", readParams, "resources/read", "",
			"Header mismatch: missing required Mcp-Name header for method resources/read"},
		{"Mcp-Name is the uri, not a name", "resources/read", json.RawMessage(`{"name":"a","uri":"b"}`), "resources/read", "a",
			"Header mismatch: Mcp-Name header value 'a' does not match body value 'b'"},
		{"Mcp-Name is case-sensitive", "tools/call", toolsCall, "tools/call", "Get_Weather",
			"Header mismatch: Mcp-Name header value 'Get_Weather' does not match body value 'get_weather'"},
		{"raw non-ASCII Mcp-Name", "tools/call", uniParams, "tools/call", "Hello, 世界",
			"Header mismatch: Mcp-Name header value contains invalid characters"},
		{"bad base64", "tools/call", toolsCall, "tools/call", "=?base64?literal?=",
			"Header mismatch: Mcp-Name header value is not valid Base64-encoded UTF-8"},
		{"body has no name", "tools/call", json.RawMessage(`{"arguments":{}}`), "tools/call", "x",
			"Header mismatch: Mcp-Name header value 'x' does not match body value (params.name is missing or not a string)"},
		{"body name not a string", "tools/call", json.RawMessage(`{"name":7}`), "tools/call", "7",
			"Header mismatch: Mcp-Name header value '7' does not match body value (params.name is missing or not a string)"},
		// The last of a repeated key is what an upstream reads.
		{"repeated name", "tools/call", json.RawMessage(`{"name":"safe","name":"evil"}`), "tools/call", "safe",
			"Header mismatch: Mcp-Name header value 'safe' does not match body value 'evil'"},
		{"escaped body name", "tools/call", json.RawMessage(`{"name":"get\u005fweather"}`), "tools/call", "get_weather", ""},

		// The tasks extension (SEP-2663): Mcp-Name is the taskId, checked
		// when sent.
		{"tasks/get with its taskId", "tasks/get", json.RawMessage(`{"taskId":"mcpt1.abc"}`), "tasks/get", "mcpt1.abc", ""},
		{"tasks/update with its taskId", "tasks/update", json.RawMessage(`{"taskId":"t1","inputResponses":{}}`), "tasks/update", "t1", ""},
		{"tasks/cancel, base64 taskId", "tasks/cancel", json.RawMessage(`{"taskId":"t 1"}`), "tasks/cancel", mcpwireB64("t 1"), ""},
		{"tasks/get without Mcp-Name", "tasks/get", json.RawMessage(`{"taskId":"t1"}`), "tasks/get", "", ""},
		{"tasks/get, another task's id", "tasks/get", json.RawMessage(`{"taskId":"t1"}`), "tasks/get", "t2",
			"Header mismatch: Mcp-Name header value 't2' does not match body value 't1'"},
		{"tasks/cancel, another task's id", "tasks/cancel", json.RawMessage(`{"taskId":"t1"}`), "tasks/cancel", "t2",
			"Header mismatch: Mcp-Name header value 't2' does not match body value 't1'"},
		{"tasks/update, the tool's name", "tasks/update", json.RawMessage(`{"taskId":"t1","name":"x"}`), "tasks/update", "x",
			"Header mismatch: Mcp-Name header value 'x' does not match body value 't1'"},
		{"tasks/get, no taskId", "tasks/get", json.RawMessage(`{}`), "tasks/get", "t1",
			"Header mismatch: Mcp-Name header value 't1' does not match body value (params.taskId is missing or not a string)"},
		{"tasks/get, repeated taskId", "tasks/get", json.RawMessage(`{"taskId":"t1","taskId":"t2"}`), "tasks/get", "t1",
			"Header mismatch: Mcp-Name header value 't1' does not match body value 't2'"},
		{"tasks/get, bad base64", "tasks/get", json.RawMessage(`{"taskId":"t1"}`), "tasks/get", "=?base64?literal?=",
			"Header mismatch: Mcp-Name header value is not valid Base64-encoded UTF-8"},
		// tasks/result and tasks/list are 2025-11-25's: not checked.
		{"tasks/result not checked", "tasks/result", json.RawMessage(`{"taskId":"t1"}`), "tasks/result", "t2", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mcpwire.CheckHeaders(tt.method, tt.params, tt.hdrMethod, tt.hdrName)
			if tt.wantMsg == "" {
				if e != nil {
					t.Fatalf("CheckHeaders = %v, want nil", e)
				}
				return
			}
			if e == nil {
				t.Fatalf("CheckHeaders = nil, want %q", tt.wantMsg)
			}
			if e.Code != -32020 || e.Message != tt.wantMsg || e.Data != nil {
				t.Errorf("CheckHeaders = %d %q (data %s), want -32020 %q", e.Code, e.Message, e.Data, tt.wantMsg)
			}
		})
	}
	// A long value is clipped in the message.
	long := strings.Repeat("é", 200)
	e := mcpwire.CheckHeaders("tools/call", json.RawMessage(`{"name":"x"}`), "tools/call", mcpwire.EncodeHeaderValue(long))
	if e == nil || len(e.Message) > 400 || !strings.Contains(e.Message, "…") {
		t.Errorf("long value: %v", e)
	}
}

func mcpwireB64(s string) string {
	return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?="
}

func TestCheckProtocolVersionHeader(t *testing.T) {
	_, params := decode(t, specToolsCall)
	if e := mcpwire.CheckProtocolVersionHeader(params, "2026-07-28"); e != nil {
		t.Errorf("matching header: %v", e)
	}
	tests := []struct {
		params, hdr, msg string
	}{
		{string(params), "", "Header mismatch: missing required MCP-Protocol-Version header"},
		{string(params), "2025-11-25", "Header mismatch: MCP-Protocol-Version header value '2025-11-25' does not match body value '2026-07-28'"},
		{`{"_meta":{}}`, "2026-07-28", "Header mismatch: MCP-Protocol-Version header value '2026-07-28' does not match body value ''"},
		{string(params), "2026-07-28\n", "Header mismatch: MCP-Protocol-Version header value contains invalid characters"},
	}
	for _, tt := range tests {
		e := mcpwire.CheckProtocolVersionHeader(json.RawMessage(tt.params), tt.hdr)
		if e == nil || e.Code != -32020 || e.Message != tt.msg {
			t.Errorf("CheckProtocolVersionHeader(%s, %q) = %v, want %q", tt.params, tt.hdr, e, tt.msg)
		}
	}
}

func TestHeaderValueEncoding(t *testing.T) {
	// basic/transports/streamable-http.md, "Encoding examples".
	tests := []struct{ value, header string }{
		{"us-west1", "us-west1"},
		{"Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="},
		{" padded ", "=?base64?IHBhZGRlZCA=?="},
		{"line1\nline2", "=?base64?bGluZTEKbGluZTI=?="},
		{"=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="},
		// Beyond the table: the same rules.
		{"", ""},
		{"a b", "a b"},
		{"tab\there", mcpwireB64("tab\there")},
		{"trailing\t", mcpwireB64("trailing\t")},
		{"\x7f", mcpwireB64("\x7f")},
		{"=?base64?", "=?base64?"},
		{"file:///projects/myapp/config.json", "file:///projects/myapp/config.json"},
	}
	for _, tt := range tests {
		if got := mcpwire.EncodeHeaderValue(tt.value); got != tt.header {
			t.Errorf("EncodeHeaderValue(%q) = %q, want %q", tt.value, got, tt.header)
		}
		got, err := mcpwire.DecodeHeaderValue(tt.header)
		if err != nil || got != tt.value {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v, want %q", tt.header, got, err, tt.value)
		}
	}
	for _, bad := range []string{
		"=?base64?literal?=",      // not Base64
		"=?base64?/w==?=",         // Base64 of invalid UTF-8
		"raw é",                   // non-ASCII must be encoded
		"line1\nline2",            // control characters must be encoded
		"=?base64?SGVsbG8=?=\x00", // trailing NUL
	} {
		if got, err := mcpwire.DecodeHeaderValue(bad); err == nil {
			t.Errorf("DecodeHeaderValue(%q) = %q, want an error", bad, got)
		}
	}
	// The markers are case-sensitive: anything else is a plain value.
	for _, plain := range []string{"=?BASE64?SGk=?=", "=?base64?SGk=", "?base64?SGk=?="} {
		if got, err := mcpwire.DecodeHeaderValue(plain); err != nil || got != plain {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v, want it unchanged", plain, got, err)
		}
	}
}

func TestWithResultType(t *testing.T) {
	tests := []struct{ in, typ, want string }{
		// server/tools.md, "Calling Tools" response, without its resultType.
		{`{"content":[{"type":"text","text":"Current weather in New York:\nTemperature: 72°F\nConditions: Partly cloudy"}],"isError":false}`, "complete",
			`{"content":[{"type":"text","text":"Current weather in New York:\nTemperature: 72°F\nConditions: Partly cloudy"}],"isError":false,"resultType":"complete"}`},
		// Every other byte is kept: whitespace, number spelling, key order,
		// escapes.
		{"{ \"b\" : 1.50E+2 ,\n \"a\":\"\\u00e9\" }", "complete", "{ \"b\" : 1.50E+2 ,\n \"a\":\"\\u00e9\" ,\"resultType\":\"complete\"}"},
		// Replaced in place.
		{`{"resultType":"complete","x":1}`, "input_required", `{"resultType":"input_required","x":1}`},
		{`{"x":1,"resultType":  7 }`, "complete", `{"x":1,"resultType":  "complete" }`},
		// Repeated: one copy is left, so every decoder reads the same.
		{`{"resultType":"a","x":1,"resultType":"b"}`, "complete", `{"x":1,"resultType":"complete"}`},
		// An empty result (ping, setLevel of old) becomes a complete one.
		{`{}`, "complete", `{"resultType":"complete"}`},
		{``, "complete", `{"resultType":"complete"}`},
		{" \n", "complete", `{"resultType":"complete"}`},
		// Not an object: unchanged.
		{`null`, "complete", `null`},
		{`[1]`, "complete", `[1]`},
		{`{"a":`, "complete", `{"a":`},
	}
	for _, tt := range tests {
		if got := string(mcpwire.WithResultType(json.RawMessage(tt.in), tt.typ)); got != tt.want {
			t.Errorf("WithResultType(%q, %q)\n got %q\nwant %q", tt.in, tt.typ, got, tt.want)
		}
	}
}

func TestResultTypeOf(t *testing.T) {
	tests := map[string]string{
		`{"resultType":"complete","content":[]}`: "complete",
		// basic/patterns/mrtr.md.
		`{"resultType":"input_required","requestState":"AEAD-protected blob"}`: "input_required",
		// Earlier revisions omit it: complete (basic/index.md).
		`{"content":[]}`:            "complete",
		``:                          "complete",
		`{"resultType":"x-ext"}`:    "x-ext",
		`{"resultType":null}`:       "",
		`{"resultType":1}`:          "",
		`{"a":{"resultType":"no"}}`: "complete",
	}
	for in, want := range tests {
		if got := mcpwire.ResultTypeOf(json.RawMessage(in)); got != want {
			t.Errorf("ResultTypeOf(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestWithCacheHints(t *testing.T) {
	// server/tools.md, "Listing Tools" response, built from its result
	// without the hints.
	in := `{
    "resultType": "complete",
    "tools": [{"name": "get_weather"}],
    "nextCursor": "next-page-cursor"
  }`
	want := `{
    "resultType": "complete",
    "tools": [{"name": "get_weather"}],
    "nextCursor": "next-page-cursor"
  ,"ttlMs":300000,"cacheScope":"public"}`
	if got := string(mcpwire.WithCacheHints(json.RawMessage(in), 300000*time.Millisecond, "public")); got != want {
		t.Errorf("WithCacheHints:\n got %s\nwant %s", got, want)
	}
	tests := []struct {
		in    string
		ttl   time.Duration
		scope string
		want  string
	}{
		// server/resources.md, resources/read: 60000 ms, private.
		{`{"contents":[]}`, time.Minute, "private", `{"contents":[],"ttlMs":60000,"cacheScope":"private"}`},
		{`{}`, 0, "private", `{"ttlMs":0,"cacheScope":"private"}`},
		// ttlMs must be >= 0; whole milliseconds.
		{`{}`, -time.Second, "public", `{"ttlMs":0,"cacheScope":"public"}`},
		{`{}`, 1500 * time.Microsecond, "public", `{"ttlMs":1,"cacheScope":"public"}`},
		{`{}`, 999 * time.Microsecond, "public", `{"ttlMs":0,"cacheScope":"public"}`},
		{`{}`, time.Duration(1<<63 - 1), "public", `{"ttlMs":9223372036854,"cacheScope":"public"}`},
		// Anything but public is private.
		{`{}`, time.Second, "", `{"ttlMs":1000,"cacheScope":"private"}`},
		{`{}`, time.Second, "Public", `{"ttlMs":1000,"cacheScope":"private"}`},
		// Existing hints (an upstream's) are replaced in place.
		{`{"ttlMs":5,"tools":[],"cacheScope":"public"}`, 2 * time.Second, "private", `{"ttlMs":2000,"tools":[],"cacheScope":"private"}`},
		{`null`, time.Second, "public", `null`},
	}
	for _, tt := range tests {
		if got := string(mcpwire.WithCacheHints(json.RawMessage(tt.in), tt.ttl, tt.scope)); got != tt.want {
			t.Errorf("WithCacheHints(%s, %v, %q) = %s, want %s", tt.in, tt.ttl, tt.scope, got, tt.want)
		}
	}
}

func TestSubscriptionFilter(t *testing.T) {
	_, params := decode(t, specListen)
	f, ok := mcpwire.ParseSubscriptionFilter(params)
	want := mcpwire.SubscriptionFilter{ToolsListChanged: true, ResourceSubscriptions: []string{"file:///project/config.json"}}
	if !ok || !reflect.DeepEqual(f, want) {
		t.Fatalf("ParseSubscriptionFilter = %+v, %v, want %+v", f, ok, want)
	}
	// The acknowledgement echoes the agreed subset (subscriptions.md).
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, w := string(b), `{"toolsListChanged":true,"resourceSubscriptions":["file:///project/config.json"]}`; got != w {
		t.Errorf("Marshal = %s, want %s", got, w)
	}
	all := mcpwire.SubscriptionFilter{ToolsListChanged: true, PromptsListChanged: true, ResourcesListChanged: true, ResourceSubscriptions: []string{`a"b`}}
	if b, _ := json.Marshal(all); string(b) != `{"toolsListChanged":true,"promptsListChanged":true,"resourcesListChanged":true,"resourceSubscriptions":["a\"b"]}` {
		t.Errorf("Marshal(all) = %s", b)
	}
	if b, _ := json.Marshal(mcpwire.SubscriptionFilter{}); string(b) != `{}` {
		t.Errorf("Marshal(empty) = %s", b)
	}

	wants := []struct {
		method, params string
		want           bool
	}{
		{"notifications/tools/list_changed", ``, true},
		{"notifications/prompts/list_changed", ``, false},
		{"notifications/resources/list_changed", ``, false},
		// server/resources.md, "Subscriptions".
		{"notifications/resources/updated", `{"_meta":{"io.modelcontextprotocol/subscriptionId":4},"uri":"file:///project/config.json"}`, true},
		{"notifications/resources/updated", `{"uri":"file:///project/other.json"}`, false},
		{"notifications/resources/updated", `{}`, false},
		// Request-scoped notifications never travel on a listen stream.
		{"notifications/progress", `{"progressToken":"abc123","progress":50}`, false},
		{"notifications/message", `{"level":"error"}`, false},
	}
	for _, tt := range wants {
		if got := f.Wants(tt.method, json.RawMessage(tt.params)); got != tt.want {
			t.Errorf("Wants(%s, %s) = %v, want %v", tt.method, tt.params, got, tt.want)
		}
	}

	parse := []struct {
		params string
		ok     bool
		want   mcpwire.SubscriptionFilter
	}{
		{`{"notifications":{}}`, true, mcpwire.SubscriptionFilter{}},
		{`{"notifications":{"promptsListChanged":true,"resourcesListChanged":true,"toolsListChanged":false}}`, true,
			mcpwire.SubscriptionFilter{PromptsListChanged: true, ResourcesListChanged: true}},
		{`{"notifications":{"toolsListChanged":"true","resourceSubscriptions":["a",1,null,"b"]}}`, true,
			mcpwire.SubscriptionFilter{ResourceSubscriptions: []string{"a", "b"}}},
		{`{"notifications":{"resourceSubscriptions":"a"}}`, true, mcpwire.SubscriptionFilter{}},
		{`{}`, false, mcpwire.SubscriptionFilter{}},
		{`{"notifications":true}`, false, mcpwire.SubscriptionFilter{}},
		{`{"notifications":null}`, false, mcpwire.SubscriptionFilter{}},
		{``, false, mcpwire.SubscriptionFilter{}},
	}
	for _, tt := range parse {
		got, ok := mcpwire.ParseSubscriptionFilter(json.RawMessage(tt.params))
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseSubscriptionFilter(%s) = %+v, %v, want %+v, %v", tt.params, got, ok, tt.want, tt.ok)
		}
	}
}

func TestWithSubscriptionID(t *testing.T) {
	// basic/patterns/subscriptions.md, the acknowledgement of request id 1.
	params := `{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["file:///project/config.json"]}}`
	want := `{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["file:///project/config.json"]},"_meta":{"io.modelcontextprotocol/subscriptionId":1}}`
	if got := string(mcpwire.WithSubscriptionID(json.RawMessage(params), jsonrpc.Int64ID(1))); got != want {
		t.Errorf("WithSubscriptionID:\n got %s\nwant %s", got, want)
	}
	tests := []struct {
		params string
		id     jsonrpc.ID
		want   string
	}{
		// A list_changed notification has no params of its own.
		{``, jsonrpc.StringID("listen-7"), `{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-7"}}`},
		// An existing _meta keeps its other members.
		{`{"_meta":{"x":1},"uri":"u"}`, jsonrpc.Int64ID(4), `{"_meta":{"x":1,"io.modelcontextprotocol/subscriptionId":4},"uri":"u"}`},
		{`{"_meta":{"io.modelcontextprotocol/subscriptionId":9}}`, jsonrpc.Int64ID(4), `{"_meta":{"io.modelcontextprotocol/subscriptionId":4}}`},
		{`{"a":1}`, jsonrpc.ID{}, `{"a":1}`},
		{`[]`, jsonrpc.Int64ID(1), `[]`},
	}
	for _, tt := range tests {
		if got := string(mcpwire.WithSubscriptionID(json.RawMessage(tt.params), tt.id)); got != tt.want {
			t.Errorf("WithSubscriptionID(%s, %s) = %s, want %s", tt.params, tt.id, got, tt.want)
		}
	}
}

// fuzzSeeds are the spec's requests plus some broken ones.
var fuzzSeeds = []string{
	`{"name":"get_weather","arguments":{"location":"Seattle, WA"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"ExampleClient","version":"1.0.0"},"io.modelcontextprotocol/clientCapabilities":{}}}`,
	`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/logLevel":"info"},"notifications":{"toolsListChanged":true}}`,
	`{"uri":"file:///projects/myapp/config.json","_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01"}}`,
	`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"a":}}}`,
	`{"_meta":`, `{"_meta":{"\u0069o.modelcontextprotocol/protocolVersion":"x"}}`, `null`, ``, `"`, `{"":{"":[`, `{"name":"\ud800"}`,
}

func FuzzRequestMeta(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		info, err := mcpwire.RequestMeta(params)
		if err != nil {
			var rpcErr *jsonrpc.Error
			if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
				t.Fatalf("RequestMeta(%q) error %v is not INVALID_PARAMS", params, err)
			}
			return
		}
		if info.ProtocolVersion == "" || len(info.Capabilities.Raw) == 0 {
			t.Fatalf("RequestMeta(%q) = %+v without version or capabilities", params, info)
		}
		if info.LogLevel != "" && !mcpwire.ValidLogLevel(info.LogLevel) {
			t.Fatalf("RequestMeta(%q) log level %q", params, info.LogLevel)
		}
		if v, _ := mcpwire.MetaProtocolVersion(params); v != info.ProtocolVersion {
			t.Fatalf("MetaProtocolVersion(%q) = %q, RequestMeta says %q", params, v, info.ProtocolVersion)
		}
		_ = mcpwire.IsStateless(params)
		_, _ = mcpwire.StatelessVersion(params)
		_, _ = mcpwire.ParseSubscriptionFilter(params)
		_ = mcpwire.WithSubscriptionID(params, jsonrpc.Int64ID(1))
	})
}

func FuzzCheckHeaders(f *testing.F) {
	methods := []string{"tools/call", "resources/read", "prompts/get", "tools/list"}
	for i, s := range fuzzSeeds {
		f.Add(methods[i%len(methods)], []byte(s), methods[i%len(methods)], "get_weather")
	}
	f.Add("tools/call", []byte(`{"name":"Hello, 世界"}`), "tools/call", "=?base64?SGVsbG8sIOS4lueVjA==?=")
	f.Add("tools/call", []byte(`{"name":"x"}`), "tools/call", "=?base64??=")
	f.Add("tasks/get", []byte(`{"taskId":"t1"}`), "tasks/get", "t1")
	f.Add("tasks/cancel", []byte(`{"taskId":"t1"}`), "tasks/cancel", "t2")
	f.Fuzz(func(t *testing.T, method string, params []byte, hdrMethod, hdrName string) {
		e := mcpwire.CheckHeaders(method, params, hdrMethod, hdrName)
		if e != nil {
			if e.Code != mcpwire.CodeHeaderMismatch || !strings.HasPrefix(e.Message, "Header mismatch: ") {
				t.Fatalf("CheckHeaders = %d %q", e.Code, e.Message)
			}
		} else if hdrMethod != method {
			t.Fatalf("CheckHeaders accepted Mcp-Method %q for %q", hdrMethod, method)
		}
		if e := mcpwire.CheckProtocolVersionHeader(params, hdrName); e != nil && e.Code != mcpwire.CodeHeaderMismatch {
			t.Fatalf("CheckProtocolVersionHeader = %v", e)
		}
		// Encoding then decoding gives back any valid UTF-8 text.
		if dec, err := mcpwire.DecodeHeaderValue(mcpwire.EncodeHeaderValue(hdrName)); utf8.ValidString(hdrName) && (err != nil || dec != hdrName) {
			t.Fatalf("round trip of %q = %q, %v", hdrName, dec, err)
		}
		_ = mcpwire.WithResultType(params, hdrMethod)
		_ = mcpwire.WithCacheHints(params, time.Second, hdrName)
		_ = mcpwire.ResultTypeOf(params)
	})
}

func TestWithoutSubscriptionID(t *testing.T) {
	for in, want := range map[string]string{
		`{"uri":"a","_meta":{"io.modelcontextprotocol/subscriptionId":"mcpgate-listen-1"}}`: `{"uri":"a"}`,
		`{"uri":"a","_meta":{"io.modelcontextprotocol/subscriptionId":3,"trace":"x"}}`:      `{"uri":"a","_meta":{"trace":"x"}}`,
		`{"uri":"a","_meta":{"trace":"x"}}`:                                                 `{"uri":"a","_meta":{"trace":"x"}}`,
		`{"uri":"a"}`:                                                                       `{"uri":"a"}`,
		`[1]`:                                                                               `[1]`,
	} {
		got := string(mcpwire.WithoutSubscriptionID(json.RawMessage(in)))
		var g, w any
		if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil || !reflect.DeepEqual(g, w) {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
}
