package h1server

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoHandler answers with what it saw of the request, and which server
// served it (fast: this package's writer).
func echoHandler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var keys []string
	for k, vv := range r.Header {
		keys = append(keys, k+"="+strings.Join(vv, ","))
	}
	slices.Sort(keys)
	_, fast := w.(*response)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Fast", fmt.Sprint(fast))
	if r.URL.Path == "/status" {
		w.WriteHeader(http.StatusTeapot)
	}
	if r.URL.Path == "/nobody" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	fmt.Fprintf(w, "%s %s %s host=%s remote=%t len=%d\n", r.Method, r.URL.RequestURI(), r.Proto, r.Host, r.RemoteAddr != "", r.ContentLength)
	fmt.Fprintf(w, "headers=%s\nbody=%q err=%v\n", strings.Join(keys, ";"), body, err)
	if la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr); la == nil {
		fmt.Fprintln(w, "no local address")
	}
}

// serverPair starts the same handler behind net/http alone and behind
// this package; it returns their addresses.
func serverPair(t testing.TB, h http.Handler) (std, fast string) {
	t.Helper()
	std = startStd(t, h)
	fast = startFast(t, h)
	return std, fast
}

func newStd(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second,
		MaxHeaderBytes: 64 << 10, ErrorLog: quietLog()}
}

func startStd(t testing.TB, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newStd(h)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func startFast(t testing.TB, h http.Handler) string {
	s, addr := startServer(t, newStd(h))
	t.Cleanup(func() { s.Close() })
	return addr
}

func startServer(t testing.TB, srv *http.Server) (*Server, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(srv)
	done := make(chan struct{})
	go func() { s.Serve(ln); close(done) }()
	// After the test's own cleanup closed s: Serve has returned and no
	// connection goroutine is left (goleak checks at the end).
	t.Cleanup(func() { <-done; s.wg.Wait() })
	return s, ln.Addr().String()
}

// exchange sends raw, closes its side and returns every response read
// back, as "status, framing, body" texts, and for each whether the
// handler was served by this package (its X-Fast header).
func exchange(t testing.TB, addr, raw string) (out []string, fast []bool) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(nc, raw); err != nil {
		t.Fatal(err)
	}
	_ = nc.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(nc)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out, fast
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, fmt.Sprintf("%d ct=%s cl=%d te=%v close=%t err=%v\n%s",
			resp.StatusCode, resp.Header.Get("Content-Type"), resp.ContentLength, resp.TransferEncoding, resp.Close, err, b))
		fast = append(fast, resp.Header.Get("X-Fast") == "true")
	}
}

// The two servers answer the same bytes the same way; fast says which
// requests this package serves itself (the rest net/http serves).
func TestSameAnswersAsNetHTTP(t *testing.T) {
	std, fast := serverPair(t, http.HandlerFunc(echoHandler))
	long := strings.Repeat("a", 9000)
	cases := []struct {
		name, raw string
		fast      []bool // per response, whether this package served it
	}{
		{"post", "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", []bool{true}},
		{"get", "GET /a?b=c HTTP/1.1\r\nHost: x\r\n\r\n", []bool{true}},
		{"empty post", "POST /mcp HTTP/1.1\r\nHost: x\r\n\r\n", []bool{true}},
		{"pipelined", "POST /1 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\naPOST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nbbGET /3 HTTP/1.1\r\nHost: x\r\n\r\n", []bool{true, true, true}},
		{"bare LF", "POST /lf HTTP/1.1\nHost: x\nContent-Length: 2\n\nhi", []bool{true}},
		{"status", "POST /status HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", []bool{true}},
		{"no body status", "POST /nobody HTTP/1.1\r\nHost: x\r\n\r\n", []bool{true}},
		{"connection close", "POST /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1\r\n\r\nxPOST /after HTTP/1.1\r\nHost: x\r\n\r\n", []bool{true}},
		{"CRLF after POST", "POST /1 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na\r\nPOST /2 HTTP/1.1\r\nHost: x\r\n\r\n", []bool{true, true}},
		{"short body", "POST /short HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc", []bool{true}},
		{"unread body", "POST /nobody HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /next HTTP/1.1\r\nHost: x\r\n\r\n", []bool{true, true}},
		// Handed to net/http: its answer, whatever it is (an error too).
		{"chunked", "POST /ch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", []bool{false}},
		{"smuggle CL+TE", "POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", nil},
		{"two lengths", "POST /l HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", nil},
		{"expect", "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz", []bool{false, false}}, // 100 Continue, then the answer
		{"http/1.0", "POST /old HTTP/1.0\r\nHost: x\r\nContent-Length: 1\r\n\r\nz", []bool{false}},
		{"no host", "POST /nohost HTTP/1.1\r\nContent-Length: 0\r\n\r\n", nil},
		{"two hosts", "POST /h HTTP/1.1\r\nHost: x\r\nHost: y\r\nContent-Length: 0\r\n\r\n", nil},
		{"bad host", "POST /h HTTP/1.1\r\nHost: x y\r\nContent-Length: 0\r\n\r\n", nil},
		{"bad header name", "POST /h HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\nContent-Length: 0\r\n\r\n", nil},
		{"bad header value", "POST /h HTTP/1.1\r\nHost: x\r\nX-V: a\x01b\r\nContent-Length: 0\r\n\r\n", nil},
		{"long header", "POST /long HTTP/1.1\r\nHost: x\r\nX-Long: " + long + "\r\nContent-Length: 0\r\n\r\n", []bool{false}},
		{"head", "HEAD /hd HTTP/1.1\r\nHost: x\r\n\r\n", []bool{false}},
		{"fast then handed", "POST /1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nPUT /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nPOST /3 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", []bool{true, false, false}},
		{"garbage", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", nil},
		{"upgrade", "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", []bool{false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, _ := exchange(t, std, tc.raw)
			got, gotFast := exchange(t, fast, tc.raw)
			if len(want) == 0 && len(got) == 0 && tc.fast != nil {
				t.Fatal("no response from either server")
			}
			if !slices.Equal(want, got) {
				t.Errorf("net/http and h1server differ:\nnet/http: %q\nh1server: %q", want, got)
			}
			if tc.fast != nil && !slices.Equal(gotFast, tc.fast) {
				t.Errorf("served here: %v, want %v", gotFast, tc.fast)
			}
		})
	}
}

func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }
