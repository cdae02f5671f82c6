package bench_test

// In-process benchmarks: the echo server and the gateway run in this test
// binary on httptest loopback servers, driven by bench/loadgen. They measure
// the same thing as bench/run.sh (calls/s direct vs through mcpgate) without
// separate processes, and are the way to profile the gateway:
//
//	go test ./bench -run '^$' -bench . -benchtime 20000x
//	go test ./bench -run '^$' -bench 'Gateway/c=64' -benchtime 10s -cpuprofile cpu.out
//	go tool pprof -top -cum cpu.out
//
// Everything (load generator, gateway, echo) shares one process and
// GOMAXPROCS, so calls/s are lower than with separate processes; cpu-µs/call
// is the whole process's CPU time per call, and Gateway minus Direct is
// roughly the gateway's CPU cost per call.
//
// To tell the three apart in a profile, each side runs under a pprof label
// "side" (gateway, echo, loadgen): goroutines inherit the labels of the
// goroutine that starts them, so the servers' accept loops, connection
// goroutines and the HTTP transports' read/write loops all carry them.
// Runtime background work (GC workers, scavenger) is unlabelled.
//
//	go tool pprof -top -tagfocus side=gateway cpu.out        # gateway only
//	go tool pprof -tags cpu.out                              # CPU split by side

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/bench/loadgen"
	"github.com/mcpgate/mcpgate/examples/echo/echoserver"
	"github.com/mcpgate/mcpgate/internal/audit"
	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/h1server"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

var concurrencies = []int{1, 8, 64}

// BenchmarkDirect calls the echo server directly.
func BenchmarkDirect(b *testing.B) {
	echo := startEcho(b)
	for _, c := range concurrencies {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			run(b, loadgen.Options{URL: echo.URL + "/mcp", Concurrency: c})
		})
	}
}

// BenchmarkGateway calls the echo server through an in-process mcpgate, on
// the single-server route /mcp/echo (tool names unprefixed).
func BenchmarkGateway(b *testing.B) {
	gw := startGateway(b)
	for _, c := range concurrencies {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			run(b, loadgen.Options{URL: gw + "/mcp/echo", Concurrency: c})
		})
	}
}

// BenchmarkGatewayFull is BenchmarkGateway with everything mcpgate serve
// runs beside the gateway: the caller authenticator (with a key), metrics,
// and the audit writer on an embedded SQLite store.
func BenchmarkGatewayFull(b *testing.B) {
	gw, key := startFullGateway(b)
	for _, c := range concurrencies {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			run(b, loadgen.Options{URL: gw + "/mcp/echo", Concurrency: c, Header: http.Header{"X-Mcpgate-Api-Key": {key}}})
		})
	}
}

// BenchmarkGatewayPrefixed calls echo__echo on the merged endpoint /mcp.
func BenchmarkGatewayPrefixed(b *testing.B) {
	gw := startGateway(b)
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			run(b, loadgen.Options{URL: gw + "/mcp", Concurrency: c, Tool: "echo__echo",
				Arguments: map[string]any{"text": "hello"}})
		})
	}
}

// BenchmarkReverseProxy is a reference point, not mcpgate: the echo server
// behind net/http/httputil.ReverseProxy (labelled side=gateway too). It is
// the cost of one net/http server hop plus one net/http client hop with no
// MCP work at all, i.e. roughly the floor for a gateway built on net/http.
func BenchmarkReverseProxy(b *testing.B) {
	echo := startEcho(b)
	target, err := url.Parse(echo.URL)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	var srv *httptest.Server
	withSide("gateway", func() { srv = httptest.NewServer(rp) })
	b.Cleanup(srv.Close)
	for _, c := range concurrencies {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			run(b, loadgen.Options{URL: srv.URL + "/mcp", Concurrency: c})
		})
	}
}

// startFullGateway is startGateway with the serve stack: a SQLite store
// holding one key, the authenticator, metrics and the audit writer.
func startFullGateway(b *testing.B) (url, key string) {
	b.Helper()
	st, err := sqlite.Open(context.Background(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	key = "bench-key-0123456789abcdef"
	if _, err := st.CreateKey(context.Background(), store.Key{Alias: "bench", KeyHash: store.HashKey(key), Source: store.SourceAPI}); err != nil {
		b.Fatal(err)
	}
	auth := callers.New(callers.Options{Keys: st})
	m := metrics.New()
	aw := audit.NewWriter(st, audit.Options{OnDepth: m.SetAuditQueueDepth, OnDrop: m.AuditDropped})
	b.Cleanup(func() {
		aw.Close(context.Background())
		auth.Close()
		st.Close()
	})
	return startGatewayWith(b, gateway.Options{Authenticator: auth, Metrics: m, MetricsOnMain: true, Audit: aw}, http.Header{"X-Mcpgate-Api-Key": {key}}), key
}

// startGateway starts an echo server (on an httptest server) and an
// mcpgate in front of it (on mcpgate serve's listener, h1server), and
// returns the gateway's base URL.
func startGateway(b *testing.B) string {
	return startGatewayWith(b, gateway.Options{}, nil)
}

func startGatewayWith(b *testing.B, o gateway.Options, hdr http.Header) string {
	b.Helper()
	echo := startEcho(b)
	cfg := &config.Config{
		Listen:            "127.0.0.1:0",
		ToolNameSeparator: "__",
		Servers: map[string]*config.Server{
			"echo": {
				Name:            "echo",
				Transport:       config.TransportHTTP,
				URL:             echo.URL + "/mcp",
				Timeout:         30 * time.Second,
				ProtocolVersion: config.ProtocolVersionAuto,
			},
		},
	}
	o.Config, o.Version = cfg, "bench"
	g := gateway.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	// The listener mcpgate serve runs: h1server in front of net/http.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := h1server.New(&http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second})
	withSide("gateway", func() {
		g.Start(ctx)
		go hs.Serve(ln)
	})
	base := "http://" + ln.Addr().String()
	b.Cleanup(func() {
		hs.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = g.Close(cctx)
		cancel()
	})
	// Warm the upstream session and the catalog, so the first measured
	// calls do not pay for them.
	withSide("loadgen", func() {
		_, err = loadgen.Run(context.Background(), loadgen.Options{URL: base + "/mcp/echo", Calls: 10, Header: hdr})
	})
	if err != nil {
		b.Fatal(err)
	}
	return base
}

// startEcho starts the echo server (labelled side=echo).
func startEcho(b *testing.B) *httptest.Server {
	var echo *httptest.Server
	withSide("echo", func() { echo = httptest.NewServer(echoserver.Handler()) })
	b.Cleanup(echo.Close)
	return echo
}

// withSide runs f with the pprof label side=name; goroutines f starts
// inherit it.
func withSide(name string, f func()) {
	pprof.Do(context.Background(), pprof.Labels("side", name), func(context.Context) { f() })
}

// run makes b.N measured tools/call with opts and reports calls/s, ns/call,
// latency percentiles and the process's CPU time per call; it returns
// ns/call.
func run(b *testing.B, opts loadgen.Options) float64 {
	b.Helper()
	opts.Calls = int64(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	var (
		res loadgen.Result
		err error
	)
	withSide("loadgen", func() { res, err = loadgen.Run(context.Background(), opts) })
	cpu := processCPU() - cpu0
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if res.Errors != 0 {
		b.Fatalf("%d errors, e.g. %q", res.Errors, res.ErrorSamples)
	}
	b.ReportMetric(res.CallsPerSec, "calls/s")
	var ns float64
	if res.Calls > 0 {
		ns = float64(res.Elapsed.Nanoseconds()) / float64(res.Calls)
		b.ReportMetric(ns, "ns/call")
		if cpu > 0 {
			b.ReportMetric(float64(cpu.Microseconds())/float64(res.Calls), "cpu-µs/call")
		}
	}
	b.ReportMetric(float64(res.P50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(res.P99.Microseconds()), "p99-µs")
	return ns
}
