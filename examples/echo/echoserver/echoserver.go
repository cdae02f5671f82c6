// Package echoserver is a minimal, fast MCP server speaking the streamable
// HTTP transport, written with net/http and encoding/json only.
//
// It exists to be the benchmark upstream for mcpgate: it offers a single tool,
// "echo", and keeps the work per call as small as practical. Every reply is
// application/json (never SSE), and session ids are issued on initialize but
// never required, so any request can be answered on its own.
package echoserver

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// DefaultProtocolVersion is the version answered when the client asks for one
// this server does not know.
const DefaultProtocolVersion = "2025-11-25"

// SupportedProtocolVersions lists the protocol versions the server accepts,
// newest first.
var SupportedProtocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// MaxBodyBytes bounds the size of a request body.
const MaxBodyBytes = 1 << 20

// JSON-RPC error codes used by the server.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
)

// ServerName and ServerVersion are reported in serverInfo.
const (
	ServerName    = "echo"
	ServerVersion = "1.0.0"
)

// Handler returns the MCP endpoint. It answers on any path; mount it where
// the endpoint should live (conventionally /mcp).
func Handler() http.Handler { return handler{} }

type handler struct{}

// request is one incoming JSON-RPC message. Params is decoded in the same
// pass as the envelope: it holds the union of the fields that initialize
// (protocolVersion) and tools/call (name, arguments.text) need; anything else
// is skipped.
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  params          `json:"params"`
}

type params struct {
	ProtocolVersion string `json:"protocolVersion"`
	Name            string `json:"name"`
	Arguments       struct {
		Text *string `json:"text"`
	} `json:"arguments"`
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// toolsListResult is the constant result of tools/list.
const toolsListResult = `{"tools":[{"name":"echo","description":"Echoes back the given text.",` +
	`"inputSchema":{"type":"object","properties":{"text":{"type":"string","description":"Text to echo back."}},"required":["text"]}}]}`

func (handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		// Sessions hold no state, so there is nothing to tear down.
		w.WriteHeader(http.StatusOK)
		return
	case http.MethodGet:
		// No server-initiated stream is offered (allowed by the spec).
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "GET stream not supported", http.StatusMethodNotAllowed)
		return
	default:
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}

	in := bufPool.Get().(*bytes.Buffer)
	out := bufPool.Get().(*bytes.Buffer)
	defer func() {
		in.Reset()
		out.Reset()
		bufPool.Put(in)
		bufPool.Put(out)
	}()

	if _, err := in.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes)); err != nil {
		status := http.StatusBadRequest
		if _, ok := err.(*http.MaxBytesError); ok {
			status = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, status, appendError(out, nil, CodeParseError, "reading body: "+err.Error()))
		return
	}
	body := bytes.TrimLeft(in.Bytes(), " \t\r\n")
	if len(body) > 0 && body[0] == '[' {
		serveBatch(w, body, out)
		return
	}

	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) || isNotification(req.ID) {
			writeJSON(w, http.StatusBadRequest, appendError(out, nil, CodeParseError, "parse error: "+err.Error()))
			return
		}
		// Well-formed JSON of the wrong shape: encoding/json still filled
		// in what it could, including the id.
		code := CodeInvalidRequest
		if strings.HasPrefix(typeErr.Field, "params") {
			code = CodeInvalidParams
		}
		writeJSON(w, http.StatusOK, appendError(out, req.ID, code, err.Error()))
		return
	}
	if req.Method == "" {
		// A response from the client, or garbage: nothing to answer.
		if len(req.ID) > 0 && req.JSONRPC == "2.0" {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		writeJSON(w, http.StatusBadRequest, appendError(out, req.ID, CodeInvalidRequest, "invalid request"))
		return
	}
	if isNotification(req.ID) {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if req.Method == "initialize" {
		w.Header().Set("Mcp-Session-Id", newSessionID())
	}
	handle(out, &req)
	writeJSON(w, http.StatusOK, out.Bytes())
}

// serveBatch answers a JSON-RPC batch (allowed by protocol 2025-03-26).
func serveBatch(w http.ResponseWriter, body []byte, out *bytes.Buffer) {
	var reqs []request
	if err := json.Unmarshal(body, &reqs); err != nil || len(reqs) == 0 {
		msg := "invalid batch"
		if err != nil {
			msg = "parse error: " + err.Error()
		}
		writeJSON(w, http.StatusBadRequest, appendError(out, nil, CodeParseError, msg))
		return
	}
	out.WriteByte('[')
	n := 0
	for i := range reqs {
		if reqs[i].Method == "" || isNotification(reqs[i].ID) {
			continue
		}
		if n > 0 {
			out.WriteByte(',')
		}
		if reqs[i].Method == "initialize" {
			w.Header().Set("Mcp-Session-Id", newSessionID())
		}
		handle(out, &reqs[i])
		n++
	}
	if n == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	out.WriteByte(']')
	writeJSON(w, http.StatusOK, out.Bytes())
}

func isNotification(id json.RawMessage) bool {
	return len(id) == 0 || string(id) == "null"
}

// handle appends the JSON-RPC response to req to out.
func handle(out *bytes.Buffer, req *request) {
	switch req.Method {
	case "tools/call":
		p := &req.Params
		if p.Name != "echo" {
			appendError(out, req.ID, CodeInvalidParams, "unknown tool: "+p.Name)
			return
		}
		if p.Arguments.Text == nil {
			appendResultPrefix(out, req.ID)
			out.WriteString(`{"content":[{"type":"text","text":"missing required argument \"text\""}],"isError":true}}`)
			return
		}
		appendResultPrefix(out, req.ID)
		out.WriteString(`{"content":[{"type":"text","text":`)
		appendString(out, *p.Arguments.Text)
		out.WriteString(`}]}}`)
	case "ping":
		appendResultPrefix(out, req.ID)
		out.WriteString(`{}}`)
	case "tools/list":
		appendResultPrefix(out, req.ID)
		out.WriteString(toolsListResult)
		out.WriteByte('}')
	case "initialize":
		appendResultPrefix(out, req.ID)
		out.WriteString(`{"protocolVersion":`)
		appendString(out, NegotiateVersion(req.Params.ProtocolVersion))
		out.WriteString(`,"capabilities":{"tools":{}},"serverInfo":{"name":"` + ServerName + `","version":"` + ServerVersion + `"}}}`)
	default:
		appendError(out, req.ID, CodeMethodNotFound, "method not found: "+req.Method)
	}
}

// NegotiateVersion returns v if the server supports it, else
// DefaultProtocolVersion.
func NegotiateVersion(v string) string {
	for _, s := range SupportedProtocolVersions {
		if s == v {
			return s
		}
	}
	return DefaultProtocolVersion
}

func appendResultPrefix(out *bytes.Buffer, id json.RawMessage) {
	out.WriteString(`{"jsonrpc":"2.0","id":`)
	out.Write(id)
	out.WriteString(`,"result":`)
}

func appendError(out *bytes.Buffer, id json.RawMessage, code int, msg string) []byte {
	out.WriteString(`{"jsonrpc":"2.0","id":`)
	if len(id) == 0 {
		out.WriteString("null")
	} else {
		out.Write(id)
	}
	out.WriteString(`,"error":{"code":`)
	out.WriteString(strconv.Itoa(code))
	out.WriteString(`,"message":`)
	appendString(out, msg)
	out.WriteString(`}}`)
	return out.Bytes()
}

// appendString appends s as a JSON string.
func appendString(out *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			// Rare or non-ASCII: let encoding/json do the escaping.
			b, _ := json.Marshal(s)
			out.Write(b)
			return
		}
	}
	out.WriteByte('"')
	out.WriteString(s)
	out.WriteByte('"')
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	w.Write(b)
}

func newSessionID() string { return rand.Text() }
