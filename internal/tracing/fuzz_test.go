package tracing_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/tracing"
)

// FuzzMeta: the _meta reader and rewriter take any params without
// panicking, a link is always valid, and the rewritten params of an object
// are valid JSON whose _meta names the gateway's trace and no baggage.
func FuzzMeta(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","baggage":"a=1"}}`,
		`{"_meta":null}`, `{"_meta":{"traceparent":1}}`, `[1,2]`, `{"_meta":{"tracestate":"` + "\u00e9" + `"}}`, `{"a":"traceparent"}`} {
		f.Add([]byte(s))
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	f.Fuzz(func(t *testing.T, params []byte) {
		if l, ok := tracing.MetaLink(params); ok && !l.SpanContext.IsValid() {
			t.Fatal("an invalid link")
		}
		_ = tracing.OutgoingParams(context.Background(), params)
		out := tracing.OutgoingParams(traced, params)
		var obj map[string]json.RawMessage
		if json.Unmarshal(params, &obj) != nil {
			// Not an object, nor null (which decodes into a nil map and,
			// like no params at all, gets params of its own).
			return
		}
		var got struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("rewritten params are not JSON: %v\n%s", err, out)
		}
		for k := range got.Meta {
			// A decoder that matches names case-insensitively reads any
			// spelling of these as the member itself.
			if strings.EqualFold(k, "baggage") || (strings.EqualFold(k, "traceparent") || strings.EqualFold(k, "tracestate")) && k != "traceparent" && k != "tracestate" {
				t.Fatalf("%s kept: %s", k, out)
			}
		}
		var top map[string]json.RawMessage
		_ = json.Unmarshal(out, &top)
		for k := range top {
			if strings.EqualFold(k, "_meta") && k != "_meta" {
				t.Fatalf("another spelling of _meta kept (%s): %s", k, out)
			}
		}
		if string(got.Meta["traceparent"]) != `"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"` {
			t.Fatalf("traceparent %s in %s", got.Meta["traceparent"], out)
		}
	})
}
