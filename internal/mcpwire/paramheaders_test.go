package mcpwire_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

func TestParamHeadersOf(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		want         []mcpwire.ParamHeader
		err          string // substring; "" = valid
	}{
		{name: "none", schema: `{"type":"object","properties":{"q":{"type":"string"}}}`},
		{name: "spec example", schema: `{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"query":{"type":"string"}}}`,
			want: []mcpwire.ParamHeader{{Name: "Region", Path: []string{"region"}}}},
		{name: "nested through properties, sorted by name", schema: `{"type":"object","properties":{
			"opts":{"type":"object","properties":{"tenant":{"type":"integer","x-mcp-header":"Tenant"}}},
			"dry":{"type":"boolean","x-mcp-header":"Dry-Run"}}}`,
			want: []mcpwire.ParamHeader{{Name: "Dry-Run", Path: []string{"dry"}}, {Name: "Tenant", Path: []string{"opts", "tenant"}}}},
		{name: "a property named like the annotation is a property", schema: `{"type":"object","properties":{"x-mcp-header":{"type":"string"}}}`},
		{name: "annotation spelled with an escape", schema: `{"properties":{"r":{"type":"string","x\u002dmcp-header":"R"}}}`,
			want: []mcpwire.ParamHeader{{Name: "R", Path: []string{"r"}}}},
		{name: "values in default and enum are data", schema: `{"properties":{"o":{"type":"object","default":{"x-mcp-header":"X"}}}}`},
		{name: "number type", schema: `{"properties":{"n":{"type":"number","x-mcp-header":"N"}}}`, err: `property "n": x-mcp-header needs type string, integer or boolean, not "number"`},
		{name: "no type", schema: `{"properties":{"n":{"x-mcp-header":"N"}}}`, err: "not none"},
		{name: "object type", schema: `{"properties":{"n":{"type":"object","x-mcp-header":"N"}}}`, err: "needs type"},
		{name: "empty", schema: `{"properties":{"n":{"type":"string","x-mcp-header":""}}}`, err: "non-empty string"},
		{name: "not a string", schema: `{"properties":{"n":{"type":"string","x-mcp-header":7}}}`, err: "non-empty string"},
		{name: "space", schema: `{"properties":{"n":{"type":"string","x-mcp-header":"A B"}}}`, err: `invalid character ' '`},
		{name: "CRLF", schema: `{"properties":{"n":{"type":"string","x-mcp-header":"A\r\nX-Evil: 1"}}}`, err: "not an HTTP token"},
		{name: "colon", schema: `{"properties":{"n":{"type":"string","x-mcp-header":"A:B"}}}`, err: "not an HTTP token"},
		{name: "duplicate in any case", schema: `{"properties":{"a":{"type":"string","x-mcp-header":"Region"},"b":{"type":"string","x-mcp-header":"REGION"}}}`, err: "repeats"},
		{name: "through items", schema: `{"properties":{"l":{"type":"array","items":{"type":"string","x-mcp-header":"L"}}}}`, err: `property "l"`},
		{name: "through oneOf", schema: `{"properties":{"o":{"oneOf":[{"type":"string","x-mcp-header":"O"}]}}}`, err: "reached through"},
		{name: "through $defs", schema: `{"$defs":{"d":{"type":"string","x-mcp-header":"D"}},"properties":{"o":{"$ref":"#/$defs/d"}}}`, err: "reached through"},
		{name: "under properties of a oneOf branch", schema: `{"oneOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}`, err: "reached through"},
		{name: "on the root", schema: `{"type":"string","x-mcp-header":"Root"}`, err: "the schema root"},
		{name: "not JSON", schema: `{"properties":{"a":{"x-mcp-header":`, err: "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mcpwire.ParamHeadersOf([]byte(tc.schema))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToolParamHeaders(t *testing.T) {
	hs, err := mcpwire.ToolParamHeaders([]byte(`{"name":"sql","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}}`))
	if err != nil || len(hs) != 1 || hs[0].Header() != "Mcp-Param-Region" {
		t.Fatalf("got %+v, %v", hs, err)
	}
	if hs, err := mcpwire.ToolParamHeaders([]byte(`{"name":"plain","inputSchema":{"type":"object"}}`)); hs != nil || err != nil {
		t.Fatalf("plain tool: %+v, %v", hs, err)
	}
}

var sqlHeaders = []mcpwire.ParamHeader{
	{Name: "Count", Path: []string{"count"}},
	{Name: "Dry", Path: []string{"dry"}},
	{Name: "Region", Path: []string{"region"}},
	{Name: "Tenant", Path: []string{"opts", "tenant"}},
}

// The spec's encoding table, and the omissions.
func TestSetParamHeaders(t *testing.T) {
	for _, tc := range []struct {
		args string
		want map[string]string
	}{
		{`{"region":"us-west1","count":42,"dry":false,"opts":{"tenant":"acme"}}`,
			map[string]string{"Mcp-Param-Region": "us-west1", "Mcp-Param-Count": "42", "Mcp-Param-Dry": "false", "Mcp-Param-Tenant": "acme"}},
		{`{"region":"Hello, 世界"}`, map[string]string{"Mcp-Param-Region": "=?base64?SGVsbG8sIOS4lueVjA==?="}},
		{`{"region":" padded "}`, map[string]string{"Mcp-Param-Region": "=?base64?IHBhZGRlZCA=?="}},
		{`{"region":"line1\nline2"}`, map[string]string{"Mcp-Param-Region": "=?base64?bGluZTEKbGluZTI=?="}},
		{`{"region":"=?base64?literal?="}`, map[string]string{"Mcp-Param-Region": "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="}},
		{`{"count":42.0}`, map[string]string{"Mcp-Param-Count": "42"}},
		{`{"count":-7}`, map[string]string{"Mcp-Param-Count": "-7"}},
		// Omitted: null, absent, not primitive, a fraction, beyond 2^53-1.
		{`{"region":null,"opts":{"tenant":null}}`, map[string]string{}},
		{`{"region":{"x":1},"count":1.5,"dry":[true]}`, map[string]string{}},
		{`{"count":9007199254740993}`, map[string]string{}},
		{`{"opts":"flat"}`, map[string]string{}},
		{``, map[string]string{}},
	} {
		h := http.Header{}
		mcpwire.SetParamHeaders(h, sqlHeaders, []byte(tc.args))
		got := map[string]string{}
		for k := range h {
			got[k] = h.Get(k)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.args, diff)
		}
	}
}

func TestCheckParamHeaders(t *testing.T) {
	hs := sqlHeaders
	for _, tc := range []struct {
		name, args string
		hdr        map[string][]string
		err        string // "" = accepted
	}{
		{name: "all match", args: `{"region":"us-west1","count":42,"dry":true,"opts":{"tenant":"acme"}}`,
			hdr: map[string][]string{"Mcp-Param-Region": {"us-west1"}, "Mcp-Param-Count": {"42"}, "Mcp-Param-Dry": {"true"}, "Mcp-Param-Tenant": {"acme"}}},
		{name: "integers compare as numbers", args: `{"count":42}`, hdr: map[string][]string{"Mcp-Param-Count": {"42.0"}}},
		{name: "base64 decoded before comparing", args: `{"region":"Hello, 世界"}`, hdr: map[string][]string{"Mcp-Param-Region": {"=?base64?SGVsbG8sIOS4lueVjA==?="}}},
		{name: "header names are case-insensitive", args: `{"region":"eu"}`, hdr: map[string][]string{"MCP-PARAM-REGION": {"eu"}}},
		{name: "no arguments, no headers", args: `{}`},
		{name: "null needs no header", args: `{"region":null}`},
		{name: "unrecognised headers are ignored", args: `{}`, hdr: map[string][]string{"Mcp-Param-Other": {"x"}}},
		{name: "missing", args: `{"region":"us-west1"}`, err: `Header mismatch: missing Mcp-Param-Region header for argument "region"`},
		{name: "missing nested", args: `{"opts":{"tenant":"acme"}}`, err: `missing Mcp-Param-Tenant header for argument "opts.tenant"`},
		{name: "different", args: `{"region":"us-west1"}`, hdr: map[string][]string{"Mcp-Param-Region": {"eu-west1"}}, err: `Mcp-Param-Region header value does not match argument "region"`},
		{name: "case of values matters", args: `{"region":"us"}`, hdr: map[string][]string{"Mcp-Param-Region": {"US"}}, err: "does not match"},
		{name: "different number", args: `{"count":42}`, hdr: map[string][]string{"Mcp-Param-Count": {"43"}}, err: "does not match"},
		{name: "not a number", args: `{"count":42}`, hdr: map[string][]string{"Mcp-Param-Count": {"forty-two"}}, err: "does not match"},
		{name: "boolean spelled otherwise", args: `{"dry":true}`, hdr: map[string][]string{"Mcp-Param-Dry": {"True"}}, err: "does not match"},
		{name: "header for an absent argument", args: `{}`, hdr: map[string][]string{"Mcp-Param-Region": {"us"}}, err: "is present but argument \"region\" is absent or null"},
		{name: "header for a non-primitive", args: `{"region":["us"]}`, hdr: map[string][]string{"Mcp-Param-Region": {"us"}}, err: "not a string, integer or boolean"},
		{name: "repeated", args: `{"region":"us"}`, hdr: map[string][]string{"Mcp-Param-Region": {"us", "eu"}}, err: "repeated"},
		{name: "invalid characters", args: `{"region":"us"}`, hdr: map[string][]string{"Mcp-Param-Region": {"u\x00s"}}, err: "contains invalid characters"},
		{name: "bad base64", args: `{"region":"us"}`, hdr: map[string][]string{"Mcp-Param-Region": {"=?base64?!!!?="}}, err: "Base64"},
		{name: "the last of a repeated key is what an upstream reads", args: `{"region":"us","region":"eu"}`, hdr: map[string][]string{"Mcp-Param-Region": {"us"}}, err: "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, vs := range tc.hdr {
				for _, v := range vs {
					h.Add(k, v)
				}
			}
			e := mcpwire.CheckParamHeaders(h, hs, []byte(tc.args))
			if tc.err == "" {
				if e != nil {
					t.Fatalf("rejected: %v", e.Message)
				}
				return
			}
			if e == nil || e.Code != mcpwire.CodeHeaderMismatch || !strings.Contains(e.Message, tc.err) {
				t.Fatalf("got %+v, want -32020 containing %q", e, tc.err)
			}
			for _, v := range []string{"us-west1", "acme"} {
				if strings.Contains(tc.args, v) && strings.Contains(e.Message, v) {
					t.Errorf("the error repeats the argument value %q: %s", v, e.Message)
				}
			}
		})
	}
}

// What SetParamHeaders writes, CheckParamHeaders accepts, for any
// arguments; neither panics on any schema.
func FuzzParamHeaders(f *testing.F) {
	f.Add(`{"properties":{"r":{"type":"string","x-mcp-header":"R"},"o":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}}`, `{"r":"a\u00e9 ","o":{"n":12}}`)
	f.Add(`{"properties":{"b":{"type":"boolean","x-mcp-header":"B"}}}`, `{"b":true}`)
	f.Add(`{"oneOf":[{"x-mcp-header":1}]}`, `[]`)
	f.Fuzz(func(t *testing.T, schema, args string) {
		hs, err := mcpwire.ParamHeadersOf([]byte(schema))
		if err != nil {
			return
		}
		h := http.Header{}
		mcpwire.SetParamHeaders(h, hs, []byte(args))
		for k, vs := range h {
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n\x00") || strings.TrimSpace(v) != v {
					t.Fatalf("unsafe header value %s: %q", k, v)
				}
			}
		}
		if e := mcpwire.CheckParamHeaders(h, hs, []byte(args)); e != nil {
			t.Fatalf("own headers rejected: %s (schema %s, args %s, headers %v)", e.Message, schema, args, h)
		}
	})
}
