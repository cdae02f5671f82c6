package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestListChangedReachesDownstream: a tool added upstream shows up in the
// downstream's merged list, announced by notifications/tools/list_changed.
func TestListChangedReachesDownstream(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var d downstream
	cs, err := d.client(t).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, handshakeEra)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitStreams(t, g)
	changes := func() int { d.mu.Lock(); defer d.mu.Unlock(); return d.toolsChg }
	seen := changes()
	mcp.AddTool(alpha.server, &mcp.Tool{Name: "fresh"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return textResult("new"), nil, nil
	})
	// As a client does: list again at each list_changed. The gateway
	// also announces one of its own whenever an upstream session
	// (re)starts (onUpstreamSession), which may come first; the upstream's
	// must follow, and the list after it hold the new tool.
	found := false
	for tries := 0; !found; tries++ {
		if tries == 5 {
			t.Fatalf("alpha__fresh missing from the list after %d list_changed", tries)
		}
		waitFor(t, "tools/list_changed", func() bool { return changes() > seen })
		seen = changes()
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range tools.Tools {
			found = found || tl.Name == "alpha__fresh"
		}
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__fresh"}); got != "new" {
		t.Errorf("fresh = %q", got)
	}
}

// TestMergedPagination walks the merged list with the gateway's cursor.
func TestMergedPagination(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	beta := startSDKUpstream(t, "beta")
	_, gw := startGatewayWith(t, Options{PageSize: 5, Config: &config.Config{Servers: map[string]*config.Server{
		"alpha": httpServer(alpha.http.URL), "beta": httpServer(beta.http.URL),
	}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "p"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, handshakeEra)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var names []string
	pages := 0
	cursor := ""
	for {
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, tl := range res.Tools {
			names = append(names, tl.Name)
		}
		if res.NextCursor == "" {
			break
		}
		if strings.Contains(res.NextCursor, "alpha") || strings.Contains(res.NextCursor, "5") {
			t.Errorf("cursor %q is not opaque", res.NextCursor)
		}
		cursor = res.NextCursor
	}
	if len(names) != 16 || pages != 4 {
		t.Errorf("got %d tools in %d pages, want 16 in 4", len(names), pages)
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Errorf("order not deterministic: %q before %q", names[i-1], names[i])
		}
	}
	if _, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: "bogus"}); err == nil || !strings.Contains(err.Error(), "Invalid cursor") {
		t.Errorf("bogus cursor: %v, want Invalid cursor", err)
	}
}

// TestFailureIsolation: a dead upstream is left out of the merged list,
// its calls fail fast naming it, and the other upstream keeps working.
func TestFailureIsolation(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + ln.Addr().String() + "/mcp"
	ln.Close() // nothing listens there now
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"alpha": httpServer(alpha.http.URL),
		"dead":  httpServer(deadURL),
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "iso"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, handshakeEra)
	if err != nil {
		t.Fatalf("initialize with one dead upstream: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 8 {
		t.Errorf("merged list has %d tools, want alpha's 8", len(tools.Tools))
	}
	// A call on the dead route fails fast with an error naming the server.
	start := time.Now()
	cs1, err := mcp.NewClient(&mcp.Implementation{Name: "iso"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp/dead"}, handshakeEra)
	if err == nil {
		_, err = cs1.CallTool(ctx, &mcp.CallToolParams{Name: "anything"})
		cs1.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "dead") {
		t.Errorf("call to dead upstream: %v, want an error naming it", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("dead upstream took %v to fail", d)
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "alpha__add", Arguments: map[string]any{"a": 1, "b": 1}}); got != "2" {
		t.Errorf("alpha__add = %q", got)
	}
}

// TestCapabilityGate: a downstream without sampling never receives a
// sampling request; the upstream gets an error instead.
func TestCapabilityGate(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := 0
	// No CreateMessageHandler: the client does not declare sampling. A
	// middleware counts any request that reaches it anyway.
	c := mcp.NewClient(&mcp.Implementation{Name: "nosampling"}, nil)
	c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "sampling/createMessage" {
				mu.Lock()
				got++
				mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, handshakeEra)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__sample", Arguments: map[string]any{"text": "x"}})
	if err == nil && !res.IsError {
		t.Errorf("sampling without the capability succeeded: %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if got != 0 {
		t.Errorf("downstream received %d sampling requests without declaring sampling", got)
	}
}

// TestCancellationBothWays: a downstream cancel reaches the upstream tool;
// an upstream that gives up on a sampling request cancels it downstream.
// slowServer is a go-sdk server whose tool "wait" takes d unless its call
// is cancelled; started and cancelled hear of each call's start and
// cancellation.
func slowServer(d time.Duration) (srv *mcp.Server, started, cancelled chan struct{}) {
	srv = mcp.NewServer(&mcp.Implementation{Name: "slow"}, nil)
	started, cancelled = make(chan struct{}, 1), make(chan struct{}, 1)
	mcp.AddTool(srv, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			cancelled <- struct{}{}
			return nil, nil, ctx.Err()
		case <-time.After(d):
			return textResult("late"), nil, nil
		}
	})
	return srv, started, cancelled
}

func TestCancellationBothWays(t *testing.T) {
	srv, started, cancelled := slowServer(15 * time.Second)
	mcp.AddTool(srv, &mcp.Tool{Name: "impatient"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer scancel()
		_, err := req.Session.CreateMessage(sctx, &mcp.CreateMessageParams{MaxTokens: 1, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "slow"}}}})
		// Stay in the call long enough for the SDK's notifications/cancelled
		// to travel on this call's stream.
		time.Sleep(500 * time.Millisecond)
		if err == nil {
			return textResult("answered"), nil, nil
		}
		return textResult("gave up"), nil, nil
	})
	up := serveSDK(t, srv)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"slow": httpServer(up.URL)}})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	samplingCancelled := make(chan struct{}, 1)
	c := mcp.NewClient(&mcp.Implementation{Name: "canceller"}, &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			select {
			case <-ctx.Done():
				samplingCancelled <- struct{}{}
				return nil, ctx.Err()
			case <-time.After(10 * time.Second):
				return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "late"}}, nil
			}
		},
	})
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp/slow"}, handshakeEra)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	callCtx, callCancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "wait"})
		errc <- err
	}()
	<-started
	callCancel()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("upstream tool was not cancelled after the downstream cancelled")
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call returned %v", err)
	}

	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "impatient"}); got != "gave up" {
		t.Errorf("impatient = %q", got)
	}
	select {
	case <-samplingCancelled:
	case <-time.After(5 * time.Second):
		t.Error("downstream sampling handler was not cancelled when the upstream gave up")
	}
	// The session still works afterwards.
	if err := cs.Ping(ctx, nil); err != nil {
		t.Errorf("ping after cancellations: %v", err)
	}
}

// TestCrashedStdioUpstream: a stdio upstream that dies fails the call in
// flight at once (naming it), leaves the other upstream alone, and is
// restarted for the next call; sessions hear tools/list_changed.
func TestCrashedStdioUpstream(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	beta := startSDKUpstream(t, "beta")
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"fragile": {Transport: config.TransportStdio, Command: exe, Env: map[string]string{stdioServerEnv: "fragile", extraToolsEnv: "1"}},
		"beta":    httpServer(beta.http.URL),
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Without roots, so the crash is of the pooled process the catalog
	// comes from (a roots client's calls run in a process of its own).
	d := downstream{noRoots: true}
	cs, err := d.client(t).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp"}, handshakeEra)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	waitStreams(t, g)
	start := time.Now()
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__crash"})
	if err == nil || !strings.Contains(err.Error(), "fragile") {
		t.Errorf("call that killed its upstream: %v, want an error naming fragile", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("dead upstream noticed after %v", el)
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "beta__add", Arguments: map[string]any{"a": 1, "b": 2}}); got != "3" {
		t.Errorf("other upstream after the crash: %q", got)
	}
	// The next call restarts the process and succeeds.
	var got string
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__echo", Arguments: map[string]any{"text": "back"}})
		if err == nil && !res.IsError {
			got = res.Content[0].(*mcp.TextContent).Text
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream not restarted: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != "fragile:back" {
		t.Errorf("after restart: %q", got)
	}
	waitFor(t, "tools/list_changed after the restart", func() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.toolsChg > 0 })
}

// waitStreams waits until every live session has its standalone stream
// (the GET stream an SDK client opens after initialize), so notifications
// broadcast next have somewhere to go.
func waitStreams(t testing.TB, g *Gateway) {
	t.Helper()
	waitFor(t, "GET streams", func() bool {
		n, ready := 0, true
		for _, s := range g.sessions.All() {
			if s.Stream() == nil {
				ready = false
			}
			n++
		}
		return n > 0 && ready
	})
}

// TestNoCrossSessionGuess: on a shared stdio upstream, a sampling request
// that cannot be tied to one downstream session is refused, never sent to
// another session's client; tied to one, it reaches that client. (The
// clients declare no roots: with roots each would have an upstream session
// of its own, see TestRootsStayWithTheirClient, and nothing to guess.)
func TestNoCrossSessionGuess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"shared": {Transport: config.TransportStdio, Command: exe, Env: map[string]string{stdioServerEnv: "shared", extraToolsEnv: "1"}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func(got *atomic.Int64) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "c"}, &mcp.ClientOptions{
			Capabilities: &mcp.ClientCapabilities{},
			CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				got.Add(1)
				return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "mine"}}, nil
			},
		})
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp/shared"}, handshakeEra)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	var gotA, gotB atomic.Int64
	a, b := connect(&gotA), connect(&gotB)

	// B's tool asks for sampling 500ms in; by then A's call (more recent)
	// is in flight too, so "the most recent call" would be A's.
	lateDone := make(chan string)
	go func() {
		res, err := b.CallTool(ctx, &mcp.CallToolParams{Name: "late_sample"})
		if err != nil {
			lateDone <- err.Error()
			return
		}
		lateDone <- res.Content[0].(*mcp.TextContent).Text
	}()
	time.Sleep(100 * time.Millisecond)
	a.CallTool(ctx, &mcp.CallToolParams{Name: "slow"})
	late := <-lateDone
	if n := gotA.Load(); n != 0 {
		t.Errorf("session A's client received %d sampling requests caused by session B", n)
	}
	if !strings.HasPrefix(late, "refused") {
		t.Errorf("ambiguous sampling = %q, want it refused", late)
	}
	// Alone in flight, B's call is attributed to B.
	if got := callText(t, ctx, b, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "y"}}); got != "sampled:mine" {
		t.Errorf("sample alone = %q", got)
	}
	if gotB.Load() == 0 || gotA.Load() != 0 {
		t.Errorf("sampling requests: A=%d B=%d, want A=0 B>0", gotA.Load(), gotB.Load())
	}
}

// TestCloseDrainsInFlight: shutting down waits for a call in flight to
// finish (bounded) and refuses new work meanwhile.
func TestCloseDrainsInFlight(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "nap"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		time.Sleep(400 * time.Millisecond)
		return textResult("rested"), nil, nil
	})
	up := serveSDK(t, srv)
	g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"slow": httpServer(up.URL)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "d"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw.URL + "/mcp/slow"}, handshakeEra)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	result := make(chan string, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "nap"})
		if err != nil {
			result <- err.Error()
			return
		}
		result <- res.Content[0].(*mcp.TextContent).Text
	}()
	waitFor(t, "the call to be in flight", func() bool { return g.inflight.Load() == 1 })
	g.Shutdown()
	// New work is refused while draining.
	status, _, _ := rpc(t, gw.URL+"/mcp/slow", nil, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if status != http.StatusServiceUnavailable {
		t.Errorf("new request while draining: %d, want 503", status)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	start := time.Now()
	if err := g.Close(cctx); err != nil {
		t.Errorf("close: %v", err)
	}
	if got := <-result; got != "rested" {
		t.Errorf("in-flight call during shutdown = %q, want it completed", got)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("close took %v", el)
	}
}

// TestIdleSessionsExpire: an idle session is ended after the idle timeout;
// one with a request in flight is not.
//
// The busy session's call lasts until the test has seen the idle one go
// (it was a 1200ms nap: a sweep seen later than that, on a loaded
// machine, found both sessions idle).
func TestIdleSessionsExpire(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow"}, nil)
	napping, wake := make(chan struct{}, 1), make(chan struct{})
	var woken sync.Once
	rouse := func() { woken.Do(func() { close(wake) }) }
	t.Cleanup(rouse) // before the upstream's Close waits for the call
	mcp.AddTool(srv, &mcp.Tool{Name: "nap"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		napping <- struct{}{}
		<-wake
		return textResult("rested"), nil, nil
	})
	up := serveSDK(t, srv)
	g, gw := startGatewayWith(t, Options{IdleTimeout: 300 * time.Millisecond,
		Config: &config.Config{Servers: map[string]*config.Server{"slow": httpServer(up.URL)}}})
	url := gw.URL + "/mcp/slow"
	idle := initSession(t, url)
	busy := initSession(t, url)
	done := make(chan string, 1)
	go func() {
		_, _, body := rpc(t, url, map[string]string{"Mcp-Session-Id": busy}, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"nap"}}`)
		done <- string(body)
	}()
	select {
	case <-napping:
	case body := <-done:
		t.Fatalf("the busy session's call ended before its nap: %s", body)
	case <-time.After(10 * time.Second):
		t.Fatal("the busy session's call never reached the upstream")
	}
	waitFor(t, "the idle session to expire", func() bool { return g.lookupSession(idle) == nil })
	if g.lookupSession(busy) == nil {
		t.Error("a session with a request in flight was expired")
	}
	rouse()
	if body := <-done; !strings.Contains(body, "rested") {
		t.Errorf("call on the busy session: %s", body)
	}
}
