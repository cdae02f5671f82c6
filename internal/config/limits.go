package config

import (
	"reflect"
	"time"
)

// The defaults of the limits section are its tags' (DefaultLimits).

// What the gateway does with a request naming a session id it does not
// know (SPEC S8.3).
const (
	// UnknownIDReject answers 404 so that the client re-initializes (the
	// MCP transport's rule).
	UnknownIDReject = "reject"
	// UnknownIDServe drops the header and serves the request as a new
	// stateless one (the reference gateway's lenient behaviour).
	UnknownIDServe = "serve"
)

// Limits keep one caller from hurting the rest (SPEC S23). A zero field
// means its Default constant.
type Limits struct {
	MaxBatch              int   `config:"max_batch,default=50,min=1" doc:"Requests in one JSON-RPC batch (2025-03-26 and older); a batch fans out into upstream calls. Above it: 400 with one JSON-RPC -32600 naming the limit, and nothing is called upstream."`
	MaxInflightPerSession int   `config:"max_inflight_per_session,default=32,min=1" doc:"Requests of one stateful session served at once (SPEC S11). More wait for a slot, they are not refused; other sessions are not slowed. Responses to server-initiated requests and notifications/cancelled never wait."`
	MaxUpstreamMessage    int64 `config:"max_upstream_message,default=16MiB,size,positive" doc:"One message read from an upstream, on every transport. Above it the call fails with an invalid_response fault (502) naming the size."`
	MaxStreams            int   `config:"max_streams,default=10000,min=1" doc:"Open long-lived downstream streams of the process (GET streams, legacy SSE streams, subscriptions/listen). Above it: 503 with Retry-After; calls are not streams and are still served."`
	// MaxBoundPerServer: a client that declared roots gets upstream
	// sessions of its own (DESIGN decision 4; for stdio each is a process).
	MaxBoundPerServer int           `config:"max_bound_sessions_per_server,default=128,min=1" doc:"Upstream sessions of one server bound to one client each (a client that declared roots gets its own; for stdio each is a process). Above it the least recently used is closed and its calls in flight fail; see docs/design/bound-sessions.md."`
	ReadHeaderTimeout time.Duration `config:"read_header_timeout,default=10s,positive" doc:"Time a client has to send a request's headers on mcpgate serve's listener; one that trickles them in is dropped."`
	IdleTimeout       time.Duration `config:"idle_timeout,default=120s,positive" doc:"A keep-alive connection idle this long is closed (mcpgate serve's listener)."`
	SSEWriteTimeout   time.Duration `config:"sse_write_timeout,default=10s,positive" doc:"Writing one SSE event to a client: one that stops reading loses its stream (its queue freed), not the gateway's memory; the session survives."`
	// StandardHTTPServer: the escape hatch from internal/h1server.
	StandardHTTPServer bool `config:"standard_http_server" doc:"Serve every request of mcpgate serve's listener with Go's net/http server. By default plain HTTP/1.1 GET and POST requests are served by mcpgate's own connection loop (fewer allocations and goroutine hand-offs per call) and everything else by net/http; set this to rule out the former when diagnosing a client."`
}

// DefaultLimits are the limits of a config file that sets none: the
// defaults of the limits' tags.
func DefaultLimits() Limits { return Limits{}.OrDefaults() }

// OrDefaults returns l with every zero field set to its default, for
// consumers of a Config built in code.
func (l Limits) OrDefaults() Limits {
	fillZero(typeOf(reflect.TypeFor[Limits]()), reflect.ValueOf(&l).Elem())
	return l
}
