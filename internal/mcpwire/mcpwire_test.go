package mcpwire_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

func TestRevisions(t *testing.T) {
	type props struct {
		Known, Handshake, Batches bool
		Negotiated                string
	}
	tests := []struct {
		rev  string
		want props
	}{
		{mcpwire.Rev20241105, props{Known: true, Handshake: true, Batches: true, Negotiated: "2024-11-05"}},
		{mcpwire.Rev20250326, props{Known: true, Handshake: true, Batches: true, Negotiated: "2025-03-26"}},
		{mcpwire.Rev20250618, props{Known: true, Handshake: true, Negotiated: "2025-06-18"}},
		{mcpwire.Rev20251125, props{Known: true, Handshake: true, Negotiated: "2025-11-25"}},
		// The stateless revision has no initialize: an initialize asking for
		// it is answered with the latest handshake revision.
		{mcpwire.Rev20260728, props{Known: true, Negotiated: "2025-11-25"}},
		{"", props{Negotiated: "2025-11-25"}},
		{"2024-10-07", props{Negotiated: "2025-11-25"}},
		{"2099-01-01", props{Negotiated: "2025-11-25"}},
		{"2025-06-18 ", props{Negotiated: "2025-11-25"}},
		{"latest", props{Negotiated: "2025-11-25"}},
	}
	for _, tt := range tests {
		got := props{
			Known:      mcpwire.IsKnown(tt.rev),
			Handshake:  mcpwire.IsHandshake(tt.rev),
			Batches:    mcpwire.SupportsBatches(tt.rev),
			Negotiated: mcpwire.Negotiate(tt.rev),
		}
		if diff := cmp.Diff(got, tt.want); diff != "" {
			t.Errorf("revision %q (-got +want):\n%s", tt.rev, diff)
		}
	}
}

func TestRevisionLists(t *testing.T) {
	if diff := cmp.Diff(mcpwire.Revisions, []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}); diff != "" {
		t.Errorf("Revisions (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(mcpwire.HandshakeRevisions, []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}); diff != "" {
		t.Errorf("HandshakeRevisions (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(mcpwire.LatestHandshake, mcpwire.HandshakeRevisions[0]); diff != "" {
		t.Errorf("LatestHandshake (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(mcpwire.SupportedList(), "2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05"); diff != "" {
		t.Errorf("SupportedList (-got +want):\n%s", diff)
	}
	// Negotiate always answers a revision that uses initialize.
	for _, rev := range append(mcpwire.Revisions, "", "x") {
		if got := mcpwire.Negotiate(rev); !mcpwire.IsHandshake(got) {
			t.Errorf("Negotiate(%q) = %q, not a handshake revision", rev, got)
		}
	}
}

func TestParseClientCaps(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want mcpwire.ClientCaps
	}{
		{"absent", ``, mcpwire.ClientCaps{}},
		{"null", `null`, mcpwire.ClientCaps{}},
		{"empty", `{}`, mcpwire.ClientCaps{}},
		{"not an object", `[1]`, mcpwire.ClientCaps{}},
		{"invalid JSON", `{"sampling":`, mcpwire.ClientCaps{}},
		{"sampling", `{"sampling":{}}`, mcpwire.ClientCaps{Sampling: true}},
		{"sampling with sub-capabilities", `{"sampling":{"tools":{},"context":{}}}`, mcpwire.ClientCaps{Sampling: true}},
		{"sampling null", `{"sampling":null}`, mcpwire.ClientCaps{}},
		{"sampling false", `{"sampling":false}`, mcpwire.ClientCaps{}},
		{"elicitation empty object means form", `{"elicitation":{}}`, mcpwire.ClientCaps{Elicitation: true, ElicitationForm: true}},
		{"elicitation form", `{"elicitation":{"form":{}}}`, mcpwire.ClientCaps{Elicitation: true, ElicitationForm: true}},
		{"elicitation url only", `{"elicitation":{"url":{}}}`, mcpwire.ClientCaps{Elicitation: true, ElicitationURL: true}},
		{"elicitation form and url", `{"elicitation":{"form":{},"url":{}}}`, mcpwire.ClientCaps{Elicitation: true, ElicitationForm: true, ElicitationURL: true}},
		{"elicitation url null means form", `{"elicitation":{"url":null}}`, mcpwire.ClientCaps{Elicitation: true, ElicitationForm: true}},
		{"elicitation null", `{"elicitation":null}`, mcpwire.ClientCaps{}},
		{"roots", `{"roots":{}}`, mcpwire.ClientCaps{Roots: true}},
		{"roots listChanged", `{"roots":{"listChanged":true}}`, mcpwire.ClientCaps{Roots: true, RootsListChanged: true}},
		{"roots listChanged false", `{"roots":{"listChanged":false}}`, mcpwire.ClientCaps{Roots: true}},
		{"roots null", `{"roots":null}`, mcpwire.ClientCaps{}},
		{"everything", `{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true},"experimental":{"x":{}}}`,
			mcpwire.ClientCaps{Sampling: true, Elicitation: true, ElicitationForm: true, ElicitationURL: true, Roots: true, RootsListChanged: true}},
		{"mistyped listChanged does not hide other capabilities", `{"sampling":{},"roots":{"listChanged":"yes"}}`,
			mcpwire.ClientCaps{Sampling: true, Roots: true}},
		{"mistyped roots does not hide other capabilities", `{"roots":[],"elicitation":{}}`,
			mcpwire.ClientCaps{Roots: true, Elicitation: true, ElicitationForm: true}},
		{"names are case-sensitive", `{"Sampling":{},"ROOTS":{}}`, mcpwire.ClientCaps{}},
		{"apps extension", `{"extensions":{"io.modelcontextprotocol/ui":{"mimeTypes":["text/html;profile=mcp-app"]}}}`,
			mcpwire.ClientCaps{UI: true, UISettings: json.RawMessage(`{"mimeTypes":["text/html;profile=mcp-app"]}`)}},
		{"apps extension with no settings", `{"extensions":{"io.modelcontextprotocol/ui":{}}}`, mcpwire.ClientCaps{UI: true, UISettings: json.RawMessage(`{}`)}},
		{"apps extension not an object", `{"extensions":{"io.modelcontextprotocol/ui":true}}`, mcpwire.ClientCaps{}},
		{"apps extension under experimental is not the extension", `{"experimental":{"io.modelcontextprotocol/ui":{}}}`, mcpwire.ClientCaps{}},
		{"other extension", `{"extensions":{"io.modelcontextprotocol/tasks":{}},"sampling":{}}`, mcpwire.ClientCaps{Sampling: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mcpwire.ParseClientCaps(json.RawMessage(tt.raw))
			if diff := cmp.Diff(got, tt.want, cmpopts.IgnoreFields(mcpwire.ClientCaps{}, "Raw")); diff != "" {
				t.Errorf("ParseClientCaps(%s) (-got +want):\n%s", tt.raw, diff)
			}
			if diff := cmp.Diff(string(got.Raw), tt.raw); diff != "" {
				t.Errorf("ParseClientCaps(%s).Raw (-got +want):\n%s", tt.raw, diff)
			}
		})
	}
}

func TestClientCapsAllows(t *testing.T) {
	tests := []struct {
		caps   mcpwire.ClientCaps
		method string
		want   bool
	}{
		{mcpwire.ClientCaps{}, mcpwire.MethodSamplingCreate, false},
		{mcpwire.ClientCaps{Sampling: true}, mcpwire.MethodSamplingCreate, true},
		{mcpwire.ClientCaps{}, mcpwire.MethodElicitationCreate, false},
		{mcpwire.ClientCaps{Elicitation: true}, mcpwire.MethodElicitationCreate, true},
		{mcpwire.ClientCaps{}, mcpwire.MethodRootsList, false},
		{mcpwire.ClientCaps{Roots: true}, mcpwire.MethodRootsList, true},
		{mcpwire.ClientCaps{}, mcpwire.MethodPing, true},
	}
	for _, tt := range tests {
		if got := tt.caps.Allows(tt.method); got != tt.want {
			t.Errorf("%+v.Allows(%q) = %v, want %v", tt.caps, tt.method, got, tt.want)
		}
	}
}

func TestParseServerCaps(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want mcpwire.ServerCaps
	}{
		{"absent", ``, mcpwire.ServerCaps{}},
		{"empty", `{}`, mcpwire.ServerCaps{}},
		{"invalid JSON", `{"tools":{}`, mcpwire.ServerCaps{}},
		{"tools", `{"tools":{}}`, mcpwire.ServerCaps{Tools: true}},
		{"tools listChanged", `{"tools":{"listChanged":true}}`, mcpwire.ServerCaps{Tools: true, ToolsListChanged: true}},
		{"tools null", `{"tools":null}`, mcpwire.ServerCaps{}},
		{"prompts listChanged", `{"prompts":{"listChanged":true}}`, mcpwire.ServerCaps{Prompts: true, PromptsListChanged: true}},
		{"resources subscribe", `{"resources":{"subscribe":true}}`, mcpwire.ServerCaps{Resources: true, ResourcesSubscribe: true}},
		{"resources both", `{"resources":{"subscribe":true,"listChanged":true}}`, mcpwire.ServerCaps{Resources: true, ResourcesSubscribe: true, ResourcesListChanged: true}},
		{"logging and completions", `{"logging":{},"completions":{}}`, mcpwire.ServerCaps{Logging: true, Completions: true}},
		{"logging null", `{"logging":null}`, mcpwire.ServerCaps{}},
		{"everything", `{"tools":{"listChanged":true},"prompts":{},"resources":{"listChanged":true},"logging":{},"completions":{},"experimental":{}}`,
			mcpwire.ServerCaps{Tools: true, ToolsListChanged: true, Prompts: true, Resources: true, ResourcesListChanged: true, Logging: true, Completions: true}},
		{"mistyped listChanged does not hide other capabilities", `{"tools":{"listChanged":"true"},"prompts":{}}`,
			mcpwire.ServerCaps{Tools: true, Prompts: true}},
		{"mistyped tools does not hide other capabilities", `{"tools":true,"resources":{"subscribe":1},"logging":{}}`,
			mcpwire.ServerCaps{Tools: true, Resources: true, Logging: true}},
		{"names are case-sensitive", `{"Tools":{},"PROMPTS":{}}`, mcpwire.ServerCaps{}},
		{"apps extension", `{"tools":{},"extensions":{"io.modelcontextprotocol/ui":{}}}`, mcpwire.ServerCaps{Tools: true, UI: true}},
		{"apps extension null", `{"extensions":{"io.modelcontextprotocol/ui":null}}`, mcpwire.ServerCaps{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mcpwire.ParseServerCaps(json.RawMessage(tt.raw))
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("ParseServerCaps(%s) (-got +want):\n%s", tt.raw, diff)
			}
		})
	}
}

func TestServerCapsMerge(t *testing.T) {
	a := mcpwire.ServerCaps{Tools: true, ToolsListChanged: true, Logging: true}
	b := mcpwire.ServerCaps{Prompts: true, Resources: true, ResourcesSubscribe: true, ResourcesListChanged: true, Completions: true, PromptsListChanged: true}
	want := mcpwire.ServerCaps{Tools: true, ToolsListChanged: true, Logging: true, Prompts: true, Resources: true, ResourcesSubscribe: true, ResourcesListChanged: true, Completions: true, PromptsListChanged: true}
	if diff := cmp.Diff(a.Merge(b), want); diff != "" {
		t.Errorf("Merge (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(b.Merge(a), want); diff != "" {
		t.Errorf("Merge reversed (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(a.Merge(mcpwire.ServerCaps{}), a); diff != "" {
		t.Errorf("Merge with zero (-got +want):\n%s", diff)
	}
}

func TestValidToolName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"get_weather", true},
		{"a", true},
		{"A-Z.0_9", true},
		{"DATA_EXPORT_v2", true},
		{"admin.tools.list", true},
		{"-leading-dash", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"", false},
		{"get weather", false},
		{" get", false},
		{"get\n", false},
		{"get\tweather", false},
		{"a,b", false},
		{"a/b", false},
		{"a:b", false},
		{"a@b", false},
		{"café", false},
		{"工具", false},
		{"a\x00", false},
		{strings.Repeat("é", 10), false},
	}
	for _, tt := range tests {
		if got := mcpwire.ValidToolName(tt.name); got != tt.want {
			t.Errorf("ValidToolName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
