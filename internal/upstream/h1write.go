package upstream

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"

	"github.com/mcpgate/mcpgate/internal/httpwire"
)

// maxFastHeaders bounds the header keys writeRequest sorts on its stack;
// a request with more goes to net/http's writer.
const maxFastHeaders = 24

// writeRequest writes req to bw as http.Request.Write would, byte for
// byte, without its per-request allocations (a transfer writer, a header
// sorter, formatted strings): the common MCP POST of an in-memory body
// with a known length. Anything else (no or unknown-length body, chunked,
// trailers, Connection: close, a User-Agent of its own, a header or host
// net/http would rewrite or drop, an httptrace) is written by req.Write
// itself, so the bytes on the wire are the same either way
// (FuzzWriteRequest holds that). The body is closed, as Write does.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	var keys [maxFastHeaders]string
	n, ok := fastHeaderKeys(req, &keys)
	if !ok {
		return req.Write(bw)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	ruri := req.URL.RequestURI()
	if !plainHost(host) || hasCTL(ruri) {
		return req.Write(bw)
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(ruri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: ")
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), req.ContentLength, 10))
	bw.WriteString("\r\n")
	for _, k := range keys[:n] {
		for _, v := range req.Header[k] {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
	// The body is in memory (GetBody is set only for those): io.Copy hands
	// it to bw through its WriterTo, without a copy buffer.
	written, err := io.Copy(bw, req.Body)
	cerr := req.Body.Close()
	if err != nil {
		return err
	}
	if written != req.ContentLength {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", req.ContentLength, written)
	}
	if cerr != nil {
		return cerr
	}
	// Buffered writes report their error on the next write or flush;
	// bufio keeps the first one.
	_, err = bw.Write(nil)
	return err
}

// fastHeaderKeys collects req's header keys that net/http writes, sorted
// into keys, and reports whether writeRequest may write req itself.
func fastHeaderKeys(req *http.Request, keys *[maxFastHeaders]string) (int, bool) {
	if req.ContentLength <= 0 || req.Body == nil || req.GetBody == nil || req.Close ||
		req.TransferEncoding != nil || req.Trailer != nil || req.URL == nil || req.URL.Scheme != "http" {
		return 0, false
	}
	if httptrace.ContextClientTrace(req.Context()) != nil {
		return 0, false
	}
	n := 0
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // net/http leaves them out too
		case "User-Agent":
			return 0, false
		}
		if n == len(keys) || !validFieldName(k) {
			return 0, false // net/http would drop an invalid name
		}
		for _, v := range vs {
			if !plainValue(v) {
				return 0, false // net/http would rewrite it
			}
		}
		// Insertion sort: a handful of keys.
		i := n
		for i > 0 && keys[i-1] > k {
			keys[i] = keys[i-1]
			i--
		}
		keys[i] = k
		n++
	}
	return n, true
}

// validFieldName is httpguts.ValidHeaderFieldName: a non-empty token.
func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !httpwire.IsTokenByte(k[i]) {
			return false
		}
	}
	return true
}

// plainValue: a value net/http writes unchanged (no line break to turn
// into a space, no surrounding white space to trim).
func plainValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] == '\r' || v[i] == '\n' {
			return false
		}
	}
	return v == "" || !isTrimmed(v[0]) && !isTrimmed(v[len(v)-1])
}

func isTrimmed(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// plainHost: a host net/http writes unchanged (ASCII, so no punycode; a
// valid Host header; no zone to remove).
func plainHost(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_':
		default:
			return false
		}
	}
	return true
}

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}
