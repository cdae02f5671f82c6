package openapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxErrorExcerpt bounds the part of an error response's body a tool
// error quotes.
const MaxErrorExcerpt = 1024

// Response is what came back for a call.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
	// URI names the response in an embedded resource (binary bodies):
	// the request URL without user info, query or fragment.
	URI string
}

// content is one MCP content block.
type content struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	Resource *resource `json:"resource,omitempty"`
}

type resource struct {
	URI      string `json:"uri"`
	MIMEType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"`
}

type callResult struct {
	Content           []content `json:"content"`
	StructuredContent any       `json:"structuredContent,omitempty"`
	IsError           bool      `json:"isError,omitempty"`
}

// Result maps a response to a CallToolResult: a 2xx JSON body becomes
// structuredContent (wrapped as {"result": ...} when the tool's output
// schema is) and its text; other text types their text; a binary body an
// embedded resource; any other status a tool error with the status and an
// excerpt of at most MaxErrorExcerpt bytes of the body.
func (t *Tool) Result(r Response) json.RawMessage {
	mt, _, _ := mime.ParseMediaType(r.ContentType)
	mt = strings.ToLower(mt)
	if r.Status < 200 || r.Status > 299 {
		msg := "HTTP " + strconv.Itoa(r.Status)
		if st := http.StatusText(r.Status); st != "" {
			msg += " " + st
		}
		if ex := Excerpt(r.Body, MaxErrorExcerpt); ex != "" {
			msg += ": " + ex
		}
		return mustJSON(callResult{Content: []content{{Type: "text", Text: msg}}, IsError: true})
	}
	if len(bytes.TrimSpace(r.Body)) == 0 {
		res := callResult{Content: []content{{Type: "text", Text: "HTTP " + strconv.Itoa(r.Status) + " (no content)"}}}
		if t.OutputSchema != nil && t.Wrapped {
			res.StructuredContent = map[string]any{"result": nil}
		}
		return mustJSON(res)
	}
	if isJSON(mt) || (mt == "" && json.Valid(r.Body)) {
		var v any
		if err := json.Unmarshal(r.Body, &v); err == nil {
			res := callResult{Content: []content{{Type: "text", Text: string(r.Body)}}}
			_, isObj := v.(map[string]any)
			switch {
			case t.Wrapped || (t.OutputSchema == nil && !isObj):
				res.StructuredContent = map[string]any{"result": v}
			default:
				res.StructuredContent = v
			}
			if t.OutputSchema != nil && !t.Wrapped && !isObj {
				// Not what the document promised: text only, rather than
				// structured content that breaks the schema.
				res.StructuredContent = nil
			}
			return mustJSON(res)
		}
	}
	if textual(mt) && utf8.Valid(r.Body) {
		return mustJSON(callResult{Content: []content{{Type: "text", Text: string(r.Body)}}})
	}
	return mustJSON(callResult{Content: []content{{Type: "resource", Resource: &resource{
		URI: r.URI, MIMEType: mt, Blob: base64.StdEncoding.EncodeToString(r.Body),
	}}}})
}

// ErrorResult is a tool error with msg.
func ErrorResult(msg string) json.RawMessage {
	return mustJSON(callResult{Content: []content{{Type: "text", Text: msg}}, IsError: true})
}

func textual(mt string) bool {
	switch {
	case mt == "", strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "+xml"),
		mt == "application/xml", mt == "application/yaml", mt == "application/x-yaml",
		mt == "application/javascript", mt == formMedia:
		return true
	}
	return false
}

// Excerpt is at most max bytes of body, cut at a rune boundary, with
// control characters other than newline and tab replaced by spaces, and
// "..." when cut.
func Excerpt(body []byte, max int) string {
	s := strings.TrimSpace(string(body))
	cut := false
	if len(s) > max {
		s, cut = s[:max], true
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if cut {
		s += "..."
	}
	return s
}
