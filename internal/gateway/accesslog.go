package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/cancelctx"
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

// accessLine is one request's access log line in the making: the
// response's status recorder (the request metric's too), the entry the
// handlers note into, the writer that counts the response's bytes, and
// the attributes it is written with, in one allocation.
type accessLine struct {
	statusWriter
	e     accessEntry
	g     *Gateway
	r     *http.Request
	start time.Time
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

// startAccess begins the access log line of r, written to w; the
// returned function writes it once the response is over.
func (g *Gateway) startAccess(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, func()) {
	a := g.newAccessLine(w, false)
	a.begin(r)
	return a, a.r, func() { a.finish(g.routeKind(r.URL.Path)) }
}

// newAccessLine is the access line of a response written to w, its
// status recorder within it (statusWriter's holdable).
func (g *Gateway) newAccessLine(w http.ResponseWriter, holdable bool) *accessLine {
	return &accessLine{statusWriter: statusWriter{ResponseWriter: w, holdable: holdable}, g: g}
}

// begin starts the line of r: the handlers find its entry in a.r's
// context, in place when the listener's request context takes it
// (cancelctx.SetInPlace: no copy of the request, issue 25), else in a copy's.
func (a *accessLine) begin(r *http.Request) {
	a.start = time.Now()
	if cancelctx.SetInPlace(r.Context(), accessKey{}, &a.e) {
		a.r = r
		return
	}
	a.r = r.WithContext(withAccess(r.Context(), &a.e))
}

// AccessLine is one access log line's fields, in the order they are
// logged.
type AccessLine struct {
	Time                time.Time
	Method, Route, Path string
	Status              int
	Bytes               int64
	Elapsed             time.Duration // logged as "ms", AppendMS
	// Logged when not empty.
	Alias, User, Session, MCPMethod, Tool, Reason string
}

// AppendMS appends the line's "ms": the duration in milliseconds, to a
// tenth, as text.
func (l *AccessLine) AppendMS(b []byte) []byte {
	return strconv.AppendFloat(b, float64(l.Elapsed.Microseconds())/1000, 'f', 1, 64)
}

// AccessLineWriter is a log handler that can write an access line itself,
// exactly as it would write the line's record, without building the
// record (about 1 µs and an allocation per request, issue 25). It reports
// whether it did; false (a value it would have to quote or escape, say):
// the line is logged as a record.
type AccessLineWriter interface {
	WriteAccessLine(l AccessLine) bool
}

// finish writes the line; route is the request's route kind
// (Gateway.routeKind, which the request metric takes too).
func (a *accessLine) finish(route string) {
	h := a.g.access.Handler()
	if !h.Enabled(deferredLineCtx, slog.LevelInfo) {
		return
	}
	status := a.status
	if status == 0 {
		status = http.StatusOK // nothing written: net/http sends 200
	}
	r, e := a.r, &a.e
	now := time.Now() // the line's time, and the end of its duration
	e.mu.Lock()
	l := AccessLine{
		Time:   now,
		Method: r.Method, Route: route, Path: r.URL.Path, Status: status, Bytes: e.bytes,
		Elapsed: now.Sub(a.start),
		Alias:   e.alias, User: e.user, Session: e.session, MCPMethod: e.mcpMethod, Tool: e.tool, Reason: e.refused,
	}
	e.mu.Unlock()
	// The handler directly, not Logger.LogAttrs: the logger would capture
	// the caller's program counter for every line (runtime.Callers, about
	// a fifth of the line's cost), and no handler mcpgate builds has
	// AddSource on.
	if w, ok := h.(AccessLineWriter); ok && w.WriteAccessLine(l) {
		return
	}
	_ = h.Handle(deferredLineCtx, l.Record())
}

// Record is the log record of l, as the access log writes it (with
// deferredLineCtx, at info, message "access").
func (l *AccessLine) Record() slog.Record {
	var ms [24]byte
	var buf [12]slog.Attr
	attrs := append(buf[:0],
		slog.String("method", l.Method),
		slog.String("route", l.Route),
		slog.String("path", l.Path),
		slog.Int("status", l.Status),
		slog.Int64("bytes", l.Bytes),
		slog.String("ms", string(l.AppendMS(ms[:0]))),
	)
	for _, kv := range [...][2]string{{"alias", l.Alias}, {"user", l.User}, {"session", l.Session}, {"mcp_method", l.MCPMethod}, {"tool", l.Tool}, {"reason", l.Reason}} {
		if kv[1] != "" {
			attrs = append(attrs, slog.String(kv[0], kv[1]))
		}
	}
	rec := slog.NewRecord(l.Time, slog.LevelInfo, "access", 0)
	rec.AddAttrs(attrs...)
	return rec
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
