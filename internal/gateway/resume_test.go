package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
	sessions "github.com/mcpgate/mcpgate/internal/session"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/redis"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// stepper is a go-sdk upstream whose tool "steps" reports progress
// steps times, delay apart, then answers "done"; cancelled counts the
// calls that ended before they finished. "addtool" adds a tool (the
// server then tells its sessions tools/list_changed); "log" logs a
// warning; "touch" marks mem://stepper/doc updated.
type stepper struct {
	srv       *mcp.Server
	http      string
	cancelled atomic.Int32
	finished  atomic.Int32
	subs      atomic.Int32 // resources/subscribe minus unsubscribe
}

type stepsDelayArgs struct {
	Steps int `json:"steps"`
	Delay int `json:"delay_ms"`
}

func newStepper(t testing.TB) *stepper {
	t.Helper()
	u := &stepper{}
	u.srv = mcp.NewServer(&mcp.Implementation{Name: "stepper", Version: "1"}, &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { u.subs.Add(1); return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { u.subs.Add(-1); return nil },
	})
	u.srv.AddResource(&mcp.Resource{URI: "mem://stepper/doc", Name: "doc"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "doc"}}}, nil
	})
	mcp.AddTool(u.srv, &mcp.Tool{Name: "touch"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return textResult("touched"), nil, u.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "mem://stepper/doc"})
	})
	mcp.AddTool(u.srv, &mcp.Tool{Name: "steps"}, func(ctx context.Context, req *mcp.CallToolRequest, a stepsDelayArgs) (*mcp.CallToolResult, any, error) {
		tok := req.Params.GetProgressToken()
		finished := false
		defer func() {
			// Cancelled, or its progress could no longer be sent (the
			// gateway ended the upstream request): ended early either way.
			if !finished {
				u.cancelled.Add(1)
			}
		}()
		for i := 1; i <= a.Steps; i++ {
			if i > 1 {
				select {
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-time.After(time.Duration(a.Delay) * time.Millisecond):
				}
			}
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(a.Steps), Message: "step " + strconv.Itoa(i)}); err != nil {
				return nil, nil, err
			}
		}
		finished = true
		u.finished.Add(1)
		return textResult("done"), nil, nil
	})
	var added atomic.Int32
	mcp.AddTool(u.srv, &mcp.Tool{Name: "addtool"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		name := fmt.Sprintf("extra%d", added.Add(1))
		mcp.AddTool(u.srv, &mcp.Tool{Name: name}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return textResult(name), nil, nil
		})
		return textResult("added " + name), nil, nil
	})
	mcp.AddTool(u.srv, &mcp.Tool{Name: "log"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Logger: "stepper", Data: a.Text})
		return textResult("logged"), nil, err
	})
	u.http = serveSDK(t, u.srv).URL
	return u
}

// fleetOf starts n replicas of one fleet: the same server and session
// keys, one shared state backend, one termination memory (the store).
func fleetOf(t *testing.T, n int, upURL string, st state.Backend, tune func(*config.Fleet)) []*replicaT {
	t.Helper()
	urls := make([]string, n)
	for i := range urls {
		urls[i] = upURL
	}
	return fleetOn(t, urls, st, tune)
}

// fleetOn is fleetOf with replica i calling its server at upURLs[i] (a
// server process per replica, as with stdio).
func fleetOn(t *testing.T, upURLs []string, st state.Backend, tune func(*config.Fleet)) []*replicaT {
	t.Helper()
	terms := sessions.NewMemTerminations()
	var out []*replicaT
	for _, upURL := range upURLs {
		f := &config.Fleet{SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}}
		if tune != nil {
			tune(f)
		}
		cfg := &config.Config{Servers: map[string]*config.Server{"s": httpServer(upURL)}, Fleet: f}
		g, ts := startGatewayWith(t, Options{Config: cfg, State: st, Terminations: terms, IdleTimeout: time.Minute})
		out = append(out, &replicaT{g: g, url: ts.URL + "/mcp"})
	}
	return out
}

type replicaT struct {
	g   *Gateway
	url string
}

// backends are the shared states a fleet test runs on: one memory
// backend shared by the replicas (as if they were one process), and a
// real Redis server.
func backends(t *testing.T) map[string]func(t *testing.T) state.Backend {
	return map[string]func(t *testing.T) state.Backend{
		"memory": func(t *testing.T) state.Backend { return state.NewMemory(state.MemoryOptions{}) },
		"redis": func(t *testing.T) state.Backend {
			srv := redistest.New(t)
			b, err := redis.Open(redis.Options{URL: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() }) // after the gateways' Close (LIFO)
			return b
		},
	}
}

// sseEvent is one event as a test client reads it.
type sseEvent struct {
	id  string
	msg *jsonrpc.Message
}

// openSSE sends method to url with the session's headers and returns the
// response; a 200 SSE body is read with next.
func openSSE(t *testing.T, method, url, sid string, hdr map[string]string, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Accept", "application/json, text/event-stream")
	if method == http.MethodGet {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(mcpwire.HeaderSessionID, sid)
	req.Header.Set(mcpwire.HeaderProtocolVersion, "2025-11-25")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readEvents reads events from r until n are read (n < 0: until the end)
// or the deadline passes.
func readEvents(t *testing.T, body io.Reader, n int, within time.Duration) []sseEvent {
	t.Helper()
	type res struct {
		evs []sseEvent
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r := jsonrpc.NewSSEReader(body, 0)
		var evs []sseEvent
		for n < 0 || len(evs) < n {
			ev, err := r.Next()
			if err != nil {
				ch <- res{evs, err}
				return
			}
			m, err := jsonrpc.Decode(ev.Data)
			if err != nil {
				ch <- res{evs, fmt.Errorf("event %q: %w", ev.Data, err)}
				return
			}
			evs = append(evs, sseEvent{id: ev.ID, msg: m})
		}
		ch <- res{evs, nil}
	}()
	select {
	case r := <-ch:
		if r.err != nil && r.err != io.EOF && n >= 0 {
			t.Fatalf("after %d events: %v", len(r.evs), r.err)
		}
		return r.evs
	case <-time.After(within):
		t.Fatalf("fewer than %d events within %s", n, within)
		return nil
	}
}

func progressOf(t *testing.T, e sseEvent) string {
	t.Helper()
	if e.msg.Method != mcpwire.NotifyProgress {
		t.Fatalf("event %s: %s, want progress", e.id, jsonrpc.Encode(e.msg))
	}
	msg, _ := jsonrpc.GetString(e.msg.Params, "message")
	tok, _ := jsonrpc.Get(e.msg.Params, "progressToken")
	return string(tok) + " " + msg
}

const stepsCall = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":6,"delay_ms":150},"_meta":{"progressToken":"tok-1"}}}`

// SPEC S15, C9.1; transports "Resumability and Redelivery": a client
// drops its POST stream on A after two progress events and resumes it
// with Last-Event-ID on B: B replays what it missed and continues live to
// the result, every event once, none lost; the call was not cancelled.
func TestResumePOSTStreamOnAnotherReplica(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			up := newStepper(t)
			fl := fleetOf(t, 2, up.http, open(t), nil)
			a, b := fl[0], fl[1]
			sid := initSession(t, a.url)

			resp := openSSE(t, http.MethodPost, a.url, sid, nil, stepsCall)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("POST: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			first := readEvents(t, resp.Body, 2, 5*time.Second)
			resp.Body.Close() // the connection drops mid-call
			key, _, ok := strings.Cut(first[0].id, "-")
			if !ok || len(key) != 32 || first[0].id != key+"-1" || first[1].id != key+"-2" {
				t.Fatalf("event ids %q, %q: want <key>-1, <key>-2", first[0].id, first[1].id)
			}
			for i, e := range first {
				if got, want := progressOf(t, e), fmt.Sprintf(`"tok-1" step %d`, i+1); got != want {
					t.Errorf("event %d: %s, want %s", i, got, want)
				}
			}

			get := openSSE(t, http.MethodGet, b.url, sid, map[string]string{"Last-Event-ID": first[1].id}, "")
			if get.StatusCode != 200 {
				body, _ := io.ReadAll(get.Body)
				t.Fatalf("GET with Last-Event-ID on B: %d %s", get.StatusCode, body)
			}
			rest := readEvents(t, get.Body, -1, 10*time.Second)
			var ids, got []string
			for _, e := range rest {
				ids = append(ids, e.id)
				if e.msg.IsResponse() {
					got = append(got, "result "+string(e.msg.ID.Raw())+" "+string(e.msg.Result))
					continue
				}
				got = append(got, progressOf(t, e))
			}
			var wantIDs, want []string
			for i := 3; i <= 7; i++ {
				wantIDs = append(wantIDs, fmt.Sprintf("%s-%d", key, i))
			}
			for i := 3; i <= 6; i++ {
				want = append(want, fmt.Sprintf(`"tok-1" step %d`, i))
			}
			want = append(want, `result 7 {"content":[{"type":"text","text":"done"}]}`)
			if strings.Join(ids, " ") != strings.Join(wantIDs, " ") {
				t.Errorf("resumed ids %v, want %v", ids, wantIDs)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("resumed events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if up.cancelled.Load() != 0 || up.finished.Load() != 1 {
				t.Errorf("upstream: %d cancelled, %d finished; want the call finished", up.cancelled.Load(), up.finished.Load())
			}
		})
	}
}

// C9.1 in fleet mode: a dropped stream nobody resumes cancels its call
// once the resume window passes, not before; without session keys a
// disconnect still cancels at once.
func TestDroppedStreamCancelledAfterWindow(t *testing.T) {
	const window = 600 * time.Millisecond
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":200,"delay_ms":20},"_meta":{"progressToken":"t"}}}`
	cases := []struct {
		name     string
		fleet    bool
		min, max time.Duration
	}{
		{"fleet", true, window - 100*time.Millisecond, window + 2*time.Second},
		{"single process", false, 0, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := newStepper(t)
			url := ""
			if c.fleet {
				url = fleetOf(t, 1, up.http, state.NewMemory(state.MemoryOptions{}), func(f *config.Fleet) { f.ResumeWindow = window })[0].url
			} else {
				_, ts := startGateway(t, &config.Config{Servers: map[string]*config.Server{"s": httpServer(up.http)}})
				url = ts.URL + "/mcp"
			}
			sid := initSession(t, url)
			resp := openSSE(t, http.MethodPost, url, sid, nil, call)
			readEvents(t, resp.Body, 1, 5*time.Second)
			resp.Body.Close()
			dropped := time.Now()
			for up.cancelled.Load() == 0 {
				if time.Since(dropped) > c.max {
					t.Fatalf("call not cancelled %s after the drop", c.max)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if took := time.Since(dropped); took < c.min {
				t.Errorf("call cancelled %s after the drop, before the %s window", took, window)
			}
		})
	}
}

// A resumed GET's heartbeats keep the call alive past the window: the
// client reads it to the end on another replica even though it came back
// only once, with a window shorter than the call.
func TestResumedReaderKeepsCallAlive(t *testing.T) {
	up := newStepper(t)
	fl := fleetOf(t, 2, up.http, state.NewMemory(state.MemoryOptions{}), func(f *config.Fleet) { f.ResumeWindow = 400 * time.Millisecond })
	sid := initSession(t, fl[0].url)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":12,"delay_ms":100},"_meta":{"progressToken":"t"}}}`
	resp := openSSE(t, http.MethodPost, fl[0].url, sid, nil, call)
	first := readEvents(t, resp.Body, 1, 5*time.Second)
	resp.Body.Close()
	get := openSSE(t, http.MethodGet, fl[1].url, sid, map[string]string{"Last-Event-ID": first[0].id}, "")
	rest := readEvents(t, get.Body, -1, 10*time.Second)
	if len(rest) != 12 || !rest[11].msg.IsResponse() || up.cancelled.Load() != 0 {
		t.Fatalf("resumed %d events (last %v), %d cancelled; want 11 progress and the result", len(rest), rest[len(rest)-1].msg, up.cancelled.Load())
	}
}

// A Last-Event-ID that is malformed, of another session's stream, never
// issued, or behind the buffer's bound gets a 4xx saying which, not a
// stream with a silent gap.
func TestBadLastEventID(t *testing.T) {
	up := newStepper(t)
	fl := fleetOf(t, 2, up.http, state.NewMemory(state.MemoryOptions{}), func(f *config.Fleet) { f.ResumeEvents = 2 })
	a, b := fl[0], fl[1]
	sid := initSession(t, a.url)
	other := initSession(t, a.url)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":5,"delay_ms":1},"_meta":{"progressToken":"t"}}}`
	evs := readEvents(t, openSSE(t, http.MethodPost, a.url, sid, nil, call).Body, -1, 5*time.Second)
	if len(evs) != 6 {
		t.Fatalf("%d events, want 6", len(evs))
	}
	key, _, _ := strings.Cut(evs[0].id, "-")
	for _, c := range []struct {
		name, sid, id string
		status        int
		says          string
	}{
		{"malformed", sid, "17", 400, "not an event id this gateway issued"},
		{"bad number", sid, key + "-01", 400, "not an event id this gateway issued"},
		{"never issued", sid, strings.Repeat("ab", 16) + "-1", 400, "names no stream of this session"},
		{"another session's", other, evs[0].id, 400, "names no stream of this session"},
		{"dropped by the bound", sid, evs[0].id, 410, "no longer buffered"},
	} {
		for _, u := range []string{a.url, b.url} {
			resp := openSSE(t, http.MethodGet, u, c.sid, map[string]string{"Last-Event-ID": c.id}, "")
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status || !strings.Contains(string(body), c.says) {
				t.Errorf("%s: %d %s, want %d saying %q", c.name, resp.StatusCode, body, c.status, c.says)
			}
		}
	}
	// Within the bound: the last event, then the stream ends.
	resp := openSSE(t, http.MethodGet, b.url, sid, map[string]string{"Last-Event-ID": evs[4].id}, "")
	if rest := readEvents(t, resp.Body, -1, 5*time.Second); len(rest) != 1 || rest[0].id != evs[5].id || !rest[0].msg.IsResponse() {
		t.Errorf("resume from the 5th event: %+v", rest)
	}
}

// S15: a standalone GET stream opened on B takes over from A's, which
// ends; a list_changed that A hears reaches B's stream within a second,
// once: through the bus when only A's upstream heard it (a server process
// per replica), and once too when B's upstream session heard it as well
// (one shared server).
func TestGETStreamMovesToNewestReplica(t *testing.T) {
	for name, open := range backends(t) {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shared upstream %v", name, shared), func(t *testing.T) {
				testGETStreamMoves(t, open(t), shared)
			})
		}
	}
}

func testGETStreamMoves(t *testing.T, st state.Backend, shared bool) {
	up, upB := newStepper(t), newStepper(t)
	if shared {
		upB = up
	}
	fl := fleetOn(t, []string{up.http, upB.http}, st, nil)
	a, b := fl[0], fl[1]
	sid := initSession(t, a.url)
	for _, r := range fl {
		waitFor(t, "upstream ready", func() bool { return r.g.Upstreams().Health()["s"].State == upstream.HealthReady })
	}
	if code, _, body := rpc(t, a.url, map[string]string{mcpwire.HeaderSessionID: sid}, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); code != 200 {
		t.Fatalf("tools/list on A: %d %s", code, body)
	}
	getA := openSSE(t, http.MethodGet, a.url, sid, nil, "")
	if getA.StatusCode != 200 {
		t.Fatalf("GET on A: %d", getA.StatusCode)
	}
	waitFor(t, "A's stream attached", func() bool { return streamOn(a.g) })
	getB := openSSE(t, http.MethodGet, b.url, sid, nil, "")
	if getB.StatusCode != 200 {
		t.Fatalf("GET on B: %d", getB.StatusCode)
	}
	ended := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, getA.Body); close(ended) }()
	select {
	case <-ended:
	case <-time.After(time.Second):
		t.Fatal("A's stream still open 1s after B's took over")
	}

	bEvents := make(chan sseEvent, 16)
	go func() {
		r := jsonrpc.NewSSEReader(getB.Body, 0)
		for {
			ev, err := r.Next()
			if err != nil {
				close(bEvents)
				return
			}
			if m, err := jsonrpc.Decode(ev.Data); err == nil {
				bEvents <- sseEvent{ev.ID, m}
			}
		}
	}()
	if code, _, body := rpc(t, a.url, map[string]string{mcpwire.HeaderSessionID: sid}, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"s__addtool","arguments":{}}}`); code != 200 || !strings.Contains(string(body), "added extra1") {
		t.Fatalf("addtool on A: %d %s", code, body)
	}
	changed := time.Now()
	select {
	case e, ok := <-bEvents:
		if !ok || e.msg.Method != mcpwire.NotifyToolsListChanged {
			t.Fatalf("B's stream: %v (open %v), want tools/list_changed", e.msg, ok)
		}
		t.Logf("list_changed reached B's stream %s after the call on A returned", time.Since(changed))
	case <-time.After(time.Second):
		t.Fatal("no list_changed on B's stream within 1s")
	}
	select {
	case e, ok := <-bEvents:
		if ok {
			t.Errorf("a second message on B's stream: %s", jsonrpc.Encode(e.msg))
		}
	case <-time.After(300 * time.Millisecond):
	}
}

// streamOn reports whether g's only session has a GET stream attached.
func streamOn(g *Gateway) bool {
	for _, s := range g.sessions.All() {
		return s.Streaming()
	}
	return false
}

// A session's log level is the fleet's: set on A, it filters what B's
// calls relay (B's upstream is told it too), including a change made on
// A after B already holds a copy.
func TestLogLevelSharedAcrossReplicas(t *testing.T) {
	up := newStepper(t)
	fl := fleetOf(t, 2, up.http, state.NewMemory(state.MemoryOptions{}), nil)
	a, b := fl[0], fl[1]
	sid := initSession(t, a.url)
	hdr := map[string]string{mcpwire.HeaderSessionID: sid}
	setLevel := func(level string) {
		t.Helper()
		if code, _, body := rpc(t, a.url, hdr, `{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"`+level+`"}}`); code != 200 || !strings.Contains(string(body), `"result":{}`) {
			t.Fatalf("setLevel %s on A: %d %s", level, code, body)
		}
	}
	logOnB := func() []string {
		t.Helper()
		resp := openSSE(t, http.MethodPost, b.url, sid, nil, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"s__log","arguments":{"text":"careful"}}}`)
		var methods []string
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			for _, e := range readEvents(t, resp.Body, -1, 5*time.Second) {
				if !e.msg.IsResponse() {
					methods = append(methods, e.msg.Method)
				}
			}
		}
		return methods
	}
	setLevel("error")
	if got := logOnB(); len(got) != 0 {
		t.Errorf("with level error set on A, B relayed %v for a warning", got)
	}
	setLevel("warning")
	waitFor(t, "B's copy hears the new level", func() bool {
		s := b.g.sessionByHash(innerHash(a.g))
		if s == nil {
			return false
		}
		return s.LogLevel() == levelIndex("warning")
	})
	if got := logOnB(); len(got) != 1 || got[0] != mcpwire.NotifyMessage {
		t.Errorf("with level warning set on A, B relayed %v; want one notifications/message", got)
	}
}

func innerHash(g *Gateway) string { return hashHex(innerID(g)) }

// S8.1, S15: a client's DELETE on any replica ends the copies the others
// hold at once, whether the deleting replica held one or not.
func TestClientDeleteEndsCopiesEverywhere(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			up := newStepper(t)
			fl := fleetOf(t, 3, up.http, open(t), nil)
			a, b, c := fl[0], fl[1], fl[2]
			list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
			for _, deleter := range []*replicaT{b, c} {
				sid := initSession(t, a.url)
				if code, _, _ := rpc(t, b.url, map[string]string{mcpwire.HeaderSessionID: sid}, list); code != 200 {
					t.Fatalf("resume on B: %d", code)
				}
				if localReport(a.g).Total != 1 || localReport(b.g).Total != 1 {
					t.Fatal("want copies on A and B")
				}
				req, _ := http.NewRequest(http.MethodDelete, deleter.url, nil)
				req.Header.Set(mcpwire.HeaderSessionID, sid)
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("DELETE: %v %v", resp, err)
				}
				resp.Body.Close()
				deadline := time.Now().Add(time.Second)
				for localReport(a.g).Total+localReport(b.g).Total != 0 {
					if time.Now().After(deadline) {
						t.Fatalf("copies still live 1s after the DELETE: A %d, B %d", localReport(a.g).Total, localReport(b.g).Total)
					}
					time.Sleep(5 * time.Millisecond)
				}
				if code, _, _ := rpc(t, a.url, map[string]string{mcpwire.HeaderSessionID: sid}, list); code != http.StatusNotFound {
					t.Errorf("A after the DELETE: %d", code)
				}
			}
		})
	}
}

// S15: resources/updated of a subscription made on A reaches the GET
// stream the session holds on B; an unsubscribe sent to B ends A's
// upstream subscription, and no update follows.
func TestResourceUpdatesReachStreamOnAnotherReplica(t *testing.T) {
	up := newStepper(t)
	fl := fleetOf(t, 2, up.http, state.NewMemory(state.MemoryOptions{}), nil)
	a, b := fl[0], fl[1]
	sid := initSession(t, a.url)
	hdr := map[string]string{mcpwire.HeaderSessionID: sid}
	if code, _, body := rpc(t, a.url, hdr, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"mem://stepper/doc"}}`); code != 200 || up.subs.Load() != 1 {
		t.Fatalf("subscribe on A: %d %s (upstream subscriptions %d)", code, body, up.subs.Load())
	}
	get := openSSE(t, http.MethodGet, b.url, sid, nil, "")
	if get.StatusCode != 200 {
		t.Fatalf("GET on B: %d", get.StatusCode)
	}
	events := make(chan *jsonrpc.Message, 16)
	go func() {
		r := jsonrpc.NewSSEReader(get.Body, 0)
		for {
			ev, err := r.Next()
			if err != nil {
				close(events)
				return
			}
			// A list change (B's upstream session starting) is not
			// what this test is about.
			if m, err := jsonrpc.Decode(ev.Data); err == nil && m.Method == mcpwire.NotifyResourceUpdated {
				events <- m
			}
		}
	}()
	waitFor(t, "B's stream attached", func() bool { return streamOn(b.g) })
	waitFor(t, "A's copy hears of B's stream", func() bool {
		s := a.g.sessionByHash(innerHash(a.g))
		return s.RemoteStream() != 0
	})
	touch := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"s__touch","arguments":{}}}`
	if code, _, body := rpc(t, a.url, hdr, touch); code != 200 {
		t.Fatalf("touch: %d %s", code, body)
	}
	select {
	case m := <-events:
		if uri, _ := jsonrpc.GetString(m.Params, "uri"); m.Method != mcpwire.NotifyResourceUpdated || uri != "mem://stepper/doc" {
			t.Fatalf("B's stream: %s", jsonrpc.Encode(m))
		}
	case <-time.After(time.Second):
		t.Fatal("no resources/updated on B's stream within 1s")
	}
	if code, _, body := rpc(t, b.url, hdr, `{"jsonrpc":"2.0","id":4,"method":"resources/unsubscribe","params":{"uri":"mem://stepper/doc"}}`); code != 200 {
		t.Fatalf("unsubscribe on B: %d %s", code, body)
	}
	// A releases its upstream subscription. (Checked on A's books: which
	// pooled upstream session the unsubscribe goes out on is relay.go's
	// business, and the upstream's count may lag.)
	waitFor(t, "A's upstream subscription released", func() bool {
		a.g.subMu.Lock()
		defer a.g.subMu.Unlock()
		return len(a.g.subs) == 0
	})
	if code, _, body := rpc(t, a.url, hdr, touch); code != 200 {
		t.Fatalf("touch: %d %s", code, body)
	}
	select {
	case m := <-events:
		t.Errorf("after the unsubscribe, B's stream got %s", jsonrpc.Encode(m))
	case <-time.After(300 * time.Millisecond):
	}
}

// balancer sends each request to the next replica, as the round-robin
// balancer of issue 14 does, and cuts the first tools/call response after
// cutAfter SSE events (a dropped connection).
func balancer(t *testing.T, cutAfter int, replicas ...*replicaT) string {
	t.Helper()
	var next atomic.Int64
	var cut atomic.Bool
	proxies := make([]*httputil.ReverseProxy, len(replicas))
	for i, r := range replicas {
		u, _ := url.Parse(strings.TrimSuffix(r.url, "/mcp"))
		p := httputil.NewSingleHostReverseProxy(u)
		p.FlushInterval = -1
		p.ErrorLog = log.New(io.Discard, "", 0)
		p.ModifyResponse = func(resp *http.Response) error {
			if resp.Request.Method == http.MethodPost && resp.Request.Header.Get("X-Test-Call") != "" &&
				strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && cut.CompareAndSwap(false, true) {
				resp.Body = &cutReader{r: resp.Body, events: cutAfter}
			}
			return nil
		}
		proxies[i] = p
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			r.Header.Set("X-Test-Call", "1")
		}
		proxies[int(next.Add(1))%len(proxies)].ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// cutReader fails once it has passed on events SSE events.
type cutReader struct {
	r      io.ReadCloser
	events int
	seen   int
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.seen >= c.events {
		return 0, errors.New("connection cut by the test")
	}
	n, err := c.r.Read(p)
	c.seen += bytes.Count(p[:n], []byte("\n\n"))
	return n, err
}

func (c *cutReader) Close() error { return c.r.Close() }

// STYLE 16, S15: the official go-sdk client, behind a balancer that sends
// every request to another replica, loses its tools/call stream after two
// events; it resumes with Last-Event-ID on the other replica by itself and
// gets every progress notification once and the result.
func TestSDKClientResumesThroughBalancer(t *testing.T) {
	up := newStepper(t)
	fl := fleetOf(t, 2, up.http, state.NewMemory(state.MemoryOptions{}), nil)
	endpoint := balancer(t, 2, fl...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	var progress []float64
	c := mcp.NewClient(&mcp.Implementation{Name: "resumer", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, req.Params.Progress)
			mu.Unlock()
		},
	})
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: 3}, handshakeEra)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "s__steps", Arguments: map[string]any{"steps": 6, "delay_ms": 300}}
	params.SetProgressToken("p")
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != "done" {
		t.Errorf("result %q", got)
	}
	// The client hands notifications to their handler on its own
	// goroutine: the last may come just after the result.
	got := func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprint(progress) }
	for deadline := time.Now().Add(time.Second); got() != "[1 2 3 4 5 6]" && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if cut := fl[0].g.resumeCount() + fl[1].g.resumeCount(); cut != 1 {
		t.Errorf("%d streams resumed, want 1 (the balancer's cut)", cut)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(progress) != "[1 2 3 4 5 6]" {
		t.Errorf("progress %v, want each of 1..6 once", progress)
	}
	if up.cancelled.Load() != 0 || up.finished.Load() != 1 {
		t.Errorf("upstream: %d cancelled, %d finished", up.cancelled.Load(), up.finished.Load())
	}
}

// BenchmarkPOSTStreamEvents measures a tools/call whose stream carries
// 100 progress events: on a single process (events without ids), and in
// fleet mode, where each event is first appended to its buffer in a
// real Redis (unix socket). ns/event is the cost per event.
func BenchmarkPOSTStreamEvents(b *testing.B) {
	const events = 100
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":100,"delay_ms":0},"_meta":{"progressToken":"t"}}}`
	for _, mode := range []string{"single process", "fleet redis"} {
		b.Run(mode, func(b *testing.B) {
			up := newStepper(b)
			var url string
			if mode == "single process" {
				_, ts := startGateway(b, &config.Config{Servers: map[string]*config.Server{"s": httpServer(up.http)}})
				url = ts.URL + "/mcp"
			} else {
				srv := redistest.New(b)
				st, err := redis.Open(redis.Options{URL: srv.URL()})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { st.Close() })
				f := &config.Fleet{SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}}
				_, ts := startGatewayWith(b, Options{Config: &config.Config{Servers: map[string]*config.Server{"s": httpServer(up.http)}, Fleet: f}, State: st})
				url = ts.URL + "/mcp"
			}
			sid := initSession(b, url)
			b.ResetTimer()
			for range b.N {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(call))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set(mcpwire.HeaderSessionID, sid)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				r := jsonrpc.NewSSEReader(resp.Body, 0)
				for {
					if _, err := r.Next(); err != nil {
						break
					}
					n++
				}
				resp.Body.Close()
				if n != events+1 {
					b.Fatalf("%d events", n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(events+1)), "ns/event")
		})
	}
}

// A resume from the call's final event gets a stream that ends at once:
// nothing follows the response.
func TestResumeAfterTheFinalEventEndsAtOnce(t *testing.T) {
	up := newStepper(t)
	fl := fleetOf(t, 2, up.http, state.NewMemory(state.MemoryOptions{}), nil)
	sid := initSession(t, fl[0].url)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":2,"delay_ms":1},"_meta":{"progressToken":"t"}}}`
	evs := readEvents(t, openSSE(t, http.MethodPost, fl[0].url, sid, nil, call).Body, -1, 5*time.Second)
	if len(evs) != 3 || !evs[2].msg.IsResponse() {
		t.Fatalf("events %+v", evs)
	}
	resp := openSSE(t, http.MethodGet, fl[1].url, sid, map[string]string{"Last-Event-ID": evs[2].id}, "")
	if rest := readEvents(t, resp.Body, -1, time.Second); resp.StatusCode != 200 || len(rest) != 0 {
		t.Errorf("resume after the final event: %d %+v", resp.StatusCode, rest)
	}
}

// A second GET on the same replica takes over too (fleet mode), and the
// goroutines of fleet sessions (the note follower, stream claims, resume
// windows) end with their streams and with the gateway.
func TestFleetGoroutinesEnd(t *testing.T) {
	up := newStepper(t)
	fl := fleetOf(t, 1, up.http, state.NewMemory(state.MemoryOptions{}), func(f *config.Fleet) { f.ResumeWindow = 200 * time.Millisecond })
	a := fl[0]
	sid := initSession(t, a.url)
	first := openSSE(t, http.MethodGet, a.url, sid, nil, "")
	waitFor(t, "first stream attached", func() bool { return streamOn(a.g) })
	second := openSSE(t, http.MethodGet, a.url, sid, nil, "")
	if first.StatusCode != 200 || second.StatusCode != 200 {
		t.Fatalf("GETs: %d, %d", first.StatusCode, second.StatusCode)
	}
	ended := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, first.Body); close(ended) }()
	select {
	case <-ended:
	case <-time.After(time.Second):
		t.Fatal("the first GET stream still open after the second took over")
	}
	// A dropped call, never resumed: its window ends it.
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":100,"delay_ms":20},"_meta":{"progressToken":"t"}}}`
	resp := openSSE(t, http.MethodPost, a.url, sid, nil, call)
	readEvents(t, resp.Body, 1, 5*time.Second)
	resp.Body.Close()
	waitFor(t, "the call cancelled", func() bool { return up.cancelled.Load() == 1 })
	second.Body.Close()
	if err := a.g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		leaked := ""
		for _, fn := range []string{"relay.(*Bus).followSessions", "gateway.(*Gateway).keepFleetStream", "gateway.(*Gateway).outliveClient"} {
			if strings.Contains(stacks, fn) {
				leaked = fn
			}
		}
		if leaked == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s outlived its stream and the gateway:\n%s", leaked, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// flakyEvents is a shared state whose event buffers fail while down is
// set, as an unreachable Redis does.
type flakyEvents struct {
	state.Backend
	down atomic.Bool
}

func (f *flakyEvents) AppendEvent(ctx context.Context, stream string, data []byte, maxLen int, ttl time.Duration) (uint64, error) {
	if f.down.Load() {
		return 0, &state.UnavailableError{Op: "append event", Err: errors.New("test outage")}
	}
	return f.Backend.AppendEvent(ctx, stream, data, maxLen, ttl)
}

// An event that could not be buffered (the shared state was down) still
// reaches the connected client, without an id; a resume from before it
// is refused with 410 naming the cause, never served with a silent gap;
// a resume from after it works.
func TestUnbufferedEventIsNoSilentGap(t *testing.T) {
	up := newStepper(t)
	st := &flakyEvents{Backend: state.NewMemory(state.MemoryOptions{})}
	fl := fleetOf(t, 2, up.http, st, nil)
	sid := initSession(t, fl[0].url)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":6,"delay_ms":150},"_meta":{"progressToken":"t"}}}`
	resp := openSSE(t, http.MethodPost, fl[0].url, sid, nil, call)
	e1 := readEvents(t, resp.Body, 1, 5*time.Second)
	st.down.Store(true)
	e2 := readEvents(t, resp.Body, 1, 5*time.Second)
	st.down.Store(false)
	e3 := readEvents(t, resp.Body, 1, 5*time.Second)
	resp.Body.Close()
	key, _, _ := strings.Cut(e1[0].id, "-")
	if e1[0].id != key+"-1" || e2[0].id != "" || e3[0].id != key+"-3" {
		t.Fatalf("ids %q, %q, %q: want <key>-1, none, <key>-3 (2 marks the gap)", e1[0].id, e2[0].id, e3[0].id)
	}
	get := openSSE(t, http.MethodGet, fl[1].url, sid, map[string]string{"Last-Event-ID": e1[0].id}, "")
	body, _ := io.ReadAll(get.Body)
	if get.StatusCode != http.StatusGone || !strings.Contains(string(body), "could not be buffered") {
		t.Errorf("resume from before the gap: %d %s", get.StatusCode, body)
	}
	get = openSSE(t, http.MethodGet, fl[1].url, sid, map[string]string{"Last-Event-ID": e3[0].id}, "")
	rest := readEvents(t, get.Body, -1, 10*time.Second)
	if len(rest) != 4 || !rest[3].msg.IsResponse() {
		t.Errorf("resume from after the gap: %d events", len(rest))
	}
}

// A subscription made through a copy that then idles out (C's) is taken
// over by the replica holding the session's GET stream (B), so updates
// keep coming while the client uses the session elsewhere.
func TestSubscriptionsMoveToTheStream(t *testing.T) {
	up := newStepper(t)
	fl := fleetOf(t, 3, up.http, state.NewMemory(state.MemoryOptions{}), nil)
	a, b, c := fl[0], fl[1], fl[2]
	sid := initSession(t, a.url)
	hdr := map[string]string{mcpwire.HeaderSessionID: sid}
	get := openSSE(t, http.MethodGet, b.url, sid, nil, "")
	if get.StatusCode != 200 {
		t.Fatalf("GET on B: %d", get.StatusCode)
	}
	updates := make(chan *jsonrpc.Message, 16)
	go func() {
		r := jsonrpc.NewSSEReader(get.Body, 0)
		for {
			ev, err := r.Next()
			if err != nil {
				close(updates)
				return
			}
			if m, err := jsonrpc.Decode(ev.Data); err == nil && m.Method == mcpwire.NotifyResourceUpdated {
				updates <- m
			}
		}
	}()
	waitFor(t, "B's stream attached", func() bool { return streamOn(b.g) })
	if code, _, body := rpc(t, c.url, hdr, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"mem://stepper/doc"}}`); code != 200 {
		t.Fatalf("subscribe on C: %d %s", code, body)
	}
	copyOnC := c.g.sessionByHash(innerHash(c.g))
	if copyOnC == nil || !copyOnC.Resumed() {
		t.Fatal("C holds no resumed copy")
	}
	c.g.retire(copyOnC) // as its idle expiry does
	waitFor(t, "B took the subscription over", func() bool {
		s := b.g.sessionByHash(copyOnC.Hash())
		if s == nil {
			return false
		}
		return s.SubServer("mem://stepper/doc") == "s"
	})
	waitFor(t, "B subscribed upstream", func() bool {
		b.g.subMu.Lock()
		defer b.g.subMu.Unlock()
		return b.g.subs[subKey{"s", "mem://stepper/doc"}] == 1
	})
	// The gateway counts B's subscription before the upstream has it:
	// touch until an update arrives (each touch is answered only by a
	// subscribed upstream session), for at most 5 s.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _, body := rpc(t, a.url, hdr, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"s__touch","arguments":{}}}`); code != 200 {
			t.Fatalf("touch: %d %s", code, body)
		}
		select {
		case <-updates:
			return
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no resources/updated on B's stream after C's copy ended")
		}
	}
}

// A resumed GET whose call ran on a replica that is gone (the event ids
// name it, and the registry no longer lists it): the stream ends after
// fleetrelay.ProducerCheck without news, not after resume_ttl, and the client's next
// resume is told the outcome is lost (410), not kept waiting.
func TestResumeEndsWhenTheCallsReplicaIsGone(t *testing.T) {
	up := newStepper(t)
	st := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewUnstartedServer(nil)
	url := "http://" + srv.Listener.Addr().String()
	cfg := &config.Config{Servers: map[string]*config.Server{"s": httpServer(up.http)},
		Fleet: &config.Fleet{SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}, Advertise: url}}
	g, _ := startGatewayWith(t, Options{Config: cfg, State: st, Replicas: st, Terminations: sessions.NewMemTerminations(), IdleTimeout: time.Minute})
	srv.Config.Handler = g
	srv.Start()
	t.Cleanup(srv.Close)
	sid := initSession(t, url+"/mcp")
	// What a replica that died mid-call leaves: its first events, no
	// final one, and no heartbeat (it was never registered: "0123456789ab").
	key := "0123456789ab" + strings.Repeat("cd", 10)
	name := "resume:" + innerHash(g) + ":" + key
	for i := 1; i <= 2; i++ {
		msg := fmt.Sprintf(`m{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":%d}}`, i)
		if _, err := st.AppendEvent(t.Context(), name, []byte(msg), 100, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the replica's own registry entry", func() bool { return g.FleetSize() == 1 })
	start := time.Now()
	get := openSSE(t, http.MethodGet, url+"/mcp", sid, map[string]string{"Last-Event-ID": key + "-1"}, "")
	if get.StatusCode != 200 {
		t.Fatalf("resume: %d", get.StatusCode)
	}
	events := readEvents(t, get.Body, -1, 10*time.Second)
	get.Body.Close()
	took := time.Since(start)
	if len(events) != 1 || events[0].id != key+"-2" {
		t.Errorf("replayed %v, want event 2 alone", events)
	}
	if took < fleetrelay.ProducerCheck || took > fleetrelay.ProducerCheck+3*time.Second {
		t.Errorf("the stream ended after %s, want about fleetrelay.ProducerCheck (%s)", took, fleetrelay.ProducerCheck)
	}
	t.Logf("a resume of a dead replica's call ended after %s", took.Round(time.Millisecond))
	again := openSSE(t, http.MethodGet, url+"/mcp", sid, map[string]string{"Last-Event-ID": key + "-2"}, "")
	body, _ := io.ReadAll(again.Body)
	again.Body.Close()
	if again.StatusCode != http.StatusGone || !strings.Contains(string(body), "replica running the call is gone") {
		t.Errorf("the next resume: %d %s; want 410 saying the call's replica is gone", again.StatusCode, body)
	}
}

// A sealed session nobody in the fleet used for longer than the idle
// timeout is expired on every replica (404), even when the replica that
// made it could not remember its end (separate terminations here, as when
// it died); one used anywhere within the timeout lives on.
func TestSealedSessionIdleEverywhere(t *testing.T) {
	up := newStepper(t)
	st := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { st.Close() })
	const idle = 600 * time.Millisecond
	var urls []string
	for range 2 {
		cfg := &config.Config{Servers: map[string]*config.Server{"s": httpServer(up.http)},
			Fleet: &config.Fleet{SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}}}
		_, ts := startGatewayWith(t, Options{Config: cfg, State: st, Terminations: sessions.NewMemTerminations(), IdleTimeout: idle})
		urls = append(urls, ts.URL+"/mcp")
	}
	a, b := urls[0], urls[1]
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`

	used := initSession(t, a)
	idleSid := initSession(t, a)
	// Used on B only, every 0.6 of the timeout, past the first timeout:
	// its shared state is renewed from B, so it lives, and A (which made
	// it and sees none of its requests) does not end it for the fleet.
	for range 3 {
		time.Sleep(idle * 6 / 10)
		if code, _, body := rpc(t, b, map[string]string{mcpwire.HeaderSessionID: used}, list); code != 200 {
			t.Fatalf("a session in use on B: %d %s", code, body)
		}
	}
	if code, _, body := rpc(t, a, map[string]string{mcpwire.HeaderSessionID: used}, list); code != 200 {
		t.Fatalf("back on A after A's copy idled out: %d %s", code, body)
	}
	// Not used anywhere for longer than the timeout: expired on B.
	if code, _, _ := rpc(t, b, map[string]string{mcpwire.HeaderSessionID: idleSid}, list); code != http.StatusNotFound {
		t.Errorf("a session idle everywhere for %s: %d, want 404", idle*18/10, code)
	}
}

// SPEC S15, catalog invalidations: a list change one replica hears from
// its upstream invalidates every replica's cached catalog of that server.
// The upstream here never notifies and counts its tools/list calls, so
// only the announcement from A can make B fetch its tools again.
func TestListChangeInvalidatesOtherReplicasCatalog(t *testing.T) {
	var (
		mu    sync.Mutex
		tools = `[{"name":"one","inputSchema":{"type":"object"}}]`
		lists atomic.Int32
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil || !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		result := `{}`
		switch m.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"quiet","version":"0"}}`
		case "tools/list":
			lists.Add(1)
			mu.Lock()
			result = `{"tools":` + tools + `}`
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
	}))
	t.Cleanup(up.Close)
	fl := fleetOf(t, 2, up.URL, state.NewMemory(state.MemoryOptions{}), nil)
	a, b := fl[0], fl[1]
	list := func(url string) string {
		t.Helper()
		code, body := statelessPost(t, url, map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
		if code != 200 {
			t.Fatalf("tools/list: %d %s", code, body)
		}
		return string(body)
	}
	if !strings.Contains(list(b.url), "s__one") {
		t.Fatal("B does not list the first tool")
	}
	// The replicas' own first fetches (at their upstream session's start)
	// may still be landing: wait until the count stands still.
	for stable, last := 0, lists.Load(); stable < 10; stable++ {
		time.Sleep(30 * time.Millisecond)
		if n := lists.Load(); n != last {
			stable, last = -1, n
		}
	}
	mu.Lock()
	tools = `[{"name":"one","inputSchema":{"type":"object"}},{"name":"two","inputSchema":{"type":"object"}}]`
	mu.Unlock()
	before := lists.Load()
	if strings.Contains(list(b.url), "s__two") || lists.Load() != before {
		t.Fatal("B fetched its tools again unasked: the test cannot tell the announcement's effect")
	}
	// A hears the change from its upstream (as its relay would).
	a.g.shareListChanged("s", mcpwire.NotifyToolsListChanged)
	waitFor(t, "B's catalog of s invalidated by A's announcement", func() bool { return strings.Contains(list(b.url), "s__two") })
}
