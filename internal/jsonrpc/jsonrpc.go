// Package jsonrpc owns JSON-RPC 2.0 framing on raw bytes for both sides of the
// gateway: decoding a message far enough to route it (id, method, result or
// error), encoding messages without re-marshalling their payloads, batches,
// and the error object.
//
// Payloads (params, result, error data) stay json.RawMessage from the moment
// they are read until they are written: the gateway forwards what it does not
// understand (unknown fields, _meta, integers beyond 2^53, schema keywords)
// byte for byte. Only the envelope is rebuilt. This package must not know
// anything about MCP.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	segmentjson "github.com/segmentio/encoding/json"
)

// Version is the only JSON-RPC version spoken.
const Version = "2.0"

// Standard JSON-RPC error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// ID is a request id kept as its exact JSON text (a string or a number).
// The zero ID is "absent" (a notification).
type ID struct{ raw string }

// StringID returns an ID holding the JSON string s.
func StringID(s string) ID {
	b, _ := json.Marshal(s)
	return ID{raw: string(b)}
}

// Int64ID returns an ID holding the integer n.
func Int64ID(n int64) ID { return ID{raw: strconv.FormatInt(n, 10)} }

// RawID returns the ID whose JSON text is raw, or an error if raw is not a
// JSON string or number.
func RawID(raw []byte) (ID, error) {
	raw = trimWS(raw)
	if len(raw) == 0 {
		return ID{}, nil
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return ID{}, fmt.Errorf("invalid id: %w", err)
		}
	case c == '-' || (c >= '0' && c <= '9'):
		if !valid(raw) {
			return ID{}, errors.New("invalid id: malformed number")
		}
	default:
		return ID{}, errors.New("invalid id: must be a string or a number")
	}
	return ID{raw: string(raw)}, nil
}

// IsValid reports whether the id is present.
func (id ID) IsValid() bool { return id.raw != "" }

// Raw returns the JSON text of the id ("" if absent).
func (id ID) Raw() string { return id.raw }

// String is the id as text for logs.
func (id ID) String() string { return id.raw }

// MarshalJSON emits the id verbatim (null when absent).
func (id ID) MarshalJSON() ([]byte, error) {
	if id.raw == "" {
		return []byte("null"), nil
	}
	return []byte(id.raw), nil
}

// Error is a JSON-RPC error object. Data is kept raw.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message)
}

// NewError returns an error object with no data.
func NewError(code int64, format string, args ...any) *Error {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &Error{Code: code, Message: msg}
}

// Message is one JSON-RPC message. Exactly one of these shapes holds:
// request (Method and ID), notification (Method, no ID), response (ID and
// Result or Error; a response to an unparseable request may have no ID).
type Message struct {
	ID     ID
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  *Error
}

// IsRequest reports whether m is a request (expects a response).
func (m *Message) IsRequest() bool { return m.Method != "" && m.ID.IsValid() }

// IsNotification reports whether m is a notification.
func (m *Message) IsNotification() bool { return m.Method != "" && !m.ID.IsValid() }

// IsResponse reports whether m is a response.
func (m *Message) IsResponse() bool { return m.Method == "" }

// NewRequest builds a request.
func NewRequest(id ID, method string, params json.RawMessage) *Message {
	return &Message{ID: id, Method: method, Params: params}
}

// NewNotification builds a notification.
func NewNotification(method string, params json.RawMessage) *Message {
	return &Message{Method: method, Params: params}
}

// NewResult builds a success response.
func NewResult(id ID, result json.RawMessage) *Message {
	m := Result(id, result)
	return &m
}

// Result is NewResult's response as a value, for a caller that allocates
// it with something else.
func Result(id ID, result json.RawMessage) Message {
	if len(result) == 0 {
		result = json.RawMessage("{}")
	}
	return Message{ID: id, Result: result}
}

// NewErrorResponse builds an error response.
func NewErrorResponse(id ID, err *Error) *Message {
	return &Message{ID: id, Error: err}
}

// wireMessage is the decoding shape. Fields are raw so that presence and
// type can be checked precisely.
type wireMessage struct {
	JSONRPC, ID, Method, Params, Result, Error json.RawMessage
}

// DecodeError describes why bytes are not a usable JSON-RPC message. Code is
// CodeParseError for invalid JSON and CodeInvalidRequest for valid JSON that
// is not a JSON-RPC message. ID is set when it could be recovered, so the
// error response can be correlated.
type DecodeError struct {
	Code   int64
	ID     ID
	Reason string
}

func (e *DecodeError) Error() string { return e.Reason }

// RPCError returns the error object to send back.
func (e *DecodeError) RPCError() *Error {
	return &Error{Code: e.Code, Message: e.Reason}
}

// valid reports whether data is one JSON value, exactly as
// encoding/json.Valid does (FuzzValidAsStandardLibrary), in a third to a
// half of its time: every message the gateway receives, an upstream's
// tool result included, is checked whole before any of it is forwarded
// (a result is spliced into the reply's envelope as it came, so one that
// is not JSON could close the envelope and start another), and
// encoding/json's scanner, a function call per byte, made that the
// largest cost of a large reply (650 µs for 100 KB; BenchmarkDecodeReply).
//
// segmentio's validator has no depth limit; encoding/json refuses a value
// nested deeper than 10000 levels (TestDecodeTooDeep), so a message that
// could be that deep (more than 10000 opening brackets, counted with
// vector instructions, and only in one of 20 KB or more) is checked by
// encoding/json itself.
func valid(data []byte) bool {
	if len(data) > 2*MaxDepth && bytes.Count(data, []byte{'['})+bytes.Count(data, []byte{'{'}) > MaxDepth {
		return json.Valid(data)
	}
	return segmentjson.Valid(data)
}

// Decode parses exactly one JSON-RPC message (not a batch).
//
// Member names are matched exactly (JSON-RPC names are case-sensitive, unlike
// encoding/json's field matching); a repeated member counts once, the last
// one winning as in encoding/json and JSON.parse.
func Decode(data []byte) (*Message, error) {
	data = trimWS(data)
	if len(data) == 0 {
		return nil, &DecodeError{Code: CodeParseError, Reason: "Parse error: empty message"}
	}
	if !valid(data) {
		return nil, invalidJSON(data)
	}
	if data[0] != '{' {
		return nil, &DecodeError{Code: CodeInvalidRequest, Reason: "Invalid Request: message must be a JSON object"}
	}
	var w wireMessage
	err := scanObject(data, func(f field, tok []byte) bool {
		val := data[f.valStart:f.valEnd]
		if keyNeedsDecode(tok) {
			// Rare: decode the key (allocates) and match it exactly.
			var key string
			if json.Unmarshal(tok, &key) != nil {
				return true
			}
			w.set(key, val)
			return true
		}
		// The conversion in a switch does not allocate.
		w.set(string(tok[1:len(tok)-1]), val)
		return true
	})
	if err != nil {
		// Unreachable for valid JSON; kept so a scanner bug cannot pass.
		return nil, &DecodeError{Code: CodeParseError, Reason: "Parse error: invalid JSON"}
	}
	return fromWire(&w)
}

// set records one envelope member; a repeated member overwrites (last wins).
func (w *wireMessage) set(key string, val []byte) {
	switch key {
	case "jsonrpc":
		w.JSONRPC = val
	case "id":
		w.ID = val
	case "method":
		w.Method = val
	case "params":
		w.Params = val
	case "result":
		w.Result = val
	case "error":
		w.Error = val
	}
}

// trimWS trims JSON whitespace only: bytes.TrimSpace would also strip
// Unicode spaces such as U+00A0, which make the text invalid JSON.
func trimWS(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func fromWire(w *wireMessage) (*Message, error) {
	var m Message
	var idErr error
	if !isNull(w.ID) {
		m.ID, idErr = RawID(w.ID)
	}
	bad := func(reason string) error {
		return &DecodeError{Code: CodeInvalidRequest, ID: m.ID, Reason: "Invalid Request: " + reason}
	}
	if string(w.JSONRPC) != `"2.0"` {
		return nil, bad(`"jsonrpc" must be "2.0"`)
	}
	if idErr != nil {
		return nil, bad("id must be a string or a number")
	}
	if len(w.Method) > 0 {
		if len(w.ID) > 0 && isNull(w.ID) {
			// JSON-RPC would answer a request with id null; MCP forbids
			// it. Either way it is not a notification: dropping it would
			// leave the client waiting for a reply that never comes.
			return nil, bad("id must not be null")
		}
		if w.Method[0] != '"' {
			return nil, bad(`"method" must be a string`)
		}
		if inner := w.Method[1 : len(w.Method)-1]; plainASCII(inner) {
			m.Method = methodName(inner) // valid JSON, no escapes, ASCII: the text is the value
		} else if err := json.Unmarshal(w.Method, &m.Method); err != nil {
			return nil, bad(`"method" must be a non-empty string`)
		}
		if m.Method == "" {
			return nil, bad(`"method" must be a non-empty string`)
		}
		if len(w.Result) > 0 || len(w.Error) > 0 {
			return nil, bad("a request must not carry result or error")
		}
		if !isNull(w.Params) {
			if c := w.Params[0]; c != '{' && c != '[' {
				return nil, bad(`"params" must be an object or an array`)
			}
			m.Params = w.Params
		}
		return &m, nil
	}
	// A response.
	switch {
	case len(w.Result) > 0 && len(w.Error) > 0:
		return nil, bad("a response must not carry both result and error")
	case len(w.Result) > 0:
		if !m.ID.IsValid() {
			return nil, bad("a result must carry an id")
		}
		m.Result = w.Result
	case len(w.Error) > 0:
		e, ok := decodeError(w.Error)
		if !ok {
			return nil, bad(`"error" must be an error object`)
		}
		m.Error = e
	default:
		return nil, bad(`missing "method", "result" or "error"`)
	}
	return &m, nil
}

// methodName is string(b), without an allocation for the methods that
// pass on every call: the switch on the conversion does not allocate, and
// each case returns its constant.
func methodName(b []byte) string {
	switch string(b) {
	case "tools/call":
		return "tools/call"
	case "tools/list":
		return "tools/list"
	case "initialize":
		return "initialize"
	case "notifications/initialized":
		return "notifications/initialized"
	case "ping":
		return "ping"
	case "notifications/progress":
		return "notifications/progress"
	case "notifications/message":
		return "notifications/message"
	case "notifications/cancelled":
		return "notifications/cancelled"
	case "resources/read":
		return "resources/read"
	case "resources/list":
		return "resources/list"
	case "prompts/get":
		return "prompts/get"
	case "prompts/list":
		return "prompts/list"
	case "completion/complete":
		return "completion/complete"
	case "server/discover":
		return "server/discover"
	}
	return string(b)
}

// decodeError reads an error object with exact member names. A missing or
// null code or message is tolerated (zero value); a mistyped one is not.
func decodeError(raw []byte) (*Error, bool) {
	if raw[0] != '{' {
		return nil, false
	}
	var e Error
	ok := true
	err := Fields(raw, func(key string, val []byte) bool {
		switch key {
		case "code":
			ok = json.Unmarshal(val, &e.Code) == nil
		case "message":
			ok = json.Unmarshal(val, &e.Message) == nil
		case "data":
			e.Data = val
		}
		return ok
	})
	if err != nil || !ok {
		return nil, false
	}
	return &e, true
}

// MaxDepth is the deepest nesting of arrays and objects a message may
// have: encoding/json's own limit, which refuses anything deeper as
// invalid.
const MaxDepth = 10000

// invalidJSON is the parse error for data that json.Valid refused. Valid
// JSON nested deeper than MaxDepth is refused too; saying "invalid JSON"
// would send its sender looking for a syntax error that is not there.
func invalidJSON(data []byte) *DecodeError {
	if nestingExceeds(data, MaxDepth) {
		return &DecodeError{Code: CodeParseError, Reason: fmt.Sprintf("Parse error: JSON nested deeper than %d levels", MaxDepth)}
	}
	return &DecodeError{Code: CodeParseError, Reason: "Parse error: invalid JSON"}
}

// nestingExceeds reports whether data opens more than limit arrays or
// objects at once, brackets inside strings not counted. It is only asked
// about data json.Valid refused, so it need not validate anything else.
func nestingExceeds(data []byte, limit int) bool {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			j, err := skipString(data, i)
			if err != nil {
				return false // the string runs to the end: no more brackets
			}
			i = j - 1
		case '[', '{':
			if depth++; depth > limit {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}

// IsBatch reports whether data (after leading whitespace) is a JSON array.
func IsBatch(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n")
	return len(data) > 0 && data[0] == '['
}

// DecodeBatch parses a JSON array of messages. Elements that fail to decode
// are reported in errs at the same index (msgs[i] is nil there).
func DecodeBatch(data []byte) (msgs []*Message, errs []error, err error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		if !json.Valid(data) {
			return nil, nil, invalidJSON(data)
		}
		return nil, nil, &DecodeError{Code: CodeInvalidRequest, Reason: "Invalid Request: batch must be an array"}
	}
	if len(raws) == 0 {
		return nil, nil, &DecodeError{Code: CodeInvalidRequest, Reason: "Invalid Request: empty batch"}
	}
	msgs = make([]*Message, len(raws))
	errs = make([]error, len(raws))
	for i, r := range raws {
		msgs[i], errs[i] = Decode(r)
	}
	return msgs, errs, nil
}

// Append appends the JSON encoding of m to buf. Params, Result and Error.Data
// are written verbatim.
func (m *Message) Append(buf []byte) []byte {
	buf = append(buf, `{"jsonrpc":"2.0"`...)
	if m.Method != "" {
		if m.ID.IsValid() {
			buf = append(buf, `,"id":`...)
			buf = append(buf, m.ID.raw...)
		}
		buf = append(buf, `,"method":`...)
		buf = appendString(buf, m.Method)
		if len(m.Params) > 0 {
			buf = append(buf, `,"params":`...)
			buf = append(buf, m.Params...)
		}
		return append(buf, '}')
	}
	buf = append(buf, `,"id":`...)
	if m.ID.IsValid() {
		buf = append(buf, m.ID.raw...)
	} else {
		buf = append(buf, "null"...)
	}
	if m.Error != nil {
		buf = append(buf, `,"error":{"code":`...)
		buf = strconv.AppendInt(buf, m.Error.Code, 10)
		buf = append(buf, `,"message":`...)
		buf = appendString(buf, m.Error.Message)
		if len(m.Error.Data) > 0 {
			buf = append(buf, `,"data":`...)
			buf = append(buf, m.Error.Data...)
		}
		return append(buf, "}}"...)
	}
	buf = append(buf, `,"result":`...)
	if len(m.Result) == 0 {
		buf = append(buf, "{}"...)
	} else {
		buf = append(buf, m.Result...)
	}
	return append(buf, '}')
}

// AppendResultHead appends what Append writes before a response's
// result, `{"jsonrpc":"2.0","id":ID,"result":`, when m is a response
// with a result; the encoding is then that, the result's bytes and a
// closing brace. It lets a large result be written where it lies instead
// of copied into one buffer with its envelope. ok is false, and buf
// unchanged, for any other message.
func (m *Message) AppendResultHead(buf []byte) (_ []byte, ok bool) {
	if m.Method != "" || m.Error != nil || len(m.Result) == 0 {
		return buf, false
	}
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	if m.ID.IsValid() {
		buf = append(buf, m.ID.raw...)
	} else {
		buf = append(buf, "null"...)
	}
	return append(buf, `,"result":`...), true
}

// Encode returns the JSON encoding of m.
func Encode(m *Message) []byte { return m.Append(make([]byte, 0, 64+len(m.Params)+len(m.Result))) }

// MarshalJSON implements json.Marshaler.
func (m *Message) MarshalJSON() ([]byte, error) { return Encode(m), nil }

// EncodeBatch encodes msgs as a JSON array.
func EncodeBatch(msgs []*Message) []byte {
	buf := []byte{'['}
	for i, m := range msgs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = m.Append(buf)
	}
	return append(buf, ']')
}

func appendString(buf []byte, s string) []byte {
	simple := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			simple = false
			break
		}
	}
	if simple {
		buf = append(buf, '"')
		buf = append(buf, s...)
		return append(buf, '"')
	}
	b, _ := json.Marshal(s)
	return append(buf, b...)
}

// AppendString appends s as a JSON string.
func AppendString(buf []byte, s string) []byte { return appendString(buf, s) }

// plainASCII reports whether a JSON string's inner text decodes to itself:
// no escapes and no bytes outside ASCII (invalid UTF-8 decodes to U+FFFD).
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}
