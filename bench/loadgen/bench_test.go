package loadgen

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/mcpgate/mcpgate/examples/echo/echoserver"
)

// BenchmarkEchoDirect measures tools/call against the echo server in-process
// (httptest, loopback), i.e. the 'direct' baseline with no gateway in
// between. ns/op is wall time per call across all workers; calls/s, p50 and
// p99 come from the load generator.
//
//	go test ./bench/loadgen -run '^$' -bench EchoDirect -benchtime 50000x
func BenchmarkEchoDirect(b *testing.B) {
	srv := httptest.NewServer(echoserver.Handler())
	defer srv.Close()
	for _, c := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			benchURL(b, Options{URL: srv.URL + "/mcp", Concurrency: c})
		})
	}
}

// benchURL runs b.N measured calls with opts and reports the load
// generator's statistics as benchmark metrics.
func benchURL(b *testing.B, opts Options) {
	opts.Calls = int64(b.N)
	b.ResetTimer()
	res, err := Run(context.Background(), opts)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if res.Errors != 0 {
		b.Fatalf("%d errors, e.g. %q", res.Errors, res.ErrorSamples)
	}
	b.ReportMetric(res.CallsPerSec, "calls/s")
	b.ReportMetric(float64(res.P50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(res.P99.Microseconds()), "p99-µs")
}
