// Package upstream is the gateway's egress MCP client: it connects to one
// upstream MCP server over stdio, legacy HTTP+SSE or streamable HTTP,
// performs the handshake, sends requests and notifications, and hands
// everything the server sends on its own (notifications, server-initiated
// requests) to a Handler together with the origin of the call it relates to.
//
// Flow: Manager.Session(server) -> Connect (transport + initialize) ->
// Session.Call / Notify; inbound traffic -> Handler. The package does not
// know downstream sessions, names or policy: it never rewrites payloads
// except the JSON-RPC id of its own requests.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Session is one live MCP session with an upstream server. Safe for
// concurrent use: many calls may be in flight at once.
type Session interface {
	// Call sends a request and waits for its response. On a JSON-RPC error
	// reply it returns a *jsonrpc.Error (use errors.As). When ctx ends before
	// the reply, notifications/cancelled is sent upstream and ctx.Err() is
	// returned wrapped. The per-request read timeout of the server applies
	// and yields an *Error of kind KindTimeout.
	Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
	// Notify sends a notification.
	Notify(ctx context.Context, method string, params json.RawMessage) error
	// Info is what the upstream said in its initialize result.
	Info() *InitInfo
	// Done is closed when the session can no longer be used (process
	// exited, stream lost, closed); Err then says why.
	Done() <-chan struct{}
	Err() error
	// Close ends the session (DELETE for streamable HTTP, stops a stdio
	// process). Safe to call more than once.
	Close() error
}

// InitInfo is the upstream's initialize result, kept per session (C5.3).
type InitInfo struct {
	ProtocolVersion string
	Capabilities    json.RawMessage
	Caps            mcpwire.ServerCaps
	ServerInfo      json.RawMessage
	Instructions    string // trimmed
	HasInstructions bool
	Result          json.RawMessage // the whole result, raw
}

// Handler receives upstream -> client traffic that is not a reply.
// origin is the value attached with WithOrigin to the context of the
// outgoing call the message relates to: exact for messages carried on a
// streamable-HTTP POST response stream, and for progress notifications whose
// progressToken is that of a call in flight; otherwise (stdio, SSE and the
// standalone GET stream) it is the origin of the most recent in-flight call
// when all in-flight calls with an origin belong to one party (the same
// OriginKey); when nothing is in flight, the session's DefaultOrigin
// (nil unless it is bound to one party: a server-wide message), and for
// a bound session's requests always its DefaultOrigin; and
// Ambiguous when several parties' calls are: a message is never guessed
// onto another caller.
//
// Methods may be called concurrently. HandleNotification runs on the
// session's read loop, in the order messages arrive (a call's progress is
// delivered before its result is returned): it must not block for long,
// and must not wait for a reply from the same session. HandleRequest runs
// in its own goroutine; its ctx ends when the upstream cancels the request
// (notifications/cancelled is consumed by the package, not passed on) or
// the session ends, and then no response is sent.
type Handler interface {
	HandleNotification(ctx context.Context, server string, origin any, msg *jsonrpc.Message)
	// HandleRequest answers a server-initiated request (sampling,
	// elicitation, roots/list; ping is answered by the package itself).
	HandleRequest(ctx context.Context, server string, origin any, msg *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error)
}

// CallValues is what a caller tells the package about one call: one
// context value (WithCallValues) instead of one per field, since every
// tools/call sets them all.
type CallValues struct {
	// Origin is the party the call is made for (WithOrigin).
	Origin any
	// ClientCapabilities are those a stateless upstream may rely on
	// (WithClientCapabilities).
	ClientCapabilities json.RawMessage
	// LogLevel is the least severe log level asked for, "" for none
	// (WithLogLevel).
	LogLevel string
}

type callValuesKey struct{}

// WithCallValues attaches v to ctx; v must not change afterwards (the
// package reads it from other goroutines). A field left empty is not
// inherited from ctx: start from CallValuesFrom(ctx) to keep them.
func WithCallValues(ctx context.Context, v *CallValues) context.Context {
	return context.WithValue(ctx, callValuesKey{}, v)
}

// CallContext is Context with Values attached, as WithCallValues(Context,
// &Values) would make it, for a caller that keeps it in a struct it
// allocates anyway: WithCallValues is an allocation of its own on every
// call. Context is the parent: its deadline, cancellation and other
// values are the CallContext's. Neither field may change once the
// CallContext is in use (the package reads Values from other goroutines).
type CallContext struct {
	context.Context
	Values CallValues
}

var _ context.Context = (*CallContext)(nil)

// ValueParent implements cancelctx.ValueOnly: c only adds values.
func (c *CallContext) ValueParent() context.Context { return c.Context }

// Value implements context.Context.
func (c *CallContext) Value(key any) any {
	if key == (callValuesKey{}) {
		return &c.Values
	}
	return c.Context.Value(key)
}

// CallValuesFrom returns a copy of the values attached to ctx (zero if
// none).
func CallValuesFrom(ctx context.Context) CallValues {
	if v := callValuesOf(ctx); v != nil {
		return *v
	}
	return CallValues{}
}

func callValuesOf(ctx context.Context) *CallValues {
	v, _ := ctx.Value(callValuesKey{}).(*CallValues)
	return v
}

// WithOrigin attaches an origin to the context of a call.
func WithOrigin(ctx context.Context, origin any) context.Context {
	v := CallValuesFrom(ctx)
	v.Origin = origin
	return WithCallValues(ctx, &v)
}

// OriginFrom returns the origin attached to ctx, or nil.
func OriginFrom(ctx context.Context) any {
	if v := callValuesOf(ctx); v != nil {
		return v.Origin
	}
	return nil
}

// Options configures a connection to one upstream server.
type Options struct {
	Server *config.Server
	// ClientName/ClientVersion go into clientInfo of initialize.
	ClientName, ClientVersion string
	// ClientCapabilities is the capabilities object to advertise (C5.2);
	// nil means {}.
	ClientCapabilities json.RawMessage
	Handler            Handler      // nil: notifications dropped, requests refused
	Logger             *slog.Logger // nil: discard
	// HTTPClient is used for sse and http servers. nil: a client shared by
	// all sessions (pooled connections, no overall timeout: requests are
	// bounded by their contexts). A client without CheckRedirect gets the
	// same-origin redirect rule (C4).
	HTTPClient *http.Client
	// MaxMessageBytes bounds one inbound message, on every transport
	// (0: DefaultMaxMessageBytes; config limits.max_upstream_message, S23).
	MaxMessageBytes int
	// CallerToken is the caller's own upstream token, sent by a server
	// with auth type passthrough ("" for none).
	CallerToken string
	// DefaultOrigin is the origin given to the Handler for server messages
	// that arrive while no call with an origin is in flight: the one party
	// a session bound to it serves (see WithBinding). nil: such messages
	// are server-wide (origin nil).
	DefaultOrigin any
	// ProbeStateless lets protocol_version auto try server/discover (the
	// 2026-07-28 revision) before the handshake, on streamable HTTP. The
	// Manager sets it until it has learned the server's era, so the probe
	// costs one round trip per server, not one per connect.
	ProbeStateless bool

	// tokens mints the oauth2 tokens of the server; the Manager shares
	// one per server across sessions. nil: Connect makes one.
	tokens *tokenSource
	// exchanger exchanges CallerToken (oauth2_token_exchange,
	// enterprise_managed); the Manager shares one per server. nil:
	// Connect makes one.
	exchanger *exchanger
	// sigv4 signs the requests of an aws_sigv4 server; the Manager shares
	// one per server. nil: Connect makes one.
	sigv4 *sigV4
	// barrenRun counts the sessions of the server in a row that expired
	// without serving a request (the Manager's: conn.judgeExpiry).
	barrenRun *atomic.Int32
}

// Kind classifies failures (C6.6).
type Kind string

const (
	KindTimeout         Kind = "timeout"
	KindUnreachable     Kind = "unreachable"
	KindAuth            Kind = "auth"
	KindRateLimited     Kind = "rate_limited"
	KindUpstreamError   Kind = "upstream_error"
	KindInvalidResponse Kind = "invalid_response"
	KindClosed          Kind = "closed"
	KindProtocolVersion Kind = "protocol_version"
	KindInternal        Kind = "internal"
)

// Error is a failure talking to an upstream. Messages never contain
// credentials, body text, cursors or tool arguments.
type Error struct {
	Server string
	Kind   Kind
	Status int // HTTP status when one was received
	// Challenge is the WWW-Authenticate of a 401 or 403 answer (bounded,
	// control characters dropped): what a step-up (the MCP spec's
	// insufficient_scope) or a reconnect needs to know. Never a secret:
	// a server's challenge names scopes and metadata URLs.
	Challenge string
	Err       error
}

// Timeout reports whether the failure is a read timeout (net.Error style).
func (e *Error) Timeout() bool { return e.Kind == KindTimeout }

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("upstream %s: %s", e.Server, e.Kind)
	}
	return fmt.Sprintf("upstream %s: %v", e.Server, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the fault kind of err (KindInternal when unknown).
func KindOf(err error) Kind {
	var ue *Error
	if errors.As(err, &ue) {
		return ue.Kind
	}
	var re *jsonrpc.Error
	if errors.As(err, &re) {
		return KindUpstreamError
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return KindTimeout
	}
	return KindInternal
}

// Fault classes at the edge (C6.6): the upstream's share of the one list
// in internal/store, which the audit record and the tool-call metric use.
const (
	FaultTimeout         = store.FaultTimeout
	FaultUnreachable     = store.FaultUnreachable
	FaultAuth            = store.FaultAuth
	FaultRateLimited     = store.FaultRateLimited
	FaultUpstreamError   = store.FaultUpstreamError
	FaultInvalidResponse = store.FaultInvalidResponse
	FaultInternal        = store.FaultInternal
	// FaultCancelled is not a failure of the upstream: the caller gave up.
	FaultCancelled = store.FaultCancelled
)

// Fault is how a failure is presented at the edge: its class, the HTTP
// status that class carries, and whether the upstream's own JSON-RPC error
// is relayed as it is.
type Fault struct {
	Class  string
	Status int
	// RPC is the upstream's JSON-RPC error to relay, when it sent one.
	RPC *jsonrpc.Error
}

// Classify maps any failure of an upstream operation to its fault class
// (C6.6). It is the one place that does: the gateway's JSON-RPC errors,
// logs and metrics all read it.
//
//	timeout          504  read timeout, or a deadline of ours
//	unreachable      502  connect/TLS/DNS failure, closed connection, lost session
//	auth             401/403 as the upstream sent it (or the token endpoint)
//	rate_limited     429
//	upstream_error   502, or the upstream's JSON-RPC error relayed (code 408 included)
//	invalid_response 502  not MCP: content type, JSON, schema, protocol version
//	internal         500  a bug or misconfiguration of the gateway
func Classify(err error) Fault {
	var rpc *jsonrpc.Error
	var ue *Error
	switch {
	case err == nil:
		return Fault{}
	case errors.As(err, &ue):
		switch ue.Kind {
		case KindTimeout:
			return Fault{Class: FaultTimeout, Status: http.StatusGatewayTimeout}
		case KindUnreachable, KindClosed:
			return Fault{Class: FaultUnreachable, Status: http.StatusBadGateway}
		case KindAuth:
			st := ue.Status
			if st != http.StatusUnauthorized && st != http.StatusForbidden {
				st = http.StatusUnauthorized
			}
			return Fault{Class: FaultAuth, Status: st}
		case KindRateLimited:
			return Fault{Class: FaultRateLimited, Status: http.StatusTooManyRequests}
		case KindInvalidResponse, KindProtocolVersion:
			return Fault{Class: FaultInvalidResponse, Status: http.StatusBadGateway}
		case KindUpstreamError:
			f := Fault{Class: FaultUpstreamError, Status: http.StatusBadGateway}
			if errors.As(err, &rpc) {
				f.RPC = rpc
			}
			if ue.Status == http.StatusServiceUnavailable {
				f.Status = http.StatusServiceUnavailable
			}
			return f
		}
		return Fault{Class: FaultInternal, Status: http.StatusInternalServerError}
	case errors.As(err, &rpc):
		// The upstream answered with an error of its own, whatever its
		// code (408 included): relayed, never a gateway timeout.
		return Fault{Class: FaultUpstreamError, Status: http.StatusBadGateway, RPC: rpc}
	case errors.Is(err, context.Canceled):
		return Fault{Class: FaultCancelled, Status: 499}
	case errors.Is(err, context.DeadlineExceeded):
		return Fault{Class: FaultTimeout, Status: http.StatusGatewayTimeout}
	}
	return Fault{Class: FaultInternal, Status: http.StatusInternalServerError}
}

// MessageTooLargeError is in the chain of the error of a call whose
// upstream message exceeded the limit (Options.MaxMessageBytes, S23); the
// *Error around it is of kind KindInvalidResponse. The message was not
// buffered whole: what was read of it is discarded.
type MessageTooLargeError struct {
	Limit int // bytes
}

func (e *MessageTooLargeError) Error() string {
	return "upstream message exceeds the " + formatSize(e.Limit) + " limit (limits.max_upstream_message)"
}

// formatSize writes n in the largest binary unit that divides it, as an
// operator would configure it ("16 MiB", "1500 bytes").
func formatSize(n int) string {
	switch {
	case n > 0 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n > 0 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " bytes"
}

// ErrClosed is returned by calls on a session that has ended.
var ErrClosed = errors.New("connection was closed")

// ErrRetired refuses a request on a session whose server was removed or
// replaced while it served (Manager.RemoveServer, AddServer): the request
// was not sent. Manager.Call sends it again on the server's new session.
var ErrRetired = errors.New("upstream session retired: its server was removed or replaced")

// ErrSessionExpired is in the chain of the error returned when a
// streamable-HTTP upstream answers 404 to a request carrying its session id
// (C6.4), or 400 with words saying it does not know the session (the
// TypeScript SDK's examples, older Python SDK servers). The session is then Done (calls sent on it before still get their
// own answers), and the Manager initializes a new one on the next call;
// Manager.Call and the Call of an Acquired session send the request again
// on it. The same error also carries the relayed *jsonrpc.Error (the
// upstream's, or INVALID_REQUEST "Session terminated").
var ErrSessionExpired = errors.New("session expired")

const (
	// DefaultTimeout is the per-request read timeout when the config has none.
	DefaultTimeout = 60 * time.Second
	// DefaultMaxMessageBytes bounds one inbound message when
	// Options.MaxMessageBytes is 0 (S23).
	DefaultMaxMessageBytes = 16 << 20
	// CloseTimeout bounds the cleanup of a session (the DELETE of a
	// streamable-HTTP session, C9.1): a hung upstream cannot hold Close
	// longer than this.
	CloseTimeout = 5 * time.Second
	// KillGrace is how long a stdio server has to exit after SIGTERM before
	// its process group is killed.
	KillGrace = 2 * time.Second
)
