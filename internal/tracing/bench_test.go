package tracing_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/mcpgate/mcpgate/internal/tracing"
)

type depthKey int

// BenchmarkOffHooks is every tracing hook one tools/call passes through
// with tracing off (the default), on a context as deep as a gateway
// request's: what "off" adds to a call, to set against the call's
// BenchmarkGateway ns/op.
func BenchmarkOffHooks(b *testing.B) {
	ctx := context.Background()
	for i := range 16 {
		ctx = context.WithValue(ctx, depthKey(i), i)
	}
	params := json.RawMessage(`{"name":"echo","arguments":{"text":"hello"},"_meta":{"progressToken":"p"}}`)
	var p *tracing.Provider
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		if p != nil { // ServeHTTP and serve: one nil check each
			b.Fatal("on")
		}
		tracing.NoteServer(ctx, "echo")
		_ = tracing.MessageSpan(ctx)
		c, sp := tracing.StartClient(ctx, "echo", "tools/call", params, "tcp")
		params2 := tracing.OutgoingParams(c, params)
		tracing.InjectHeader(c, h)
		tracing.End(sp, nil, "")
		_ = params2
	}
}
