package gateway

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// The gateway's tracing hooks (SPEC S16.2; the rules are internal/tracing's):
// ServeHTTP starts the HTTP request's span, serve and handleNotification
// one span per MCP message under it, and the call's stages (pipeline.go:
// policy, budget, the guardrails, upstream, trace) and upstreamFault note
// the server, outcome and fault class on the message's span. With g.tracer nil (the default) each hook is one nil check.

// startHTTPSpan starts r's span; end ends it with the response's status.
func (g *Gateway) startHTTPSpan(sw *statusWriter, r *http.Request) (*http.Request, func()) {
	route := httpRoute(r.URL.Path)
	if g.isAdminPath(r.URL.Path) {
		route = g.adminPath + "/*"
	}
	r, sp := g.tracer.StartHTTP(r, route)
	return r, func() { tracing.EndHTTP(sp, sw.status) }
}

// startMessageSpan starts the span of message m received in scope sc.
func (g *Gateway) startMessageSpan(ctx context.Context, sc *scope, m *jsonrpc.Message) (context.Context, trace.Span) {
	tm := &tracing.Message{Method: m.Method, Params: m.Params, Route: "stdio"}
	if m.ID.IsValid() {
		tm.ID = m.ID.String()
	}
	if m.Method == mcpwire.MethodToolsCall || m.Method == mcpwire.MethodPromptsGet {
		tm.Name, _ = jsonrpc.GetString(m.Params, "name")
	}
	if sc != nil {
		if sc.rt != nil && sc.rt.path != "" {
			tm.Route = sc.rt.path
		}
		if sc.sess != nil {
			tm.SessionHash = sc.sess.ShortHash()
			tm.Protocol = sc.sess.Rev()
		} else if rev, ok := mcpwire.StatelessVersion(m.Params); ok {
			tm.Protocol = rev
		}
	}
	if id := IdentityFrom(ctx); id != nil {
		tm.Alias, tm.User = id.Alias, id.User
	}
	return g.tracer.StartMessage(ctx, tm)
}

// httpRoute is the low-cardinality template of path (http.route): names
// of servers and toolsets are replaced by placeholders.
func httpRoute(path string) string {
	switch {
	case path == "/healthz" || path == "/readyz" || path == "/metrics" || path == "/enabled":
		return path
	case strings.HasPrefix(path, "/.well-known/"):
		return "/.well-known/*"
	}
	base, _ := splitEndpoint(path)
	suffix := strings.TrimRight(path, "/")[len(base):]
	switch {
	case base == "" || base == "/mcp" || base == "/mcp/proxy":
		return base + suffix
	case strings.HasPrefix(base, "/mcp/"):
		return "/mcp/{servers}" + suffix
	}
	if _, ok := toolsetOf(base); ok {
		return "/toolset/{toolset}/mcp" + suffix
	}
	if strings.HasSuffix(base, "/mcp") && strings.Count(base, "/") == 2 {
		return "/{server}/mcp" + suffix
	}
	return "other"
}
