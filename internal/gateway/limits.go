package gateway

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
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
		e := rpcRefusal(http.StatusServiceUnavailable, jsonrpc.NewError(codeOverLimit,
			"Service Unavailable: too many open streams (limits.max_streams %d); try again later", l.MaxStreams))
		e.id = id
		e.withHeader("Retry-After", "5").write(w)
		return nil, nil
	}
	return newStreamSender(legacy, l.SSEWriteTimeout), func() { g.streams.Add(-1) }
}

// OpenStreams is the number of long-lived downstream streams open now.
func (g *Gateway) OpenStreams() int { return int(g.streams.Load()) }

// Per-call limits (issue 22 hole 14): a key's rate limit and budget count
// the requests and calls a caller makes, not the HTTP requests that carry
// them. Authenticate takes one request of the rate limit per HTTP request;
// that pays for the first JSON-RPC request the HTTP request carries (its
// callTicket), and every further one (the rest of a batch) takes its own.
// Requests no HTTP request of the caller carried (the stdio front, an
// operator's call as a key) take one each. Budgets are reserved per
// tools/call in its budget stage (pipeline.go).

// callLimiter takes one request from a caller's rate limit;
// *callers.Authenticator implements it. ctx of a request another replica
// forwarded (callers.WithRateCounted) takes nothing.
type callLimiter interface {
	AllowCall(ctx context.Context, c *callers.Caller) (bool, time.Duration)
}

var _ callLimiter = (*callers.Authenticator)(nil)

// callTicket is the one JSON-RPC request an authenticated HTTP request
// paid for with its share of the caller's rate limit.
type callTicket struct{ used atomic.Bool }

type callTicketKey struct{}

// withCallTicket marks ctx as that of an HTTP request whose rate limit
// Authenticate took.
func withCallTicket(ctx context.Context) context.Context {
	return context.WithValue(ctx, callTicketKey{}, &callTicket{})
}

// takeCallTicket reports whether ctx's HTTP request still had its paid
// request, and uses it.
func takeCallTicket(ctx context.Context) bool {
	t, _ := ctx.Value(callTicketKey{}).(*callTicket)
	return t != nil && t.used.CompareAndSwap(false, true)
}

// admitRequest takes request m's share of its caller's rate limit, before
// it runs: nil, or the JSON-RPC error of the refusal (429 semantics: the
// same code and message as the HTTP 429).
func (g *Gateway) admitRequest(ctx context.Context, sc *scope) *jsonrpc.Error {
	c := callers.FromContext(ctx)
	if c == nil || c.RateLimitRPM <= 0 || takeCallTicket(ctx) {
		return nil
	}
	cl, ok := g.auth.(callLimiter)
	if !ok {
		return nil
	}
	if ok, wait := cl.AllowCall(ctx, c); !ok {
		noteLimit(sc, http.StatusTooManyRequests, callers.RetryAfterSeconds(wait))
		return &jsonrpc.Error{Code: callers.CodeRateLimited, Message: callers.MessageRateLimited}
	}
	return nil
}

// limitReply is a limit's refusal of the one request a POST carries,
// answered with its HTTP status (and Retry-After) instead of a 200.
type limitReply struct {
	status     int
	retryAfter int64
}

// noteLimit records on the POST answering sc's request that a limit
// refused it; the other transports carry the JSON-RPC error alone.
func noteLimit(sc *scope, status int, retryAfter int64) {
	if sc == nil {
		return
	}
	out := sc.out
	if rs, ok := out.(*roundSender); ok {
		// A 2026-07-28 call runs as an exchange: the refusal goes to the
		// request whose round it is.
		rs.mu.Lock()
		out = rs.cur
		rs.mu.Unlock()
	}
	ps, ok := out.(*postSender)
	if !ok {
		return
	}
	ps.mu.Lock()
	ps.limited = &limitReply{status: status, retryAfter: max(retryAfter, 1)}
	ps.mu.Unlock()
}
