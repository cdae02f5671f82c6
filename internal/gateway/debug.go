package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// The debug header (SPEC S16.4): a request with x-mcpgate-debug: true,
// from an admin caller or with telemetry.debug_header on, is answered
// with headers that explain it: the route, the caller, each upstream
// reached with the source of the credential used (its kind and a short
// fingerprint, never the value), whether its session was reused or
// created, and how much of the time was the gateway's own.
//
// A JSON answer carries them as headers, complete. An answer that became
// an SSE stream has sent its headers before the call ended: it carries
// what was known then, and the final values again as trailers.

// HeaderDebug asks for the diagnostics.
const HeaderDebug = "X-Mcpgate-Debug"

// The diagnostic headers.
const (
	headerDebugRoute    = "X-Mcpgate-Debug-Route"
	headerDebugCaller   = "X-Mcpgate-Debug-Caller"
	headerDebugSession  = "X-Mcpgate-Debug-Session"
	headerDebugUpstream = "X-Mcpgate-Debug-Upstream"
	headerDebugLatency  = "X-Mcpgate-Debug-Latency"
)

var debugHeaders = []string{headerDebugRoute, headerDebugCaller, headerDebugSession, headerDebugUpstream, headerDebugLatency}

// debugInfo is what one request's handlers and upstream calls tell the
// diagnostics. It is upstream.Notes for the request's context.
type debugInfo struct {
	g     *Gateway
	start time.Time

	mu        sync.Mutex
	route     string
	caller    string
	session   string
	upstreams map[string]*debugUpstream
	spans     [][2]time.Time // upstream calls, for the gateway's share
}

// maxDebugMethods bounds the requests named per upstream (a merged list
// walks pages).
const maxDebugMethods = 8

type debugUpstream struct {
	created, reused int
	methods         []string // the requests sent, in order (at most maxDebugMethods)
	calls           int
	busy            time.Duration
}

func (d *debugInfo) up(server string) *debugUpstream {
	u := d.upstreams[server]
	if u == nil {
		u = &debugUpstream{}
		d.upstreams[server] = u
	}
	return u
}

// SessionUsed is upstream.Notes.
func (d *debugInfo) SessionUsed(server string, created bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if u := d.up(server); created {
		u.created++
	} else {
		u.reused++
	}
}

// Called is upstream.Notes.
func (d *debugInfo) Called(server, method string, start time.Time, took time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	u := d.up(server)
	u.calls++
	if len(u.methods) < maxDebugMethods {
		u.methods = append(u.methods, method)
	}
	u.busy += took
	d.spans = append(d.spans, [2]time.Time{start, start.Add(took)})
}

// wantsDebug reports whether r asks for diagnostics and may have them.
func (g *Gateway) wantsDebug(r *http.Request) bool {
	v := r.Header.Get(HeaderDebug)
	if v == "" || !(strings.EqualFold(strings.TrimSpace(v), "true") || strings.TrimSpace(v) == "1") {
		return false
	}
	if g.conf().Telemetry.DebugHeader {
		return true
	}
	id := IdentityFrom(r.Context())
	return id != nil && id.Admin
}

// startDebug begins the diagnostics of an authenticated request: the
// returned writer sets them when the answer starts, and done sets the
// final values as trailers when it streamed.
func (g *Gateway) startDebug(w http.ResponseWriter, r *http.Request, rt route) (http.ResponseWriter, *http.Request, func()) {
	d := &debugInfo{g: g, start: time.Now(), upstreams: map[string]*debugUpstream{}}
	d.route = describeRoute(r.URL.Path, rt)
	d.caller = describeCaller(IdentityFrom(r.Context()))
	r = r.WithContext(withDebug(upstream.WithNotes(r.Context(), d), d))
	dw := &debugWriter{ResponseWriter: w, d: d, r: r}
	return dw, r, dw.finish
}

type debugKey struct{}

func withDebug(ctx context.Context, d *debugInfo) context.Context {
	return context.WithValue(ctx, debugKey{}, d)
}

func debugOf(ctx context.Context) *debugInfo {
	d, _ := ctx.Value(debugKey{}).(*debugInfo)
	return d
}

// noteDebugSession records the request's downstream session (by the
// short hash the access log and admin API use).
func noteDebugSession(ctx context.Context, s *session) {
	if d := debugOf(ctx); d != nil && s != nil {
		d.mu.Lock()
		d.session = s.ShortHash()
		d.mu.Unlock()
	}
}

// describeRoute names the route: its path kind and the servers it names.
func describeRoute(path string, rt route) string {
	var b strings.Builder
	b.WriteString(routeKind(path))
	b.WriteString(" ")
	b.WriteString(path)
	switch {
	case rt.toolset != "":
		fmt.Fprintf(&b, "; toolset=%s", rt.toolset)
	case rt.single != "":
		fmt.Fprintf(&b, "; server=%s", rt.single)
	}
	if rt.proxy {
		b.WriteString("; proxy")
	}
	fmt.Fprintf(&b, "; servers=%s", strings.Join(rt.servers, ","))
	return b.String()
}

// describeCaller names the caller by alias, user and team, never by a
// credential.
func describeCaller(id *Identity) string {
	if id == nil {
		return "anonymous"
	}
	var parts []string
	for _, kv := range [][2]string{{"alias", id.Alias}, {"user", id.User}, {"team", id.Team}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	if id.Issuer != "" {
		parts = append(parts, "issuer="+id.Issuer)
	}
	if id.Admin {
		parts = append(parts, "admin")
	}
	if len(parts) == 0 {
		return "anonymous"
	}
	return strings.Join(parts, "; ")
}

// credentialSource is the kind of credential a server is called with:
// the auth type, "static:<type>" for the gateway's own fixed ones.
func credentialSource(srv *config.Server) string {
	if srv == nil {
		return "unknown"
	}
	if srv.Auth == nil || srv.Auth.Type == "" || srv.Auth.Type == config.AuthNone {
		if srv.Transport == config.TransportStdio && len(srv.Env) > 0 {
			return "static:env"
		}
		if len(srv.Headers) > 0 {
			return "static:headers"
		}
		return "none"
	}
	switch t := srv.Auth.Type; t {
	case config.AuthAPIKey, config.AuthBearer, config.AuthToken, config.AuthBasic, config.AuthAuthorization:
		return "static:" + t
	default:
		return t
	}
}

// render fills h with the diagnostics as they stand.
func (d *debugInfo) render(ctx context.Context, h http.Header) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h.Set(headerDebugRoute, d.route)
	h.Set(headerDebugCaller, d.caller)
	if d.session != "" {
		h.Set(headerDebugSession, d.session)
	}
	h.Del(headerDebugUpstream)
	st := d.g.current()
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range d.upstreams {
			if !yield(k) {
				return
			}
		}
	}) {
		u := d.upstreams[name]
		sess := "none"
		switch {
		case u.created > 0 && u.reused > 0:
			sess = "created+reused"
		case u.created > 0:
			sess = "created"
		case u.reused > 0:
			sess = "reused"
		}
		v := fmt.Sprintf("server=%s; credential=%s", name, credentialSource(st.cfg.Servers[name]))
		if fp := d.g.up.Fingerprint(ctx, name); fp != "" && credentialSource(st.cfg.Servers[name]) != "none" {
			v += "; fp=" + shortFP(fp)
		}
		v += fmt.Sprintf("; session=%s; calls=%d", sess, u.calls)
		if len(u.methods) > 0 {
			v += "; requests=" + strings.Join(u.methods, ",")
		}
		v += "; ms=" + millis(u.busy)
		h.Add(headerDebugUpstream, v)
	}
	total := time.Since(d.start)
	busy := unionLength(d.spans)
	h.Set(headerDebugLatency, fmt.Sprintf("total_ms=%s; upstream_ms=%s; gateway_ms=%s", millis(total), millis(busy), millis(max(total-busy, 0))))
}

// shortFP is a credential fingerprint cut to what tells two apart.
func shortFP(fp string) string {
	fp = strings.TrimPrefix(fp, "sha256:")
	if len(fp) > 8 {
		fp = fp[:8]
	}
	return fp
}

func millis(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64)
}

// unionLength is the time covered by the spans (concurrent upstream calls
// overlap: a merged list waits for the slowest, not the sum).
func unionLength(spans [][2]time.Time) time.Duration {
	if len(spans) == 0 {
		return 0
	}
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var total time.Duration
	cur := s[0]
	for _, sp := range s[1:] {
		if sp[0].After(cur[1]) {
			total += cur[1].Sub(cur[0])
			cur = sp
		} else if sp[1].After(cur[1]) {
			cur[1] = sp[1]
		}
	}
	return total + cur[1].Sub(cur[0])
}

// debugWriter sets the diagnostics when the answer starts.
type debugWriter struct {
	http.ResponseWriter
	d       *debugInfo
	r       *http.Request
	started bool
	stream  bool
}

func (w *debugWriter) WriteHeader(code int) {
	if !w.started {
		w.started = true
		h := w.Header()
		if strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
			// The call goes on after the headers: the final values
			// follow as trailers.
			w.stream = true
			h.Set("Trailer", strings.Join(debugHeaders, ", "))
		}
		w.d.render(w.r.Context(), h)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *debugWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *debugWriter) Flush() {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *debugWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish sets the trailers of a streamed answer.
func (w *debugWriter) finish() {
	if w.stream {
		w.d.render(w.r.Context(), w.Header())
	}
}
