package h1server

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"slices"
	"testing"
)

// FuzzSameAnswers feeds the same bytes to net/http alone and to this
// package in front of it: the responses must be the same, whichever of
// the two served each request. This holds the package's one piece of
// parsing of its own (where a header block ends, which requests it
// keeps) to net/http's.
func FuzzSameAnswers(f *testing.F) {
	for _, seed := range []string{
		"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\nHost: x\nContent-Length: 1\n\nz",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nz",
		"POST http://x/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\n Folded: y\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nz\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: [::1]:80\r\nContent-Length: +1\r\n\r\nz",
	} {
		f.Add([]byte(seed))
	}
	std, fast := serverPair(f, http.HandlerFunc(echoHandler))
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, _ := exchange(t, std, string(raw))
		got, _ := exchange(t, fast, string(raw))
		if !slices.Equal(want, got) {
			t.Fatalf("net/http and h1server differ on %q:\nnet/http: %q\nh1server: %q", raw, want, got)
		}
	})
}

// FuzzParseRequest holds parseRequest to http.ReadRequest: a header block
// it takes must be one ReadRequest reads whole, into the same request
// (every field a handler sees but the body and the context, which
// serveRequest sets).
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
		"POST /mcp/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
			"Mcp-Session-Id: abc\r\nMcp-Protocol-Version: 2025-06-18\r\nContent-Length: 97\r\n\r\n",
		"GET /mcp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nLast-Event-ID: 3\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
		"POST http://y/z?q=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 007\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive\r\nconnection: close\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nx-a:\t 2\r\nX-B:\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nX-A: 1 \r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nX-A: \xff\r\n\r\n",
		"POST /%zz HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST * HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a b HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.0\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		n := endOfHeader(raw)
		if n < 0 {
			return
		}
		head := raw[:n]
		var got http.Request
		if !parseRequest(bytes.Clone(head), &got) {
			return
		}
		br := bufio.NewReader(bytes.NewReader(head))
		want, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("parseRequest took %q, which ReadRequest refuses: %v", head, err)
		}
		if br.Buffered() != 0 {
			t.Fatalf("parseRequest took %q whole, ReadRequest left %d bytes", head, br.Buffered())
		}
		if got.Method != want.Method || got.RequestURI != want.RequestURI || got.Proto != want.Proto ||
			got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor || got.Host != want.Host ||
			got.ContentLength != want.ContentLength || got.Close != want.Close ||
			!reflect.DeepEqual(got.URL, want.URL) || !reflect.DeepEqual(got.Header, want.Header) ||
			!reflect.DeepEqual(got.TransferEncoding, want.TransferEncoding) || !reflect.DeepEqual(got.Trailer, want.Trailer) ||
			got.Form != nil || got.GetBody != nil || got.RemoteAddr != "" || got.TLS != nil {
			t.Fatalf("%q:\nparseRequest %+v\nReadRequest  %+v", head, got, *want)
		}
		if eligible(&got) != eligible(want) {
			t.Fatalf("%q: eligible %v, ReadRequest's %v", head, eligible(&got), eligible(want))
		}
	})
}

// The requests MCP clients send are the ones parseRequest takes, at a
// pinned cost: one string for the block, one slice for the values, the
// map (two) and the URL.
func TestParseRequestTakesMCPRequests(t *testing.T) {
	for _, head := range []string{
		"POST /mcp/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
			"Mcp-Session-Id: abc\r\nMcp-Protocol-Version: 2025-06-18\r\nContent-Length: 97\r\n\r\n",
		"GET /mcp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nConnection: keep-alive\r\nLast-Event-ID: 3\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nHost: x\r\nUser-Agent: node\r\nAccept-Encoding: gzip, deflate\r\nContent-Length: 0\r\n\r\n",
	} {
		var req http.Request
		if !parseRequest([]byte(head), &req) || !eligible(&req) {
			t.Errorf("%q: not taken", head)
		}
	}
	head := []byte("POST /mcp/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
		"Mcp-Session-Id: abc\r\nMcp-Protocol-Version: 2025-06-18\r\nContent-Length: 97\r\n\r\n")
	var req http.Request
	if n := testing.AllocsPerRun(100, func() { parseRequest(head, &req) }); n > 5 {
		t.Errorf("parseRequest: %v allocations, want at most 5", n)
	}
}
