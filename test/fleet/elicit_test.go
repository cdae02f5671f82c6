package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// hop is one HTTP request an SDK client sent through the balancer: what it
// carried, which replica served it, and what its reply's body delivered.
type hop struct {
	HTTP    string // POST, GET, DELETE
	Method  string // the JSON-RPC method; "" for a response to the server
	Tool    string // params.name of a tools/call
	ID      string // the JSON-RPC id, as JSON
	Retry   bool   // params carry requestState: a 2026-07-28 retry
	Replica string // HeaderReplica
	Status  int
	body    lockedBuffer // the reply's body, as far as the client read it
}

func (h *hop) String() string {
	return fmt.Sprintf("%s %s %s id=%s retry=%v -> %d from %q", h.HTTP, h.Method, h.Tool, h.ID, h.Retry, h.Status, h.Replica)
}

// lockedBuffer is a bytes.Buffer the SDK's reader goroutine writes and the
// test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// steer is an SDK client's transport that adds its key, pins each request
// to the replica pin names for it ("" for round robin, with the balancer
// routing by pinByHeader) and records every hop. The SDK client itself is
// unmodified: steer only reads what it sends.
type steer struct {
	key string
	pin func(*hop) string

	mu   sync.Mutex
	hops []*hop
}

func (s *steer) RoundTrip(r *http.Request) (*http.Response, error) {
	h := &hop{HTTP: r.Method}
	r = r.Clone(r.Context())
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		var m struct {
			Method string          `json:"method"`
			ID     json.RawMessage `json:"id"`
			Params struct {
				Name         string `json:"name"`
				RequestState string `json:"requestState"`
			} `json:"params"`
		}
		_ = json.Unmarshal(b, &m)
		h.Method, h.ID, h.Retry = m.Method, string(m.ID), m.Params.RequestState != ""
		if m.Method == "tools/call" {
			h.Tool = m.Params.Name
		}
	}
	r.Header.Set("X-Mcpgate-Api-Key", s.key)
	if p := s.pin(h); p != "" {
		r.Header.Set(HeaderPin, p)
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	h.Replica, h.Status = resp.Header.Get(HeaderReplica), resp.StatusCode
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, &h.body), resp.Body}
	s.mu.Lock()
	s.hops = append(s.hops, h)
	s.mu.Unlock()
	return resp, nil
}

// since returns the hops recorded after the first n.
func (s *steer) since(n int) []*hop {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*hop(nil), s.hops[n:]...)
}

func (s *steer) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hops)
}

// askingCase is one server-everything tool that asks the client something
// during the call, and what the result must then say.
type askingCase struct {
	tool string
	args map[string]any
	asks string // the method of the server's request
	// want is what the result text must contain: the client's answer.
	want func(answer string) []string
}

var askingCases = []askingCase{
	{tool: "everything__trigger-elicitation-request", args: map[string]any{}, asks: "elicitation/create",
		want: func(a string) []string {
			return []string{"User provided the requested information!", "- Name: " + a, `"name": "` + a + `"`}
		}},
	{tool: "everything__trigger-sampling-request", args: map[string]any{"prompt": "say the fleet word", "maxTokens": 20}, asks: "sampling/createMessage",
		want: func(a string) []string { return []string{"LLM sampling result:", a} }},
}

// testServerRequestAcrossReplicas: scenario 2. An elicitation (and a
// sampling request) asked during a call on replica a is answered through
// another replica, and the call completes with the client's answer.
//
// The go-sdk client, unmodified, through the balancer; its transport
// (steer) only pins: the tools/call to a, and then
//   - 2025-11-25: the client's reply POST (a JSON-RPC response to the
//     request a relayed) to b for the elicitation, c for the sampling
//     request: the replica the reply lands on forwards it to a, which
//     answers the upstream's pending request. Twice: with the SDK's
//     default capabilities (roots: the request comes on the session's GET
//     stream, pinned to b, so a hands it to b) and without roots (it
//     comes on the call's POST stream; the GET goes round robin);
//   - 2026-07-28: the call gets input_required from a; the SDK's own retry
//     (inputResponses + requestState) goes to c, which forwards it to a,
//     where the call is still running, and relays its result.
//
// The answer is fresh each run, so only a reply that reached the asking
// upstream request can put it in the result.
func testServerRequestAcrossReplicas(t *testing.T, f *Fleet) {
	needNode(t)
	a, b, c := f.Replicas[0].Name, f.Replicas[1].Name, f.Replicas[2].Name
	f.LB.Route(f.LB.pinByHeader)
	defer f.LB.Route(nil)

	var (
		answer  atomic.Pointer[string] // what the handlers answer now
		elicits atomic.Int32
		samples atomic.Int32
	)
	opts := &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicits.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": *answer.Load(), "check": true}}, nil
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			samples.Add(1)
			return &mcp.CreateMessageResult{Model: "fleet-model", Role: "assistant", Content: &mcp.TextContent{Text: *answer.Load()}, StopReason: "endTurn"}, nil
		},
	}
	connect := func(t *testing.T, ctx context.Context, rev string, opts *mcp.ClientOptions, pin func(*hop) string) (*mcp.ClientSession, *steer) {
		t.Helper()
		st := &steer{key: streamKey, pin: pin}
		client := mcp.NewClient(&mcp.Implementation{Name: "fleet-asked", Version: "1"}, opts)
		tr := &mcp.StreamableClientTransport{Endpoint: f.LB.URL + "/mcp", HTTPClient: &http.Client{Transport: st}}
		var so *mcp.ClientSessionOptions
		if rev != "" {
			so = &mcp.ClientSessionOptions{ProtocolVersion: rev}
		}
		cs, err := client.Connect(ctx, tr, so)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs, st
	}
	// call makes one asking call and checks its result; it returns the
	// hops of the call.
	call := func(t *testing.T, ctx context.Context, cs *mcp.ClientSession, st *steer, tc askingCase) []*hop {
		t.Helper()
		ans := "fleet-" + rand.Text()[:10]
		answer.Store(&ans)
		e0, s0, from := elicits.Load(), samples.Load(), st.len()
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		took := time.Since(start)
		// The client's reply is a POST of its own, recorded once its
		// answer (202) is written, which may come after the tool's result
		// reached the client: the replica that took the reply passed it
		// on before answering it.
		isReply := func(h *hop) bool { return h.HTTP == http.MethodPost && h.Method == "" && h.ID != "" }
		hops := st.since(from)
		for deadline := time.Now().Add(5 * time.Second); err == nil && !slices.ContainsFunc(hops, isReply) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			hops = st.since(from)
		}
		if err != nil {
			t.Fatalf("%s: %v\nhops: %v", tc.tool, err, hops)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		if res.IsError {
			t.Fatalf("%s: tool error %q\nthe session's hops: %v", tc.tool, text.String(), st.since(0))
		}
		for _, w := range tc.want(ans) {
			if !strings.Contains(text.String(), w) {
				t.Errorf("%s: result lacks %q (the client answered %q):\n%s", tc.tool, w, ans, text.String())
			}
		}
		if n := elicits.Load() - e0 + samples.Load() - s0; n != 1 {
			t.Errorf("%s: the client's handlers ran %d times, want once", tc.tool, n)
		}
		t.Logf("%s: answered in %v; hops %v", tc.tool, took, hops)
		return hops
	}

	t.Run(revStateful, func(t *testing.T) {
		// Where the server's request reaches the client: a client that
		// declares roots (the SDK's default) has upstream sessions bound
		// to it, whose requests go on its GET stream; without roots the
		// request rides the call's own POST stream.
		for _, v := range []struct {
			name string
			caps *mcp.ClientCapabilities // nil: the SDK's default (roots)
			// getTo is where the client's GET stream is pinned ("":
			// round robin); askedOn the replica whose stream must carry
			// the server's request.
			getTo, askedOn string
		}{
			// The GET stream on b, the call on a: a hands the bound
			// session's request to b (the session-note topic), and the
			// client's answer, on c or b, comes back to a.
			{"roots declared, GET stream on b", nil, b, b},
			{"no roots", &mcp.ClientCapabilities{}, "", a},
		} {
			t.Run(v.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				var replyTo atomic.Pointer[string]
				o := *opts
				o.Capabilities = v.caps
				cs, st := connect(t, ctx, revStateful, &o, func(h *hop) string {
					switch {
					case h.Method == "tools/call":
						return a
					case h.HTTP == http.MethodPost && h.Method == "" && h.ID != "":
						return *replyTo.Load() // a response to the server's request
					case h.HTTP == http.MethodGet:
						return v.getTo
					}
					return ""
				})
				if v.getTo != "" {
					// The SDK opens its GET stream after initialize, on its
					// own: a question asked before it is open has nowhere
					// to go.
					deadline := time.Now().Add(5 * time.Second)
					for !slices.ContainsFunc(st.since(0), func(h *hop) bool {
						return h.HTTP == http.MethodGet && h.Status == http.StatusOK && h.Replica == v.getTo
					}) {
						if time.Now().After(deadline) {
							t.Fatalf("no GET stream open on %s after 5s: %v", v.getTo, st.since(0))
						}
						time.Sleep(10 * time.Millisecond)
					}
				}
				for i, tc := range askingCases {
					to := []string{b, c}[i%2]
					replyTo.Store(&to)
					hops := call(t, ctx, cs, st, tc)
					var calls, replies []*hop
					for _, h := range hops {
						switch {
						case h.Method == "tools/call":
							calls = append(calls, h)
						case h.HTTP == http.MethodPost && h.Method == "" && h.ID != "":
							replies = append(replies, h)
						}
					}
					if len(calls) != 1 || calls[0].Replica != a || calls[0].Status != http.StatusOK {
						t.Errorf("%s: the call's hops %v, want one, served by %s", tc.tool, calls, a)
					}
					// The stream that carried the server's request (the GET
					// stream carries the session's earlier ones too).
					asked := ""
					for _, h := range st.since(0) {
						if strings.Contains(h.body.String(), `"`+tc.asks+`"`) {
							asked = h.HTTP + " " + h.Method + " on " + h.Replica
						}
					}
					if !strings.HasSuffix(asked, " on "+v.askedOn) {
						t.Errorf("%s: the server's request reached the client on %q, want a stream of %s", tc.tool, asked, v.askedOn)
					}
					if len(replies) != 1 || replies[0].Replica != to || replies[0].Status/100 != 2 {
						t.Errorf("%s: the client's replies %v, want one, served by %s", tc.tool, replies, to)
					} else {
						t.Logf("%s: asked (%s), reply id %s served by %s", tc.tool, asked, replies[0].ID, to)
					}
				}
			})
		}
	})

	t.Run(revStateless, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cs, st := connect(t, ctx, "", opts, func(h *hop) string {
			switch {
			case h.Method == "tools/call" && h.Retry:
				return c
			case h.Method == "tools/call":
				return a
			}
			return ""
		})
		if got := cs.InitializeResult().ProtocolVersion; got != revStateless {
			t.Fatalf("negotiated %s, want %s", got, revStateless)
		}
		for _, tc := range askingCases {
			hops := call(t, ctx, cs, st, tc)
			var calls []*hop
			for _, h := range hops {
				if h.Method == "tools/call" {
					calls = append(calls, h)
				}
			}
			if len(calls) != 2 {
				t.Errorf("%s: %d tools/call requests %v, want the call and one retry", tc.tool, len(calls), calls)
				continue
			}
			first, retry := calls[0], calls[1]
			if body := first.body.String(); first.Retry || first.Replica != a || first.Status != http.StatusOK ||
				!strings.Contains(body, `"input_required"`) || !strings.Contains(body, `"`+tc.asks+`"`) {
				t.Errorf("%s: first round %v, want input_required (%s) from %s:\n%.2000s", tc.tool, first, tc.asks, a, body)
			}
			if !retry.Retry || retry.Replica != c || retry.Status != http.StatusOK || !strings.Contains(retry.body.String(), *answer.Load()) {
				t.Errorf("%s: retry %v, want the final result, with the answer, from %s:\n%.2000s", tc.tool, retry, c, retry.body.String())
			} else {
				t.Logf("%s: input_required on %s, retry with the answer on %s", tc.tool, a, c)
			}
		}
	})
}
