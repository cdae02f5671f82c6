// Package mcpwire owns the MCP vocabulary the gateway acts on: protocol
// revisions and their negotiation, method and notification names, MCP error
// codes, HTTP header names, name rules, and small readers/rewriters for the
// few message fields the gateway must look at (names, cursors, progress
// tokens, capabilities).
//
// It deliberately has no Go structs for whole MCP results: payloads stay raw
// (see package jsonrpc) so that the gateway forwards what it does not
// understand. Everything here works for both protocol eras: the handshake
// revisions (2024-11-05 .. 2025-11-25) and the stateless 2026-07-28 revision.
package mcpwire

import (
	"encoding/json"
	"slices"
	"strings"
)

// Protocol revisions.
const (
	Rev20241105 = "2024-11-05"
	Rev20250326 = "2025-03-26"
	Rev20250618 = "2025-06-18"
	Rev20251125 = "2025-11-25"
	Rev20260728 = "2026-07-28"

	// LatestHandshake is the newest revision that uses initialize.
	LatestHandshake = Rev20251125
)

// HandshakeRevisions lists the initialize-era revisions, newest first.
var HandshakeRevisions = []string{Rev20251125, Rev20250618, Rev20250326, Rev20241105}

// Revisions lists every revision the gateway speaks, newest first.
var Revisions = []string{Rev20260728, Rev20251125, Rev20250618, Rev20250326, Rev20241105}

// IsKnown reports whether rev is a revision the gateway speaks.
func IsKnown(rev string) bool { return slices.Contains(Revisions, rev) }

// IsHandshake reports whether rev uses the initialize handshake.
func IsHandshake(rev string) bool { return slices.Contains(HandshakeRevisions, rev) }

// Negotiate picks the revision to answer an initialize request that asked
// for requested: the same revision when the gateway speaks it, otherwise the
// latest handshake revision (the client then decides whether to continue).
func Negotiate(requested string) string {
	if IsHandshake(requested) {
		return requested
	}
	return LatestHandshake
}

// SupportsBatches reports whether JSON-RPC batches are part of rev
// (they were added in 2025-03-26 and removed in 2025-06-18; 2024-11-05
// allowed them by virtue of JSON-RPC).
func SupportsBatches(rev string) bool { return rev == Rev20241105 || rev == Rev20250326 }

// SupportedList is the comma-separated list used in error messages.
func SupportedList() string { return strings.Join(Revisions, ", ") }

// HTTP header names.
const (
	HeaderSessionID       = "Mcp-Session-Id"
	HeaderProtocolVersion = "Mcp-Protocol-Version"
	HeaderLastEventID     = "Last-Event-Id"
	HeaderMethod          = "Mcp-Method"
	HeaderName            = "Mcp-Name"
)

// Methods and notifications.
const (
	MethodInitialize           = "initialize"
	MethodPing                 = "ping"
	MethodToolsList            = "tools/list"
	MethodToolsCall            = "tools/call"
	MethodPromptsList          = "prompts/list"
	MethodPromptsGet           = "prompts/get"
	MethodResourcesList        = "resources/list"
	MethodResourceTemplates    = "resources/templates/list"
	MethodResourcesRead        = "resources/read"
	MethodResourcesSubscribe   = "resources/subscribe"
	MethodResourcesUnsubscribe = "resources/unsubscribe"
	MethodCompletionComplete   = "completion/complete"
	MethodLoggingSetLevel      = "logging/setLevel"
	MethodSamplingCreate       = "sampling/createMessage"
	MethodElicitationCreate    = "elicitation/create"
	MethodRootsList            = "roots/list"

	NotifyInitialized          = "notifications/initialized"
	NotifyCancelled            = "notifications/cancelled"
	NotifyProgress             = "notifications/progress"
	NotifyMessage              = "notifications/message"
	NotifyToolsListChanged     = "notifications/tools/list_changed"
	NotifyPromptsListChanged   = "notifications/prompts/list_changed"
	NotifyResourcesListChanged = "notifications/resources/list_changed"
	NotifyResourceUpdated      = "notifications/resources/updated"
	NotifyRootsListChanged     = "notifications/roots/list_changed"
	NotifyElicitationComplete  = "notifications/elicitation/complete"
)

// MCP-specific error codes.
const (
	CodeResourceNotFound       = -32002
	CodeURLElicitationRequired = -32042
	// CodeConnectionClosed and CodeRequestTimeout follow the SDKs' usage.
	CodeConnectionClosed = -32000
	CodeRequestTimeout   = -32001
)

// ValidToolName reports whether name follows the tool-name rule of the
// 2025-11-25 revision (1-128 chars of [A-Za-z0-9_.-]).
func ValidToolName(name string) bool {
	if len(name) == 0 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// ClientCaps is what the gateway needs to know of a downstream's
// capabilities: which server-initiated requests it may receive.
type ClientCaps struct {
	Sampling         bool
	Elicitation      bool
	ElicitationForm  bool
	ElicitationURL   bool
	Roots            bool
	RootsListChanged bool
	// UI: the client runs MCP Apps views (it declared the extension
	// ExtUI); UISettings is its settings object as it sent it, nil when
	// only the bit is known (a session restored from a sealed id).
	UI         bool
	UISettings json.RawMessage
	Raw        json.RawMessage
}

// ParseClientCaps reads the capabilities object of initialize params.
// Each capability is read on its own, so one mistyped member does not hide
// the others, and names are matched exactly.
func ParseClientCaps(raw json.RawMessage) ClientCaps {
	caps := ClientCaps{Raw: raw}
	c := members(raw)
	caps.Sampling = present(c["sampling"])
	if e := c["elicitation"]; present(e) {
		caps.Elicitation = true
		m := members(e)
		// An empty elicitation object means form support (2025-11-25).
		caps.ElicitationForm = present(m["form"]) || !present(m["url"])
		caps.ElicitationURL = present(m["url"])
	}
	if r := c["roots"]; present(r) {
		caps.Roots = true
		caps.RootsListChanged = isTrue(members(r)["listChanged"])
	}
	// Extensions are declared the same way in both eras (SEP-1724): the
	// 2025-11-25 schema has no member for them, but clients of that era
	// that speak MCP Apps send it all the same.
	if ui := members(c["extensions"])[ExtUI]; len(ui) > 0 && ui[0] == '{' {
		caps.UI, caps.UISettings = true, ui
	}
	return caps
}

// MCP Apps (SEP-1865): the extension's identifier, the mime type of its
// views, and the URI scheme views are served under.
const (
	ExtUI       = "io.modelcontextprotocol/ui"
	MimeTypeApp = "text/html;profile=mcp-app"
	SchemeUI    = "ui://"
)

// UISettingsDefault is the settings object of the MCP Apps extension the
// gateway declares when it has none of a client's to pass on.
const UISettingsDefault = `{"mimeTypes":["` + MimeTypeApp + `"]}`

// present reports whether a capability member declares support: it is there
// and neither null nor false.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null" && string(raw) != "false"
}

func isTrue(raw json.RawMessage) bool { return string(raw) == "true" }

// members returns the members of a JSON object (empty for anything else).
func members(raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &m)
	}
	return m
}

// Allows reports whether a downstream with these capabilities may receive a
// server-initiated request of the given method.
func (c ClientCaps) Allows(method string) bool {
	switch method {
	case MethodSamplingCreate:
		return c.Sampling
	case MethodElicitationCreate:
		return c.Elicitation
	case MethodRootsList:
		return c.Roots
	}
	return true
}

// InitializeParams is the part of initialize params the gateway reads.
type InitializeParams struct {
	ProtocolVersion string          `json:"protocolVersion"`
	Capabilities    json.RawMessage `json:"capabilities"`
	ClientInfo      struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"clientInfo"`
}

// ServerCaps records which server features an upstream advertised.
type ServerCaps struct {
	Tools, Prompts, Resources, Logging, Completions bool
	ToolsListChanged, PromptsListChanged            bool
	ResourcesListChanged, ResourcesSubscribe        bool
	// ToolTasks: the server runs task-augmented tools/call
	// (tasks.requests.tools.call, 2025-11-25).
	ToolTasks bool
	// UI: the server declared the MCP Apps extension (ExtUI).
	UI bool
	// TasksExtension: the server declared the 2026-07-28 tasks
	// extension (ExtensionTasks): it may answer a tools/call of a request
	// that declares it with a task handle.
	TasksExtension bool
}

// ParseServerCaps reads an initialize result's capabilities object. Each
// capability is read on its own, so one mistyped member does not hide the
// others, and names are matched exactly.
func ParseServerCaps(raw json.RawMessage) ServerCaps {
	var s ServerCaps
	c := members(raw)
	if t := c["tools"]; present(t) {
		s.Tools, s.ToolsListChanged = true, isTrue(members(t)["listChanged"])
	}
	if p := c["prompts"]; present(p) {
		s.Prompts, s.PromptsListChanged = true, isTrue(members(p)["listChanged"])
	}
	if r := c["resources"]; present(r) {
		m := members(r)
		s.Resources, s.ResourcesListChanged, s.ResourcesSubscribe = true, isTrue(m["listChanged"]), isTrue(m["subscribe"])
	}
	s.Logging = present(c["logging"])
	s.Completions = present(c["completions"])
	s.ToolTasks = present(members(members(members(c["tasks"])["requests"])["tools"])["call"])
	if ui := members(c["extensions"])[ExtUI]; len(ui) > 0 && ui[0] == '{' {
		s.UI = true
	}
	if tx := members(c["extensions"])[ExtensionTasks]; len(tx) > 0 && tx[0] == '{' {
		s.TasksExtension = true
	}
	return s
}

// Merge returns the union of two capability sets.
func (s ServerCaps) Merge(o ServerCaps) ServerCaps {
	return ServerCaps{
		Tools: s.Tools || o.Tools, Prompts: s.Prompts || o.Prompts, Resources: s.Resources || o.Resources,
		Logging: s.Logging || o.Logging, Completions: s.Completions || o.Completions,
		ToolsListChanged: s.ToolsListChanged || o.ToolsListChanged, PromptsListChanged: s.PromptsListChanged || o.PromptsListChanged,
		ResourcesListChanged: s.ResourcesListChanged || o.ResourcesListChanged, ResourcesSubscribe: s.ResourcesSubscribe || o.ResourcesSubscribe,
		ToolTasks: s.ToolTasks || o.ToolTasks,
		UI:        s.UI || o.UI, TasksExtension: s.TasksExtension || o.TasksExtension,
	}
}
