package bench_test

// BenchmarkCallPath measures what one warm tools/call costs the gateway
// itself (issue 25): allocations and CPU per call, without the load
// generator's or the echo server's share. The upstream is a raw HTTP/1.1
// MCP server on loopback (rawUpstream) that allocates nothing per request,
// so allocs/op is the gateway's count:
//
//	route     ServeHTTP on /mcp/echo (single-server route, session era)
//	route-100k  the same, the tool's result 100 KB of text (what a
//	          tool's real output costs: every reply is validated whole
//	          and its envelope read before its result is forwarded)
//	merged    ServeHTTP on /mcp, the tool called as echo__echo
//	stateless ServeHTTP on /mcp, a 2026-07-28 request (no session)
//	serve     through a real net/http server on loopback, /mcp/echo, with
//	          metrics on; the client is raw HTTP/1.1 too (no allocation)
//	serve-h1  serve through mcpgate serve's listener (h1server in front
//	          of net/http)
//
// The first three call the gateway's handler directly with a reused
// request and response writer, so they leave out net/http's server work;
// serve adds it. Profile with
//
//	go test ./bench -run '^$' -bench CallPath -benchmem -memprofile mem.out -cpuprofile cpu.out
//	go tool pprof -top -sample_index=alloc_objects mem.out

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/h1server"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/metrics"
)

const (
	callRouteBody     = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`
	callBigBody       = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"big"}}}`
	callMergedBody    = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo__echo","arguments":{"text":"hello"}}}`
	callStatelessBody = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo__echo","arguments":{"text":"hello"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"}}}}`
	// callReply is what rawUpstream answers every tools/call with, and
	// what each measured call checks it got back.
	callReplyText = `"text":"hello"`
)

func BenchmarkCallPath(b *testing.B) {
	up := startRawUpstream(b)
	g, _ := newCallPathGateway(b, up, gateway.Options{})
	b.Run("route", func(b *testing.B) {
		sid := initDirect(b, g, "/mcp/echo")
		benchDirect(b, g, "/mcp/echo", callRouteBody, http.Header{
			"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-06-18"}})
	})
	b.Run("route-100k", func(b *testing.B) {
		sid := initDirect(b, g, "/mcp/echo")
		benchDirect(b, g, "/mcp/echo", callBigBody, http.Header{
			"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-06-18"}})
	})
	b.Run("merged", func(b *testing.B) {
		sid := initDirect(b, g, "/mcp")
		benchDirect(b, g, "/mcp", callMergedBody, http.Header{
			"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-06-18"}})
	})
	b.Run("stateless", func(b *testing.B) {
		benchDirect(b, g, "/mcp", callStatelessBody, http.Header{
			"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"echo__echo"}})
	})
	b.Run("serve", func(b *testing.B) { benchServe(b, up, false) })
	b.Run("serve-h1", func(b *testing.B) { benchServe(b, up, true) })
}

// benchServe is the serve sub-benchmarks: through net/http's server, or
// (h1) through the listener mcpgate serve runs, h1server in front of it.
func benchServe(b *testing.B, up string, h1 bool) {
	gs, _ := newCallPathGateway(b, up, gateway.Options{Metrics: metrics.New(), MetricsOnMain: true})
	var addr string
	if h1 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		hs := h1server.New(&http.Server{Handler: gs, ReadHeaderTimeout: 10 * time.Second})
		go hs.Serve(ln)
		b.Cleanup(func() { hs.Close() })
		addr = ln.Addr().String()
	} else {
		srv := httptest.NewServer(gs)
		b.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
		addr = srv.Listener.Addr().String()
	}
	sid := initDirect(b, gs, "/mcp/echo")
	c := dialRaw(b, addr)
	req := rawPost("/mcp/echo", callRouteBody, "Mcp-Session-Id: "+sid+"\r\nMcp-Protocol-Version: 2025-06-18\r\n")
	c.call(b, req) // warm
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for range b.N {
		c.call(b, req)
	}
	cpu := processCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1000, "cpu-µs/call")
}

// newCallPathGateway is a started gateway with the one server echo at
// upURL; the gateway is closed with b.
func newCallPathGateway(b *testing.B, upURL string, o gateway.Options) (*gateway.Gateway, string) {
	b.Helper()
	o.Config = &config.Config{
		Listen:            "127.0.0.1:0",
		ToolNameSeparator: "__",
		Servers: map[string]*config.Server{
			"echo": {Name: "echo", Transport: config.TransportHTTP, URL: upURL, Timeout: 30 * time.Second, ProtocolVersion: config.ProtocolVersionAuto},
		},
	}
	o.Version = "bench"
	g := gateway.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	g.Start(ctx)
	b.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = g.Close(cctx)
		cancel()
	})
	return g, upURL
}

// discardWriter is a reusable http.ResponseWriter: its header map is
// cleared and its body buffer reset before each call.
type discardWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}
func (w *discardWriter) Flush() {}

// rewindBody is a request body that can be read again.
type rewindBody struct{ bytes.Reader }

func (*rewindBody) Close() error { return nil }

// directRequest is one POST reused for every call.
type directRequest struct {
	r    *http.Request
	body *rewindBody
	raw  []byte
	w    discardWriter
}

func newDirectRequest(path, body string, hdr http.Header) *directRequest {
	d := &directRequest{raw: []byte(body), body: &rewindBody{}, w: discardWriter{h: http.Header{}}}
	d.r = &http.Request{
		Method: http.MethodPost, URL: &url.URL{Path: path}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}},
		Host:   "127.0.0.1:4200", RemoteAddr: "127.0.0.1:50000", RequestURI: path, ContentLength: int64(len(body)),
	}
	for k, v := range hdr {
		d.r.Header[k] = v
	}
	d.r = d.r.WithContext(context.Background())
	return d
}

// do serves the request once and returns the status and the body.
func (d *directRequest) do(h http.Handler) (int, []byte) {
	d.body.Reset(d.raw)
	d.r.Body = d.body
	clear(d.w.h)
	d.w.status = 0
	d.w.body.Reset()
	h.ServeHTTP(&d.w, d.r)
	return d.w.status, d.w.body.Bytes()
}

// initDirect opens a session on path through ServeHTTP and returns its id.
func initDirect(b *testing.B, g http.Handler, path string) string {
	b.Helper()
	d := newDirectRequest(path, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`, nil)
	if st, body := d.do(g); st != http.StatusOK {
		b.Fatalf("initialize: %d %s", st, body)
	}
	sid := d.w.h.Get("Mcp-Session-Id")
	if sid == "" {
		b.Fatal("initialize: no session id")
	}
	n := newDirectRequest(path, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, http.Header{"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-06-18"}})
	if st, body := n.do(g); st != http.StatusAccepted {
		b.Fatalf("initialized: %d %s", st, body)
	}
	return sid
}

func benchDirect(b *testing.B, g http.Handler, path, body string, hdr http.Header) {
	d := newDirectRequest(path, body, hdr)
	for range 10 { // warm: catalog, pooled connections, buffers
		if st, out := d.do(g); st != http.StatusOK || !bytes.Contains(out, []byte(callReplyText)) {
			b.Fatalf("tools/call: %d %s", st, out)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for range b.N {
		if st, out := d.do(g); st != http.StatusOK || !bytes.Contains(out, []byte(callReplyText)) {
			b.Fatalf("tools/call: %d %s", st, out)
		}
	}
	cpu := processCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1000, "cpu-µs/call")
}

// rawUpstream is an MCP server over raw HTTP/1.1 that allocates nothing
// per request: it reads Content-Length bodies, finds id and method with
// package jsonrpc's scanner and writes canned replies. Session ids are
// issued (one fixed id) and not checked.
func startRawUpstream(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serveRawUpstream(c) })
		}
	})
	b.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String() + "/mcp"
}

var (
	upInitResult = []byte(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}`)
	upListResult = []byte(`{"tools":[{"name":"echo","description":"Echoes back the given text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}]}`)
	upCallResult = []byte(`{"content":[{"type":"text",` + callReplyText + `}]}`)
	// upBigResult answers a call whose text is "big": about 100 KB of
	// text content, escapes and non-ASCII included, as a tool's output.
	upBigResult = func() []byte {
		var b bytes.Buffer
		b.WriteString(`{"content":[{"type":"text",` + callReplyText + `}`)
		for i := 0; b.Len() < 100<<10; i++ {
			b.WriteString(`,{"type":"text","text":"line ` + strconv.Itoa(i) + ` of the tool's output, with \"quotes\", \u00e9 and a path C:\\tmp\\x"}`)
		}
		b.WriteString(`]}`)
		return b.Bytes()
	}()
)

func serveRawUpstream(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 16<<10)
	bw := bufio.NewWriterSize(c, 16<<10)
	body := make([]byte, 0, 16<<10)
	reply := make([]byte, 0, 4<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		post := bytes.HasPrefix(line, []byte("POST "))
		del := bytes.HasPrefix(line, []byte("DELETE "))
		clen := 0
		for {
			h, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			h = bytes.TrimRight(h, "\r\n")
			if len(h) == 0 {
				break
			}
			if len(h) > 15 && bytes.EqualFold(h[:15], []byte("content-length:")) {
				clen = atoi(bytes.TrimSpace(h[15:]))
			}
			if len(h) > 18 && bytes.EqualFold(h[:18], []byte("transfer-encoding:")) {
				panic("rawUpstream: chunked request bodies are not supported")
			}
		}
		if clen > cap(body) {
			body = make([]byte, clen)
		}
		body = body[:clen]
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		switch {
		case del:
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		case !post:
			bw.WriteString("HTTP/1.1 405 Method Not Allowed\r\nAllow: POST\r\nContent-Length: 0\r\n\r\n")
		default:
			id, hasID := jsonrpc.Get(body, "id")
			method, _ := jsonrpc.Get(body, "method")
			reply = append(reply[:0], `{"jsonrpc":"2.0","id":`...)
			reply = append(reply, id...)
			switch {
			case !hasID:
				bw.WriteString("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
				if err := bw.Flush(); err != nil {
					return
				}
				continue
			case string(method) == `"tools/call"` && bytes.Contains(body, []byte(`"text":"big"`)):
				reply = append(append(append(reply, `,"result":`...), upBigResult...), '}')
			case string(method) == `"tools/call"`:
				reply = append(append(append(reply, `,"result":`...), upCallResult...), '}')
			case string(method) == `"initialize"`:
				reply = append(append(append(reply, `,"result":`...), upInitResult...), '}')
			case string(method) == `"tools/list"`:
				reply = append(append(append(reply, `,"result":`...), upListResult...), '}')
			case string(method) == `"ping"`:
				reply = append(reply, `,"result":{}}`...)
			default:
				reply = append(reply, `,"error":{"code":-32601,"message":"Method not found"}}`...)
			}
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: raw-session\r\nContent-Length: ")
			bw.Write(strconv.AppendInt(reply[len(reply):], int64(len(reply)), 10))
			bw.WriteString("\r\n\r\n")
			bw.Write(reply)
		}
		if err := bw.Flush(); err != nil {
			return
		}
	}
}

// rawClient is a keep-alive HTTP/1.1 client that allocates nothing per
// call: it writes a prepared request and reads a Content-Length reply.
type rawClient struct {
	c    net.Conn
	br   *bufio.Reader
	body []byte
}

func dialRaw(b *testing.B, addr string) *rawClient {
	b.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return &rawClient{c: c, br: bufio.NewReaderSize(c, 16<<10), body: make([]byte, 0, 16<<10)}
}

func rawPost(path, body, headers string) []byte {
	return []byte("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
		headers + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

func (rc *rawClient) call(b *testing.B, req []byte) {
	if _, err := rc.c.Write(req); err != nil {
		b.Fatal(err)
	}
	line, err := rc.br.ReadSlice('\n')
	if err != nil {
		b.Fatal(err)
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		b.Fatalf("status %q", line)
	}
	clen := -1
	for {
		h, err := rc.br.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		if len(h) > 15 && bytes.EqualFold(h[:15], []byte("content-length:")) {
			clen = atoi(bytes.TrimSpace(h[15:]))
		}
	}
	if clen < 0 {
		b.Fatal("reply without Content-Length")
	}
	if clen > cap(rc.body) {
		rc.body = make([]byte, clen)
	}
	rc.body = rc.body[:clen]
	if _, err := io.ReadFull(rc.br, rc.body); err != nil {
		b.Fatal(err)
	}
	if !bytes.Contains(rc.body, []byte(callReplyText)) {
		b.Fatalf("reply %s", rc.body)
	}
}

// atoi parses a Content-Length (no allocation); malformed is -1.
func atoi(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}
