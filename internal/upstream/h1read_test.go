package upstream

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"reflect"
	"testing"
	"time"
)

type readResult struct {
	Err              bool
	Status           string
	StatusCode       int
	Proto            string
	ProtoMajor       int
	ProtoMinor       int
	Header           http.Header
	ContentLength    int64
	Close            bool
	TransferEncoding []string
	Body             string
	BodyErr          string
	Rest             string
}

func readWith(data []byte, method string, read func(*bufio.Reader, *http.Request) (*http.Response, error)) readResult {
	br := bufio.NewReaderSize(bytes.NewReader(data), 256)
	req, _ := http.NewRequest(method, "http://example.com/mcp", nil)
	resp, err := read(br, req)
	if err != nil {
		return readResult{Err: true}
	}
	body, berr := io.ReadAll(resp.Body)
	r := readResult{Status: resp.Status, StatusCode: resp.StatusCode, Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
		Header: resp.Header, ContentLength: resp.ContentLength, Close: resp.Close, TransferEncoding: resp.TransferEncoding, Body: string(body)}
	if berr != nil {
		r.BodyErr = berr.Error()
	}
	rest, _ := io.ReadAll(br)
	r.Rest = string(rest)
	if len(r.Header) == 0 {
		r.Header = nil
	}
	return r
}

var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: abc\r\nDate: Thu, 03 Dec 2026 07:00:00 GMT\r\nContent-Length: 7\r\n\r\n{\"a\":1}next",
	"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 3\r\nconnection: keep-alive\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nabcde",
	"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
	"HTTP/1.1 200 OK\r\nX-A: 1\r\nX-A: 2\r\n folded\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200\r\nX-Trail: v \r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx",
	"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
}

// readResponse reads every response as http.ReadResponse does: the same
// status, headers, length, close flag, body (and its error) and the same
// bytes left on the connection.
func TestReadResponseAsNetHTTP(t *testing.T) {
	for _, s := range responseSeeds {
		for _, m := range []string{http.MethodPost, http.MethodHead} {
			got, want := readWith([]byte(s), m, readResponseOnly), readWith([]byte(s), m, http.ReadResponse)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s %q:\nreadResponse      %+v\nhttp.ReadResponse %+v", m, s, got, want)
			}
		}
	}
	// The common reply takes the fast path (no fallback hides a difference).
	if _, ok := parseHead([]byte(responseSeeds[0][:bytes.Index([]byte(responseSeeds[0]), []byte("\r\n\r\n"))+4]), nil); !ok {
		t.Error("the common reply is not read by readResponse itself")
	}
}

func FuzzReadResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, want := readWith(data, http.MethodPost, readResponseOnly), readWith(data, http.MethodPost, http.ReadResponse)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nreadResponse      %+v\nhttp.ReadResponse %+v", data, got, want)
		}
	})
}

// FuzzReadResponseHeaders aims at the fast path: a 200 with a length and
// one more header line of any key and value.
func FuzzReadResponseHeaders(f *testing.F) {
	f.Add("Mcp-Session-Id", "abc", "7", "{\"a\":1}")
	f.Add("content-TYPE", " text/event-stream", "3", "abc")
	f.Add("Connection", "Keep-Alive", "0", "")
	f.Add("X-\x01", "v\tw", "1", "xy")
	f.Fuzz(func(t *testing.T, key, val, length, body string) {
		data := []byte("HTTP/1.1 200 OK\r\n" + key + ": " + val + "\r\nContent-Length: " + length + "\r\n\r\n" + body)
		got, want := readWith(data, http.MethodPost, readResponseOnly), readWith(data, http.MethodPost, http.ReadResponse)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nreadResponse      %+v\nhttp.ReadResponse %+v", data, got, want)
		}
	})
}

// On a live connection the peer sends a reply and then waits: the reply
// is read from what arrived, without waiting for more bytes.
func TestReadResponseDoesNotWaitForMore(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	reply := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	go func() {
		// In two writes, the head split in the middle.
		_, _ = server.Write([]byte(reply[:20]))
		time.Sleep(10 * time.Millisecond)
		_, _ = server.Write([]byte(reply[20:]))
	}()
	_ = client.SetDeadline(time.Now().Add(5 * time.Second))
	req, _ := http.NewRequest(http.MethodPost, "http://example.com/mcp", nil)
	resp, _, err := readResponse(bufio.NewReaderSize(client, 4096), req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "{}" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("body %q, %v; header %v", body, err, resp.Header)
	}
}

// readResponseOnly is readResponse without its spare body wrapper.
func readResponseOnly(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	resp, _, err := readResponse(br, req)
	return resp, err
}
