package upstream

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// writeBoth writes the request build makes with writeRequest and with
// net/http's Request.Write.
func writeBoth(t *testing.T, build func() *http.Request) (fast, std []byte) {
	t.Helper()
	var a, b bytes.Buffer
	wa := bufio.NewWriter(&a)
	ra := build()
	erra := writeRequest(wa, ra)
	wa.Flush()
	wb := bufio.NewWriter(&b)
	errb := build().Write(wb)
	wb.Flush()
	if (erra == nil) != (errb == nil) {
		t.Fatalf("writeRequest error %v, Request.Write error %v", erra, errb)
	}
	return a.Bytes(), b.Bytes()
}

func TestWriteRequestAsNetHTTP(t *testing.T) {
	build := func() *http.Request {
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/mcp?x=1", strings.NewReader(`{"jsonrpc":"2.0"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Mcp-Session-Id", "abc")
		req.Header.Set("Accept", acceptPost)
		req.Header.Set("Content-Type", contentTypeJSON)
		req.Header.Add("X-Multi", "1")
		req.Header.Add("X-Multi", "2")
		return req
	}
	fast, std := writeBoth(t, build)
	if !bytes.Equal(fast, std) {
		t.Fatalf("writeRequest wrote\n%q\nRequest.Write wrote\n%q", fast, std)
	}
	// The fast path took it (no fallback hides a difference).
	var keys [maxFastHeaders]string
	if _, ok := fastHeaderKeys(build(), &keys); !ok {
		t.Fatal("the common POST is not written by writeRequest itself")
	}
}

func TestWriteRequestAllocatesNothing(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/mcp", bytes.NewReader(body))
	req.Header.Set("Accept", acceptPost)
	req.Header.Set("Content-Type", contentTypeJSON)
	bw := bufio.NewWriter(io.Discard)
	r := bytes.NewReader(body)
	req.Body = nopBody{r}
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(body)
		if err := writeRequest(bw, req); err != nil {
			t.Fatal(err)
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("writeRequest: %v allocations per request, want none", allocs)
	}
}

type nopBody struct{ *bytes.Reader }

func (nopBody) Close() error { return nil }

// FuzzWriteRequest: whatever the host, path, headers and body, writeRequest
// writes what Request.Write writes (or fails when it fails).
func FuzzWriteRequest(f *testing.F) {
	f.Add("127.0.0.1:9000", "/mcp", "Mcp-Session-Id", "abc", "X-Other", "v", []byte(`{"a":1}`), false)
	f.Add("example.com", "/a b?q=1", "user-agent", "me", "Host", "evil", []byte("x"), false)
	f.Add("[::1%25eth0]:80", "/", "X-A", " padded ", "X-B", "line\r\nbreak", []byte{}, true)
	f.Add("bücher.de", "/p", "bad name", "v", "Content-Length", "9", []byte("body"), false)
	f.Fuzz(func(t *testing.T, host, path, k1, v1, k2, v2 string, body []byte, closeReq bool) {
		build := func() *http.Request {
			req, err := http.NewRequest(http.MethodPost, "http://example.com/", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = host
			req.URL.Path = path
			req.Close = closeReq
			req.Header[k1] = []string{v1}
			req.Header[k2] = append(req.Header[k2], v2)
			return req
		}
		fast, std := writeBoth(t, build)
		if !bytes.Equal(fast, std) {
			t.Fatalf("writeRequest wrote\n%q\nRequest.Write wrote\n%q", fast, std)
		}
	})
}

// streamable.request sets the session headers by map key: their names
// must be canonical, as Header.Set would make them.
func TestSessionHeaderNamesCanonical(t *testing.T) {
	for _, k := range []string{mcpwire.HeaderSessionID, mcpwire.HeaderProtocolVersion, headerAccept, headerContentType} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("%q is not canonical (%q)", k, c)
		}
	}
}
