package tracing

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// Attribute keys: the OpenTelemetry HTTP and MCP semantic conventions
// where they have one, mcpgate.* for the gateway's own.
const (
	KeyHTTPMethod    = "http.request.method"
	KeyHTTPStatus    = "http.response.status_code"
	KeyHTTPRoute     = "http.route"
	KeyURLPath       = "url.path"
	KeyURLScheme     = "url.scheme"
	KeyUserAgent     = "user_agent.original"
	KeyServerAddress = "server.address"
	KeyErrorType     = "error.type"

	KeyMCPMethod      = "mcp.method.name"
	KeyMCPSession     = "mcp.session.id" // a hash, never the id
	KeyMCPProtocol    = "mcp.protocol.version"
	KeyRequestID      = "jsonrpc.request.id"
	KeyRPCStatus      = "rpc.response.status_code"
	KeyToolName       = "gen_ai.tool.name"
	KeyPromptName     = "gen_ai.prompt.name"
	KeyOperation      = "gen_ai.operation.name"
	KeyNetTransport   = "network.transport"
	KeyServer         = "mcpgate.server"
	KeyRoute          = "mcpgate.route"
	KeyCallerAlias    = "mcpgate.caller.alias"
	KeyCallerUser     = "mcpgate.caller.user"
	KeyOutcome        = "mcpgate.outcome"
	KeyFault          = "mcpgate.fault"
	KeyLinkSource     = "mcpgate.link.source"
	KeyProgressEvents = "mcpgate.progress.count"
)

// maxNameLen bounds a tool or prompt name in a span (MCP's own limit).
const maxNameLen = 128

// Outcomes of a message (mcpgate.outcome).
const (
	OutcomeOK      = "ok"
	OutcomeError   = "error"   // an error reply (the upstream's or the gateway's)
	OutcomeFault   = "fault"   // the upstream could not be reached or failed
	OutcomeRefused = "refused" // policy or authentication said no
)

// StartHTTP starts the server span of one HTTP request; route is its
// low-cardinality template (http.route, "/mcp/{server}"). The parent is
// the request's traceparent header: the caller's trace continues here.
// Its baggage header is never read. Off, r is returned as it is.
func (p *Provider) StartHTTP(r *http.Request, route string) (*http.Request, trace.Span) {
	if p == nil {
		return r, nil
	}
	ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs := []attribute.KeyValue{
		attribute.String(KeyHTTPMethod, r.Method),
		attribute.String(KeyHTTPRoute, route),
		attribute.String(KeyURLPath, r.URL.Path), // never the query: it may hold a token
		attribute.String(KeyURLScheme, scheme),
		attribute.String(KeyServerAddress, r.Host),
	}
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, attribute.String(KeyUserAgent, ua))
	}
	ctx, sp := p.tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return r.WithContext(ctx), sp
}

// EndHTTP ends an HTTP request's span with its status: 5xx is an error
// (HTTP semantic conventions: a 4xx is the client's, not the server's).
func EndHTTP(sp trace.Span, status int) {
	if sp == nil {
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	sp.SetAttributes(attribute.Int(KeyHTTPStatus, status))
	switch {
	case status >= 500:
		sp.SetAttributes(attribute.String(KeyErrorType, strconv.Itoa(status)))
		sp.SetStatus(codes.Error, "")
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		sp.SetAttributes(attribute.String(KeyOutcome, OutcomeRefused))
	}
	sp.End()
}

// NoteCaller records the authenticated caller (its key alias and user,
// never a secret) on the span in ctx: the HTTP request's.
func NoteCaller(ctx context.Context, alias, user string) {
	sp := trace.SpanFromContext(ctx)
	if !sp.IsRecording() {
		return
	}
	setNonEmpty(sp, KeyCallerAlias, alias)
	setNonEmpty(sp, KeyCallerUser, user)
}

func setNonEmpty(sp trace.Span, k, v string) {
	if v != "" {
		sp.SetAttributes(attribute.String(k, v))
	}
}

// Message is what the gateway knows of one MCP message when its span
// starts.
type Message struct {
	Method string
	// Name is the tool or prompt of tools/call and prompts/get, as the
	// client named it (namespaced).
	Name string
	// ID is the JSON-RPC id's text; "" for a notification.
	ID string
	// SessionHash is the downstream session's short hash (as in the access
	// log), "" for none.
	SessionHash string
	// Protocol is the session's or request's MCP revision.
	Protocol string
	// Route is the route kind ("mcp", "toolset", "sse", "stdio").
	Route string
	// Alias and User name the caller (never a secret).
	Alias, User string
	// Params are the message's params: only _meta's traceparent and
	// tracestate are read (a link).
	Params json.RawMessage
}

// msgState is a message span's outcome as the handlers learn it.
type msgState struct {
	sp       trace.Span
	mu       sync.Mutex
	outcome  string
	fault    string
	progress int
}

type msgKey struct{}

// StartMessage starts the span of one MCP message received from a client,
// under the span in ctx (the HTTP request that carried it). A trace
// context in the message's params._meta is a link, never the parent.
func (p *Provider) StartMessage(ctx context.Context, m *Message) (context.Context, trace.Span) {
	if p == nil {
		return ctx, nil
	}
	name := m.Method
	attrs := []attribute.KeyValue{attribute.String(KeyMCPMethod, m.Method)}
	if len(m.Name) > maxNameLen {
		// A refused or unknown name is the client's to choose: bounded, as
		// MCP bounds real ones.
		m.Name = m.Name[:maxNameLen]
	}
	switch m.Method {
	case "tools/call":
		if m.Name != "" {
			name += " " + m.Name
			attrs = append(attrs, attribute.String(KeyToolName, m.Name), attribute.String(KeyOperation, "execute_tool"))
		}
	case "prompts/get":
		if m.Name != "" {
			name += " " + m.Name
			attrs = append(attrs, attribute.String(KeyPromptName, m.Name))
		}
	}
	if m.ID != "" {
		attrs = append(attrs, attribute.String(KeyRequestID, m.ID))
	}
	if m.SessionHash != "" {
		attrs = append(attrs, attribute.String(KeyMCPSession, m.SessionHash))
	}
	if m.Protocol != "" {
		attrs = append(attrs, attribute.String(KeyMCPProtocol, m.Protocol))
	}
	if m.Route != "" {
		attrs = append(attrs, attribute.String(KeyRoute, m.Route))
	}
	if m.Alias != "" {
		attrs = append(attrs, attribute.String(KeyCallerAlias, m.Alias))
	}
	if m.User != "" {
		attrs = append(attrs, attribute.String(KeyCallerUser, m.User))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
	if l, ok := MetaLink(m.Params); ok {
		opts = append(opts, trace.WithLinks(l))
	}
	ctx, sp := p.tracer.Start(ctx, name, opts...)
	return context.WithValue(ctx, msgKey{}, &msgState{sp: sp}), sp
}

// EndMessage ends a message's span: an error reply sets the span status
// and records an exception event that names the JSON-RPC code and the
// outcome, never the message's arguments or the upstream's error text.
func EndMessage(ctx context.Context, sp trace.Span, rpcErr *jsonrpc.Error) {
	if sp == nil {
		return
	}
	outcome, fault, progress := OutcomeOK, "", 0
	if st, _ := ctx.Value(msgKey{}).(*msgState); st != nil {
		st.mu.Lock()
		if st.outcome != "" {
			outcome = st.outcome
		}
		fault, progress = st.fault, st.progress
		st.mu.Unlock()
	}
	if rpcErr != nil && outcome == OutcomeOK {
		outcome = OutcomeError
	}
	attrs := []attribute.KeyValue{attribute.String(KeyOutcome, outcome)}
	if fault != "" {
		attrs = append(attrs, attribute.String(KeyFault, fault))
	}
	if progress > 0 {
		attrs = append(attrs, attribute.Int(KeyProgressEvents, progress))
	}
	sp.SetAttributes(attrs...)
	if rpcErr != nil {
		code := strconv.FormatInt(rpcErr.Code, 10)
		errType := fault
		if errType == "" {
			errType = code
		}
		sp.SetAttributes(attribute.String(KeyRPCStatus, code), attribute.String(KeyErrorType, errType))
		sp.AddEvent("exception", trace.WithAttributes(
			attribute.String("exception.type", "jsonrpc.error"),
			attribute.String("exception.message", outcome+": JSON-RPC error "+code),
		))
		sp.SetStatus(codes.Error, outcome)
	}
	sp.End()
}

// NoteServer records the upstream server a message is routed to.
func NoteServer(ctx context.Context, server string) {
	if st, _ := ctx.Value(msgKey{}).(*msgState); st != nil {
		st.sp.SetAttributes(attribute.String(KeyServer, server))
	}
}

// NoteProtocol records the revision an initialize negotiated, unknown
// when its span started.
func NoteProtocol(ctx context.Context, rev string) {
	if st, _ := ctx.Value(msgKey{}).(*msgState); st != nil {
		st.sp.SetAttributes(attribute.String(KeyMCPProtocol, rev))
	}
}

// NoteOutcome records why a message failed: outcome (Outcome*) and the
// fault class ("timeout", "unreachable", "policy", ...).
func NoteOutcome(ctx context.Context, outcome, fault string) {
	if st, _ := ctx.Value(msgKey{}).(*msgState); st != nil {
		st.mu.Lock()
		st.outcome, st.fault = outcome, fault
		st.mu.Unlock()
	}
}

// MessageSpan is the span of the message in ctx, for work that outlives
// ctx's lookups (progress relayed later); nil when none is recording.
func MessageSpan(ctx context.Context) *MsgHandle {
	st, _ := ctx.Value(msgKey{}).(*msgState)
	if st == nil {
		return nil
	}
	return (*MsgHandle)(st)
}

// MsgHandle is a message span held by the gateway's progress routes.
type MsgHandle msgState

// Progress records one progress notification relayed to the client for
// the message (an event without the notification's text).
func (h *MsgHandle) Progress() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.progress++
	h.mu.Unlock()
	h.sp.AddEvent("mcp.progress")
}

// StartClient starts the client span of one request the gateway sends
// upstream, under the span in ctx; nothing when ctx holds no recording
// span. transport is network.transport ("pipe" for stdio, "tcp").
func StartClient(ctx context.Context, server, method string, params json.RawMessage, transport string) (context.Context, trace.Span) {
	tr, _ := tracerOf(ctx)
	if tr == nil {
		return ctx, nil
	}
	name := method
	attrs := []attribute.KeyValue{attribute.String(KeyMCPMethod, method), attribute.String(KeyServer, server)}
	if transport != "" {
		attrs = append(attrs, attribute.String(KeyNetTransport, transport))
	}
	if method == "tools/call" || method == "prompts/get" {
		if n, ok := jsonrpc.GetString(params, "name"); ok && n != "" {
			name += " " + n
			key := KeyToolName
			if method == "prompts/get" {
				key = KeyPromptName
			}
			attrs = append(attrs, attribute.String(key, n))
		}
	}
	return tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// StartInternal starts an internal span (process start, handshake, token
// fetch) for server under the span in ctx; nothing without one.
func StartInternal(ctx context.Context, name, server string) (context.Context, trace.Span) {
	tr, _ := tracerOf(ctx)
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, name, trace.WithAttributes(attribute.String(KeyServer, server)))
}

// End ends a client or internal span; a failed operation sets the status
// and an exception event with errType (a fault class or JSON-RPC code),
// never the error's text, which may echo what was sent.
func End(sp trace.Span, err error, errType string) {
	if sp == nil {
		return
	}
	if err != nil {
		if rpc, ok := err.(*jsonrpc.Error); ok {
			code := strconv.FormatInt(rpc.Code, 10)
			sp.SetAttributes(attribute.String(KeyRPCStatus, code))
			if errType == "" {
				errType = code
			}
		}
		if errType == "" {
			errType = "error"
		}
		sp.SetAttributes(attribute.String(KeyErrorType, errType))
		sp.AddEvent("exception", trace.WithAttributes(
			attribute.String("exception.type", errType),
			attribute.String("exception.message", "failed: "+errType),
		))
		sp.SetStatus(codes.Error, errType)
	}
	sp.End()
}

// Detach is a context with no deadline or values but ctx's span, for
// work started by a request that outlives it (a shared connect, a token
// mint); context.Background() when ctx holds no recording span.
func Detach(ctx context.Context) context.Context {
	sp := trace.SpanFromContext(ctx)
	if !sp.IsRecording() {
		return context.Background()
	}
	return trace.ContextWithSpan(context.Background(), sp)
}

// Within is base (its deadline, cancellation and values) with the span of
// from, when from holds a recording one: for background work a request
// waits for.
func Within(base, from context.Context) context.Context {
	sp := trace.SpanFromContext(from)
	if !sp.IsRecording() {
		return base
	}
	return trace.ContextWithSpan(base, sp)
}

// InjectHeader puts the gateway's trace context in an outgoing request's
// traceparent (and tracestate) header; no baggage header is ever sent.
func InjectHeader(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}
