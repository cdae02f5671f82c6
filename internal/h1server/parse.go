package h1server

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/mcpgate/mcpgate/internal/httpwire"
)

// maxFastHeaders is the most header lines parseRequest takes; a longer
// block is http.ReadRequest's to read.
const maxFastHeaders = 64

// parseRequest fills *req from head, a whole header block through its
// empty line, as http.ReadRequest would, for the requests MCP clients
// send: "POST|GET target HTTP/1.1", every line ended by CRLF, plain
// "Key: value" header lines. ok false: anything else (a folded or odd
// line, a byte net/http would check or rewrite, a header it acts on
// beyond splitting: Transfer-Encoding, Trailer, Pragma, Expect, Upgrade,
// Connection other than keep-alive, a repeated Host or Content-Length),
// which http.ReadRequest then reads, so that the request is the same
// either way (FuzzParseRequest holds that). It costs a third of
// ReadRequest's allocations: one string for the whole block (every value
// and the target are substrings of it), one slice backing every value,
// the header map and the URL. The body and the context are left to the
// caller (ReadRequest's body is never read here: serveRequest sets its
// own).
func parseRequest(head []byte, req *http.Request) bool {
	if len(head) < 4 || string(head[len(head)-4:]) != "\r\n\r\n" {
		return false
	}
	// Every byte a control one only as part of a line's CRLF: a CR or
	// LF anywhere else, or any other control byte, is net/http's to
	// judge (as is obs-text, which textproto takes as it is).
	lines := 0
	for i := 0; i < len(head); i++ {
		if c := head[i]; byteClass[c]&plainByte == 0 {
			if c != '\r' || i+1 >= len(head) || head[i+1] != '\n' {
				return false
			}
			i++
			lines++
		}
	}
	// The request line, the header lines and the empty one.
	if lines < 2 || lines-2 > maxFastHeaders {
		return false
	}
	text := string(head)
	line, rest, _ := strings.Cut(text, "\r\n")
	method, target, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(target, " ")
	if !ok1 || !ok2 || proto != "HTTP/1.1" {
		return false
	}
	switch method {
	case http.MethodPost:
		method = http.MethodPost
	case http.MethodGet:
		method = http.MethodGet
	default:
		return false
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return false
	}
	rest = rest[:len(rest)-2] // the empty line
	n := lines - 2
	values := make([]string, n)
	h := make(http.Header, n)
	var keyBuf [64]byte
	clen := int64(-1)
	host := ""
	for i := 0; i < n; i++ {
		l, more, _ := strings.Cut(rest, "\r\n")
		rest = more
		colon := strings.IndexByte(l, ':')
		if colon <= 0 || colon > len(keyBuf) {
			return false
		}
		key, ok := canonicalKey(keyBuf[:0], l[:colon])
		if !ok {
			return false
		}
		v := l[colon+1:]
		for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
			v = v[1:]
		}
		if last := l[len(l)-1]; last == ' ' || last == '\t' {
			return false // textproto trims it
		}
		switch key {
		case "Transfer-Encoding", "Trailer", "Pragma", "Expect", "Upgrade", "Http2-Settings":
			return false // net/http rewrites, checks or acts on them
		case "Connection":
			if !strings.EqualFold(v, "keep-alive") {
				return false
			}
		case "Host":
			if _, seen := h["Host"]; seen {
				return false // net/http refuses two
			}
			host = v
		case "Content-Length":
			if clen >= 0 {
				return false // repeated: net/http checks they agree
			}
			if clen = httpwire.ParseLength(v); clen < 0 {
				return false
			}
		}
		values[i] = v
		if vs, ok := h[key]; ok {
			h[key] = append(vs, v) // a new array: values stays as it is
		} else {
			h[key] = values[i : i+1 : i+1]
		}
	}
	// As ReadRequest: an absolute target's host wins over the header,
	// which is taken out of the map.
	delete(h, "Host")
	if u.Host != "" {
		host = u.Host
	}
	*req = http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: max(clen, 0), Host: host, RequestURI: target,
	}
	return true
}

// canonicalKey is textproto.CanonicalMIMEHeaderKey of k written into buf,
// when k is a token (ok false otherwise); the headers MCP clients send
// come back as constants, others are copied.
func canonicalKey(buf []byte, k string) (string, bool) {
	buf, ok := httpwire.AppendCanonicalKey(buf, k)
	if !ok {
		return "", false
	}
	switch string(buf) {
	case "Host":
		return "Host", true
	case "Content-Type":
		return "Content-Type", true
	case "Content-Length":
		return "Content-Length", true
	case "Accept":
		return "Accept", true
	case "Accept-Encoding":
		return "Accept-Encoding", true
	case "Accept-Language":
		return "Accept-Language", true
	case "User-Agent":
		return "User-Agent", true
	case "Authorization":
		return "Authorization", true
	case "Connection":
		return "Connection", true
	case "Cache-Control":
		return "Cache-Control", true
	case "Origin":
		return "Origin", true
	case "Cookie":
		return "Cookie", true
	case "Mcp-Session-Id":
		return "Mcp-Session-Id", true
	case "Mcp-Protocol-Version":
		return "Mcp-Protocol-Version", true
	case "Mcp-Method":
		return "Mcp-Method", true
	case "Mcp-Name":
		return "Mcp-Name", true
	case "Last-Event-Id":
		return "Last-Event-Id", true
	case "Traceparent":
		return "Traceparent", true
	case "Tracestate":
		return "Tracestate", true
	case "X-Api-Key":
		return "X-Api-Key", true
	case "X-Forwarded-For":
		return "X-Forwarded-For", true
	case "Transfer-Encoding":
		return "Transfer-Encoding", true
	case "Trailer":
		return "Trailer", true
	case "Pragma":
		return "Pragma", true
	case "Expect":
		return "Expect", true
	case "Upgrade":
		return "Upgrade", true
	case "Http2-Settings":
		return "Http2-Settings", true
	}
	return string(buf), true
}

// byteClass tells the bytes parseRequest takes as they are in a line:
// plainByte, HTAB, SP and VCHAR, no obs-text.
var byteClass = func() (t [256]uint8) {
	for c := range 0x80 {
		if c == '\t' || c >= ' ' && c < 0x7f {
			t[c] |= plainByte
		}
	}
	return t
}()

const plainByte = 1
