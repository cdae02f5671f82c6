package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

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
		if len(params) == 0 || !mayHoldBaggage(params) {
			return params
		}
		return withMeta(params, nil)
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return withMeta(params, c)
}

// mayHoldBaggage reports whether params could carry a baggage member in
// any spelling a decoder reads as one: "baggage" in any letter case, or
// any escaped key (\u0062aggage). Cheap, and false for most params.
func mayHoldBaggage(params []byte) bool {
	if bytes.IndexByte(params, '\\') >= 0 {
		return true
	}
	for i := 0; i+len(metaBaggage) <= len(params); i++ {
		if params[i]|0x20 == 'b' && bytes.EqualFold(params[i:i+len(metaBaggage)], []byte(metaBaggage)) {
			return true
		}
	}
	return false
}

// deleteFolded removes every top-level member of obj whose decoded name
// equals key ignoring case, except key itself when keepExact: many
// decoders (encoding/json into a struct, among them) match member names
// case-insensitively, so "_metA" or "Baggage" reach an upstream as
// "_meta" or "baggage" do.
func deleteFolded(obj []byte, key string, keepExact bool) ([]byte, error) {
	var names []string
	if err := jsonrpc.Fields(obj, func(k string, _ []byte) bool {
		if strings.EqualFold(k, key) && !(keepExact && k == key) {
			names = append(names, k)
		}
		return true
	}); err != nil {
		return nil, err
	}
	var err error
	for _, k := range names {
		if obj, err = jsonrpc.Delete(obj, k); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

// withMeta rewrites params._meta: baggage removed, then the trace context
// of c set (c nil: the client's traceparent is left as it was). params
// that are not an object are returned as they are.
func withMeta(params json.RawMessage, c propagation.MapCarrier) json.RawMessage {
	// No params, or null (which some clients send for none): the trace
	// context goes in params of its own.
	if t := bytes.TrimSpace(params); len(t) == 0 || string(t) == "null" {
		if c == nil {
			return params
		}
		params = json.RawMessage("{}")
	}
	if params[0] != '{' && bytes.TrimSpace(params)[0] != '{' {
		return params
	}
	// Only one _meta, spelled exactly: another spelling would carry what
	// the client put there past the rules below.
	orig := params
	params, err := deleteFolded(params, metaKey, true)
	if err != nil {
		return orig
	}
	meta, ok := jsonrpc.Get(params, metaKey)
	if !ok || len(meta) == 0 || meta[0] != '{' {
		if c == nil {
			return params
		}
		meta = []byte("{}")
	}
	out, err := deleteFolded([]byte(meta), metaBaggage, false)
	if err != nil {
		return params
	}
	if c != nil {
		// The gateway's context replaces the client's, in every spelling.
		for _, k := range []string{metaTraceparent, metaTracestate} {
			if out, err = deleteFolded(out, k, false); err != nil {
				return params
			}
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
