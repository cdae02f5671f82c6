package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
)

const debugUpstreamToken = "upstream-secret-7f3a9c"

// debugServers: a needs a bearer token (checked), b is open and
// per_call, c sends progress before it answers (so the answer streams).
func debugServers(t *testing.T) map[string]*config.Server {
	echo := func(name string) *mcp.Server {
		srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
		srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2})
				time.Sleep(20 * time.Millisecond)
			}
			return textResult(name), nil
		})
		return srv
	}
	a := serveSDK(t, echo("a"))
	guarded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+debugUpstreamToken {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		a.Config.Handler.ServeHTTP(w, r)
	})
	ga := httptest.NewServer(guarded)
	t.Cleanup(ga.Close)
	sa := httpServer(ga.URL)
	sa.Auth = &config.Auth{Type: config.AuthBearer, Value: debugUpstreamToken}
	sb := httpServer(serveSDK(t, echo("b")).URL)
	sb.SessionMode = config.SessionPerCall
	return map[string]*config.Server{"a": sa, "b": sb, "c": httpServer(serveSDK(t, echo("c")).URL)}
}

var latencyRE = regexp.MustCompile(`^total_ms=([0-9.]+); upstream_ms=([0-9.]+); gateway_ms=([0-9.]+)$`)

// checkLatency parses the latency header: the parts add up and the
// upstream part is not zero when an upstream was called.
func checkLatency(t *testing.T, v string, upstream bool) {
	t.Helper()
	m := latencyRE.FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("latency header %q", v)
	}
	f := func(s string) float64 { x, _ := strconv.ParseFloat(s, 64); return x }
	total, up, own := f(m[1]), f(m[2]), f(m[3])
	if d := total - up - own; d < -0.15 || d > 0.15 {
		t.Errorf("latency %q: %v != %v + %v", v, total, up, own)
	}
	if upstream && up <= 0 {
		t.Errorf("latency %q: no upstream time for an upstream call", v)
	}
}

// SPEC S16.4: x-mcpgate-debug answers, for an admin caller, with the
// route, the caller, per upstream the credential source (masked), the
// session reused or created, and the latency split; for anyone else
// nothing, unless telemetry.debug_header is on; never a secret.
func TestDebugHeader(t *testing.T) {
	keys := &memKeys{}
	admin := keys.add(t, store.Key{Alias: "ops-admin", User: "olga", Admin: true})
	plain := keys.add(t, store.Key{Alias: "dev-laptop", User: "dan", Team: "web"})
	cfg := &config.Config{Servers: debugServers(t)}
	g, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Config: cfg})

	session := func(secret string) map[string]string {
		code, hdr, body := rpc(t, gw.URL+"/mcp", withKey(secret), initBody)
		if code != 200 {
			t.Fatalf("initialize: %d %s", code, body)
		}
		h := withKey(secret)
		h[mcpwire.HeaderSessionID] = hdr.Get(mcpwire.HeaderSessionID)
		return h
	}
	call := func(h map[string]string, tool string, debug bool) http.Header {
		t.Helper()
		if debug {
			h[HeaderDebug] = "true"
		} else {
			delete(h, HeaderDebug)
		}
		code, hdr, body := rpc(t, gw.URL+"/mcp", h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"`+tool+`","arguments":{"q":"argument-value-9d2e"}}}`)
		if code != 200 || !strings.Contains(string(body), `"text"`) {
			t.Fatalf("call %s: %d %s", tool, code, body)
		}
		return hdr
	}
	noSecret := func(hdr http.Header) {
		t.Helper()
		for k, vs := range hdr {
			for _, v := range vs {
				if strings.Contains(v, debugUpstreamToken) || strings.Contains(v, admin) || strings.Contains(v, plain) || strings.Contains(v, "argument-value") {
					t.Errorf("header %s carries a secret or an argument: %q", k, v)
				}
			}
		}
	}

	ha := session(admin)
	first := call(ha, "a__echo", true)
	noSecret(first)
	if got := first.Get(headerDebugRoute); got != "mcp /mcp; servers=a,b,c" {
		t.Errorf("route %q", got)
	}
	if got := first.Get(headerDebugCaller); got != "alias=ops-admin; user=olga; admin" {
		t.Errorf("caller %q", got)
	}
	if got := first.Get(headerDebugSession); len(got) != idPrefixLen || strings.Contains(ha[mcpwire.HeaderSessionID], got) {
		t.Errorf("session %q: want the short hash, never the id", got)
	}
	fpRE := regexp.MustCompile(`^server=a; credential=static:bearer_token; fp=[0-9a-f]{8}; session=(reused|created); calls=([12]); requests=((?:tools/list,)?tools/call); ms=[0-9.]+$`)
	// The catalog's first listing of a may still be running when the
	// call arrives (seen under -race); the call then waits on it and
	// the header rightly reports both requests, and only then.
	if ups := first.Values(headerDebugUpstream); len(ups) != 1 || !fpRE.MatchString(ups[0]) {
		t.Errorf("upstream headers %q", ups)
	} else if m := fpRE.FindStringSubmatch(ups[0]); (m[2] == "2") != (m[3] == "tools/list,tools/call") {
		t.Errorf("upstream header %q: the call count disagrees with the requests", ups[0])
	}
	checkLatency(t, first.Get(headerDebugLatency), true)
	// The pooled session is reused on the next call.
	if ups := call(ha, "a__echo", true).Values(headerDebugUpstream); len(ups) != 1 || !strings.Contains(ups[0], "session=reused") {
		t.Errorf("second call: %q, want the session reused", ups)
	}
	// per_call: a new upstream session every time, and no credential.
	for range 2 {
		if ups := call(ha, "b__echo", true).Values(headerDebugUpstream); len(ups) != 1 || !regexp.MustCompile(`^server=b; credential=none; session=created; calls=[12]; requests=(tools/list,)?tools/call; ms=`).MatchString(ups[0]) {
			t.Errorf("per_call: %q", ups)
		}
	}
	// Without the header, or from a caller who is not an admin: nothing.
	hp := session(plain)
	for _, hdr := range []http.Header{call(ha, "a__echo", false), call(hp, "a__echo", true)} {
		for _, k := range debugHeaders {
			if v := hdr.Get(k); v != "" {
				t.Errorf("%s: %q, want none", k, v)
			}
		}
	}
	// telemetry.debug_header: every caller may ask.
	on := *g.conf()
	on.Telemetry.DebugHeader = true
	g.compiled.Store(compileConfig(&on))
	got := call(hp, "a__echo", true)
	noSecret(got)
	if c := got.Get(headerDebugCaller); c != "alias=dev-laptop; user=dan; team=web" {
		t.Errorf("caller with debug_header on: %q", c)
	}

	// An answer that streams (progress first): the headers carry what was
	// known when it started, the trailers the final values.
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"c__echo","arguments":{},"_meta":{"progressToken":"p1"}}}`))
	for k, v := range ha {
		req.Header.Set(k, v)
	}
	req.Header.Set(HeaderDebug, "true")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q, want a stream", ct)
	}
	if resp.Header.Get(headerDebugRoute) == "" {
		t.Errorf("a stream's headers carry no route")
	}
	sc := bufio.NewScanner(resp.Body)
	progress := false
	for sc.Scan() {
		progress = progress || strings.Contains(sc.Text(), "notifications/progress")
	}
	if !progress {
		t.Errorf("no progress on the stream")
	}
	if ups := resp.Trailer.Values(headerDebugUpstream); len(ups) != 1 || !strings.HasPrefix(ups[0], "server=c; credential=none; session=") {
		t.Errorf("trailer upstream %q (trailers %v)", ups, resp.Trailer)
	}
	checkLatency(t, resp.Trailer.Get(headerDebugLatency), true)
}

// unionLength counts overlapping upstream calls once.
func TestUnionLength(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(a, b int) [2]time.Time {
		return [2]time.Time{t0.Add(time.Duration(a) * time.Millisecond), t0.Add(time.Duration(b) * time.Millisecond)}
	}
	for _, c := range []struct {
		spans [][2]time.Time
		want  time.Duration
	}{
		{nil, 0},
		{[][2]time.Time{at(0, 10)}, 10 * time.Millisecond},
		{[][2]time.Time{at(0, 10), at(5, 20)}, 20 * time.Millisecond},
		{[][2]time.Time{at(30, 40), at(0, 10), at(2, 8)}, 20 * time.Millisecond},
	} {
		if got := unionLength(c.spans); got != c.want {
			t.Errorf("unionLength(%v) = %v, want %v", c.spans, got, c.want)
		}
	}
}

// A page the gateway served itself (its login and consent pages, the
// console) posts with the gateway's own origin: accepted whatever
// allowed_origins says, on loopback or not; another origin, or one that
// only shares the host, is refused.
func TestSameOriginAccepted(t *testing.T) {
	for _, c := range []struct {
		public, host, origin string
		ok                   bool
	}{
		{"https://mcp.example.com", "mcp.example.com", "https://mcp.example.com", true},
		{"https://mcp.example.com/prefix", "internal:8080", "https://mcp.example.com", true},
		{"", "gw.internal:4000", "http://gw.internal:4000", true},
		{"https://mcp.example.com", "mcp.example.com", "http://mcp.example.com", false},
		{"https://mcp.example.com", "mcp.example.com", "https://evil.example.com", false},
		{"", "gw.internal:4000", "http://gw.internal:4001", false},
		{"", "gw.internal:4000", "null", false},
	} {
		g := New(Options{Config: &config.Config{Listen: "0.0.0.0:4000", PublicURL: c.public}})
		r := httptest.NewRequest(http.MethodPost, "http://"+c.host+"/oauth/login", nil)
		r.Header.Set("Origin", c.origin)
		if err := g.checkOriginHost(r); (err == nil) != c.ok {
			t.Errorf("public_url %q, Host %q, Origin %q: %v, want ok=%v", c.public, c.host, c.origin, err, c.ok)
		}
	}
}

// S16.4 for a caller's own credential: a passthrough server shows its
// source as passthrough with the fingerprint of the token this caller
// sent (two callers, two fingerprints), never the token.
func TestDebugHeaderCallerCredential(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "pt", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("ok"), nil
	})
	pt := httpServer(serveSDK(t, srv).URL)
	pt.Auth = &config.Auth{Type: config.AuthPassthrough}
	cfg := &config.Config{Servers: map[string]*config.Server{"pt": pt}, Telemetry: config.Telemetry{DebugHeader: true}}
	_, gw := startGatewayWith(t, Options{Config: cfg})
	fpRE := regexp.MustCompile(`^server=pt; credential=passthrough; fp=([0-9a-f]{8}); session=`)
	fp := func(token string) string {
		t.Helper()
		code, hdr, body := rpc(t, gw.URL+"/mcp", map[string]string{"X-Mcp-pt-Authorization": "Bearer " + token, HeaderDebug: "true"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pt__echo","arguments":{}}}`)
		if code != 200 {
			t.Fatalf("call: %d %s", code, body)
		}
		ups := hdr.Values(headerDebugUpstream)
		for _, v := range ups {
			if strings.Contains(v, token) {
				t.Errorf("the caller's token in a debug header: %q", v)
			}
		}
		if len(ups) != 1 || !fpRE.MatchString(ups[0]) {
			t.Fatalf("upstream header %q", ups)
		}
		return fpRE.FindStringSubmatch(ups[0])[1]
	}
	a, a2, b := fp("alice-token-51c0"), fp("alice-token-51c0"), fp("bob-token-7d2e")
	if a != a2 || a == b {
		t.Errorf("fingerprints alice %s, alice again %s, bob %s: want one per token", a, a2, b)
	}
}
