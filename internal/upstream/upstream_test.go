package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// transportCase builds a fake upstream of one transport.
type transportCase struct {
	name string
	// start returns the server config and a way to read the cancellations
	// the upstream received.
	start func(t *testing.T) (*config.Server, func(s Session) string)
}

func cancelledViaTool(s Session) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := callTool(ctx, s, "cancelled", "")
	if err != nil {
		return "error: " + err.Error()
	}
	return out
}

func cancelledOf(f *fake) func(Session) string {
	return func(Session) string {
		f.mu.Lock()
		defer f.mu.Unlock()
		return strings.Join(f.cancelled, "\n")
	}
}

var transports = []transportCase{
	{"stdio", func(t *testing.T) (*config.Server, func(Session) string) {
		return stdioServer(t, "raw", nil), cancelledViaTool
	}},
	{"streamable-sse", func(t *testing.T) (*config.Server, func(Session) string) {
		f := newStreamableFake(t)
		return f.server("http"), cancelledOf(f.fake)
	}},
	{"streamable-json", func(t *testing.T) (*config.Server, func(Session) string) {
		f := newStreamableFake(t)
		f.jsonReplies = true
		return f.server("http"), cancelledOf(f.fake)
	}},
	{"sse", func(t *testing.T) (*config.Server, func(Session) string) {
		f := newSSEFake(t)
		return f.server("sse"), cancelledOf(f.fake)
	}},
}

func TestHandshakeAndCall(t *testing.T) {
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := tc.start(t)
			s := connect(t, Options{Server: srv, ClientName: "gw", ClientVersion: "9.9",
				ClientCapabilities: json.RawMessage(`{"roots":{}}`)})
			info := s.Info()
			if info.ProtocolVersion != mcpwire.LatestHandshake {
				t.Errorf("ProtocolVersion = %q", info.ProtocolVersion)
			}
			if info.HasInstructions {
				t.Errorf("absent instructions reported present (%q)", info.Instructions)
			}
			if !info.Caps.Tools || !info.Caps.ToolsListChanged || !info.Caps.Logging {
				t.Errorf("Caps = %+v", info.Caps)
			}
			ctx := context.Background()
			got, err := callTool(ctx, s, "echo", `{"text":"hi there"}`)
			if err != nil || got != "hi there" {
				t.Fatalf("echo = %q, %v", got, err)
			}
			initParams, err := callTool(ctx, s, "init", "")
			if err != nil {
				t.Fatal(err)
			}
			want := `{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"gw","version":"9.9"}}`
			if initParams != want {
				t.Errorf("initialize params:\n got %s\nwant %s", initParams, want)
			}
			// A JSON-RPC error reply is a *jsonrpc.Error.
			_, err = s.Call(ctx, "no/such/method", nil)
			var rpcErr *jsonrpc.Error
			if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeMethodNotFound {
				t.Errorf("unknown method: err = %v, want METHOD_NOT_FOUND", err)
			}
			if KindOf(err) != KindUpstreamError {
				t.Errorf("KindOf = %v", KindOf(err))
			}
		})
	}
}

func TestInstructionsTrimmed(t *testing.T) {
	f := newStreamableFake(t)
	ins := "  \n Be brief.\t"
	f.instructions = &ins
	s := connect(t, Options{Server: f.server("http")})
	if info := s.Info(); !info.HasInstructions || info.Instructions != "Be brief." {
		t.Errorf("instructions = %q (present %v)", info.Instructions, info.HasInstructions)
	}
}

func TestProtocolVersion(t *testing.T) {
	tests := []struct {
		name       string
		configured string
		answer     string // "" echoes the offer
		wantOffer  string
		wantHeader string // MCP-Protocol-Version after initialize
		wantErr    string
	}{
		{name: "auto", configured: "auto", wantOffer: "2025-11-25", wantHeader: "2025-11-25"},
		{name: "empty means auto", configured: "", wantOffer: "2025-11-25", wantHeader: "2025-11-25"},
		{name: "auto accepts an older revision", configured: "auto", answer: "2025-03-26", wantOffer: "2025-11-25"},
		{name: "pinned", configured: "2025-06-18", wantOffer: "2025-06-18", wantHeader: "2025-06-18"},
		{name: "pinned before the header existed", configured: "2025-03-26", wantOffer: "2025-03-26"},
		{name: "pinned 2024", configured: "2024-11-05", wantOffer: "2024-11-05"},
		{name: "pinned mismatch", configured: "2025-06-18", answer: "2025-11-25", wantOffer: "2025-06-18", wantErr: "protocol version"},
		{name: "auto unsupported", configured: "auto", answer: "unsupported", wantOffer: "2025-11-25", wantErr: "protocol version"},
		{name: "stateless pinned, handshake-era upstream", configured: "2026-07-28", wantErr: "protocol version 2026-07-28"},
		{name: "unknown", configured: "1999-01-01", wantErr: "protocol version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newStreamableFake(t)
			f.version = tt.answer
			srv := f.server("pv")
			srv.ProtocolVersion = tt.configured
			s, err := Connect(context.Background(), Options{Server: srv})
			if tt.wantErr != "" {
				if err == nil {
					s.Close()
					t.Fatalf("Connect succeeded, want error %q", tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) || KindOf(err) != KindProtocolVersion {
					t.Errorf("err = %v (kind %v), want %q", err, KindOf(err), tt.wantErr)
				}
				// No operation runs after a failed negotiation: not even
				// notifications/initialized.
				var methods []string
				for _, r := range f.seen() {
					methods = append(methods, r.Method)
				}
				want := []string{"initialize"}
				switch {
				case tt.configured == "2026-07-28":
					want = []string{"server/discover"}
				case tt.wantOffer == "":
					want = nil
				}
				if diff := cmp.Diff(methods, want); diff != "" {
					t.Errorf("requests (-got +want):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			defer s.Close()
			if _, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil); err != nil {
				t.Fatal(err)
			}
			seen := f.seen()
			if f.init == nil {
				t.Fatal("no initialize seen")
			}
			if offer, _ := jsonrpc.GetString(f.init, "protocolVersion"); offer != tt.wantOffer {
				t.Errorf("offered %q, want %q", offer, tt.wantOffer)
			}
			if seen[0].Version != "" || seen[0].SessionID != "" {
				t.Errorf("initialize carried session headers: %+v", seen[0])
			}
			for _, r := range seen[1:] {
				if r.Version != tt.wantHeader {
					t.Errorf("%s: MCP-Protocol-Version = %q, want %q", r.Method, r.Version, tt.wantHeader)
				}
				if r.SessionID != "session-1" {
					t.Errorf("%s: Mcp-Session-Id = %q", r.Method, r.SessionID)
				}
				if r.Accept != "application/json, text/event-stream" {
					t.Errorf("%s: Accept = %q", r.Method, r.Accept)
				}
			}
		})
	}
}

// TestPinnedRevisionStdio checks the offer on another transport.
func TestPinnedRevisionStdio(t *testing.T) {
	srv := stdioServer(t, "raw", nil)
	srv.ProtocolVersion = mcpwire.Rev20250618
	s := connect(t, Options{Server: srv})
	got, err := callTool(context.Background(), s, "init", "")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := jsonrpc.GetString(json.RawMessage(got), "protocolVersion"); v != "2025-06-18" {
		t.Errorf("offered %q", v)
	}
	if s.Info().ProtocolVersion != "2025-06-18" {
		t.Errorf("negotiated %q", s.Info().ProtocolVersion)
	}

	srv = stdioServer(t, "raw", map[string]string{"UPSTREAM_TEST_VERSION": "2025-03-26"})
	srv.ProtocolVersion = mcpwire.Rev20250618
	if s, err := Connect(context.Background(), Options{Server: srv}); err == nil || !strings.Contains(err.Error(), "protocol version") {
		if s != nil {
			s.Close()
		}
		t.Errorf("mismatch: err = %v", err)
	}
}

func TestStreamableOriginIsExact(t *testing.T) {
	f := newStreamableFake(t)
	h := &recorder{}
	s := connect(t, Options{Server: f.server("http"), Handler: h})
	ctx := context.Background()

	// A is older; B starts later and is still running when A's messages
	// arrive, so "most recent in flight" would say B. The POST stream says A.
	var wg sync.WaitGroup
	var errA, errB error
	wg.Go(func() {
		_, errA = callTool(WithOrigin(ctx, "A"), s, "notify", `{"delay_ms":300}`)
	})
	waitFor(t, "A in flight", func() bool { return inFlight(t, s) == 1 })
	wg.Go(func() {
		_, errB = callTool(WithOrigin(ctx, "B"), s, "notify", `{"delay_ms":700}`)
	})
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	// A server request on the POST stream carries the caller's origin too,
	// and its answer goes back to the upstream.
	got, err := callTool(WithOrigin(ctx, "C"), s, "ask", "")
	if err != nil {
		t.Fatal(err)
	}
	if got != `{"roots":[{"uri":"file:///work"}]}` {
		t.Errorf("ask = %s", got)
	}
	notes, reqs := h.got()
	want := []delivered{{"http", mcpwire.NotifyMessage, "A"}, {"http", mcpwire.NotifyMessage, "B"}}
	if diff := cmp.Diff(notes, want, cmp.AllowUnexported(delivered{})); diff != "" {
		t.Errorf("notifications (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(reqs, []delivered{{"http", mcpwire.MethodRootsList, "C"}}, cmp.AllowUnexported(delivered{})); diff != "" {
		t.Errorf("requests (-got +want):\n%s", diff)
	}
}

func TestOriginAttributionWithoutStreams(t *testing.T) {
	for _, tc := range []transportCase{transports[0], transports[3]} { // stdio, sse
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := tc.start(t)
			h := &recorder{}
			s := connect(t, Options{Server: srv, Handler: h})
			ctx := context.Background()
			// The only call in flight.
			if _, err := callTool(WithOrigin(ctx, "only"), s, "notify", ""); err != nil {
				t.Fatal(err)
			}
			// A progress token names its call exactly, even when another
			// call is more recent.
			var wg sync.WaitGroup
			wg.Go(func() {
				params := `{"name":"notify","arguments":{"delay_ms":300},"_meta":{"progressToken":7}}`
				if _, err := s.Call(WithOrigin(ctx, "tokened"), mcpwire.MethodToolsCall, json.RawMessage(params)); err != nil {
					t.Error(err)
				}
			})
			waitFor(t, "the tokened call in flight", func() bool { return inFlight(t, s) == 1 })
			slowCtx, cancel := context.WithCancel(WithOrigin(ctx, "recent"))
			wg.Go(func() { callTool(slowCtx, s, "slow", "") })
			// The tokened call's two notifications (its fake sends them
			// 300ms in), while the recent one is still in flight.
			eventually(func() bool { notes, _ := h.got(); return len(notes) >= 3 })
			cancel()
			wg.Wait()
			notes, _ := h.got()
			want := []delivered{
				{srv.Name, mcpwire.NotifyMessage, "only"},
				{srv.Name, mcpwire.NotifyMessage, Ambiguous}, // no token, two callers in flight: not guessed
				{srv.Name, mcpwire.NotifyProgress, "tokened"},
			}
			if diff := cmp.Diff(notes, want, cmp.AllowUnexported(delivered{})); diff != "" {
				t.Errorf("notifications (-got +want):\n%s", diff)
			}
			// With nothing in flight, the origin is nil; the server
			// request is answered upstream.
			if got, err := callTool(ctx, s, "ask", ""); err != nil || !strings.Contains(got, "file:///work") {
				t.Errorf("ask = %q, %v", got, err)
			}
		})
	}
}

func TestServerPingAndNoHandler(t *testing.T) {
	f := newStreamableFake(t)
	s := connect(t, Options{Server: f.server("http")}) // no Handler
	ctx := context.Background()
	// roots/list with no Handler is refused with METHOD_NOT_FOUND.
	if got, err := callTool(ctx, s, "ask", ""); err != nil || got != "error -32601" {
		t.Errorf("ask without handler = %q, %v", got, err)
	}
	// ping is answered by the package itself.
	h := &recorder{}
	s2 := connect(t, Options{Server: f.server("http2"), Handler: h})
	reply, err := f.ask(ctx, func(data []byte) {
		m, _ := jsonrpc.Decode(data)
		s2.receive(m, nil)
	}, mcpwire.MethodPing)
	if err != nil || string(reply.Result) != "{}" {
		t.Errorf("ping reply = %+v, %v", reply, err)
	}
	if _, reqs := h.got(); len(reqs) != 0 {
		t.Errorf("ping reached the handler: %+v", reqs)
	}
}

func TestCancellation(t *testing.T) {
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			srv, cancelled := tc.start(t)
			s := connect(t, Options{Server: srv})
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			start := time.Now()
			_, err := callTool(ctx, s, "slow", "")
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if KindOf(err) == KindTimeout {
				t.Errorf("a cancellation was reported as a timeout")
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("cancel took %v", d)
			}
			// The upstream hears about it, and the session still works.
			want := `"reason":"request cancelled by the client"`
			var got string
			eventually(func() bool { got = cancelled(s); return strings.Contains(got, want) })
			if !strings.Contains(got, `{"requestId":`) || !strings.Contains(got, want) {
				t.Errorf("cancellations seen upstream = %q", got)
			}
			if out, err := callTool(context.Background(), s, "echo", `{"text":"after"}`); err != nil || out != "after" {
				t.Errorf("after cancel: %q, %v", out, err)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			srv, cancelled := tc.start(t)
			srv.Timeout = 200 * time.Millisecond
			logger, logs := newLogger()
			s := connectShortTimeout(t, Options{Server: srv, Logger: logger})
			start := time.Now()
			_, err := callTool(context.Background(), s, "slow", "")
			var ue *Error
			if !errors.As(err, &ue) || ue.Kind != KindTimeout || KindOf(err) != KindTimeout {
				t.Fatalf("err = %v, want KindTimeout", err)
			}
			if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
				t.Errorf("timed out after %v", d)
			}
			msg := err.Error()
			if !strings.Contains(msg, "timed out after 0.2s") || !strings.Contains(msg, srv.Name) {
				t.Errorf("message %q should name the server and the budget", msg)
			}
			if errors.Is(err, context.Canceled) {
				t.Errorf("a timeout must not look like a cancellation")
			}
			if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "budget=0.2s") ||
				!strings.Contains(l, "server="+srv.Name) || !strings.Contains(l, "target=") {
				t.Errorf("no warning naming server, target and budget in logs:\n%s", l)
			}
			eventually(func() bool { return strings.Contains(cancelled(s), "timed out after 0.2s") })
			if got := cancelled(s); !strings.Contains(got, "timed out after 0.2s") {
				t.Errorf("cancellations seen upstream = %q", got)
			}
		})
	}
}

// A JSON-RPC error that happens to carry 408 is an upstream error, never
// a gateway timeout (C6.2).
func TestRPCError408IsNotATimeout(t *testing.T) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		if m.Method != mcpwire.MethodToolsList {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Encode(jsonrpc.NewErrorResponse(m.ID, jsonrpc.NewError(408, "Request Timeout"))))
		return true
	}
	s := connect(t, Options{Server: f.server("http")})
	_, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil)
	if KindOf(err) != KindUpstreamError {
		t.Errorf("kind = %v (%v), want upstream_error", KindOf(err), err)
	}
}

// connectShortTimeout connects for a test whose server has a short
// timeout (o.Server.Timeout): the budget bounds initialize too, which a
// loaded machine (the race detector beside other tests and the fuzzing)
// misses now and then, a stdio child most of all, even when retried. What
// such a test checks is a call's timeout, so the handshake runs with a
// generous budget on a copy of the server's config, and the connection
// takes the short one once connected, before any call (nothing else
// reads it meanwhile).
func connectShortTimeout(t *testing.T, o Options) *conn {
	t.Helper()
	short := o.Server.Timeout
	srv := *o.Server
	srv.Timeout = 10 * time.Second
	o.Server = &srv
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Connect(ctx, o)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	s := c.(*conn)
	t.Cleanup(func() { s.Close() })
	s.timeout = short
	return s
}

func TestProgressExtendsTheReadTimeout(t *testing.T) {
	srv := stdioServer(t, "raw", nil)
	srv.Timeout = 300 * time.Millisecond
	s := connectShortTimeout(t, Options{Server: srv})
	// notify waits 200ms, reports progress, then answers: within budget.
	params := `{"name":"notify","arguments":{"delay_ms":200},"_meta":{"progressToken":"t"}}`
	if _, err := s.Call(context.Background(), mcpwire.MethodToolsCall, json.RawMessage(params)); err != nil {
		t.Fatal(err)
	}
	// Progress restarts the budget: a call that reports progress at 200ms
	// and answers 200ms later (400ms in all, over its 300ms) succeeds; the
	// same call without a progress token times out at 300ms.
	extended := `{"name":"notify","arguments":{"delay_ms":200,"then_ms":200},"_meta":{"progressToken":"t2"}}`
	start := time.Now()
	if _, err := s.Call(context.Background(), mcpwire.MethodToolsCall, json.RawMessage(extended)); err != nil {
		t.Fatalf("a call whose progress restarted its budget: %v", err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("answered after %v: the extended call did not run past its budget", d)
	}
	plain := `{"name":"notify","arguments":{"delay_ms":200,"then_ms":200}}`
	if _, err := s.Call(context.Background(), mcpwire.MethodToolsCall, json.RawMessage(plain)); KindOf(err) != KindTimeout {
		t.Errorf("the same call without progress: %v, want a timeout", err)
	}
}

func TestStdioProcessDeath(t *testing.T) {
	var starts sync.Map
	var mu sync.Mutex
	startCount := 0
	m := NewManager(ManagerOptions{
		Servers: map[string]*config.Server{"proc": stdioServer(t, "raw", nil)},
		OnSessionStart: func(server string, info *InitInfo) {
			mu.Lock()
			startCount++
			mu.Unlock()
			starts.Store(server, info)
		},
	})
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	s, err := m.Session(ctx, "proc")
	if err != nil {
		t.Fatal(err)
	}
	pid1, err := callTool(ctx, s, "pid", "")
	if err != nil {
		t.Fatal(err)
	}
	// A pending call fails at once when the process dies.
	slowErr := make(chan error, 1)
	go func() {
		_, err := callTool(ctx, s, "slow", "")
		slowErr <- err
	}()
	waitFor(t, "the slow call in flight", func() bool { return inFlight(t, s) == 1 })
	start := time.Now()
	_, err = callTool(ctx, s, "die", "")
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "connection was closed") {
		t.Errorf("die: err = %v, want ErrClosed", err)
	}
	select {
	case err := <-slowErr:
		if !errors.Is(err, ErrClosed) || KindOf(err) != KindClosed {
			t.Errorf("pending call: err = %v, want ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("pending call hung after the process died")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("failing took %v", d)
	}
	select {
	case <-s.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("session not Done after process exit")
	}
	if !errors.Is(s.Err(), ErrClosed) {
		t.Errorf("Err = %v", s.Err())
	}
	// The next call gets a new process.
	s2, err := m.Session(ctx, "proc")
	if err != nil {
		t.Fatal(err)
	}
	if s2 == s {
		t.Fatal("dead session returned again")
	}
	pid2, err := callTool(ctx, s2, "pid", "")
	if err != nil || pid2 == pid1 {
		t.Errorf("pid after restart = %q (before %q), %v", pid2, pid1, err)
	}
	// OnSessionStart may run just after Session returns: wait for it.
	count := func() int { mu.Lock(); defer mu.Unlock(); return startCount }
	eventually(func() bool { return count() == 2 })
	if n := count(); n != 2 {
		t.Errorf("OnSessionStart called %d times, want 2", n)
	}
	if h := m.Health()["proc"]; h.State != HealthReady {
		t.Errorf("health = %+v", h)
	}
}

func TestStdioHugeLine(t *testing.T) {
	srv := stdioServer(t, "raw", nil)
	srv.Timeout = 30 * time.Second // -race makes 16 MiB slow to scan
	s := connect(t, Options{Server: srv})
	// As large as the default limit allows, framing included.
	const size = DefaultMaxMessageBytes - 128
	ctx := context.Background()
	res, err := s.Call(ctx, mcpwire.MethodToolsCall, json.RawMessage(fmt.Sprintf(`{"name":"big","arguments":{"size":%d}}`, size)))
	if err != nil {
		t.Fatal(err)
	}
	if want := size + len(`{"content":[{"type":"text","text":""}]}`); len(res) != want {
		t.Errorf("got %d bytes, want %d", len(res), want)
	}
	// Outgoing: a large, pretty-printed message arrives as one line.
	text := strings.Repeat("y", 1<<20)
	args := "{\n  \"text\": \"" + text + "\"\n}"
	got, err := callTool(ctx, s, "echo", args)
	if err != nil || got != text {
		t.Errorf("echo of a pretty 1 MiB message: %d bytes, %v", len(got), err)
	}
}

func TestMessageLimit(t *testing.T) {
	s := connect(t, Options{Server: stdioServer(t, "raw", nil), MaxMessageBytes: 1 << 20})
	ctx := context.Background()
	_, err := callTool(ctx, s, "big", `{"size":2000000}`)
	if KindOf(err) != KindInvalidResponse || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("err = %v, want invalid response", err)
	}
	if got, err := callTool(ctx, s, "echo", `{"text":"ok"}`); err != nil || got != "ok" {
		t.Errorf("after an oversized line: %q, %v", got, err)
	}
}

func TestGarbageSurfacesAtOnce(t *testing.T) {
	for _, tc := range []transportCase{transports[0], transports[3]} { // stdio, sse
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := tc.start(t)
			srv.Timeout = 10 * time.Second
			logger, logs := newLogger()
			s := connect(t, Options{Server: srv, Logger: logger})
			start := time.Now()
			_, err := callTool(context.Background(), s, "garbage", "")
			if KindOf(err) != KindInvalidResponse || !strings.Contains(err.Error(), "invalid MCP response") {
				t.Fatalf("err = %v, want invalid MCP response", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v: must not wait for the timeout", d)
			}
			if strings.Contains(err.Error(), "secret") || strings.Contains(logs.String(), "secret") {
				t.Errorf("body text leaked: %v\n%s", err, logs)
			}
			if got, err := callTool(context.Background(), s, "echo", `{"text":"still here"}`); err != nil || got != "still here" {
				t.Errorf("session after garbage: %q, %v", got, err)
			}
		})
	}
}

func TestInvalidHTTPResponsesFailFast(t *testing.T) {
	tests := []struct {
		name, contentType, body string
		want                    string
	}{
		{"html", "text/html", "<html>secret-page</html>", "unsupported content type"},
		{"no content type", "", "secret", "unsupported content type"},
		{"invalid json", "application/json", "secret-invalid-json", "invalid MCP response"},
		{"empty body", "application/json", "", "invalid MCP response"},
		{"not json-rpc", "application/json", `{"secret":"invalid-rpc"}`, "invalid MCP response"},
		{"missing result", "application/json", `{"jsonrpc":"2.0","id":0}`, "invalid MCP response"},
		{"other id only", "application/json", `{"jsonrpc":"2.0","id":12345,"result":{"secret":1}}`, "invalid MCP response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newStreamableFake(t)
			f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
				if m.Method != mcpwire.MethodToolsList {
					return false
				}
				if tt.contentType == "" {
					w.Header()["Content-Type"] = nil
				} else {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.Write([]byte(tt.body))
				return true
			}
			srv := f.server("http")
			srv.Timeout = 10 * time.Second
			logger, logs := newLogger()
			s := connect(t, Options{Server: srv, Logger: logger})
			start := time.Now()
			_, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) || KindOf(err) != KindInvalidResponse {
				t.Errorf("err = %q (kind %v), want %q", msg, KindOf(err), tt.want)
			}
			if strings.Contains(msg, "secret") || strings.Contains(msg, "timed out") || strings.Contains(logs.String(), "secret") {
				t.Errorf("err = %q leaks the body or says timed out", msg)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

func TestInterruptedBodyKeepsItsCause(t *testing.T) {
	f := newStreamableFake(t)
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		if m.Method != mcpwire.MethodToolsList {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte(`{"jsonrpc":`))
		w.(http.Flusher).Flush()
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
		return true
	}
	s := connect(t, Options{Server: f.server("http")})
	_, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil)
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") || strings.Contains(err.Error(), "invalid MCP response") {
		t.Errorf("err = %v, want the read failure", err)
	}
}

func TestHTTPStatuses(t *testing.T) {
	tests := []struct {
		status   int
		kind     Kind
		withBody bool
	}{
		{401, KindAuth, false},
		{403, KindAuth, false},
		{429, KindRateLimited, false},
		{503, KindUpstreamError, false},
		{500, KindUpstreamError, true},
		{400, KindUpstreamError, true},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			f := newStreamableFake(t)
			f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
				if m.Method != mcpwire.MethodToolsList {
					return false
				}
				if tt.withBody {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tt.status)
					w.Write(jsonrpc.Encode(jsonrpc.NewErrorResponse(jsonrpc.ID{}, jsonrpc.NewError(-32099, "relayed"))))
					return true
				}
				http.Error(w, "secret body", tt.status)
				return true
			}
			s := connect(t, Options{Server: f.server("http")})
			_, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil)
			var ue *Error
			if !errors.As(err, &ue) || ue.Kind != tt.kind || ue.Status != tt.status {
				t.Fatalf("err = %#v, want kind %v status %d", err, tt.kind, tt.status)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("body leaked: %v", err)
			}
			var rpc *jsonrpc.Error
			if tt.withBody && (!errors.As(err, &rpc) || rpc.Message != "relayed") {
				t.Errorf("relayed JSON-RPC error lost: %v", err)
			}
			select {
			case <-s.Done():
				t.Errorf("session ended on HTTP %d", tt.status)
			default:
			}
		})
	}
}

func TestSessionExpired(t *testing.T) {
	for _, relayed := range []bool{false, true} {
		t.Run(fmt.Sprintf("relayed=%v", relayed), func(t *testing.T) {
			f := newStreamableFake(t)
			f.jsonReplies = true
			var once sync.Once
			f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
				hit := false
				if m.Method == mcpwire.MethodToolsList {
					once.Do(func() { hit = true })
				}
				if !hit {
					return false
				}
				if relayed {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusNotFound)
					w.Write(jsonrpc.Encode(jsonrpc.NewErrorResponse(m.ID, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Tool catalog unavailable"))))
				} else {
					w.WriteHeader(http.StatusNotFound)
				}
				return true
			}
			m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"exp": f.server("")}})
			t.Cleanup(func() { m.Close() })
			ctx := context.Background()
			s, err := m.Session(ctx, "exp")
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Call(ctx, mcpwire.MethodToolsList, nil)
			var rpc *jsonrpc.Error
			if !errors.Is(err, ErrSessionExpired) || !errors.As(err, &rpc) {
				t.Fatalf("err = %v, want session expired", err)
			}
			wantCode, wantMsg := int64(jsonrpc.CodeInvalidRequest), "Session terminated"
			if relayed {
				wantCode, wantMsg = jsonrpc.CodeMethodNotFound, "Tool catalog unavailable"
			}
			if rpc.Code != wantCode || rpc.Message != wantMsg {
				t.Errorf("rpc error = %d %q, want %d %q", rpc.Code, rpc.Message, wantCode, wantMsg)
			}
			select {
			case <-s.Done():
			default:
				t.Fatal("expired session not Done")
			}
			s2, err := m.Session(ctx, "exp")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s2.Call(ctx, mcpwire.MethodToolsList, nil); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range f.seen() {
				if r.Method != mcpwire.NotifyInitialized {
					got = append(got, r.Method+"@"+r.SessionID)
				}
			}
			// auto probes the stateless era once per server (the fake
			// does not speak it), then remembers: the reconnect goes
			// straight to initialize.
			want := []string{"server/discover@", "initialize@", "tools/list@session-1", "initialize@", "tools/list@session-2"}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("requests (-got +want):\n%s", diff)
			}
		})
	}
}

func TestNotFoundBeforeSession(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(ts.Close)
	_, err := Connect(context.Background(), Options{Server: &config.Server{Name: "nf", Transport: "http", URL: ts.URL}})
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeMethodNotFound || rpc.Message != "Not Found" {
		t.Errorf("err = %v, want METHOD_NOT_FOUND Not Found", err)
	}
}

func TestSSEReplyStreamEnded(t *testing.T) {
	f := newStreamableFake(t)
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		if m.Method != mcpwire.MethodToolsList {
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{Data: []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`)}))
		return true
	}
	srv := f.server("http")
	srv.Timeout = 10 * time.Second
	s := connect(t, Options{Server: srv})
	start := time.Now()
	_, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil)
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != mcpwire.CodeConnectionClosed || !strings.Contains(err.Error(), "SSE stream ended") {
		t.Fatalf("err = %v, want CONNECTION_CLOSED SSE stream ended", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
}

func TestStreamResumption(t *testing.T) {
	// 2025-11-25 polling: the POST stream primes an event id and closes;
	// the reply comes on the GET that resumes it.
	f := newStreamableFake(t)
	var resumedWith string
	var mu sync.Mutex
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		if m.Method != mcpwire.MethodToolsList {
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{ID: "ev-1", Retry: 50, Data: []byte{}}))
		f.mu.Lock()
		f.pendingReply = jsonrpc.Encode(jsonrpc.NewResult(m.ID, json.RawMessage(`{"tools":[]}`)))
		f.mu.Unlock()
		return true
	}
	f.onGet = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Last-Event-Id") == "" {
			w.WriteHeader(http.StatusMethodNotAllowed) // no standalone stream
			return true
		}
		f.mu.Lock()
		reply := f.pendingReply
		f.pendingReply = nil
		f.mu.Unlock()
		mu.Lock()
		resumedWith = r.Header.Get("Last-Event-Id")
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{ID: "ev-2", Data: reply}))
		return true
	}
	s := connect(t, Options{Server: f.server("http")})
	res, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil)
	if err != nil || string(res) != `{"tools":[]}` {
		t.Fatalf("tools/list = %s, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if resumedWith != "ev-1" {
		t.Errorf("Last-Event-ID = %q", resumedWith)
	}
}

func TestStandaloneGETStreamAndDelete(t *testing.T) {
	f := newStreamableFake(t)
	f.allowGet = true
	h := &recorder{}
	s, err := Connect(context.Background(), Options{Server: f.server("http"), Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	f.get <- []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	waitFor(t, "a notification from the GET stream", func() bool { notes, _ := h.got(); return len(notes) == 1 })
	if notes, _ := h.got(); notes[0].method != mcpwire.NotifyToolsListChanged || notes[0].origin != nil {
		t.Errorf("GET stream notification = %+v", notes[0])
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff(f.deleted, []string{"session-1"}); diff != "" {
		t.Errorf("DELETEs (-got +want):\n%s", diff)
	}
	if _, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("call after Close: %v", err)
	}
}

func TestHungDeleteIsBounded(t *testing.T) {
	f := newStreamableFake(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.onDelete = func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	}
	s, err := Connect(context.Background(), Options{Server: f.server("http")})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 300 * time.Millisecond
	s.(*conn).closeBudget = budget
	start := time.Now()
	s.Close()
	if d := time.Since(start); d < budget || d > budget+time.Second {
		t.Errorf("Close took %v, want about %v", d, budget)
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, tr := range []string{config.TransportHTTP, config.TransportSSE} {
		t.Run(tr, func(t *testing.T) {
			srv := &config.Server{Name: "gone-" + tr, Transport: tr, URL: "http://" + addr + "/mcp?token=secret"}
			m := NewManager(ManagerOptions{Servers: map[string]*config.Server{srv.Name: srv}})
			t.Cleanup(func() { m.Close() })
			start := time.Now()
			_, err := m.Session(context.Background(), srv.Name)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if KindOf(err) != KindUnreachable || !strings.Contains(msg, srv.Name) || !strings.Contains(msg, "connection refused") {
				t.Errorf("err = %q (kind %v)", msg, KindOf(err))
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("err leaks the query: %q", msg)
			}
			// During backoff the last error comes back at once.
			_, err2 := m.Session(context.Background(), srv.Name)
			if err2 == nil || err2.Error() != msg {
				t.Errorf("second attempt: %v", err2)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
			if h := m.Health()[srv.Name]; h.State != HealthDown || !strings.Contains(h.LastError, "connection refused") {
				t.Errorf("health = %+v", h)
			}
		})
	}
}

func TestRedirects(t *testing.T) {
	f := newStreamableFake(t)
	var contacted sync.Map
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		contacted.Store("other", true)
	}))
	t.Cleanup(other.Close)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, f.srv.URL+"/mcp", http.StatusTemporaryRedirect) // another origin
		case "/cross":
			http.Redirect(w, r, other.URL+"/mcp", http.StatusPermanentRedirect)
		case "/local":
			http.Redirect(w, r, "/mcp", http.StatusTemporaryRedirect)
		default:
			f.serve(w, r)
		}
	}))
	t.Cleanup(front.Close)

	s := connect(t, Options{Server: &config.Server{Name: "r", Transport: "http", URL: front.URL + "/local"}})
	if _, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil); err != nil {
		t.Errorf("same-origin redirect: %v", err)
	}
	_, err := Connect(context.Background(), Options{Server: &config.Server{Name: "r2", Transport: "http", URL: front.URL + "/cross"}})
	if err == nil || !strings.Contains(err.Error(), "cross-origin redirect to "+other.URL) {
		t.Errorf("cross-origin redirect: %v", err)
	}
	if _, ok := contacted.Load("other"); ok {
		t.Error("the redirect destination was contacted")
	}
}

func TestSSEEndpointMustBeSameOrigin(t *testing.T) {
	f := newSSEFake(t)
	f.endpoint = "http://evil.example/messages"
	_, err := Connect(context.Background(), Options{Server: f.server("sse")})
	if err == nil || !strings.Contains(err.Error(), "another origin") {
		t.Errorf("err = %v", err)
	}
}

func TestSSEStreamEndFailsPendingCalls(t *testing.T) {
	f := newSSEFake(t)
	s := connect(t, Options{Server: f.server("sse")})
	errc := make(chan error, 1)
	go func() {
		_, err := callTool(context.Background(), s, "slow", "")
		errc <- err
	}()
	waitFor(t, "the slow call in flight", func() bool { return inFlight(t, s) == 1 })
	f.dropStream()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "connection was closed") {
			t.Errorf("err = %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("pending call hung after the stream ended")
	}
	<-s.Done()
}

func TestStdioCloseReapsTheProcess(t *testing.T) {
	for _, ignoreTerm := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignoreTERM=%v", ignoreTerm), func(t *testing.T) {
			if ignoreTerm && testing.Short() {
				t.Skip("waits for KillGrace")
			}
			env := map[string]string{}
			if ignoreTerm {
				env["UPSTREAM_TEST_IGNORE_TERM"] = "1"
				env["UPSTREAM_TEST_LINGER"] = "1"
			}
			s, err := Connect(context.Background(), Options{Server: stdioServer(t, "raw", env)})
			if err != nil {
				t.Fatal(err)
			}
			pid := s.(*conn).t.(*stdio).pid()
			start := time.Now()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			d := time.Since(start)
			if d > KillGrace+2*time.Second || (ignoreTerm && d < KillGrace) {
				t.Errorf("Close took %v", d)
			}
			// ESRCH: no such process, not even a zombie.
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("process %d still exists after Close (kill 0: %v)", pid, err)
			}
		})
	}
}

func TestStdioEnvAndStderr(t *testing.T) {
	t.Setenv("UPSTREAM_TEST_PARENT_SECRET", "hunter2")
	logger, logs := newLogger()
	srv := stdioServer(t, "raw", map[string]string{"FROM_CONFIG": "yes"})
	srv.Cwd = t.TempDir()
	s := connect(t, Options{Server: srv, Logger: logger})
	ctx := context.Background()
	for name, want := range map[string]string{
		"FROM_CONFIG":                 "yes",
		"UPSTREAM_TEST_PARENT_SECRET": "<unset>",
	} {
		if got, err := callTool(ctx, s, "env", `{"name":"`+name+`"}`); err != nil || got != want {
			t.Errorf("env %s = %q, %v; want %q", name, got, err, want)
		}
	}
	if !strings.Contains(logs.String(), `server=stdio-raw`) || !strings.Contains(logs.String(), `line="fake stdio server ready"`) {
		t.Errorf("stderr not logged with the server name:\n%s", logs)
	}
}

func TestStdioStartFailures(t *testing.T) {
	_, err := Connect(context.Background(), Options{Server: &config.Server{Name: "nocmd", Transport: "stdio"}})
	if err == nil || !strings.Contains(err.Error(), "nocmd") || !strings.Contains(err.Error(), "no command") {
		t.Errorf("no command: %v", err)
	}
	_, err = Connect(context.Background(), Options{Server: &config.Server{Name: "missing", Transport: "stdio", Command: "/nonexistent/mcp-server"}})
	if KindOf(err) != KindUnreachable || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing binary: %v", err)
	}
}

func TestManager(t *testing.T) {
	f := newStreamableFake(t)
	stdioSrv := stdioServer(t, "raw", nil)
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{
		"web":  f.server(""),
		"proc": stdioSrv,
	}})
	if _, err := m.Session(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown server: %v", err)
	}
	h := m.Health()
	if h["web"].State != HealthStarting || h["proc"].State != HealthStarting {
		t.Errorf("initial health = %+v", h)
	}
	// Concurrent callers share one connect.
	var wg sync.WaitGroup
	sessions := make([]Session, 10)
	for i := range sessions {
		wg.Go(func() {
			s, err := m.Session(context.Background(), "web")
			if err != nil {
				t.Error(err)
			}
			sessions[i] = s
		})
	}
	wg.Wait()
	for _, s := range sessions[1:] {
		if s != sessions[0] {
			t.Fatal("callers got different sessions")
		}
	}
	f.mu.Lock()
	if f.sessions != 1 {
		t.Errorf("%d initializes, want 1", f.sessions)
	}
	f.mu.Unlock()
	// Start brings up the rest.
	m.Start(context.Background())
	if !eventually(func() bool { return m.Health()["proc"].State == HealthReady }) {
		t.Fatalf("proc never ready: %+v", m.Health())
	}
	s, err := m.Session(context.Background(), "proc")
	if err != nil {
		t.Fatal(err)
	}
	pid := s.(*conn).t.(*stdio).pid()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("stdio process %d survived Manager.Close", pid)
	}
	if _, err := m.Session(context.Background(), "web"); !errors.Is(err, ErrClosed) {
		t.Errorf("Session after Close: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.deleted) != 1 {
		t.Errorf("DELETEs = %v", f.deleted)
	}
}

func TestManagerRestartsAfterDeathWhenStarted(t *testing.T) {
	started := make(chan string, 4)
	m := NewManager(ManagerOptions{
		Servers:        map[string]*config.Server{"proc": stdioServer(t, "raw", nil)},
		OnSessionStart: func(server string, _ *InitInfo) { started <- server },
	})
	t.Cleanup(func() { m.Close() })
	m.Start(context.Background())
	waitStart := func() {
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("no session start")
		}
	}
	waitStart()
	s, err := m.Session(context.Background(), "proc")
	if err != nil {
		t.Fatal(err)
	}
	callTool(context.Background(), s, "die", "")
	waitStart() // restarted without a call
}

func TestStreamableReusesConnections(t *testing.T) {
	for _, jsonReplies := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonReplies), func(t *testing.T) {
			var mu sync.Mutex
			conns := 0
			f := newStreamableFake(t, func(ts *httptest.Server) {
				ts.Config.ConnState = func(_ net.Conn, state http.ConnState) {
					if state == http.StateNew {
						mu.Lock()
						conns++
						mu.Unlock()
					}
				}
			})
			f.jsonReplies = jsonReplies
			s := connect(t, Options{Server: f.server("http")})
			for i := range 20 {
				if got, err := callTool(context.Background(), s, "echo", `{"text":"x"}`); err != nil || got != "x" {
					t.Fatalf("call %d: %q, %v", i, got, err)
				}
				time.Sleep(10 * time.Millisecond) // the fake ends each stream 5ms after its reply
			}
			mu.Lock()
			defer mu.Unlock()
			if conns > 3 {
				t.Errorf("%d connections for 22 sequential requests", conns)
			}
		})
	}
}

func TestStaticHeadersTrimmed(t *testing.T) {
	var mu sync.Mutex
	var got []string
	record := func(r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.Header.Get("X-Trace"))
		mu.Unlock()
	}
	f := newStreamableFake(t)
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool { record(r); return false }
	srv := f.server("http")
	srv.Headers = map[string]string{" X-Trace ": "  abc \t"}
	s := connect(t, Options{Server: srv})
	if _, err := s.Call(context.Background(), mcpwire.MethodToolsList, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(got, []string{"POST abc", "POST abc", "POST abc"}); diff != "" {
		t.Errorf("X-Trace per request (-got +want):\n%s", diff)
	}
}

func TestGETStreamReconnectsWithLastEventID(t *testing.T) {
	f := newStreamableFake(t)
	var mu sync.Mutex
	var lastIDs []string
	f.onGet = func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-Id"))
		n := len(lastIDs)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		note := fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"g-%d"}}`, n)
		w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{ID: fmt.Sprintf("g-%d", n), Retry: 20, Data: note}))
		w.(http.Flusher).Flush()
		if n >= 2 {
			<-r.Context().Done() // stay open until the client goes
		}
		return true // the first stream drops at once
	}
	h := &recorder{}
	connect(t, Options{Server: f.server("http"), Handler: h})
	waitFor(t, "a notification after the GET stream reconnected", func() bool { notes, _ := h.got(); return len(notes) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(lastIDs, []string{"", "g-1"}); diff != "" {
		t.Errorf("Last-Event-ID per GET (-got +want):\n%s", diff)
	}
}
