package upstream

import (
	"bufio"
	"bytes"
	"io"
	"net/http"

	"github.com/mcpgate/mcpgate/internal/httpwire"
)

// readResponse reads the response to req from br as http.ReadResponse
// does, with fewer allocations for the common MCP reply: HTTP/1.1, a 200
// or 202, a Content-Length, plain header lines. The head is looked at
// without consuming it (Peek); anything else (chunked, Connection: close,
// a folded or odd line, another status, a head larger than the buffer)
// is left to http.ReadResponse on the untouched reader, so the result is
// the same either way (FuzzReadResponse holds that).
//
// A response read here comes with spare, an h1Body allocated with it for
// the caller's wrapper of its body (nil when http.ReadResponse read it).
func readResponse(br *bufio.Reader, req *http.Request) (resp *http.Response, spare *h1Body, err error) {
	head := peekHead(br)
	if head == nil || req.Method == http.MethodHead {
		resp, err = http.ReadResponse(br, req)
		return resp, nil, err
	}
	fr, ok := parseHead(head, req)
	if !ok {
		resp, err = http.ReadResponse(br, req)
		return resp, nil, err
	}
	_, _ = br.Discard(len(head))
	resp = &fr.resp
	if resp.ContentLength == 0 {
		resp.Body = http.NoBody
	} else {
		fr.body = fixedBody{br: br, left: resp.ContentLength}
		resp.Body = &fr.body
	}
	return resp, &fr.wrap, nil
}

// fastValues is how many header values a fastResponse holds (a Go or
// Python server's reply has five or six lines; the struct is then in the
// size class the four allocations it replaces added up to); a head with
// more lines gets a slice of its own for them.
const fastValues = 6

// fastResponse is what a response read by parseHead needs, in one
// allocation: the response, its body, the connection's wrapper of that
// body (h1Conn.roundTrip) and the values of its header lines (all but
// the keys substrings of one copy of the head).
type fastResponse struct {
	resp http.Response
	body fixedBody
	wrap h1Body
	vals [fastValues]string
}

// peekHead is the response head (through its empty line) once it is in
// br's buffer, or nil when it does not fit or the read fails (which
// http.ReadResponse then meets and reports).
func peekHead(br *bufio.Reader) []byte {
	if br.Buffered() == 0 {
		if _, err := br.Peek(1); err != nil {
			return nil
		}
	}
	for {
		// Everything already read first: asking for one byte more than
		// that waits for the peer, which may have sent all it will.
		b, _ := br.Peek(br.Buffered())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			return b[:i+4]
		}
		if len(b) >= br.Size() {
			return nil
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			return nil
		}
	}
}

// parseHead parses a head that needs nothing http.ReadResponse would do
// beyond splitting it; ok false: let http.ReadResponse read it.
func parseHead(head []byte, req *http.Request) (*fastResponse, bool) {
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return nil, false
	}
	code := int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	if code != http.StatusOK && code != http.StatusAccepted || !isDigit(line[9]) || !isDigit(line[10]) || !isDigit(line[11]) {
		return nil, false
	}
	for _, c := range line {
		if c < ' ' || c == 0x7f {
			return nil, false
		}
	}
	// Header lines: count them (one []string backs every value, as in
	// textproto) and check each is a plain "Key: value".
	rest = rest[:len(rest)-2] // the empty line
	lines := 0
	for r := rest; len(r) > 0; lines++ {
		l, more, found := bytes.Cut(r, []byte("\r\n"))
		if !found || !plainHeaderLine(l) {
			return nil, false
		}
		r = more
	}
	// The values are substrings of one copy of the head: one allocation
	// for every header string but the keys (interned or copied).
	text := string(rest)
	fr := new(fastResponse)
	values := fr.vals[:min(lines, fastValues)]
	if lines > fastValues {
		values = make([]string, lines)
	}
	h := make(http.Header, lines)
	var keyBuf [64]byte
	clen := int64(-1)
	for i, off := 0, 0; off < len(text); i++ {
		end := off + bytes.Index(rest[off:], []byte("\r\n"))
		colon := off + bytes.IndexByte(rest[off:end], ':')
		if colon-off > len(keyBuf) {
			return nil, false
		}
		key := canonicalKey(keyBuf[:0], rest[off:colon])
		v := colon + 1
		for v < end && (text[v] == ' ' || text[v] == '\t') {
			v++
		}
		val := text[v:end]
		switch key {
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil, false // net/http rewrites or checks them
		case "Connection":
			if !equalFold(val, "keep-alive") {
				return nil, false
			}
		case "Content-Length":
			if clen >= 0 {
				return nil, false // repeated: net/http checks they agree
			}
			if clen = httpwire.ParseLength(val); clen < 0 {
				return nil, false
			}
		}
		values[i] = val
		if vs, ok := h[key]; ok {
			h[key] = append(vs, val) // a new array: values stays as it is
		} else {
			h[key] = values[i : i+1 : i+1]
		}
		off = end + 2
	}
	if clen < 0 {
		return nil, false // read until close, or a 202 without a length
	}
	fr.resp = http.Response{
		Status: statusText(line[9:]), StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: clen, Request: req,
	}
	return fr, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// plainHeaderLine: "Key: value" with a token key, and a value net/http
// takes as it is (no control byte, no trailing white space).
func plainHeaderLine(l []byte) bool {
	colon := bytes.IndexByte(l, ':')
	if colon <= 0 {
		return false
	}
	for _, c := range l[:colon] {
		if !httpwire.IsTokenByte(c) {
			return false
		}
	}
	for _, c := range l[colon+1:] {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	if n := len(l); n > colon+1 && (l[n-1] == ' ' || l[n-1] == '\t') {
		return false
	}
	return true
}

// canonicalKey is textproto.CanonicalMIMEHeaderKey of a token (the
// caller has checked it is one: plainHeaderLine), written into buf; the
// headers an MCP reply carries come back as constants.
func canonicalKey(buf []byte, k []byte) string {
	buf, _ = httpwire.AppendCanonicalKey(buf, k)
	switch string(buf) {
	case "Content-Type":
		return "Content-Type"
	case "Content-Length":
		return "Content-Length"
	case "Mcp-Session-Id":
		return "Mcp-Session-Id"
	case "Date":
		return "Date"
	case "Connection":
		return "Connection"
	case "Cache-Control":
		return "Cache-Control"
	case "Server":
		return "Server"
	case "Transfer-Encoding":
		return "Transfer-Encoding"
	case "Trailer":
		return "Trailer"
	case "Pragma":
		return "Pragma"
	case "Keep-Alive":
		return "Keep-Alive"
	case "Vary":
		return "Vary"
	}
	return string(buf)
}

// statusText is the status line after the version, as a constant for the
// two statuses the fast path takes with their usual reason.
func statusText(s []byte) string {
	switch string(s) {
	case "200 OK":
		return "200 OK"
	case "202 Accepted":
		return "202 Accepted"
	}
	return string(s)
}

func equalFold(s, t string) bool { return len(s) == len(t) && bytes.EqualFold([]byte(s), []byte(t)) }

// fixedBody is a Content-Length body read from the connection's reader:
// what net/http's body does for one, without its wrappers. A connection
// that ends early is io.ErrUnexpectedEOF, as there.
type fixedBody struct {
	br   *bufio.Reader
	left int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	if b.left == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *fixedBody) Close() error { return nil }
