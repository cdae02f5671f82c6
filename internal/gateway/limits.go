package gateway

import (
	"net/http"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// Limits that keep one caller from hurting the rest (S23). The batch and
// per-session bounds live where batches are decoded and sessions serve;
// this file holds the process-wide ones.

// codeOverLimit is the JSON-RPC code of a refusal because a gateway-wide
// limit is reached (an implementation-defined server error, JSON-RPC
// 2.0 section 5.1).
const codeOverLimit = -32000

// openStream opens one more long-lived downstream stream (a GET stream, a
// legacy SSE stream, a subscriptions/listen stream), counted against
// limits.max_streams, with the per-event write deadline of
// limits.sse_write_timeout. Over the limit it answers 503 naming the
// limit (id: the request's, for a listen stream) and returns nil;
// otherwise done must be called when the stream ends. Each open stream
// holds a goroutine, buffers and often an upstream subscription, so their
// number is bounded like memory.
func (g *Gateway) openStream(w http.ResponseWriter, id jsonrpc.ID, legacy bool) (st *streamSender, done func()) {
	l := g.limits()
	if g.streams.Add(1) > int64(l.MaxStreams) {
		g.streams.Add(-1)
		w.Header().Set("Retry-After", "5")
		writeRPCErrorID(w, http.StatusServiceUnavailable, id, jsonrpc.NewError(codeOverLimit,
			"Service Unavailable: too many open streams (limits.max_streams %d); try again later", l.MaxStreams))
		return nil, nil
	}
	return newStreamSender(legacy, l.SSEWriteTimeout), func() { g.streams.Add(-1) }
}

// OpenStreams is the number of long-lived downstream streams open now.
func (g *Gateway) OpenStreams() int { return int(g.streams.Load()) }
