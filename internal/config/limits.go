package config

import (
	"cmp"
	"time"
)

// Defaults of the limits section (SPEC S23) and of sessions.unknown_id
// (SPEC S8.3).
const (
	DefaultMaxBatch              = 50
	DefaultMaxInflightPerSession = 32
	DefaultMaxUpstreamMessage    = 16 << 20
	DefaultMaxStreams            = 10000
	DefaultReadHeaderTimeout     = 10 * time.Second
	DefaultListenerIdleTimeout   = 120 * time.Second
	DefaultSSEWriteTimeout       = 10 * time.Second
	DefaultMaxBoundPerServer     = 128
)

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

// unknownIDModes are the accepted sessions.unknown_id values, in the order
// error messages name them.
var unknownIDModes = []string{UnknownIDReject, UnknownIDServe}

// Limits keep one caller from hurting the rest (SPEC S23). A zero field
// means its Default constant.
type Limits struct {
	// MaxBatch caps the requests of one JSON-RPC batch (2025-03-26 and
	// older): a batch fans out into upstream calls.
	MaxBatch int
	// MaxInflightPerSession caps the requests of one stateful session
	// served at once (SPEC S11); more wait for a slot, they are not
	// refused.
	MaxInflightPerSession int
	// MaxUpstreamMessage caps one message read from an upstream, on
	// every transport.
	MaxUpstreamMessage int64
	// MaxStreams caps the open long-lived downstream streams (GET
	// streams, legacy SSE streams, subscriptions/listen) of the process.
	MaxStreams int
	// ReadHeaderTimeout bounds reading a request's headers on the
	// listener (a client that trickles them in is dropped).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle for this long.
	IdleTimeout time.Duration
	// SSEWriteTimeout bounds writing one SSE event to a client: one that
	// stops reading loses its stream, not the gateway's memory.
	SSEWriteTimeout time.Duration
	// MaxBoundPerServer caps the upstream sessions of one server that
	// are bound to one client each (a client that declared roots gets its
	// own, DESIGN decision 4; for stdio each is a process): past it the
	// least recently used is closed.
	MaxBoundPerServer int
}

// DefaultLimits are the limits of a config file that sets none.
func DefaultLimits() Limits {
	return Limits{
		MaxBatch:              DefaultMaxBatch,
		MaxInflightPerSession: DefaultMaxInflightPerSession,
		MaxUpstreamMessage:    DefaultMaxUpstreamMessage,
		MaxStreams:            DefaultMaxStreams,
		ReadHeaderTimeout:     DefaultReadHeaderTimeout,
		IdleTimeout:           DefaultListenerIdleTimeout,
		SSEWriteTimeout:       DefaultSSEWriteTimeout,
		MaxBoundPerServer:     DefaultMaxBoundPerServer,
	}
}

// OrDefaults returns l with every zero field set to its default, for
// consumers of a Config built in code.
func (l Limits) OrDefaults() Limits {
	d := DefaultLimits()
	return Limits{
		MaxBatch:              cmp.Or(l.MaxBatch, d.MaxBatch),
		MaxInflightPerSession: cmp.Or(l.MaxInflightPerSession, d.MaxInflightPerSession),
		MaxUpstreamMessage:    cmp.Or(l.MaxUpstreamMessage, d.MaxUpstreamMessage),
		MaxStreams:            cmp.Or(l.MaxStreams, d.MaxStreams),
		ReadHeaderTimeout:     cmp.Or(l.ReadHeaderTimeout, d.ReadHeaderTimeout),
		IdleTimeout:           cmp.Or(l.IdleTimeout, d.IdleTimeout),
		SSEWriteTimeout:       cmp.Or(l.SSEWriteTimeout, d.SSEWriteTimeout),
		MaxBoundPerServer:     cmp.Or(l.MaxBoundPerServer, d.MaxBoundPerServer),
	}
}

func (l Limits) validate(errs *errorList, strict bool) {
	positive := func(path string, v int64) {
		if v < 0 || (v == 0 && strict) {
			errs.add(path, 0, "must be >= 1")
		}
	}
	positive("limits.max_batch", int64(l.MaxBatch))
	positive("limits.max_inflight_per_session", int64(l.MaxInflightPerSession))
	positive("limits.max_upstream_message", l.MaxUpstreamMessage)
	positive("limits.max_streams", int64(l.MaxStreams))
	positive("limits.max_bound_sessions_per_server", int64(l.MaxBoundPerServer))
	for _, d := range []struct {
		path string
		v    time.Duration
	}{
		{"limits.read_header_timeout", l.ReadHeaderTimeout},
		{"limits.idle_timeout", l.IdleTimeout},
		{"limits.sse_write_timeout", l.SSEWriteTimeout},
	} {
		if d.v < 0 || (d.v == 0 && strict) {
			errs.add(d.path, 0, "must be > 0")
		}
	}
}
