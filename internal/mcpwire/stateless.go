package mcpwire

// The vocabulary of the stateless revision 2026-07-28 (see
// docs/design/2026-07-28.md): per-request _meta, server/discover,
// subscriptions/listen, the Mcp-Method/Mcp-Name request headers, resultType,
// cache hints and multi round-trip requests. Everything reads and splices raw
// JSON with package jsonrpc, so that bytes the gateway does not rewrite stay
// as they were.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// StatelessRevisions lists the revisions that carry their version in each
// request's _meta instead of negotiating it with initialize, newest first.
var StatelessRevisions = []string{Rev20260728}

// IsStatelessRevision reports whether rev is a per-request (stateless)
// revision the gateway speaks.
func IsStatelessRevision(rev string) bool { return slices.Contains(StatelessRevisions, rev) }

// Methods and notifications added by 2026-07-28.
const (
	MethodServerDiscover            = "server/discover"
	MethodSubscriptionsListen       = "subscriptions/listen"
	NotifySubscriptionsAcknowledged = "notifications/subscriptions/acknowledged"
)

// statelessClientMethods are the client requests of 2026-07-28 (the
// ClientRequest union of its schema).
var statelessClientMethods = []string{
	MethodServerDiscover, MethodResourcesList, MethodResourceTemplates, MethodResourcesRead,
	MethodSubscriptionsListen, MethodPromptsList, MethodPromptsGet, MethodToolsList,
	MethodToolsCall, MethodCompletionComplete,
	// The tasks extension (io.modelcontextprotocol/tasks).
	MethodTasksGet, MethodTasksUpdate, MethodTasksCancel,
}

// IsStatelessClientMethod reports whether method is a request a client may
// send under 2026-07-28. initialize, ping, logging/setLevel and
// resources/(un)subscribe are not: a stateless request for them is answered
// METHOD_NOT_FOUND.
func IsStatelessClientMethod(method string) bool {
	return slices.Contains(statelessClientMethods, method)
}

// Reserved _meta keys.
const (
	FieldMeta                 = "_meta"
	MetaKeyProgressToken      = "progressToken"
	MetaKeyProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaKeyClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaKeyClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaKeyLogLevel           = "io.modelcontextprotocol/logLevel"
	MetaKeyServerInfo         = "io.modelcontextprotocol/serverInfo"
	MetaKeySubscriptionID     = "io.modelcontextprotocol/subscriptionId"
)

// HeaderParamPrefix starts the headers that mirror tool arguments annotated
// with x-mcp-header (Mcp-Param-{Name}).
const HeaderParamPrefix = "Mcp-Param-"

// The sentinel that wraps a Base64 header value (=?base64?...?=).
const (
	headerBase64Prefix = "=?base64?"
	headerBase64Suffix = "?="
)

// Result members and their values.
const (
	FieldResultType     = "resultType"
	FieldTTLMs          = "ttlMs"
	FieldCacheScope     = "cacheScope"
	FieldInputRequests  = "inputRequests"
	FieldInputResponses = "inputResponses"
	FieldRequestState   = "requestState"

	ResultComplete      = "complete"
	ResultInputRequired = "input_required"

	CacheScopePublic  = "public"
	CacheScopePrivate = "private"
)

// Error codes defined by 2026-07-28 (the sub-range -32020..-32099 is
// reserved for the specification).
const (
	CodeHeaderMismatch                  = -32020
	CodeMissingRequiredClientCapability = -32021
	CodeUnsupportedProtocolVersion      = -32022
)

// IsStatelessErrorCode reports whether code is one of the errors that only a
// 2026-07-28 server returns: an upstream answering one speaks the stateless
// era (it must not be probed with initialize instead).
func IsStatelessErrorCode(code int64) bool {
	return code == CodeHeaderMismatch || code == CodeMissingRequiredClientCapability || code == CodeUnsupportedProtocolVersion
}

// ResourceNotFoundCode is the code of a resource-not-found error in rev:
// 2026-07-28 uses INVALID_PARAMS and forbids -32002.
func ResourceNotFoundCode(rev string) int64 {
	if IsStatelessRevision(rev) {
		return jsonrpc.CodeInvalidParams
	}
	return CodeResourceNotFound
}

// LoggingLevels are the log levels, least severe first.
var LoggingLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// ValidLogLevel reports whether l is a log level.
func ValidLogLevel(l string) bool { return slices.Contains(LoggingLevels, l) }

// CacheableMethod reports whether a complete result of method must carry
// ttlMs and cacheScope.
func CacheableMethod(method string) bool {
	switch method {
	case MethodServerDiscover, MethodToolsList, MethodPromptsList, MethodResourcesList,
		MethodResourceTemplates, MethodResourcesRead:
		return true
	}
	return false
}

// AllowsInputRequired reports whether a server may answer method with an
// input_required result (and so whether its params may carry inputResponses
// and requestState).
func AllowsInputRequired(method string) bool {
	return method == MethodToolsCall || method == MethodPromptsGet || method == MethodResourcesRead
}

// IsInputRequestMethod reports whether method may appear in inputRequests:
// the former server-initiated requests.
func IsInputRequestMethod(method string) bool {
	return method == MethodElicitationCreate || method == MethodSamplingCreate || method == MethodRootsList
}

// CapabilityFor names the client capability a server-initiated request
// needs ("sampling", "elicitation", "roots"), "" for any other method.
func CapabilityFor(method string) string {
	switch method {
	case MethodSamplingCreate:
		return "sampling"
	case MethodElicitationCreate:
		return "elicitation"
	case MethodRootsList:
		return "roots"
	}
	return ""
}

// NameParam returns the params member that the Mcp-Name header mirrors for
// method, and whether method needs Mcp-Name at all.
func NameParam(method string) (string, bool) {
	switch method {
	case MethodToolsCall, MethodPromptsGet:
		return "name", true
	case MethodResourcesRead:
		return "uri", true
	}
	return "", false
}

// TaskNameParam returns the params member that Mcp-Name mirrors for the
// tasks extension's methods (SEP-2663: tasks/get, tasks/update and
// tasks/cancel carry Mcp-Name: <taskId>). Unlike NameParam's, the header
// is checked only when sent: clients written before the extension's
// routing headers send none, and a request without it is still served.
// A sent one that is not the body's taskId is refused like any other
// mismatch, so an intermediary routing on the header never sees a request
// that means another task than it says.
func TaskNameParam(method string) (string, bool) {
	switch method {
	case MethodTasksGet, MethodTasksUpdate, MethodTasksCancel:
		return "taskId", true
	}
	return "", false
}

// RequestInfo is what a stateless request's _meta says about its sender.
type RequestInfo struct {
	ProtocolVersion string
	// ClientInfo is the raw Implementation object (nil when absent);
	// ClientName and ClientVersion are its name and version when they are
	// strings. Self-reported: for display and logs, never for decisions.
	ClientInfo                json.RawMessage
	ClientName, ClientVersion string
	// Capabilities are the capabilities declared for this request only.
	Capabilities ClientCaps
	// LogLevel is the requested minimum log level; "" means the request
	// asked for no notifications/message at all.
	LogLevel string
}

// MetaProtocolVersion returns _meta["io.modelcontextprotocol/protocolVersion"]
// of request params when it is a non-empty string.
func MetaProtocolVersion(params json.RawMessage) (string, bool) {
	meta, ok := jsonrpc.Get(params, FieldMeta)
	if !ok {
		return "", false
	}
	v, ok := jsonrpc.GetString(meta, MetaKeyProtocolVersion)
	return v, ok && v != ""
}

// IsStateless reports whether request params carry the 2026-07-28 revision
// in their _meta.
func IsStateless(params json.RawMessage) bool {
	v, ok := MetaProtocolVersion(params)
	return ok && IsStatelessRevision(v)
}

// StatelessVersion reports whether a request selects the stateless era: its
// _meta names a protocol version that is not a handshake revision. Such a
// request is served statelessly when the version is in StatelessRevisions
// and answered with UnsupportedProtocolVersion otherwise. A handshake
// revision in _meta selects nothing (the request is handled as before).
func StatelessVersion(params json.RawMessage) (string, bool) {
	v, ok := MetaProtocolVersion(params)
	if !ok || IsHandshake(v) {
		return "", false
	}
	return v, true
}

// RequestMeta reads the per-request fields of a stateless request's _meta
// without decoding the rest of params. A missing or mistyped required field
// (protocol version, client capabilities) or a malformed optional one
// (client info, log level) is an INVALID_PARAMS *jsonrpc.Error, as the
// specification requires. It does not check that the version is supported
// (see CheckStatelessVersion).
func RequestMeta(params json.RawMessage) (RequestInfo, error) {
	var info RequestInfo
	meta, ok := jsonrpc.Get(params, FieldMeta)
	if !ok || !isObject(meta) {
		return info, invalidMeta("missing _meta")
	}
	v, ok := jsonrpc.GetString(meta, MetaKeyProtocolVersion)
	if !ok || v == "" {
		return info, invalidMeta("missing or invalid _meta field " + MetaKeyProtocolVersion)
	}
	info.ProtocolVersion = v

	caps, ok := jsonrpc.Get(meta, MetaKeyClientCapabilities)
	if !ok || !isObject(caps) || !json.Valid(caps) {
		return info, invalidMeta("missing or invalid _meta field " + MetaKeyClientCapabilities)
	}
	info.Capabilities = ParseClientCaps(json.RawMessage(caps))

	if ci, ok := jsonrpc.Get(meta, MetaKeyClientInfo); ok && string(ci) != "null" {
		if !isObject(ci) || !json.Valid(ci) {
			return info, invalidMeta("invalid _meta field " + MetaKeyClientInfo)
		}
		info.ClientInfo = json.RawMessage(ci)
		info.ClientName, _ = jsonrpc.GetString(ci, "name")
		info.ClientVersion, _ = jsonrpc.GetString(ci, "version")
	}

	if lv, ok := jsonrpc.Get(meta, MetaKeyLogLevel); ok && string(lv) != "null" {
		l, ok := jsonrpc.GetString(meta, MetaKeyLogLevel)
		if !ok || !ValidLogLevel(l) {
			return info, invalidMeta("invalid log level in _meta field " + MetaKeyLogLevel)
		}
		info.LogLevel = l
	}
	return info, nil
}

func invalidMeta(what string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Invalid params: " + what}
}

// isObject reports whether a raw value (as returned by jsonrpc.Get, so
// without leading space) is a JSON object.
func isObject(raw []byte) bool { return len(raw) > 0 && raw[0] == '{' }

// UnsupportedProtocolVersion is the error for a request whose version the
// gateway does not speak, listing the versions it does.
func UnsupportedProtocolVersion(requested string, supported []string) *jsonrpc.Error {
	data := []byte(`{"supported":[`)
	for i, s := range supported {
		if i > 0 {
			data = append(data, ',')
		}
		data = jsonrpc.AppendString(data, s)
	}
	data = append(data, `],"requested":`...)
	data = jsonrpc.AppendString(data, requested)
	data = append(data, '}')
	return &jsonrpc.Error{Code: CodeUnsupportedProtocolVersion, Message: "Unsupported protocol version", Data: data}
}

// CheckStatelessVersion returns nil when rev is a stateless revision the
// gateway serves, otherwise UnsupportedProtocolVersion listing every
// revision (the handshake ones included, so that a dual-era client can fall
// back to initialize).
func CheckStatelessVersion(rev string) *jsonrpc.Error {
	if IsStatelessRevision(rev) {
		return nil
	}
	return UnsupportedProtocolVersion(rev, Revisions)
}

// HeaderMismatch is a HeaderMismatch error whose message is
// "Header mismatch: " followed by detail.
func HeaderMismatch(detail string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: CodeHeaderMismatch, Message: "Header mismatch: " + detail}
}

// CheckHeaders validates the Mcp-Method and Mcp-Name headers of a stateless
// request (their values as received; "" when absent) against its body. It
// returns nil when they agree, otherwise the HeaderMismatch error the
// response must carry (with HTTP status 400). Mcp-Name is checked only for
// the methods that need it (NameParam), after decoding a Base64 sentinel
// value, and for the tasks extension's methods when it is sent
// (TaskNameParam); on other methods it is ignored.
func CheckHeaders(method string, params json.RawMessage, hdrMethod, hdrName string) *jsonrpc.Error {
	switch {
	case hdrMethod == "":
		return HeaderMismatch("missing required Mcp-Method header")
	case !headerSafe(hdrMethod):
		return HeaderMismatch("Mcp-Method header value contains invalid characters")
	case hdrMethod != method:
		return HeaderMismatch("Mcp-Method header value '" + clip(hdrMethod) + "' does not match body value '" + clip(method) + "'")
	}
	field, ok := NameParam(method)
	if !ok {
		if field, ok = TaskNameParam(method); !ok || hdrName == "" {
			return nil
		}
	} else if hdrName == "" {
		return HeaderMismatch("missing required Mcp-Name header for method " + method)
	}
	name, err := DecodeHeaderValue(hdrName)
	if err != nil {
		return HeaderMismatch("Mcp-Name header value " + err.Error())
	}
	body, ok := jsonrpc.GetString(params, field)
	if !ok {
		return HeaderMismatch("Mcp-Name header value '" + clip(name) + "' does not match body value (params." + field + " is missing or not a string)")
	}
	if name != body {
		return HeaderMismatch("Mcp-Name header value '" + clip(name) + "' does not match body value '" + clip(body) + "'")
	}
	return nil
}

// CheckProtocolVersionHeader validates the MCP-Protocol-Version header of a
// stateless request against _meta["io.modelcontextprotocol/protocolVersion"]:
// a missing header or a different value is a HeaderMismatch.
func CheckProtocolVersionHeader(params json.RawMessage, hdrVersion string) *jsonrpc.Error {
	if hdrVersion == "" {
		return HeaderMismatch("missing required MCP-Protocol-Version header")
	}
	if !headerSafe(hdrVersion) {
		return HeaderMismatch("MCP-Protocol-Version header value contains invalid characters")
	}
	v, _ := MetaProtocolVersion(params)
	if v != hdrVersion {
		return HeaderMismatch("MCP-Protocol-Version header value '" + clip(hdrVersion) + "' does not match body value '" + clip(v) + "'")
	}
	return nil
}

// Why a header value could not be decoded.
var (
	errHeaderChars  = errors.New("contains invalid characters")
	errHeaderBase64 = errors.New("is not valid Base64-encoded UTF-8")
)

// DecodeHeaderValue returns the text a Mcp-Name or Mcp-Param-* header
// value stands for: the decoded UTF-8 of a =?base64?...?= value, the value
// itself otherwise. A value with characters outside visible ASCII, space and
// tab, or a malformed Base64 value, is an error.
func DecodeHeaderValue(v string) (string, error) {
	if !headerSafe(v) {
		return "", errHeaderChars
	}
	if len(v) >= len(headerBase64Prefix)+len(headerBase64Suffix) &&
		strings.HasPrefix(v, headerBase64Prefix) && strings.HasSuffix(v, headerBase64Suffix) {
		b, err := base64.StdEncoding.DecodeString(v[len(headerBase64Prefix) : len(v)-len(headerBase64Suffix)])
		if err != nil || !utf8.Valid(b) {
			return "", errHeaderBase64
		}
		return string(b), nil
	}
	return v, nil
}

// EncodeHeaderValue returns s as a Mcp-Name or Mcp-Param-* header value:
// as it is when it is plain ASCII without control characters or surrounding
// whitespace, otherwise (or when it looks like the sentinel itself) in the
// =?base64?...?= form.
func EncodeHeaderValue(s string) string {
	if !needsBase64(s) {
		return s
	}
	return headerBase64Prefix + base64.StdEncoding.EncodeToString([]byte(s)) + headerBase64Suffix
}

func needsBase64(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return true
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return true
		}
	}
	return strings.HasPrefix(s, headerBase64Prefix) && strings.HasSuffix(s, headerBase64Suffix)
}

// headerSafe reports whether v holds only what a header value may carry
// (RFC 9110): visible ASCII, space and horizontal tab.
func headerSafe(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c > 0x7e {
			return false
		}
	}
	return true
}

// clip shortens a value echoed in an error message.
func clip(s string) string {
	const max = 128
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// WithResultType returns result with its resultType member set to typ
// (replaced in place when present, appended otherwise); every other byte is
// kept. An empty result becomes {"resultType":typ}. A result that is not a
// JSON object is returned unchanged.
func WithResultType(result json.RawMessage, typ string) json.RawMessage {
	out, err := jsonrpc.Set(result, FieldResultType, jsonrpc.String(typ))
	if err != nil {
		return result
	}
	return out
}

// ResultTypeOf returns the resultType of a result: "complete" when the
// member is absent (results of earlier revisions), "" when it is not a
// string (an invalid result).
func ResultTypeOf(result json.RawMessage) string {
	if _, ok := jsonrpc.Get(result, FieldResultType); !ok {
		return ResultComplete
	}
	s, _ := jsonrpc.GetString(result, FieldResultType)
	return s
}

// WithCacheHints returns result with ttlMs (ttl in whole milliseconds, never
// negative) and cacheScope set; every other byte is kept. Any scope other
// than CacheScopePublic is written as CacheScopePrivate, the safe choice. A
// result that is not a JSON object is returned unchanged.
func WithCacheHints(result json.RawMessage, ttl time.Duration, scope string) json.RawMessage {
	ms := max(ttl.Milliseconds(), 0)
	if scope != CacheScopePublic {
		scope = CacheScopePrivate
	}
	var num [20]byte
	out, err := jsonrpc.Set(result, FieldTTLMs, appendInt(num[:0], ms))
	if err != nil {
		return result
	}
	if out, err = jsonrpc.Set(out, FieldCacheScope, jsonrpc.String(scope)); err != nil {
		return result
	}
	return out
}

func appendInt(b []byte, n int64) []byte {
	if n == 0 {
		return append(b, '0')
	}
	var d [20]byte
	i := len(d)
	for n > 0 {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, d[i:]...)
}

// SubscriptionFilter is the notifications member of a subscriptions/listen
// request (and of its acknowledgement): which change notifications a
// listener opted in to. Anything not set is not wanted.
type SubscriptionFilter struct {
	ToolsListChanged      bool
	PromptsListChanged    bool
	ResourcesListChanged  bool
	ResourceSubscriptions []string
}

// ParseSubscriptionFilter reads params.notifications of a
// subscriptions/listen request. ok is false when it is missing or not an
// object (the member is required). Flags count only when literally true;
// non-string URIs are skipped.
func ParseSubscriptionFilter(params json.RawMessage) (f SubscriptionFilter, ok bool) {
	n, found := jsonrpc.Get(params, "notifications")
	if !found || !isObject(n) {
		return f, false
	}
	isTrueMember := func(k string) bool { v, _ := jsonrpc.Get(n, k); return string(v) == "true" }
	f.ToolsListChanged = isTrueMember("toolsListChanged")
	f.PromptsListChanged = isTrueMember("promptsListChanged")
	f.ResourcesListChanged = isTrueMember("resourcesListChanged")
	if arr, found := jsonrpc.Get(n, "resourceSubscriptions"); found {
		_ = jsonrpc.Elements(arr, func(e []byte) bool {
			var s string
			if len(e) > 0 && e[0] == '"' && json.Unmarshal(e, &s) == nil {
				f.ResourceSubscriptions = append(f.ResourceSubscriptions, s)
			}
			return true
		})
	}
	return f, true
}

// Wants reports whether a listener with this filter receives the
// notification method (with params, for the uri of a resource update).
func (f SubscriptionFilter) Wants(method string, params json.RawMessage) bool {
	switch method {
	case NotifyToolsListChanged:
		return f.ToolsListChanged
	case NotifyPromptsListChanged:
		return f.PromptsListChanged
	case NotifyResourcesListChanged:
		return f.ResourcesListChanged
	case NotifyResourceUpdated:
		uri, ok := jsonrpc.GetString(params, "uri")
		return ok && slices.Contains(f.ResourceSubscriptions, uri)
	}
	return false
}

// MarshalJSON encodes the filter with only the members that are set, as in
// the acknowledgement of the specification.
func (f SubscriptionFilter) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	sep := func() {
		if len(b) > 1 {
			b = append(b, ',')
		}
	}
	for _, m := range []struct {
		on  bool
		key string
	}{{f.ToolsListChanged, "toolsListChanged"}, {f.PromptsListChanged, "promptsListChanged"}, {f.ResourcesListChanged, "resourcesListChanged"}} {
		if m.on {
			sep()
			b = append(b, `"`+m.key+`":true`...)
		}
	}
	if f.ResourceSubscriptions != nil {
		sep()
		b = append(b, `"resourceSubscriptions":[`...)
		for i, u := range f.ResourceSubscriptions {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonrpc.AppendString(b, u)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// WithoutSubscriptionID removes the subscription id a notification got on
// a listen stream: relayed elsewhere, it would name a stream its new
// reader never opened.
func WithoutSubscriptionID(params json.RawMessage) json.RawMessage {
	return WithoutMetaKey(params, MetaKeySubscriptionID)
}

// WithoutMetaKey removes _meta[key] from params (and _meta itself when
// nothing else is left in it); params without it are returned unchanged.
func WithoutMetaKey(params json.RawMessage, key string) json.RawMessage {
	meta, ok := jsonrpc.Get(params, FieldMeta)
	if !ok {
		return params
	}
	if _, has := jsonrpc.Get(meta, key); !has {
		return params
	}
	meta, err := jsonrpc.Delete(meta, key)
	if err != nil {
		return params
	}
	rest := 0
	_ = jsonrpc.Fields(meta, func(string, []byte) bool { rest++; return false })
	var out []byte
	if rest == 0 {
		out, err = jsonrpc.Delete(params, FieldMeta)
	} else {
		out, err = jsonrpc.Set(params, FieldMeta, meta)
	}
	if err != nil {
		return params
	}
	return out
}

// WithSubscriptionID returns notification (or result) params with
// _meta["io.modelcontextprotocol/subscriptionId"] set to the JSON-RPC id of
// the subscriptions/listen request; every other byte is kept. Params that
// are not a JSON object are returned unchanged.
func WithSubscriptionID(params json.RawMessage, listenID jsonrpc.ID) json.RawMessage {
	if !listenID.IsValid() {
		return params
	}
	out, err := jsonrpc.SetPath(params, []byte(listenID.Raw()), FieldMeta, MetaKeySubscriptionID)
	if err != nil {
		return params
	}
	return out
}
