package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/redis"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store"
)

// fleetMember is one replica of a test fleet: its gateway and the server
// its advertise URL names.
type fleetMember struct {
	g   *Gateway
	srv *httptest.Server
	url string
}

// kill makes the replica unreachable the way a crashed process is: its
// connections drop and its port refuses, while its registry entry lives
// on until the TTL.
func (m *fleetMember) kill() {
	m.srv.CloseClientConnections()
	m.srv.Close()
}

// startMember starts a replica of the fleet whose registry is reg: the
// same session keys as every other (fleetConfig key 1), its own advertise
// URL. X-Test-Owner names the caller, as in ownerGateway.
func startMember(t testing.TB, upURL string, reg state.Replicas, auth ...Authenticator) *fleetMember {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	m := &fleetMember{srv: srv, url: "http://" + srv.Listener.Addr().String()}
	cfg := fleetConfig(upURL, 1)
	cfg.Fleet.Advertise = m.url
	o := Options{Config: cfg, Replicas: reg}
	if len(auth) > 0 {
		o.Authenticator = auth[0]
	}
	m.g, _ = startGatewayWith(t, o)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("X-Test-Owner"); o != "" {
			r = r.WithContext(WithIdentity(r.Context(), &Identity{Owner: "key:" + hashHex(o), Alias: o, User: o + "-user"}))
		}
		m.g.ServeHTTP(w, r)
	})
	srv.Start()
	t.Cleanup(srv.Close) // before the gateway's Close (LIFO)
	return m
}

// askingUpstream is a 2025-11-25 go-sdk server whose tool "ask" elicits a
// name and greets it.
func askingUpstream(t testing.TB) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Name?", RequestedSchema: map[string]any{"type": "object"}})
		if err != nil {
			return nil, err
		}
		return textResult("hello " + fmt.Sprint(r.Content["name"])), nil
	})
	return serveSDK(t, srv).URL
}

// replyRouter is a load balancer that sends a client's JSON-RPC replies
// to one replica and everything else to another: the worst case of round
// robin, every time.
type replyRouter struct {
	requests, replies string // host:port
	mu                sync.Mutex
	ids               []string // ids of the replies routed
}

func (rr *replyRouter) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.URL.Host, out.Host = rr.requests, ""
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		if m, err := jsonrpc.Decode(body); err == nil && m.IsResponse() {
			out.URL.Host = rr.replies
			rr.mu.Lock()
			rr.ids = append(rr.ids, m.ID.String())
			rr.mu.Unlock()
		}
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	}
	return http.DefaultTransport.RoundTrip(out)
}

func hostOf(url string) string { return strings.TrimPrefix(url, "http://") }

// S15, issue 14 §3: on a 2025-11-25 session, an elicitation asked during
// a call on replica A is answered through replica B (the load balancer
// sends the reply there); B forwards it to A, whose call completes with
// the answer. On one process-local registry and on Redis.
func TestReplyReachesTheAskingReplica(t *testing.T) {
	up := askingUpstream(t)
	backends := map[string]func(t *testing.T) state.Replicas{
		"memory": func(*testing.T) state.Replicas { return state.NewMemory(state.MemoryOptions{}) },
		"redis": func(t *testing.T) state.Replicas {
			srv := redistest.New(t)
			b, err := redis.Open(redis.Options{URL: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			reg := open(t)
			a, b := startMember(t, up, reg), startMember(t, up, reg)
			// B's count is read as it joins; A's at its next beat.
			waitFor(t, "A to see B", func() bool { return a.g.FleetSize() == 2 && b.g.FleetSize() == 2 })
			lb := &replyRouter{requests: hostOf(a.url), replies: hostOf(b.url)}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "fleet-client", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
				},
			}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url + "/mcp", HTTPClient: &http.Client{Transport: lb}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "f__ask", Arguments: map[string]any{}}); got != "hello Ada" {
				t.Errorf("call on A answered through B: %q", got)
			}
			lb.mu.Lock()
			ids := lb.ids
			lb.mu.Unlock()
			if len(ids) != 1 || !strings.HasPrefix(ids[0], `"mcpg-`+a.g.instance+`-`) {
				t.Errorf("replies routed to B: %q, want one to an id naming A (%s)", ids, a.g.instance)
			}
			if n := localReport(b.g).Total; n != 1 {
				t.Errorf("B holds %d sessions: the reply did not pass through it", n)
			}
		})
	}
}

// A reply whose asking replica crashed (registry entry still live, port
// refusing) or left the fleet is a clear error for the client at once,
// never a hang or a silent 202; one to a request that replica no longer
// waits for is refused, as on one replica (SPEC S24).
func TestReplyToAGoneReplica(t *testing.T) {
	up := askingUpstream(t)
	reg := state.NewMemory(state.MemoryOptions{})
	a, b := startMember(t, up, reg), startMember(t, up, reg)
	owner := map[string]string{"X-Test-Owner": "alice"}
	code, hdr, initRes := rpc(t, a.url+"/mcp", owner, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}`)
	if code != 200 {
		t.Fatalf("initialize on A: %d %s", code, initRes)
	}
	sid := hdr.Get(mcpwire.HeaderSessionID)
	if code, _ := send(t, http.MethodPost, a.url+"/mcp", "alice", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized: %d", code)
	}
	reply := func(id string) (int, string, time.Duration) {
		start := time.Now()
		code, body := send(t, http.MethodPost, b.url+"/mcp", "alice", sid, `{"jsonrpc":"2.0","id":`+id+`,"result":{"action":"accept","content":{"name":"Bo"}}}`)
		return code, body, time.Since(start)
	}

	// A late reply: A is there but waits for nothing: refused, as on one
	// replica (SPEC S24).
	late := askIDOn(a.g.instance)
	if code, body, _ := reply(late); code != http.StatusBadRequest || body != `{"jsonrpc":"2.0","id":`+late+`,"error":{"code":-32600,"message":"Invalid Request: no request with id `+jsonEscape(late)+` is pending for this session"}}` {
		t.Errorf("late reply through B: %d %s", code, body)
	}
	// A replica that was never in the fleet.
	if code, body, _ := reply(askIDOn("0123456789ab")); code != http.StatusGone || !strings.Contains(body, "is gone") {
		t.Errorf("reply to an unknown replica: %d %s", code, body)
	}

	// A call on A waits for the client's answer ...
	req, _ := http.NewRequest(http.MethodPost, a.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"f__ask","arguments":{}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Test-Owner", "alice")
	req.Header.Set(mcpwire.HeaderSessionID, sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ev, err := jsonrpc.NewSSEReader(resp.Body, 0).Next()
	if err != nil {
		t.Fatalf("no elicitation on the call's stream: %v", err)
	}
	ask, err := jsonrpc.Decode(ev.Data)
	if err != nil || ask.Method != "elicitation/create" {
		t.Fatalf("first event %s: %v", ev.Data, err)
	}
	// ... and A crashes before it comes.
	a.kill()
	code, body, took := reply(ask.ID.Raw())
	if code != http.StatusBadGateway || !strings.Contains(body, "cannot be reached") || took > 3*time.Second {
		t.Errorf("reply to a crashed replica: %d %s after %v", code, body, took)
	}
	var e struct {
		Error *jsonrpc.Error `json:"error"`
	}
	if json.Unmarshal([]byte(body), &e) != nil || e.Error == nil {
		t.Errorf("not a JSON-RPC error: %s", body)
	}

	// Shut down cleanly, A leaves the registry: B says it is gone.
	a.g.Shutdown()
	waitFor(t, "A to leave the registry", func() bool { return b.g.FleetSize() == 1 })
	if code, body, took := reply(ask.ID.Raw()); code != http.StatusGone || !strings.Contains(body, "is gone") || took > 3*time.Second {
		t.Errorf("reply to a replica that left: %d %s after %v", code, body, took)
	}
	t.Logf("crashed replica: error after %v", took)
}

// A replica that accepts the connection but never answers (hung, not
// dead) still gives the client its error within the peer timeout.
func TestReplyToAHungReplica(t *testing.T) {
	reg := state.NewMemory(state.MemoryOptions{})
	b := startMember(t, faultyUpstream(t).URL, reg)
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	if err := reg.Heartbeat(context.Background(), state.Replica{ID: "feedfacecafe", URL: hung.URL}, time.Minute); err != nil {
		t.Fatal(err)
	}
	sid := initOwned(t, b.url, "alice")
	start := time.Now()
	code, body := send(t, http.MethodPost, b.url+"/mcp", "alice", sid, `{"jsonrpc":"2.0","id":`+askIDOn("feedfacecafe")+`,"result":{}}`)
	took := time.Since(start)
	if code != http.StatusBadGateway || !strings.Contains(body, "cannot be reached") || took > 3*time.Second {
		t.Errorf("reply to a hung replica: %d %s after %v", code, body, took)
	}
	t.Logf("hung replica: error after %v", took)
}

// statelessAsk is a 2026-07-28 tools/call of f__ask as owner; extra goes in
// its params.
func statelessAsk(t *testing.T, url, owner, extra string) (int, string, time.Duration) {
	t.Helper()
	start := time.Now()
	code, body := statelessPost(t, url+"/mcp", map[string]string{"X-Test-Owner": owner, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "f__ask"},
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"f__ask","arguments":{}`+extra+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`)
	return code, body, time.Since(start)
}

// retryWith answers the one question of an input_required result.
func retryWith(t *testing.T, body, name string) string {
	t.Helper()
	var round struct {
		Result struct {
			ResultType    string                     `json:"resultType"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  string                     `json:"requestState"`
		} `json:"result"`
	}
	if json.Unmarshal([]byte(body), &round) != nil || round.Result.ResultType != "input_required" || len(round.Result.InputRequests) != 1 {
		t.Fatalf("want one question: %s", body)
	}
	if !strings.HasPrefix(round.Result.RequestState, sealedStatePrefix) {
		t.Fatalf("requestState %q is not sealed", round.Result.RequestState)
	}
	for k := range round.Result.InputRequests {
		return `,"inputResponses":{"` + k + `":{"action":"accept","content":{"name":"` + name + `"}}},"requestState":"` + round.Result.RequestState + `"`
	}
	return ""
}

// S15, S18.1, issue 14 §3: a 2026-07-28 call's input_required round,
// started on A, is answered on C: C forwards the retry (with the caller's
// headers, which A authenticates again) to A and relays the result. A
// retry whose replica crashed or left is a 400 at once, naming what to do.
func TestRetryReachesTheReplicaRunningTheCall(t *testing.T) {
	up := askingUpstream(t)
	reg := state.NewMemory(state.MemoryOptions{})
	a, b, c := startMember(t, up, reg), startMember(t, up, reg), startMember(t, up, reg)

	_, first, _ := statelessAsk(t, a.url, "alice", "")
	retry := retryWith(t, first, "Lin")
	// Another caller's retry is refused on C like any foreign state,
	// without a hop.
	if code, body, _ := statelessAsk(t, c.url, "bob", retry); code != http.StatusBadRequest || !strings.Contains(body, "not issued to this caller") {
		t.Errorf("bob's retry on C: %d %s", code, body)
	}
	if code, body, _ := statelessAsk(t, c.url, "alice", retry); code != 200 || !strings.Contains(body, `"text":"hello Lin"`) {
		t.Fatalf("retry on C of a call on A: %d %s", code, body)
	}
	if n := countExchanges(c.g) + countExchanges(b.g); n != 0 {
		t.Errorf("B and C hold %d exchanges: the call moved", n)
	}

	// An origin outside the registry is never contacted, even in a
	// state sealed by the fleet's own key.
	var trapped atomic.Int32
	trap := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { trapped.Add(1) }))
	defer trap.Close()
	tok, err := c.g.ring.SealState(fleet.State{Exchange: "x", Round: 1, Origin: trap.URL}, "key:"+hashHex("alice"))
	if err != nil {
		t.Fatal(err)
	}
	forged := `,"inputResponses":{"q":{"action":"accept"}},"requestState":"` + sealedStatePrefix + tok + `"`
	if code, body, _ := statelessAsk(t, c.url, "alice", forged); code != http.StatusBadRequest || !strings.Contains(body, "is gone") || trapped.Load() != 0 {
		t.Errorf("state naming a URL outside the fleet: %d %s (the URL was contacted %d times)", code, body, trapped.Load())
	}

	// The replica running the call crashes between the rounds.
	_, second, _ := statelessAsk(t, a.url, "alice", "")
	retry = retryWith(t, second, "Max")
	a.kill()
	code, body, took := statelessAsk(t, b.url, "alice", retry)
	if code != http.StatusBadRequest || !strings.Contains(body, "the gateway replica that ran this call is gone; send the request again without requestState") || took > 3*time.Second {
		t.Errorf("retry of a crashed replica's call: %d %s after %v", code, body, took)
	}
	if !strings.Contains(body, `"id":1`) {
		t.Errorf("the error does not answer the request: %s", body)
	}
	t.Logf("crashed replica: retry refused after %v", took)
	a.g.Shutdown()
	waitFor(t, "A to leave the registry", func() bool { return b.g.FleetSize() == 2 })
	if code, body, took := statelessAsk(t, b.url, "alice", retry); code != http.StatusBadRequest || !strings.Contains(body, "is gone") || took > 3*time.Second {
		t.Errorf("retry of a departed replica's call: %d %s after %v", code, body, took)
	}
}

// The origin's reply to a forwarded retry streams through: an event the
// call sends after the answer reaches the client at once, long before
// the result.
func TestForwardedRetryStreams(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Name?", RequestedSchema: map[string]any{"type": "object"}})
		if err != nil {
			return nil, err
		}
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Message: "after-answer"})
		time.Sleep(500 * time.Millisecond)
		return textResult("hello " + fmt.Sprint(r.Content["name"])), nil
	})
	up := serveSDK(t, srv).URL
	reg := state.NewMemory(state.MemoryOptions{})
	a, c := startMember(t, up, reg), startMember(t, up, reg)
	const meta = `,"_meta":{"progressToken":"p-9","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
	body := func(extra string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"f__ask","arguments":{}` + extra + meta + `}}`
	}
	hdr := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "f__ask"}
	_, first := statelessPost(t, a.url+"/mcp", hdr, body(""))
	last := first
	if i := strings.LastIndex(first, "data: "); i >= 0 {
		last = strings.TrimSpace(first[i+len("data: "):]) // the round's result, after the events
	}
	req, _ := http.NewRequest(http.MethodPost, c.url+"/mcp", strings.NewReader(body(retryWith(t, last, "Sam"))))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("retry on C: %d %s", resp.StatusCode, ct)
	}
	sse := jsonrpc.NewSSEReader(resp.Body, 0)
	var progressAt, resultAt time.Duration
	for {
		ev, err := sse.Next()
		if err != nil {
			break
		}
		switch {
		case strings.Contains(string(ev.Data), "after-answer"):
			progressAt = time.Since(start)
		case strings.Contains(string(ev.Data), "hello Sam"):
			resultAt = time.Since(start)
		}
	}
	if progressAt == 0 || resultAt == 0 || resultAt-progressAt < 300*time.Millisecond {
		t.Errorf("progress at %v, result at %v: want the progress relayed at once, ~500ms before the result", progressAt, resultAt)
	}
	t.Logf("relayed progress after %v, result after %v", progressAt, resultAt)
}

// A forwarded retry costs its caller one request of their rate limit,
// taken where the client sent it, not a second one on the replica
// running the call (which still authenticates the key).
func TestForwardedRetryCountsOnce(t *testing.T) {
	up := askingUpstream(t)
	reg := state.NewMemory(state.MemoryOptions{})
	keys := &memKeys{}
	secret := keys.add(t, store.Key{Alias: "k", RateLimitRPM: 2})
	// Each replica its own buckets (no shared limiter): what A takes is
	// seen on A alone.
	a := startMember(t, up, reg, newAuth(t, keys, testLogger(t)))
	c := startMember(t, up, reg, newAuth(t, keys, testLogger(t)))
	hdr := map[string]string{callers.HeaderAPIKey: secret, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "f__ask"}
	ask := func(url, extra string) (int, string) {
		return statelessPost(t, url+"/mcp", hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"f__ask","arguments":{}`+extra+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`)
	}
	_, first := ask(a.url, "") // A: 1 of 2
	if code, body := ask(c.url, retryWith(t, first, "Kit")); code != 200 || !strings.Contains(body, "hello Kit") {
		t.Fatalf("retry on C: %d %s", code, body)
	}
	list := func() int {
		code, _ := statelessPost(t, a.url+"/mcp", map[string]string{callers.HeaderAPIKey: secret, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
			`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+statelessMetaJSON+`}}`)
		return code
	}
	if code := list(); code != 200 {
		t.Errorf("A's second request of the key: %d (the forwarded retry was counted on A too)", code)
	}
	if code := list(); code != http.StatusTooManyRequests {
		t.Errorf("A's third request of a 2-per-minute key: %d, want 429", code)
	}
}

func countExchanges(g *Gateway) int {
	n := 0
	g.exchanges.each(func(*exchange) { n++ })
	return n
}

// The internal endpoint answers only a request whose peer header verifies
// for its method, path, body and time; a gateway without fleet keys has
// no such endpoint, and a forged header on a public path is refused too.
func TestPeerEndpointRefusesUnauthenticated(t *testing.T) {
	reg := state.NewMemory(state.MemoryOptions{})
	up := faultyUpstream(t)
	a := startMember(t, up.URL, reg)
	body := []byte(`{"jsonrpc":"2.0","id":` + askIDOn(a.g.instance) + `,"result":{}}`)
	other, err := fleet.NewRing([][]byte{bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	post := func(path string, hdr string, b []byte) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, a.url+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if hdr != "" {
			req.Header.Set(fleetrelay.HeaderPeer, hdr)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	sign := func(r *fleet.Ring, target string, body []byte, at time.Time) string {
		return r.SignPeer(fleet.PeerRequest{Method: http.MethodPost, Target: target, Body: body}, at)
	}
	good := sign(a.g.ring, fleetrelay.DeliverPath, body, now)
	otherID := []byte(`{"jsonrpc":"2.0","id":` + askIDOn("0123456789ab") + `,"result":{}}`)
	pa, _ := fleet.ParsePeerAuth(good)
	pa.MAC[3] ^= 0x40
	for name, c := range map[string]struct {
		path, hdr string
		body      []byte
		want      int
	}{
		"absent":                  {fleetrelay.DeliverPath, "", body, http.StatusUnauthorized},
		"garbage":                 {fleetrelay.DeliverPath, "Bearer abc", body, http.StatusUnauthorized},
		"forged MAC":              {fleetrelay.DeliverPath, pa.String(), body, http.StatusUnauthorized},
		"stale":                   {fleetrelay.DeliverPath, sign(a.g.ring, fleetrelay.DeliverPath, body, now.Add(-2*time.Minute)), body, http.StatusUnauthorized},
		"another fleet's key":     {fleetrelay.DeliverPath, sign(other, fleetrelay.DeliverPath, body, now), body, http.StatusUnauthorized},
		"another body":            {fleetrelay.DeliverPath, good, []byte(`{"jsonrpc":"2.0","id":"mcpg-x-2","result":{}}`), http.StatusUnauthorized},
		"signed for another path": {fleetrelay.DeliverPath, sign(a.g.ring, "/mcp", body, now), body, http.StatusUnauthorized},
		"forged on a public path": {"/mcp", pa.String(), []byte(callBody), http.StatusUnauthorized},
		"unknown internal path":   {"/fleet/v1/other", good, body, http.StatusNotFound},
		// Authenticated: nothing waits for that id (from no one).
		"valid": {fleetrelay.DeliverPath, good, body, http.StatusNotFound},
		// Authenticated, but for another replica (two advertising one URL).
		"valid, another replica's id": {fleetrelay.DeliverPath, sign(a.g.ring, fleetrelay.DeliverPath, otherID, now), otherID, http.StatusMisdirectedRequest},
	} {
		if code, out := post(c.path, c.hdr, c.body); code != c.want {
			t.Errorf("%s: %d %s, want %d", name, code, out, c.want)
		}
	}
	// A forwarded client request is served with the client address the
	// forwarding replica signed (anonymous owners and key CIDR rules go
	// by it, not by the replica's address); one the MAC does not cover
	// is refused.
	hop := func(client, signed string) int {
		b := []byte(initBody)
		req, _ := http.NewRequest(http.MethodPost, a.url+"/mcp", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(fleetrelay.HeaderPeerClient, client)
		req.Header.Set(fleetrelay.HeaderPeer, a.g.ring.SignPeer(fleet.PeerRequest{Method: http.MethodPost, Target: "/mcp", Client: signed, Body: b}, now))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := hop("192.0.2.9:1234", "192.0.2.8:1234"); code != http.StatusUnauthorized {
		t.Errorf("a client address the MAC does not cover: %d", code)
	}
	if code := hop("192.0.2.9:1234", "192.0.2.9:1234"); code != 200 {
		t.Errorf("a forwarded initialize: %d", code)
	}
	if rep := localReport(a.g); rep.Total != 1 || rep.Sessions[0].ClientIP != "192.0.2.9" {
		t.Errorf("the forwarded session's client: %+v", rep.Sessions)
	}

	req, _ := http.NewRequest(http.MethodGet, a.url+fleetrelay.DeliverPath, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Without fleet keys (or without a registry) there is no endpoint.
	for name, o := range map[string]Options{
		"no keys":     {Config: &config.Config{Servers: map[string]*config.Server{"f": httpServer(up.URL + "/mcp")}}, Replicas: reg},
		"no registry": {Config: fleetConfig(up.URL, 1)},
		"no advertise": {Config: func() *config.Config {
			cfg := fleetConfig(up.URL, 1)
			cfg.Fleet.Advertise = ""
			return cfg
		}(), Replicas: reg},
	} {
		_, gw := startGatewayWith(t, o)
		req, _ := http.NewRequest(http.MethodPost, gw.URL+fleetrelay.DeliverPath, bytes.NewReader(body))
		req.Header.Set(fleetrelay.HeaderPeer, good)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", name, resp.StatusCode)
		}
	}
}

// fakeReplicas is a registry whose answers a test sets.
type fakeReplicas struct {
	mu   sync.Mutex
	down bool
	live []state.Replica
	left []string
}

func (f *fakeReplicas) Heartbeat(context.Context, state.Replica, time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return fmt.Errorf("heartbeat: %w", state.ErrUnavailable)
	}
	return nil
}

func (f *fakeReplicas) LiveReplicas(context.Context) ([]state.Replica, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, fmt.Errorf("live replicas: %w", state.ErrUnavailable)
	}
	return append([]state.Replica(nil), f.live...), nil
}

func (f *fakeReplicas) Deregister(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = append(f.left, id)
	return nil
}

func (f *fakeReplicas) set(down bool, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
	f.live = f.live[:0]
	for i := range n {
		f.live = append(f.live, state.Replica{ID: fmt.Sprint(i)})
	}
}

// The live count the rate limits' fallback divides by follows the
// registry, and stays at the last count while the registry is down (the
// very time the fallback applies); a clean shutdown deregisters.
func TestFleetSizeFollowsTheRegistry(t *testing.T) {
	reg := &fakeReplicas{}
	reg.set(false, 3)
	g, _ := startGatewayWith(t, Options{Config: fleetConfig(faultyUpstream(t).URL, 1), Replicas: reg})
	if n := g.FleetSize(); n != 3 {
		t.Fatalf("after Start: %d, want 3", n)
	}
	reg.set(false, 4)
	waitFor(t, "the count to follow", func() bool { return g.FleetSize() == 4 })
	reg.set(true, 0)
	time.Sleep(2 * fleetrelay.HeartbeatInterval)
	if n := g.FleetSize(); n != 4 {
		t.Errorf("registry down: %d, want the last known 4", n)
	}
	reg.set(false, 2)
	waitFor(t, "the count after the outage", func() bool { return g.FleetSize() == 2 })
	g.Shutdown()
	waitFor(t, "a deregistration", func() bool {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return len(reg.left) == 1 && reg.left[0] == g.instance
	})

	// The heartbeat loop ends with the gateway.
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Close(cctx); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "relay.(*Peers)") {
		t.Errorf("a peers goroutine outlived Close:\n%s", stacks)
	}

	if n := (&Gateway{}).FleetSize(); n != 0 {
		t.Errorf("outside a fleet: %d", n)
	}
}

// askIDOn is the raw JSON of an id of askID's fleet form naming replica.
func askIDOn(replica string) string { return `"mcpg-` + replica + `-` + randomID() + `"` }

// jsonEscape is s as it appears inside a JSON string.
func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// BenchmarkReplyDelivery: what a reply costs when it lands on the replica
// that asked, and when it lands on another one and is forwarded (one more
// HTTP round trip on loopback, the peer MAC, a registry read from memory).
func BenchmarkReplyDelivery(b *testing.B) {
	reg := state.NewMemory(state.MemoryOptions{})
	up := askingUpstream(b)
	a, other := startMember(b, up, reg), startMember(b, up, reg)
	post := func(url, sid, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set(mcpwire.HeaderSessionID, sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(mcpwire.HeaderSessionID)
	}
	code, sid := post(a.url, "", initBody)
	if code != 200 || sid == "" {
		b.Fatalf("initialize: %d", code)
	}
	post(a.url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	by := sessionParty(a.g.lookupSession(sid))
	for _, c := range []struct{ name, url string }{{"here", a.url}, {"forwarded", other.url}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				id := a.g.askID()
				ch := make(chan *jsonrpc.Message, 1)
				a.g.pending.put(id.Raw(), by, ch)
				if code, _ := post(c.url, sid, `{"jsonrpc":"2.0","id":`+id.Raw()+`,"result":{"action":"accept"}}`); code != http.StatusAccepted {
					b.Fatalf("reply: %d", code)
				}
				<-ch
			}
		})
	}
}
