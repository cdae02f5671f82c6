package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/tracing/tracetest"
)

// seenCall is what a traced upstream received for one tools/call.
type seenCall struct {
	header http.Header
	params json.RawMessage
}

// tracedUpstream serves tools and records every tools/call's headers and
// params; "slow" sends one progress notification, then its result once
// progressSeen is closed (the client has the progress: the order is
// certain), "broken" answers a JSON-RPC error.
func tracedUpstream(t *testing.T, tools ...string) (url string, calls func() []seenCall) {
	return tracedUpstreamWith(t, nil, tools...)
}

func tracedUpstreamWith(t *testing.T, progressSeen <-chan struct{}, tools ...string) (url string, calls func() []seenCall) {
	var mu sync.Mutex
	var seen []seenCall
	ts := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "up-1")
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"traced","version":"0"}}`
		case "tools/list":
			var l []string
			for _, n := range tools {
				l = append(l, `{"name":"`+n+`","inputSchema":{"type":"object"}}`)
			}
			return `{"tools":[` + strings.Join(l, ",") + `]}`
		case "tools/call":
			mu.Lock()
			seen = append(seen, seenCall{r.Header.Clone(), append(json.RawMessage(nil), m.Params...)})
			mu.Unlock()
			name, _ := jsonrpc.GetString(m.Params, "name")
			switch name {
			case "broken":
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"disk full at /secret/upstream-detail"}}`, m.ID.Raw())
				return ""
			case "slow":
				tok, _ := jsonrpc.GetPath(m.Params, "_meta", "progressToken")
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%s,\"progress\":1,\"total\":2}}\n\n", tok)
				w.(http.Flusher).Flush()
				select {
				case <-progressSeen:
				case <-time.After(5 * time.Second):
				}
				fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n", m.ID.Raw())
				return ""
			}
			return `{"content":[{"type":"text","text":"ok"}]}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"nope"}}`, m.ID.Raw())
		return ""
	})
	return ts.URL, func() []seenCall {
		mu.Lock()
		defer mu.Unlock()
		return append([]seenCall(nil), seen...)
	}
}

// rpcEvents posts one message and returns the last message of the reply,
// calling onEvent with each SSE event as it arrives.
func rpcEvents(t *testing.T, url string, hdr map[string]string, body string, onEvent func([]byte)) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	r := jsonrpc.NewSSEReader(resp.Body, 0)
	var last []byte
	for {
		ev, err := r.Next()
		if err != nil {
			return last
		}
		onEvent(ev.Data)
		last = ev.Data
	}
}

// newTestProvider exports to rcv over OTLP/HTTP, sampling everything,
// with no OTEL_* variable read.
func newTestProvider(t *testing.T, rcv *tracetest.Receiver) *tracing.Provider {
	t.Helper()
	one := 1.0
	p, err := tracing.New(context.Background(), &config.Tracing{Endpoint: rcv.Endpoint, Protocol: tracing.ProtocolHTTP, SampleRatio: &one},
		tracing.Options{Version: "test", LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil || p == nil {
		t.Fatalf("tracing.New: %v %v", p, err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

const (
	// The client's own trace (HTTP header): the gateway's spans continue it.
	clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientParent = "00f067aa0ba902b7"
	// A trace named in params._meta: only ever a link.
	metaTrace  = "0af7651916cd43dd8448eb211c80319c"
	metaParent = "b7ad6b7169203331"
)

// TestTracing runs a real gateway over real HTTP upstreams and exports to
// an OTLP/HTTP receiver: the span tree of a merged-route tools/call with
// progress, an upstream error and a policy-refused call; the link rule;
// what goes upstream; and that no argument, secret or session id is in
// any span.
func TestTracing(t *testing.T) {
	rcv := tracetest.NewHTTP(t)
	p := newTestProvider(t, rcv)
	progressSeen := make(chan struct{})
	alphaURL, alphaCalls := tracedUpstreamWith(t, progressSeen, "slow", "forbidden")
	betaURL, _ := tracedUpstream(t, "broken")
	keys := &memKeys{}
	secret := keys.add(t, store.Key{Alias: "ada-laptop", User: "ada", DenyTools: map[string][]string{"alpha": {"forbidden"}}})
	_, gw := startGatewayWith(t, Options{Tracer: p, Authenticator: newAuth(t, keys, nil), Config: &config.Config{Servers: map[string]*config.Server{
		"alpha": httpServer(alphaURL), "beta": httpServer(betaURL)}}})
	url := gw.URL + "/mcp"

	h := withKey(secret)
	code, hdr, body := rpc(t, url, h, initBody)
	if code != http.StatusOK {
		t.Fatalf("initialize: %d %s", code, body)
	}
	sid := hdr.Get(mcpwire.HeaderSessionID)
	h[mcpwire.HeaderSessionID] = sid
	rpc(t, url, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	call := func(id int, tool string) []byte {
		t.Helper()
		hh := map[string]string{}
		for k, v := range h {
			hh[k] = v
		}
		hh["traceparent"] = "00-" + clientTrace + "-" + clientParent + "-01"
		hh["baggage"] = "user=mallory-header"
		b := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"password":"hunter2-argument"},`+
			`"_meta":{"progressToken":"p-%d","traceparent":"00-%s-%s-01","tracestate":"client=1","baggage":"user=mallory-meta"}}}`, id, tool, id, metaTrace, metaParent)
		return rpcEvents(t, url, hh, b, func(ev []byte) {
			if strings.Contains(string(ev), "notifications/progress") {
				close(progressSeen)
			}
		})
	}
	if r := call(2, "alpha__slow"); !strings.Contains(string(r), "done") {
		t.Fatalf("alpha__slow: %s", r)
	}
	if r := call(3, "beta__broken"); !strings.Contains(string(r), "-32000") {
		t.Fatalf("beta__broken: %s", r)
	}
	if r := call(4, "alpha__forbidden"); !strings.Contains(string(r), "Unknown tool") {
		t.Fatalf("alpha__forbidden: %s", r)
	}
	if code, _, _ := rpc(t, url, map[string]string{"X-Mcpgate-Api-Key": "mcpg_wrong-key-0123456789"}, initBody); code != http.StatusUnauthorized {
		t.Fatalf("wrong key: %d", code)
	}
	if resp, err := http.Get(gw.URL + "/healthz"); err == nil {
		resp.Body.Close()
	}
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.WaitFor(t, "the calls' spans", func(s []tracetest.Span) bool {
		return len(tracetest.Named(s, "tools/call alpha__forbidden")) == 1 && len(tracetest.Named(s, "POST /mcp")) >= 6
	})

	msgOf := func(name string) (msg, httpSpan tracetest.Span) {
		t.Helper()
		m := tracetest.Named(spans, name)
		if len(m) != 1 {
			t.Fatalf("%d spans named %q, want 1", len(m), name)
		}
		msg = m[0]
		httpSpan = tracetest.ByID(spans, msg.ParentID)
		if httpSpan.Name != "POST /mcp" || httpSpan.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Fatalf("%s: parent is %q (%v), want the HTTP request's span", name, httpSpan.Name, httpSpan.Kind)
		}
		// The request's traceparent header is the parent: the client's
		// trace continues, under the span it named.
		if httpSpan.TraceID != clientTrace || httpSpan.ParentID != clientParent || msg.TraceID != clientTrace {
			t.Errorf("%s: trace %s parent %s, want the header's %s / %s", name, httpSpan.TraceID, httpSpan.ParentID, clientTrace, clientParent)
		}
		// params._meta's trace context is a link, never the parent.
		if len(msg.Links) != 1 || msg.Links[0].TraceID != metaTrace || msg.Links[0].SpanID != metaParent {
			t.Errorf("%s: links %+v, want one to %s/%s", name, msg.Links, metaTrace, metaParent)
		}
		return msg, httpSpan
	}
	wantAttrs := func(s tracetest.Span, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got := s.Attrs[k]; got != v {
				t.Errorf("%s: %s = %q, want %q", s.Name, k, got, v)
			}
		}
	}

	// A merged-route call with progress.
	slow, slowHTTP := msgOf("tools/call alpha__slow")
	wantAttrs(slowHTTP, map[string]string{"http.request.method": "POST", "http.route": "/mcp", "http.response.status_code": "200", "mcpgate.caller.alias": "ada-laptop"})
	wantAttrs(slow, map[string]string{
		"mcp.method.name": "tools/call", "gen_ai.tool.name": "alpha__slow", "gen_ai.operation.name": "execute_tool",
		"mcp.session.id": hashHex(sid)[:idPrefixLen], "mcp.protocol.version": "2025-11-25", "jsonrpc.request.id": "2",
		"mcpgate.server": "alpha", "mcpgate.route": "/mcp", "mcpgate.caller.alias": "ada-laptop", "mcpgate.caller.user": "ada",
		"mcpgate.outcome": "ok", "mcpgate.progress.count": "1",
	})
	if slow.Kind != tracepb.Span_SPAN_KIND_SERVER || slow.Status == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("slow: kind %v status %v", slow.Kind, slow.Status)
	}
	if len(slow.Events) != 1 || slow.Events[0].Name != "mcp.progress" {
		t.Errorf("slow: events %+v, want one mcp.progress", slow.Events)
	}
	clients := tracetest.Children(spans, slow.SpanID)
	// The call may arrive before the catalog's first listing of alpha
	// (started when the gateway starts) has ended: it then waits on that
	// listing, or makes it, and the trace truthfully holds that
	// tools/list client span too. Only that one may be beside the call's.
	if len(clients) == 2 && clients[0].Name == "tools/list" && clients[0].Kind == tracepb.Span_SPAN_KIND_CLIENT {
		clients = clients[1:]
	} else if len(clients) == 2 && clients[1].Name == "tools/list" && clients[1].Kind == tracepb.Span_SPAN_KIND_CLIENT {
		clients = clients[:1]
	}
	if len(clients) != 1 || clients[0].Name != "tools/call slow" || clients[0].Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("slow: children %+v, want one client span tools/call slow", clients)
	}
	wantAttrs(clients[0], map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "slow", "mcpgate.server": "alpha", "network.transport": "tcp"})

	// What the upstream received: the gateway's context (the client
	// span) in the header and in _meta, no baggage, the client's
	// traceparent replaced.
	seen := alphaCalls()
	if len(seen) != 1 {
		t.Fatalf("alpha saw %d calls, want 1 (forbidden is refused before it)", len(seen))
	}
	wantTP := "00-" + clientTrace + "-" + clients[0].SpanID + "-01"
	if got := seen[0].header.Get("traceparent"); got != wantTP {
		t.Errorf("upstream traceparent header %q, want %q", got, wantTP)
	}
	if got, _ := jsonrpc.GetPath(seen[0].params, "_meta", "traceparent"); string(got) != `"`+wantTP+`"` {
		t.Errorf("upstream _meta.traceparent %s, want %q", got, wantTP)
	}
	if _, ok := jsonrpc.GetPath(seen[0].params, "_meta", "tracestate"); ok {
		t.Errorf("the client's tracestate went upstream: %s", seen[0].params)
	}
	if seen[0].header.Get("baggage") != "" || strings.Contains(string(seen[0].params), "mallory") {
		t.Errorf("client baggage went upstream: header %q params %s", seen[0].header.Get("baggage"), seen[0].params)
	}

	// An upstream error: status Error, an exception event without the
	// upstream's text or the arguments.
	broken, _ := msgOf("tools/call beta__broken")
	wantAttrs(broken, map[string]string{"mcpgate.server": "beta", "mcpgate.outcome": "error", "mcpgate.fault": "upstream_error", "rpc.response.status_code": "-32000"})
	if broken.Status != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("broken: status %v, want error", broken.Status)
	}
	if len(broken.Events) != 1 || broken.Events[0].Name != "exception" {
		t.Errorf("broken: events %+v, want one exception", broken.Events)
	}
	bc := tracetest.Children(spans, broken.SpanID)
	if len(bc) != 1 || bc[0].Status != tracepb.Status_STATUS_CODE_ERROR || bc[0].Attrs["rpc.response.status_code"] != "-32000" {
		t.Errorf("broken: client spans %+v, want one failed with -32000", bc)
	}

	// A policy-refused call: no upstream span, outcome refused.
	refused, _ := msgOf("tools/call alpha__forbidden")
	wantAttrs(refused, map[string]string{"mcpgate.outcome": "refused", "mcpgate.fault": "policy", "mcpgate.caller.alias": "ada-laptop"})
	if refused.Status != tracepb.Status_STATUS_CODE_ERROR || len(tracetest.Children(spans, refused.SpanID)) != 0 {
		t.Errorf("refused: status %v, children %d", refused.Status, len(tracetest.Children(spans, refused.SpanID)))
	}

	// An unauthenticated request: its HTTP span says refused, and no
	// message span is under it.
	var unauth []tracetest.Span
	for _, s := range tracetest.Named(spans, "POST /mcp") {
		if s.Attrs["http.response.status_code"] == "401" {
			unauth = append(unauth, s)
		}
	}
	if len(unauth) != 1 || unauth[0].Attrs["mcpgate.outcome"] != "refused" || len(tracetest.Children(spans, unauth[0].SpanID)) != 0 {
		t.Errorf("unauthenticated: %+v", unauth)
	}

	// Probes are not traced (a kubelet every few seconds would drown the
	// rest).
	if n := len(tracetest.Named(spans, "GET /healthz")); n != 0 {
		t.Errorf("%d spans for /healthz", n)
	}

	// Each message's span is under the request that carried it: the
	// initialize's request is another trace.
	var init []tracetest.Span // the client's, not an upstream session's
	for _, s := range tracetest.Named(spans, "initialize") {
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
			init = append(init, s)
		}
	}
	if len(init) != 1 || init[0].TraceID == clientTrace || init[0].Attrs["mcp.protocol.version"] != "2025-11-25" {
		t.Errorf("initialize spans %+v: want one, in a trace of its own, with the negotiated revision", init)
	}

	// Nothing secret in any span.
	for _, s := range spans {
		var all []string
		for k, v := range s.Attrs {
			all = append(all, k+"="+v)
		}
		for _, e := range s.Events {
			for k, v := range e.Attrs {
				all = append(all, k+"="+v)
			}
		}
		for _, l := range s.Links {
			for k, v := range l.Attrs {
				all = append(all, k+"="+v)
			}
		}
		text := s.Name + " " + strings.Join(all, " ")
		for _, bad := range []string{"hunter2", secret, sid, "mallory", "/secret/upstream-detail", "password"} {
			if strings.Contains(text, bad) {
				t.Errorf("span %q holds %q: %s", s.Name, bad, text)
			}
		}
	}
}

// Off, the gateway builds no span and sends no trace context upstream:
// a client's traceparent in _meta passes as it is, its baggage does not.
func TestTracingOff(t *testing.T) {
	alphaURL, calls := tracedUpstream(t, "echo")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alphaURL)}})
	url := gw.URL + "/mcp"
	sid := initSession(t, url)
	h := map[string]string{mcpwire.HeaderSessionID: sid, "traceparent": "00-" + clientTrace + "-" + clientParent + "-01"}
	rpc(t, url, h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","_meta":{"traceparent":"00-`+metaTrace+`-`+metaParent+`-01","baggage":"user=mallory"}}}`)
	seen := calls()
	if len(seen) != 1 {
		t.Fatalf("%d calls", len(seen))
	}
	if got := seen[0].header.Get("traceparent"); got != "" {
		t.Errorf("traceparent header %q sent with tracing off", got)
	}
	if got, _ := jsonrpc.GetPath(seen[0].params, "_meta", "traceparent"); !strings.Contains(string(got), metaTrace) {
		t.Errorf("_meta.traceparent %s, want the client's", got)
	}
	if strings.Contains(string(seen[0].params), "mallory") {
		t.Errorf("baggage forwarded: %s", seen[0].params)
	}
}

// startTracedMember is startMember with tracing; it records the baggage
// header of every request that reaches the replica.
func startTracedMember(t *testing.T, upURL string, reg state.Replicas, p *tracing.Provider, baggage *sync.Map) *fleetMember {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	m := &fleetMember{srv: srv, url: "http://" + srv.Listener.Addr().String()}
	cfg := fleetConfig(upURL, 1)
	cfg.Fleet.Advertise = m.url
	m.g, _ = startGatewayWith(t, Options{Config: cfg, Replicas: reg, Tracer: p})
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("Baggage"); v != "" {
			baggage.Store(m.url+" "+r.URL.Path+" "+v, true)
		}
		if o := r.Header.Get("X-Test-Owner"); o != "" {
			r = r.WithContext(WithIdentity(r.Context(), &Identity{Owner: "key:" + hashHex(o), Alias: o, User: o + "-user"}))
		}
		m.g.ServeHTTP(w, r)
	})
	srv.Start()
	t.Cleanup(srv.Close)
	return m
}

// A retry that reaches another replica is forwarded to the one running
// the call (S15): that replica's span is a child of the forwarding
// replica's, in the client's trace, and the client's baggage header
// stops at the first replica.
func TestTracingFleetHop(t *testing.T) {
	rcv := tracetest.NewHTTP(t)
	p := newTestProvider(t, rcv)
	up := askingUpstream(t)
	reg := state.NewMemory(state.MemoryOptions{})
	var baggage sync.Map
	a := startTracedMember(t, up, reg, p, &baggage)
	c := startTracedMember(t, up, reg, p, &baggage)
	_, first, _ := statelessAsk(t, a.url, "alice", "")
	retry := retryWith(t, first, "Lin")
	code, body := statelessPost(t, c.url+"/mcp", map[string]string{"X-Test-Owner": "alice", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "f__ask",
		"traceparent": "00-" + clientTrace + "-" + clientParent + "-01", "baggage": "user=mallory"},
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"f__ask","arguments":{}`+retry+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`)
	if code != http.StatusOK || !strings.Contains(body, "hello Lin") {
		t.Fatalf("retry on C: %d %s", code, body)
	}
	_ = p.ForceFlush(context.Background())
	spans := rcv.WaitFor(t, "both replicas' request spans", func(s []tracetest.Span) bool {
		n := 0
		for _, sp := range tracetest.Named(s, "POST /mcp") {
			if sp.TraceID == clientTrace {
				n++
			}
		}
		return n == 2
	})
	var atC, atA tracetest.Span
	for _, s := range tracetest.Named(spans, "POST /mcp") {
		switch {
		case s.TraceID != clientTrace:
		case s.ParentID == clientParent:
			atC = s
		default:
			atA = s
		}
	}
	if atC.SpanID == "" || atA.ParentID != atC.SpanID {
		t.Errorf("forwarded request's span: parent %q, want the forwarding replica's %q", atA.ParentID, atC.SpanID)
	}
	baggage.Range(func(k, _ any) bool {
		if !strings.HasPrefix(k.(string), c.url+" ") {
			t.Errorf("baggage went past the first replica: %s", k)
		}
		return true
	})
}

// A per_call server opens a session for each call, inside the call's
// trace: the stdio process start, the handshake (with its initialize
// client span) and, for an oauth2 server, the token fetch are spans of
// the call.
func TestTracingConnectSpans(t *testing.T) {
	rcv := tracetest.NewHTTP(t)
	p := newTestProvider(t, rcv)
	var tokens atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens.Add(1)
		w.Header().Set("Content-Type", "application/json")
		// A token that is due for a refresh at once, so that the calls
		// below fetch one, not only the gateway's start.
		io.WriteString(w, `{"access_token":"tok-never-in-a-span","token_type":"Bearer","expires_in":1}`)
	}))
	t.Cleanup(idp.Close)
	gammaURL, _ := tracedUpstream(t, "echo")
	gamma := httpServer(gammaURL)
	gamma.SessionMode = config.SessionPerCall
	gamma.Auth = &config.Auth{Type: config.AuthOAuth2, TokenURL: idp.URL, ClientID: "gw", ClientSecret: "client-secret-never-in-a-span"}
	local, _ := upstreamConfig(t, config.TransportStdio, "local")
	local.SessionMode = config.SessionPerCall
	_, gw := startGatewayWith(t, Options{Tracer: p, Config: &config.Config{Servers: map[string]*config.Server{"gamma": gamma, "local": local}}})
	url := gw.URL + "/mcp"
	sid := initSession(t, url)
	call := func(id int, tool string) {
		t.Helper()
		_, _, body := rpc(t, url, map[string]string{mcpwire.HeaderSessionID: sid, "traceparent": "00-" + clientTrace + "-" + clientParent + "-01"},
			fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"text":"x"}}}`, id, tool))
		if !strings.Contains(string(body), `"result"`) {
			t.Fatalf("%s: %s", tool, body)
		}
	}
	inCall := func(s []tracetest.Span, name, server string) []tracetest.Span {
		var out []tracetest.Span
		for _, sp := range tracetest.Named(s, name) {
			if sp.TraceID == clientTrace && sp.Attrs["mcpgate.server"] == server {
				out = append(out, sp)
			}
		}
		return out
	}
	call(2, "local__echo")
	// A call past the token's refresh time (half its life) fetches one;
	// another fetch (the start's, a list's) may have come between, so a
	// few tries.
	for i := 0; i < 5 && len(inCall(rcv.Spans(), "oauth2.token", "gamma")) == 0; i++ {
		time.Sleep(600 * time.Millisecond)
		call(3+i, "gamma__echo")
		_ = p.ForceFlush(context.Background())
	}
	spans := rcv.WaitFor(t, "the connect spans", func(s []tracetest.Span) bool {
		return len(inCall(s, "mcp.upstream.handshake", "gamma")) > 0 && len(inCall(s, "mcp.upstream.handshake", "local")) > 0 &&
			len(inCall(s, "mcp.upstream.start", "local")) > 0 && len(inCall(s, "oauth2.token", "gamma")) > 0
	})
	for _, server := range []string{"gamma", "local"} {
		hs := inCall(spans, "mcp.upstream.handshake", server)[0]
		var initialize bool
		for _, c := range tracetest.Children(spans, hs.SpanID) {
			initialize = initialize || (c.Name == "initialize" && c.Kind == tracepb.Span_SPAN_KIND_CLIENT)
		}
		if !initialize {
			t.Errorf("%s: the handshake has no initialize client span under it", server)
		}
	}
	if st := inCall(spans, "mcp.upstream.start", "local")[0]; st.Status == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("process start failed: %+v", st)
	}
	if tokens.Load() == 0 {
		t.Error("no token was fetched")
	}
	for _, s := range spans {
		for k, v := range s.Attrs {
			if strings.Contains(v, "never-in-a-span") {
				t.Errorf("span %q attribute %s holds a secret", s.Name, k)
			}
		}
	}
}
