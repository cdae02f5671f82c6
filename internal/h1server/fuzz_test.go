package h1server

import (
	"net/http"
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
