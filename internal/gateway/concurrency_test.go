package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// busyUpstream is a streamable-HTTP upstream whose tool "wait" takes
// 500ms and whose tool "block" runs until it is cancelled. It counts the
// calls running at once and records the request ids the gateway cancelled
// with notifications/cancelled.
type busyUpstream struct {
	*httptest.Server
	running, most atomic.Int32
	mu            sync.Mutex
	cancelled     []string // requestId of each notifications/cancelled
}

func newBusyUpstream(t *testing.T) *busyUpstream {
	t.Helper()
	u := &busyUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if m.Method == mcpwire.NotifyCancelled {
			id, _ := jsonrpc.Get(m.Params, "requestId")
			u.mu.Lock()
			u.cancelled = append(u.cancelled, string(id))
			u.mu.Unlock()
		}
		if !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		result := `{}`
		switch m.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "busy-1")
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"busy","version":"0"}}`
		case "tools/list":
			result = `{"tools":[{"name":"wait","inputSchema":{"type":"object"}},{"name":"block","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			n := u.running.Add(1)
			for m := u.most.Load(); n > m && !u.most.CompareAndSwap(m, n); m = u.most.Load() {
			}
			name, _ := jsonrpc.GetString(m.Params, "name")
			if name == "block" {
				<-r.Context().Done()
				u.running.Add(-1)
				return
			}
			time.Sleep(500 * time.Millisecond) // the call's duration, which the tests measure
			u.running.Add(-1)
			result = `{"content":[{"type":"text","text":"waited"}]}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *busyUpstream) cancellations() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.cancelled...)
}

// busyGateway serves busy's tools on /mcp with limits; callers are named
// by X-Test-Owner as in ownerGateway.
func busyGateway(t *testing.T, limits config.Limits) (*Gateway, string, *busyUpstream) {
	t.Helper()
	up := newBusyUpstream(t)
	g, url := ownerGateway(t, Options{Config: &config.Config{
		Servers: map[string]*config.Server{"b": httpServer(up.URL + "/mcp")},
		Limits:  limits,
	}})
	return g, url, up
}

// callsAtOnce makes n concurrent calls of tool on session sid and returns
// how long they took together; each must succeed.
func callsAtOnce(t *testing.T, url, sid, tool string, n int) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"b__%s","arguments":{}}}`, 100+i, tool)
			code, got := send(t, http.MethodPost, url+"/mcp", "alice", sid, body)
			want := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"waited"}]}}`, 100+i)
			if code != http.StatusOK || got != want {
				t.Errorf("call %d: %d %s, want 200 %s", i, code, got, want)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// S11: the calls of one session run concurrently. Ten 500ms calls on one
// streamable-HTTP session took 5s when the session served one at a time.
func TestSessionCallsRunConcurrently(t *testing.T) {
	_, url, up := busyGateway(t, config.Limits{})
	sid := initOwned(t, url, "alice")
	d := callsAtOnce(t, url, sid, "wait", 10)
	t.Logf("10 concurrent 500ms calls on one session: %v", d)
	if d >= 1500*time.Millisecond {
		t.Errorf("10 concurrent 500ms calls on one session took %v, want < 1.5s", d)
	}
	if got := up.most.Load(); got != 10 {
		t.Errorf("the upstream saw at most %d calls at once, want 10", got)
	}
}

// S11, S23: limits.max_inflight_per_session bounds the calls served at
// once; the others wait their turn and are served, none is refused.
func TestSessionInflightLimitWaits(t *testing.T) {
	_, url, up := busyGateway(t, config.Limits{MaxInflightPerSession: 2})
	sid := initOwned(t, url, "alice")
	d := callsAtOnce(t, url, sid, "wait", 6)
	t.Logf("6 calls of 500ms, 2 at a time: %v", d)
	if d < 1400*time.Millisecond || d > 2200*time.Millisecond {
		t.Errorf("6 calls of 500ms, 2 at a time, took %v, want about 1.5s", d)
	}
	if got := up.most.Load(); got != 2 {
		t.Errorf("the upstream saw at most %d calls at once, want 2", got)
	}
	// Another session of the same owner has slots of its own.
	other := initOwned(t, url, "alice")
	if d := callsAtOnce(t, url, other, "wait", 2); d > 900*time.Millisecond {
		t.Errorf("2 calls on a second session took %v", d)
	}
}

// S11: JSON-RPC responses and notifications/cancelled never wait for a
// slot: a call in flight may be waiting for exactly that message.
func TestResponsesPassFullSession(t *testing.T) {
	_, url, up := busyGateway(t, config.Limits{MaxInflightPerSession: 1})
	sid := initOwned(t, url, "alice")
	done := make(chan struct{})
	go func() {
		defer close(done)
		callsAtOnce(t, url, sid, "wait", 1)
	}()
	waitFor(t, "the call to hold the only slot", func() bool { return up.running.Load() == 1 })
	for body, want := range map[string]int{
		// Answered at once: refused, as nothing waits for "x" (S24).
		`{"jsonrpc":"2.0","id":"x","result":{}}`:                                             http.StatusBadRequest,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"nope"}}`: http.StatusAccepted,
	} {
		t0 := time.Now()
		if code, got := send(t, http.MethodPost, url+"/mcp", "alice", sid, body); code != want {
			t.Errorf("%s: %d %s, want %d", body, code, got, want)
		}
		if d := time.Since(t0); d > 200*time.Millisecond {
			t.Errorf("%s waited %v for a slot", body, d)
		}
	}
	// A 2026-07-28 request ignores Mcp-Session-Id: it does not wait for
	// that session's slot either.
	t0 := time.Now()
	code, body := statelessPost(t, url+"/mcp", map[string]string{"X-Test-Owner": "alice", mcpwire.HeaderSessionID: sid, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
		`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{`+statelessMetaJSON+`}}`)
	if code != 200 || !strings.Contains(body, "b__wait") {
		t.Errorf("2026-07-28 tools/list naming a busy session: %d %s", code, body)
	}
	if d := time.Since(t0); d > 300*time.Millisecond {
		t.Errorf("a 2026-07-28 request waited %v for the slot of the session it named", d)
	}
	<-done
}

// S11, S8.2: a DELETE waits for nothing; it ends the session's calls in
// flight (cancelled upstream) and requests still waiting for a slot, and
// the id answers 404 from then on.
func TestDeleteEndsCallsInFlight(t *testing.T) {
	_, url, up := busyGateway(t, config.Limits{MaxInflightPerSession: 3})
	sid := initOwned(t, url, "alice")
	type result struct {
		code int
		body string
	}
	results := make(chan result, 4)
	for i := range 4 { // three run, the fourth waits for a slot
		go func() {
			code, body := send(t, http.MethodPost, url+"/mcp", "alice", sid,
				fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"b__block","arguments":{}}}`, 200+i))
			results <- result{code, body}
		}()
	}
	waitFor(t, "three calls upstream", func() bool { return up.running.Load() == 3 })
	// The fourth is waiting for a slot by now. Nothing outside the session
	// shows a waiter, and a fourth that came after the DELETE gets the
	// same 404: the pause only makes the waiting path the one taken.
	time.Sleep(100 * time.Millisecond)

	t0 := time.Now()
	code, body := send(t, http.MethodDelete, url+"/mcp", "alice", sid, "")
	if d := time.Since(t0); d > 300*time.Millisecond {
		t.Errorf("DELETE with calls in flight took %v", d)
	}
	if code != http.StatusOK || body != `{"message":"Session terminated successfully"}` {
		t.Errorf("DELETE: %d %s", code, body)
	}
	var cancelled, refused int
	for range 4 {
		select {
		case r := <-results:
			switch {
			case r.code == http.StatusOK && strings.Contains(r.body, `"code":-32800`):
				cancelled++
			case r.code == http.StatusNotFound && strings.Contains(r.body, "send initialize"):
				refused++
			default:
				t.Errorf("a call of the deleted session: %d %s", r.code, r.body)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("calls of a deleted session still running after 2s")
		}
	}
	if cancelled != 3 || refused != 1 {
		t.Errorf("cancelled %d, refused %d; want 3 cancelled in flight and 1 refused while waiting", cancelled, refused)
	}
	waitFor(t, "three cancellations upstream", func() bool { return len(up.cancellations()) == 3 })
	// The upstream records a cancellation before its handler returns and
	// counts itself out: the count follows within moments.
	waitFor(t, "no upstream call still running", func() bool { return up.running.Load() == 0 })
}

// S11: a session created by initialize serves nothing else until the
// initialize has completed. In a synctest bubble, "still waiting" is
// exact: synctest.Wait returns once the request blocks, no pause guesses
// when it has.
func TestSessionWaitsForInitialize(t *testing.T) {
	synctest.Test(t, testSessionWaitsForInitialize)
}

func testSessionWaitsForInitialize(t *testing.T) {
	g := New(Options{Config: &config.Config{}})
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	s := g.newSession(route{}, nil, true)
	got := make(chan bool, 1)
	go func() {
		ok, _ := s.Acquire(nil)
		got <- ok
	}()
	synctest.Wait()
	select {
	case <-got:
		t.Fatal("a request was served before initialize completed")
	default:
	}
	s.MarkReady()
	select {
	case ok := <-got:
		if !ok {
			t.Error("acquire failed after initialize")
		}
	case <-time.After(time.Second):
		t.Fatal("a request still waits after initialize completed")
	}
	s.Release()
	// A session that ends first releases its waiters without a slot.
	s2 := g.newSession(route{}, nil, true)
	type acquired struct{ ok, ended bool }
	got2 := make(chan acquired, 1)
	go func() {
		ok, ended := s2.Acquire(nil)
		got2 <- acquired{ok, ended}
	}()
	synctest.Wait() // the request waits for initialize
	s2.close()
	if a := <-got2; a.ok || !a.ended {
		t.Errorf("acquire on a session that ended: ok %v ended %v", a.ok, a.ended)
	}
}

// S11 on legacy HTTP+SSE: the in-flight bound holds, a POST is
// acknowledged only once its requests have their slots (a flood slows
// its sender instead of piling up behind 202s), and a batch larger than
// the bound still completes (each request starts as soon as it has a
// slot, so none waits for another that has not started).
func TestLegacySSEInflightBound(t *testing.T) {
	_, url, up := busyGateway(t, config.Limits{MaxInflightPerSession: 2})
	endpoint, events := openLegacy(t, url, "alice")
	if code, body := send(t, http.MethodPost, endpoint, "alice", "", initBody); code != http.StatusAccepted {
		t.Fatalf("initialize: %d %s", code, body)
	}
	var batch []string
	for i := range 5 {
		batch = append(batch, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"b__wait","arguments":{}}}`, 10+i))
	}
	start := time.Now()
	code, body := send(t, http.MethodPost, endpoint, "alice", "", "["+strings.Join(batch, ",")+"]")
	acked := time.Since(start)
	if code != http.StatusAccepted {
		t.Fatalf("batch of 5: %d %s", code, body)
	}
	// Slots for 5 calls of 500ms, 2 at a time: the fifth gets one after
	// two rounds.
	if acked < 900*time.Millisecond || acked > 1600*time.Millisecond {
		t.Errorf("the batch of 5 was acknowledged after %v, want about 1s (when its last request got a slot)", acked)
	}
	got := map[string]bool{}
	for len(got) < 6 { // the initialize reply and five results
		ev, err := events.Next()
		if err != nil {
			t.Fatalf("stream ended after %d replies: %v", len(got), err)
		}
		m, err := jsonrpc.Decode(ev.Data)
		if err != nil || !m.IsResponse() {
			continue
		}
		got[m.ID.Raw()] = true
		if m.ID.Raw() != "1" && !strings.Contains(string(m.Result), "waited") {
			t.Errorf("reply %s: %s", ev.Data, m.Error)
		}
	}
	if d := time.Since(start); d > 2200*time.Millisecond {
		t.Errorf("5 calls of 500ms, 2 at a time, took %v", d)
	}
	if most := up.most.Load(); most != 2 {
		t.Errorf("the upstream saw at most %d calls at once, want 2", most)
	}
}

// openLegacy opens a legacy HTTP+SSE session for owner and returns its
// message endpoint and its stream's events (the endpoint event read).
func openLegacy(t *testing.T, url, owner string) (string, *jsonrpc.SSEReader) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/sse", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Test-Owner", owner)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	events := jsonrpc.NewSSEReader(resp.Body, 1<<20)
	ev, err := events.Next()
	if err != nil || ev.Name != "endpoint" {
		t.Fatalf("first event %+v, %v; want the endpoint", ev, err)
	}
	return url + strings.TrimSpace(string(ev.Data)), events
}

// S23 on legacy HTTP+SSE: a batch over limits.max_batch is refused at
// once with the -32600 naming the limit, and nothing is called upstream.
func TestLegacySSEBatchLimit(t *testing.T) {
	_, url, up := busyGateway(t, config.Limits{MaxBatch: 2})
	endpoint, _ := openLegacy(t, url, "alice")
	batch := `[` + strings.Repeat(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"b__wait","arguments":{}}},`, 2) +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"b__wait","arguments":{}}}]`
	code, body := send(t, http.MethodPost, endpoint, "alice", "", batch)
	const want = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: batch of 3 requests exceeds limits.max_batch (2)"}}`
	if code != http.StatusBadRequest || strings.TrimSpace(body) != want {
		t.Errorf("legacy batch of 3 over 2: %d %s\nwant 400 %s", code, body, want)
	}
	// Something that did not happen: a call dispatched in the background
	// would have reached the loopback upstream within this pause.
	time.Sleep(50 * time.Millisecond)
	if n := up.most.Load(); n != 0 {
		t.Errorf("a refused batch reached the upstream (%d calls at once)", n)
	}
}

// S23: one caller at its limits never slows another. With session A's
// slots all held by calls that do not end, session B's calls run at once.
func TestSessionAtItsLimitDoesNotSlowAnother(t *testing.T) {
	_, url, up := busyGateway(t, config.Limits{MaxInflightPerSession: 2})
	a := initOwned(t, url, "alice")
	b := initOwned(t, url, "bob")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 3 { // two hold A's slots, the third waits for one
		wg.Go(func() {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"b__block","arguments":{}}}`, 50+i)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("X-Test-Owner", "alice")
			req.Header.Set(mcpwire.HeaderSessionID, a)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	waitFor(t, "A at its limit", func() bool { return up.running.Load() == 2 })
	start := time.Now()
	for i := range 2 {
		code, got := send(t, http.MethodPost, url+"/mcp", "bob", b, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"b__wait","arguments":{}}}`, 60+i))
		if code != http.StatusOK || !strings.Contains(got, "waited") {
			t.Errorf("bob's call beside alice's full session: %d %s", code, got)
		}
	}
	if d := time.Since(start); d > 1400*time.Millisecond {
		t.Errorf("bob's two 500ms calls took %v beside alice's full session", d)
	}
}

// S11 on the stdio front: its one session's requests run concurrently,
// up to limits.max_inflight_per_session; more wait, none is refused.
func TestStdioFrontInflightBound(t *testing.T) {
	g, _, up := busyGateway(t, config.Limits{MaxInflightPerSession: 2})
	var in strings.Builder
	for i := range 6 {
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"b__wait","arguments":{}}}`+"\n", 70+i)
	}
	var out bytes.Buffer
	start := time.Now()
	if err := g.ServeStdioAs(context.Background(), "", strings.NewReader(in.String()), &out); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	if n := strings.Count(out.String(), `"text":"waited"`); n != 6 {
		t.Errorf("%d of 6 stdio calls answered: %s", n, out.String())
	}
	if d < 1400*time.Millisecond || d > 2200*time.Millisecond {
		t.Errorf("6 stdio calls of 500ms, 2 at a time, took %v, want about 1.5s", d)
	}
	if most := up.most.Load(); most != 2 {
		t.Errorf("the upstream saw at most %d calls at once, want 2", most)
	}
}
