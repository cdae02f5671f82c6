package bench_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/mcpgate/mcpgate/bench/loadgen"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/tracing/tracetest"
)

// BenchmarkTracing: what tracing costs per call (issue 15). direct is the
// echo server alone; off is the gateway as it runs by default (no
// provider built); on is the gateway tracing every call (sample_ratio 1)
// into an OTLP/HTTP receiver in this process (batched export, spans
// decoded by the receiver: its CPU is counted too). x-direct is ns/call
// over the direct run's just before it.
//
//	go test ./bench -run '^$' -bench BenchmarkTracing -benchtime 20000x -count 3
func BenchmarkTracing(b *testing.B) {
	echo := startEcho(b)
	off := startGatewayWith(b, gateway.Options{}, nil)
	rcv := tracetest.NewHTTP(b)
	one := 1.0
	p, err := tracing.New(context.Background(), &config.Tracing{Endpoint: rcv.Endpoint, SampleRatio: &one},
		tracing.Options{Version: "bench", LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	on := startGatewayWith(b, gateway.Options{Tracer: p}, nil)
	for _, c := range []int{1, 8} {
		var direct float64
		for _, mode := range []struct{ name, url string }{{"direct", echo.URL + "/mcp"}, {"off", off + "/mcp/echo"}, {"on", on + "/mcp/echo"}} {
			b.Run(fmt.Sprintf("%s/c=%d", mode.name, c), func(b *testing.B) {
				ns := run(b, loadgen.Options{URL: mode.url, Concurrency: c})
				if mode.name == "direct" {
					direct = ns
				} else if direct > 0 {
					b.ReportMetric(ns/direct, "x-direct")
				}
			})
		}
	}
	if rcv.Count() == 0 {
		_ = p.ForceFlush(context.Background())
		if rcv.Count() == 0 {
			b.Fatal("tracing on exported no span")
		}
	}
}
