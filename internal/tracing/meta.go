package tracing

import (
	"bytes"
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// The trace context an MCP message may carry in params._meta (the MCP
// semantic conventions' context propagation): traceparent and tracestate,
// and baggage, which the gateway never honours.
const (
	metaKey         = "_meta"
	metaTraceparent = "traceparent"
	metaTracestate  = "tracestate"
	metaBaggage     = "baggage"
)

// MetaLink reads params._meta.traceparent (and tracestate) as a link to
// the client's trace: the client's context is related to the message's
// span, never its parent, so a client cannot place the gateway's spans
// inside a trace of its choosing. false when there is no valid one.
func MetaLink(params json.RawMessage) (trace.Link, bool) {
	if len(params) == 0 || !bytes.Contains(params, []byte(metaTraceparent)) {
		return trace.Link{}, false
	}
	meta, ok := jsonrpc.Get(params, metaKey)
	if !ok || len(meta) == 0 || meta[0] != '{' {
		return trace.Link{}, false
	}
	tp, ok := jsonrpc.GetString(meta, metaTraceparent)
	if !ok {
		return trace.Link{}, false
	}
	c := propagation.MapCarrier{metaTraceparent: tp}
	if ts, ok := jsonrpc.GetString(meta, metaTracestate); ok {
		c[metaTracestate] = ts
	}
	sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), c))
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String(KeyLinkSource, "params._meta")}}, true
}

// OutgoingParams is params as sent upstream: the client's baggage is
// taken out of _meta, and when ctx carries the gateway's trace context
// it replaces any traceparent and tracestate there, so an instrumented
// server continues the gateway's trace. Untouched (and not copied) when
// there is nothing to do.
func OutgoingParams(ctx context.Context, params json.RawMessage) json.RawMessage {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		if len(params) == 0 || !bytes.Contains(params, []byte(metaBaggage)) {
			return params
		}
		return withMeta(params, nil)
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return withMeta(params, c)
}

// withMeta rewrites params._meta: baggage removed, then the trace context
// of c set (c nil: the client's traceparent is left as it was). params
// that are not an object are returned as they are.
func withMeta(params json.RawMessage, c propagation.MapCarrier) json.RawMessage {
	if len(bytes.TrimSpace(params)) == 0 {
		if c == nil {
			return params
		}
		params = json.RawMessage("{}")
	}
	if params[0] != '{' && bytes.TrimSpace(params)[0] != '{' {
		return params
	}
	meta, ok := jsonrpc.Get(params, metaKey)
	if !ok || len(meta) == 0 || meta[0] != '{' {
		if c == nil {
			return params
		}
		meta = []byte("{}")
	}
	out := []byte(meta)
	var err error
	if _, has := jsonrpc.Get(out, metaBaggage); has {
		if out, err = jsonrpc.Delete(out, metaBaggage); err != nil {
			return params
		}
	}
	if c != nil {
		if out, err = jsonrpc.Delete(out, metaTracestate); err != nil {
			return params
		}
		for _, k := range []string{metaTraceparent, metaTracestate} {
			if v, ok := c[k]; ok && v != "" {
				if out, err = jsonrpc.Set(out, k, jsonrpc.String(v)); err != nil {
					return params
				}
			}
		}
	}
	res, err := jsonrpc.Set(params, metaKey, out)
	if err != nil {
		return params
	}
	return res
}
