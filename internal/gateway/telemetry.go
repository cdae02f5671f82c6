package gateway

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/audit"
	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// AuditSink takes one record per tool call (S16.3); *audit.Writer
// implements it. Record must not block.
type AuditSink interface {
	Record(store.ToolCall)
}

// DurableAuditSink also takes a record and returns once it is committed
// (audit.durable); *audit.Writer implements it.
type DurableAuditSink interface {
	AuditSink
	RecordDurable(context.Context, store.ToolCall) error
}

// ArgumentsAuditSink also takes a record with its call's arguments, for
// the audit exporters only (servers.<name>.audit.arguments), as received
// with the patterns to redact them by: the sink redacts them off the
// call's path, before any exporter sees them, and copies them (the
// call's buffers are not its to keep). *audit.Writer implements it.
type ArgumentsAuditSink interface {
	RecordWithRawArguments(c store.ToolCall, raw json.RawMessage, patterns []string)
	RecordDurableWithRawArguments(ctx context.Context, c store.ToolCall, raw json.RawMessage, patterns []string) error
}

// The gateway finds these by type assertion: a change of signature must
// not silently drop the exporters' arguments.
var (
	_ DurableAuditSink   = (*audit.Writer)(nil)
	_ ArgumentsAuditSink = (*audit.Writer)(nil)
)

// record reports one tools/call to metrics and the audit log: who,
// where, how it ended, how long, how many bytes, what it cost (the cost
// the caller's budget was charged); arguments only, redacted, for the
// exporters of a server with audit.arguments. A call a pre guardrail
// blocked is recorded with its guardrail's name and cost 0. It runs for
// every tools/call, also one a stage before upstream ended (c.fail):
// denied, refused, or a server whose list could not be read (recorded
// against that server with the upstream's fault class). The outcome is
// ok, tool_error or the fault class (store.FaultClasses).
func (c *call) record() {
	g := c.g
	if g.metrics == nil && g.audit == nil {
		return
	}
	ctx, sc, server, params, res, err, cost, start := c.ctx, c.sc, c.server, c.params, c.res, c.err, c.cost, c.start
	d := time.Since(start)
	// The upstream name the call resolved to is the name its params
	// carry (checkPolicy put it there); only a call that failed before
	// resolving is read from its params.
	tool := c.upName
	if tool == "" {
		tool, _ = jsonrpc.GetString(params, "name")
	}
	tool = boundName(tool)
	guardrail := guardrailOf(ctx)
	outcome, fault := store.OutcomeOK, ""
	switch {
	case c.fail != nil:
		// A stage before upstream ended the call: its own class.
		fault = cmp.Or(c.fault, store.FaultInternal)
	case err != nil:
		fault = upstream.Classify(err).Class
		if ce := (*clientError)(nil); errors.As(err, &ce) {
			fault = store.FaultClientError
		}
	case guardrail != "":
		fault = store.FaultBlocked
	case toolError(res):
		outcome = store.OutcomeToolError
	}
	if fault != "" {
		outcome = fault
	}
	if g.metrics != nil {
		label := metrics.UnknownTool // bounded cardinality: catalog tools only
		if c.upName != "" {
			// The name resolved: checkPolicy found it in the catalog (a
			// call that failed before that is not looked up: its server
			// may be the one down).
			label = tool
		}
		g.metrics.ObserveToolCall(server, label, outcome, d)
	}
	if g.audit == nil {
		return
	}
	rec := store.ToolCall{Time: start, Server: server, Tool: tool, DurationMs: d.Milliseconds(), Outcome: outcome,
		ErrorClass: fault, RequestBytes: int64(len(params)), ResponseBytes: int64(len(res)),
		Guardrail: guardrail, Cost: cost}
	if c := callers.FromContext(ctx); c != nil {
		rec.KeyAlias, rec.User, rec.Team = c.Alias, c.User, c.Team
		if c.Master {
			rec.KeyAlias = store.ActorMaster
		}
	}
	if sc != nil && sc.sess != nil {
		rec.SessionIDPrefix = sc.sess.ID()[:idPrefixLen]
	}
	args, patterns := g.auditArguments(server, params)
	as, _ := g.audit.(ArgumentsAuditSink)
	if as == nil {
		args = nil
	}
	if g.durableAudit == nil {
		if args != nil {
			as.RecordWithRawArguments(rec, args, patterns)
		} else {
			g.audit.Record(rec)
		}
		return
	}
	// audit.durable: the answer waits for the record's commit (bounded:
	// a stalled store must not hold every call), whatever the caller
	// does meanwhile.
	wctx, cancel := context.WithTimeout(c.detached(ctx), g.auditWait)
	defer cancel()
	var werr error
	if args != nil {
		werr = as.RecordDurableWithRawArguments(wctx, rec, args, patterns)
	} else {
		werr = g.durableAudit.RecordDurable(wctx, rec)
	}
	if werr != nil {
		g.metrics.AuditUnconfirmed()
		if everyTenSeconds(&g.auditWarnAt) {
			g.log.Warn("audit: a tool call answered before its audit record was committed", "server", server, "error", werr)
		}
	}
}

// detached returns context.WithoutCancel(ctx), kept in c: the call is
// allocated anyway, WithoutCancel would be an allocation of its own.
func (c *call) detached(ctx context.Context) context.Context {
	c.nc.parent = ctx
	return &c.nc
}

// noCancel is context.WithoutCancel of parent: its values, never done.
type noCancel struct{ parent context.Context }

var _ context.Context = (*noCancel)(nil)

func (*noCancel) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*noCancel) Done() <-chan struct{}       { return nil }
func (*noCancel) Err() error                  { return nil }

// Value answers as context.WithoutCancel(parent) would. That one hides
// the context package's own key (an *int), by which context.Cause would
// find the parent's cancellation; its Value is asked for *int keys only
// (it allocates on every lookup), which no other code uses.
func (c *noCancel) Value(key any) any {
	if _, ok := key.(*int); ok {
		return context.WithoutCancel(c.parent).Value(key)
	}
	return c.parent.Value(key)
}

// maxAuditToolName bounds the tool name an audit record keeps: a denied
// call's name is the caller's text, not a catalog name.
const maxAuditToolName = 256

// boundName cuts name to maxAuditToolName bytes, on a character boundary.
func boundName(name string) string {
	if len(name) <= maxAuditToolName {
		return name
	}
	name = name[:maxAuditToolName]
	for len(name) > 0 && !utf8.ValidString(name) {
		name = name[:len(name)-1]
	}
	return name
}

// callCost is what a tools/call that went upstream cost (S21 cost):
// priced when the upstream answered; one that never got an answer costs
// nothing, as does one a pre guardrail stopped (the cost stage never
// asks). The audit record carries it and the caller's budget is charged
// it.
func (c *call) callCost() float64 {
	srv := c.g.current().cfg.Servers[c.server]
	if srv == nil || srv.Tools == nil || (c.err != nil && c.upstreamRPCError() == nil) {
		return 0
	}
	tool, _ := jsonrpc.GetString(c.params, "name")
	return srv.Tools.CallCost(tool, int64(len(c.res)))
}

// auditArguments returns the call's arguments, not yet redacted, and the
// patterns to redact them by, when server's config says audit.arguments;
// else nil. The audit sink redacts them on its exporters' goroutines
// (audit.Writer.RecordWithRawArguments); they go to the exporters and
// nowhere else (never a log line).
func (g *Gateway) auditArguments(server string, params json.RawMessage) (json.RawMessage, []string) {
	patterns, on := g.compiled.Load().auditRedact[server]
	if !on {
		return nil, nil
	}
	raw, ok := jsonrpc.Get(params, "arguments")
	if !ok {
		return nil, nil
	}
	return raw, patterns
}

// toolError reports whether a tools/call result says isError: true.
func toolError(res json.RawMessage) bool {
	v, ok := jsonrpc.Get(res, "isError")
	return ok && string(v) == "true"
}

// serveMetrics refreshes the gauges that are read rather than counted,
// then answers the scrape.
func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request) {
	for name, h := range g.up.Health() {
		g.metrics.SetUpstreamHealth(name, h.State)
	}
	n := 0
	for _, s := range g.sessions.All() {
		if !s.Closed() {
			n++
		}
	}
	g.metrics.SetSessions(n)
	g.metrics.SetTasks(g.taskTable.Running())
	for _, name := range g.current().names {
		for _, k := range []catalog.Kind{catalog.Tools, catalog.Prompts, catalog.Resources} {
			if size, ok := g.cat.Size(name, k); ok {
				g.metrics.SetCatalogSize(name, k.String(), size)
			}
		}
	}
	g.metrics.Handler().ServeHTTP(w, r)
}

// MetricsHandler serves /metrics for a separate listener (metrics_listen).
func (g *Gateway) MetricsHandler() http.Handler { return http.HandlerFunc(g.serveMetrics) }

// isAdminPath reports whether path is below the admin API's
// (Options.AdminPath).
func (g *Gateway) isAdminPath(path string) bool {
	return g.adminPath != "" && strings.HasPrefix(path, g.adminPath+"/")
}

// routeKind is routeKind with the admin API's paths labelled "admin".
func (g *Gateway) routeKind(path string) string {
	if g.isAdminPath(path) {
		return "admin"
	}
	return routeKind(path)
}

// routeKind is the bounded route label of a request path.
func routeKind(path string) string {
	switch {
	case path == "/healthz" || path == "/readyz" || path == "/enabled":
		return "health"
	case path == "/metrics":
		return "metrics"
	}
	_, kind := splitEndpoint(path)
	switch kind {
	case epSSE, epSSEMessages:
		return "sse"
	}
	if _, ok := toolsetOf(path); ok {
		return "toolset"
	}
	return "mcp"
}

// statusWriter remembers the status of a response for the request metric;
// it passes Flush, Hijack and the ResponseController through.
type statusWriter struct {
	http.ResponseWriter
	status int
	// holdable: the Middleware lets a stream of this response be
	// held off net/http (held.go); held is that stream once it is, whose
	// end ends the request.
	holdable bool
	held     *heldStream
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// FlushError lets http.ResponseController see a failed flush (a stream
// whose client stopped reading) through the wrapper.
func (s *statusWriter) FlushError() error {
	return http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := s.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("hijack not supported")
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// everyTenSeconds reports true at most once per ten seconds per last (the
// time of the last true, in Unix nanoseconds): a warning that every call
// could trigger is logged once in a while.
func everyTenSeconds(last *atomic.Int64) bool {
	now := time.Now().UnixNano()
	prev := last.Load()
	return now-prev >= int64(10*time.Second) && last.CompareAndSwap(prev, now)
}
