package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// The access log (issue 15, SPEC S16): one line per HTTP request the
// gateway serves, written when the response is over: method, route kind,
// status, bytes written, duration, the caller's key alias and user, the
// session's short hash, the MCP method and tool name of a single
// message, and for a refused caller why (unknown, expired, disabled key,
// address not allowed; callers.Failure.Reason). It never holds a secret, a query string, a header value, a
// tool argument or a full session id. Health probes and /metrics are not
// logged (a scraper every few seconds would drown the rest).

// accessEntry collects what the handlers learn about one request.
type accessEntry struct {
	mu              sync.Mutex
	alias, user     string
	session         string
	mcpMethod, tool string
	// refused says why the caller was refused (callers.Failure.Reason):
	// "expired key", never the key.
	refused string
	bytes   int64
}

type accessKey struct{}

func withAccess(ctx context.Context, e *accessEntry) context.Context {
	return context.WithValue(ctx, accessKey{}, e)
}

func accessOf(ctx context.Context) *accessEntry {
	e, _ := ctx.Value(accessKey{}).(*accessEntry)
	return e
}

// noteCaller records the request's caller.
func noteCaller(ctx context.Context, alias, user string) {
	if e := accessOf(ctx); e != nil {
		e.mu.Lock()
		e.alias, e.user = alias, user
		e.mu.Unlock()
	}
}

// noteRefusal records why the request's caller was refused.
func noteRefusal(ctx context.Context, reason string) {
	if e := accessOf(ctx); e != nil {
		e.mu.Lock()
		e.refused = reason
		e.mu.Unlock()
	}
}

// noteMCP records the request's MCP method and the tool, prompt or
// resource it names.
func noteMCP(ctx context.Context, method, name string) {
	if e := accessOf(ctx); e != nil {
		e.mu.Lock()
		e.mcpMethod, e.tool = method, name
		e.mu.Unlock()
	}
}

// noteMCPParams is noteMCP with the name read from params, only when an
// access line takes it: reading it is a scan and a string.
func noteMCPParams(ctx context.Context, method string, params json.RawMessage) {
	if accessOf(ctx) == nil {
		return
	}
	name, _ := jsonrpc.GetString(params, "name")
	noteMCP(ctx, method, name)
}

// noteSession records the request's session (by a short hash of its id).
func noteSession(ctx context.Context, s *session) {
	noteDebugSession(ctx, s)
	if e := accessOf(ctx); e != nil && s != nil {
		e.mu.Lock()
		e.session = s.ShortHash()
		e.mu.Unlock()
	}
}

// accessLine is one request's access log line in the making: the entry
// the handlers note into, the writer that counts the response's bytes,
// and the attributes it is written with, in one allocation.
type accessLine struct {
	*statusWriter
	e     accessEntry
	g     *Gateway
	r     *http.Request
	start time.Time
	attrs [12]slog.Attr
}

// Write counts what the response writes.
func (a *accessLine) Write(b []byte) (int, error) {
	n, err := a.statusWriter.Write(b)
	a.e.mu.Lock()
	a.e.bytes += int64(n)
	a.e.mu.Unlock()
	return n, err
}

// logsAccess reports whether path's requests go in the access log.
func logsAccess(path string) bool {
	switch path {
	case "/healthz", "/readyz", "/metrics", "/enabled":
		return false
	}
	return true
}

// startAccess begins the access log line of r, whose response sw
// records; the returned function writes it once the response is over.
func (g *Gateway) startAccess(sw *statusWriter, r *http.Request) (http.ResponseWriter, *http.Request, func()) {
	a := g.beginAccess(sw, r)
	return a, a.r, a.finish
}

// beginAccess is startAccess for the middleware, which defers finish
// itself (no closure to allocate).
func (g *Gateway) beginAccess(sw *statusWriter, r *http.Request) *accessLine {
	a := &accessLine{statusWriter: sw, g: g, start: time.Now()}
	a.r = r.WithContext(withAccess(r.Context(), &a.e))
	return a
}

// finish writes the line.
func (a *accessLine) finish() {
	status := a.status
	if status == 0 {
		status = http.StatusOK // nothing written: net/http sends 200
	}
	r, e := a.r, &a.e
	var ms [24]byte
	e.mu.Lock()
	attrs := append(a.attrs[:0],
		slog.String("method", r.Method),
		slog.String("route", a.g.routeKind(r.URL.Path)),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Int64("bytes", e.bytes),
		slog.String("ms", string(strconv.AppendFloat(ms[:0], float64(time.Since(a.start).Microseconds())/1000, 'f', 1, 64))),
	)
	for _, kv := range [...][2]string{{"alias", e.alias}, {"user", e.user}, {"session", e.session}, {"mcp_method", e.mcpMethod}, {"tool", e.tool}, {"reason", e.refused}} {
		if kv[1] != "" {
			attrs = append(attrs, slog.String(kv[0], kv[1]))
		}
	}
	e.mu.Unlock()
	// The handler directly, not Logger.LogAttrs: the logger would capture
	// the caller's program counter for every line (runtime.Callers, about
	// a fifth of the line's cost), and no handler mcpgate builds has
	// AddSource on.
	h := a.g.access.Handler()
	if !h.Enabled(deferredLineCtx, slog.LevelInfo) {
		return
	}
	rec := slog.NewRecord(time.Now(), slog.LevelInfo, "access", 0)
	rec.AddAttrs(attrs...)
	_ = h.Handle(deferredLineCtx, rec)
}

// deferredLineKey marks the context of an access line: its handler may
// write it a little later, in a batch (cmd/mcpgate's logbatch.go), since
// nothing waits for it, unlike a warning or an error.
type deferredLineKey struct{}

var deferredLineCtx = context.WithValue(context.Background(), deferredLineKey{}, true)

// AccessLineContext is the context access lines are logged with.
func AccessLineContext() context.Context { return deferredLineCtx }

// DeferredLine reports whether a log record's context marks it as a line
// that may be written in a batch (the access log's).
func DeferredLine(ctx context.Context) bool {
	v, _ := ctx.Value(deferredLineKey{}).(bool)
	return v
}
