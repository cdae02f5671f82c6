package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
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
	"github.com/mcpgate/mcpgate/internal/store"
)

// SPEC S24, issue 22 hole 1: an answer to a server-initiated request is
// taken only from the downstream session it was sent to (a stateless
// caller: the same caller on the same route); anyone else is refused, and
// the request goes on waiting for its own client's answer. These tests
// play the attacker with the victim's real relayed id (read off the
// victim's stream), as an attacker would after learning or guessing it.

// answerGateway serves alpha and beta, go-sdk servers whose tools ask,
// sample and list roots, behind real keys: alice's reaches alpha, bob's
// beta. With anonymous, a caller with no key is let in too (all of them
// from loopback: one owner fingerprint).
func answerGateway(t *testing.T, anonymous bool) (url string, alice, bob map[string]string) {
	t.Helper()
	alpha, beta := startSDKUpstream(t, "alpha"), startSDKUpstream(t, "beta")
	keys := &memKeys{}
	alice = withKey(keys.add(t, store.Key{Alias: "alice", Servers: []string{"alpha"}}))
	bob = withKey(keys.add(t, store.Key{Alias: "bob", Servers: []string{"beta"}}))
	auth := callers.New(callers.Options{Keys: keys, CacheTTL: -1, Anonymous: anonymous})
	t.Cleanup(func() { auth.Close() })
	_, gw := startGatewayWith(t, Options{Authenticator: auth, Config: &config.Config{Servers: map[string]*config.Server{
		"alpha": httpServer(alpha.http.URL), "beta": httpServer(beta.http.URL),
	}}})
	return gw.URL, alice, bob
}

// askCaps declares every capability a server may ask of a client.
const askCaps = `{"elicitation":{},"sampling":{},"roots":{"listChanged":true}}`

// rawSession initializes a 2025-11-25 session on url as hdr's caller with
// caps, and returns its id.
func rawSession(t *testing.T, url string, hdr map[string]string, caps string) string {
	t.Helper()
	code, h, body := rpc(t, url, hdr, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":`+caps+`,"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := h.Get(mcpwire.HeaderSessionID)
	if code != http.StatusOK || sid == "" {
		t.Fatalf("initialize on %s: %d %s", url, code, body)
	}
	if code, _, body := rpc(t, url, with(hdr, mcpwire.HeaderSessionID, sid), `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", code, body)
	}
	return sid
}

// with is hdr plus k: v.
func with(hdr map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for hk, hv := range hdr {
		out[hk] = hv
	}
	return out
}

// post sends body to url with hdr and returns the status and the whole
// body (an SSE body too: read until it ends).
func post(t *testing.T, url string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	return statelessPost(t, url, hdr, body)
}

// streamOf POSTs body to url with hdr and returns the JSON-RPC messages of
// the SSE answer as they come.
func streamOf(t *testing.T, url string, hdr map[string]string, body string) <-chan *jsonrpc.Message {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %d %s, want an SSE stream", url, resp.StatusCode, b)
	}
	return messagesOf(t, resp.Body)
}

// messagesOf decodes the JSON-RPC messages of an SSE body as they come;
// the channel closes when the body ends.
func messagesOf(t *testing.T, body io.Reader) <-chan *jsonrpc.Message {
	ch := make(chan *jsonrpc.Message, 16)
	go func() {
		defer close(ch)
		r := jsonrpc.NewSSEReader(body, 1<<20)
		for {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if m, err := jsonrpc.Decode(ev.Data); err == nil {
				ch <- m
			}
		}
	}()
	return ch
}

// nextMessage is the next message of ch that match accepts, within 10 s.
func nextMessage(t *testing.T, ch <-chan *jsonrpc.Message, what string, match func(*jsonrpc.Message) bool) *jsonrpc.Message {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended before %s", what)
			}
			if match(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s within 10s", what)
		}
	}
}

func isRequest(method string) func(*jsonrpc.Message) bool {
	return func(m *jsonrpc.Message) bool { return m.IsRequest() && m.Method == method }
}

func isResponseTo(id string) func(*jsonrpc.Message) bool {
	return func(m *jsonrpc.Message) bool { return m.IsResponse() && m.ID.Raw() == id }
}

// resultText is the text of a tools/call result's first content item.
func resultText(t *testing.T, m *jsonrpc.Message) string {
	t.Helper()
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || len(res.Content) == 0 {
		t.Fatalf("not a tool result: %s", jsonrpc.Encode(m))
	}
	return res.Content[0].Text
}

// notPendingBody is the exact refusal of an answer with raw id, sent from a
// session or without one.
func notPendingBody(raw string, session bool) string {
	whom := "this caller on this route"
	if session {
		whom = "this session"
	}
	return `{"jsonrpc":"2.0","id":` + raw + `,"error":{"code":-32600,"message":"Invalid Request: no request with id ` + jsonEscape(raw) + ` is pending for ` + whom + `"}}`
}

// askedID matches the relayed id of a single gateway: 128 random bits.
var askedID = regexp.MustCompile(`^"mcpg-[0-9a-f]{32}"$`)

// The three kinds of server-initiated request, each: the tool that makes
// its upstream ask, the answer of an attacker and of the victim, and what
// the tool returns from the victim's.
var askKinds = []struct {
	method, tool, args string
	theirs, mine, want string
}{
	{mcpwire.MethodElicitationCreate, "ask", `{"text":"Delete everything?"}`,
		`{"action":"accept","content":{"name":"Bob"}}`, `{"action":"accept","content":{"name":"Alice"}}`, "accept:Alice"},
	{"sampling/createMessage", "sample", `{"text":"hi"}`,
		`{"role":"assistant","model":"m","content":{"type":"text","text":"bob"}}`, `{"role":"assistant","model":"m","content":{"type":"text","text":"alice"}}`, "sampled:alice"},
	{"roots/list", "roots", `{}`,
		`{"roots":[{"uri":"file:///bob"}]}`, `{"roots":[{"uri":"file:///alice"}]}`, "file:///alice"},
}

// Hole 1: while alice's tools/call waits on an upstream's elicitation
// (sampling, roots), bob (another key, another route, no session) posts a
// response with alice's relayed id, alone, in a batch of answers and in a
// batch beside a request; then a second session of alice's own key, and
// alice's key without a session. Each is refused with the exact error,
// alice's upstream goes on waiting, and then receives alice's own answer.
// A cancellation naming her relayed id cancels nothing either.
func TestAnswerOnlyFromTheAskedSession(t *testing.T) {
	url, alice, bob := answerGateway(t, false)
	for _, k := range askKinds {
		t.Run(k.tool, func(t *testing.T) {
			sid := rawSession(t, url+"/mcp/alpha", alice, askCaps)
			mine := with(alice, mcpwire.HeaderSessionID, sid)
			call := streamOf(t, url+"/mcp/alpha", mine, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+k.tool+`","arguments":`+k.args+`}}`)
			asked := nextMessage(t, call, k.method, isRequest(k.method))
			id := asked.ID.Raw()
			if !askedID.MatchString(id) {
				t.Errorf("relayed id %s: want mcpg- and 128 random bits (a counter can be guessed)", id)
			}
			theirs := `{"jsonrpc":"2.0","id":` + id + `,"result":` + k.theirs + `}`
			other := rawSession(t, url+"/mcp/alpha", alice, askCaps)
			for _, c := range []struct {
				name, url string
				hdr       map[string]string
				body      string
				code      int
				want      string
			}{
				{"bob, no session, his route", url + "/mcp/beta", bob, theirs, http.StatusBadRequest, notPendingBody(id, false)},
				{"bob, a batch of answers", url + "/mcp/beta", bob, "[" + theirs + "]", http.StatusBadRequest, notPendingBody(id, false)},
				{"bob, an answer beside a request", url + "/mcp/beta", bob, "[" + theirs + `,{"jsonrpc":"2.0","id":1,"method":"ping"}]`, http.StatusOK,
					`[{"jsonrpc":"2.0","id":1,"result":{}},` + notPendingBody(id, false) + `]`},
				{"alice's key, another session", url + "/mcp/alpha", with(alice, mcpwire.HeaderSessionID, other), theirs, http.StatusBadRequest, notPendingBody(id, true)},
				{"alice's key, no session", url + "/mcp/alpha", alice, theirs, http.StatusBadRequest, notPendingBody(id, false)},
				{"bob cancels it", url + "/mcp/beta", bob, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}`, http.StatusAccepted, ""},
			} {
				if code, body := post(t, c.url, c.hdr, c.body); code != c.code || strings.TrimSpace(body) != c.want {
					t.Errorf("%s: %d %s\nwant %d %s", c.name, code, body, c.code, c.want)
				}
			}
			// Alice's own answer is still awaited, and is what her
			// upstream gets.
			if code, body := post(t, url+"/mcp/alpha", mine, `{"jsonrpc":"2.0","id":`+id+`,"result":`+k.mine+`}`); code != http.StatusAccepted {
				t.Fatalf("alice's answer: %d %s", code, body)
			}
			if got := resultText(t, nextMessage(t, call, "alice's result", isResponseTo("7"))); got != k.want {
				t.Errorf("alice's call returned %q, want %q", got, k.want)
			}
			// Once taken, the id is spent, for alice too.
			if code, body := post(t, url+"/mcp/alpha", mine, `{"jsonrpc":"2.0","id":`+id+`,"result":`+k.mine+`}`); code != http.StatusBadRequest || strings.TrimSpace(body) != notPendingBody(id, true) {
				t.Errorf("alice's answer again: %d %s", code, body)
			}
		})
	}
}

// Hole 1 with auth.anonymous: callers without a key share one owner
// fingerprint (loopback), so only the session tells them apart: an
// anonymous caller without a session, or with a session of its own, does
// not answer another anonymous session's request. (Two anonymous callers
// without sessions on one route are one caller to the gateway: what
// protects their requests is that the ids cannot be guessed.)
func TestAnswerOnlyFromTheAskedSessionAnonymous(t *testing.T) {
	url, _, _ := answerGateway(t, true)
	anon := map[string]string{}
	sid := rawSession(t, url+"/mcp/alpha", anon, askCaps)
	mine := with(anon, mcpwire.HeaderSessionID, sid)
	call := streamOf(t, url+"/mcp/alpha", mine, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ask","arguments":{"text":"Delete everything?"}}}`)
	id := nextMessage(t, call, "the elicitation", isRequest(mcpwire.MethodElicitationCreate)).ID.Raw()
	theirs := `{"jsonrpc":"2.0","id":` + id + `,"result":{"action":"accept","content":{"name":"Mallory"}}}`
	other := rawSession(t, url+"/mcp/beta", anon, askCaps)
	same := rawSession(t, url+"/mcp/alpha", anon, askCaps)
	for _, c := range []struct {
		name, url string
		hdr       map[string]string
		session   bool
	}{
		{"no session, another route", url + "/mcp/beta", anon, false},
		{"no session, the same route", url + "/mcp/alpha", anon, false},
		{"a session of its own, another route", url + "/mcp/beta", with(anon, mcpwire.HeaderSessionID, other), true},
		{"a session of its own, the same route", url + "/mcp/alpha", with(anon, mcpwire.HeaderSessionID, same), true},
	} {
		if code, body := post(t, c.url, c.hdr, theirs); code != http.StatusBadRequest || strings.TrimSpace(body) != notPendingBody(id, c.session) {
			t.Errorf("%s: %d %s", c.name, code, body)
		}
	}
	if code, body := post(t, url+"/mcp/alpha", mine, `{"jsonrpc":"2.0","id":`+id+`,"result":{"action":"accept","content":{"name":"Alice"}}}`); code != http.StatusAccepted {
		t.Fatalf("the session's own answer: %d %s", code, body)
	}
	if got := resultText(t, nextMessage(t, call, "the result", isResponseTo("7"))); got != "accept:Alice" {
		t.Errorf("the call returned %q, want the session's own answer", got)
	}
}

// openLegacyAs opens a legacy HTTP+SSE stream at url+path+"/sse" as hdr's
// caller, and returns its message endpoint and its messages.
func openLegacyAs(t *testing.T, url, path string, hdr map[string]string) (string, <-chan *jsonrpc.Message) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+path+"/sse", nil)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	r := jsonrpc.NewSSEReader(resp.Body, 1<<20)
	ev, err := r.Next()
	if err != nil || ev.Name != "endpoint" {
		t.Fatalf("first event %+v, %v; want the endpoint", ev, err)
	}
	ch := make(chan *jsonrpc.Message, 16)
	go func() {
		defer close(ch)
		for {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if m, err := jsonrpc.Decode(ev.Data); err == nil {
				ch <- m
			}
		}
	}()
	endpoint := url + strings.TrimSpace(string(ev.Data))
	if code, body := post(t, endpoint, hdr, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":`+askCaps+`,"clientInfo":{"name":"legacy","version":"1"}}}`); code != http.StatusAccepted {
		t.Fatalf("legacy initialize: %d %s", code, body)
	}
	nextMessage(t, ch, "the initialize result", isResponseTo("1"))
	if code, body := post(t, endpoint, hdr, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("legacy initialized: %d %s", code, body)
	}
	return endpoint, ch
}

// Hole 1 on the legacy HTTP+SSE transport: bob, on a legacy session of
// his own, posts an answer with the id of the elicitation alice's call
// waits on. It is acknowledged as every legacy POST is, refused on bob's
// stream with the exact error (where this transport's replies go), and
// alice's call gets alice's answer.
func TestAnswerOnlyFromTheAskedSessionLegacy(t *testing.T) {
	url, alice, bob := answerGateway(t, false)
	aliceAt, aliceHears := openLegacyAs(t, url, "/mcp/alpha", alice)
	bobAt, bobHears := openLegacyAs(t, url, "/mcp/beta", bob)
	if code, body := post(t, aliceAt, alice, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ask","arguments":{"text":"Delete everything?"}}}`); code != http.StatusAccepted {
		t.Fatalf("alice's call: %d %s", code, body)
	}
	id := nextMessage(t, aliceHears, "the elicitation", isRequest(mcpwire.MethodElicitationCreate)).ID.Raw()
	if !askedID.MatchString(id) {
		t.Errorf("relayed id %s: want mcpg- and 128 random bits", id)
	}
	if code, body := post(t, bobAt, bob, `{"jsonrpc":"2.0","id":`+id+`,"result":{"action":"accept","content":{"name":"Bob"}}}`); code != http.StatusAccepted {
		t.Errorf("bob's legacy POST: %d %s, want the transport's 202", code, body)
	}
	refusal := nextMessage(t, bobHears, "bob's refusal", isResponseTo(id))
	if got := string(jsonrpc.Encode(refusal)); got != notPendingBody(id, true) {
		t.Errorf("bob's stream: %s\nwant %s", got, notPendingBody(id, true))
	}
	if code, body := post(t, aliceAt, alice, `{"jsonrpc":"2.0","id":`+id+`,"result":{"action":"accept","content":{"name":"Alice"}}}`); code != http.StatusAccepted {
		t.Fatalf("alice's answer: %d %s", code, body)
	}
	if got := resultText(t, nextMessage(t, aliceHears, "alice's result", isResponseTo("7"))); got != "accept:Alice" {
		t.Errorf("alice's call returned %q, want accept:Alice", got)
	}
}

// The stdio front has one client, and still answers go through the one
// owner-checked path: a reply that nothing waits for is refused on stdout
// with the same error, and the front goes on serving.
func TestStdioRefusesAnAnswerNothingWaitsFor(t *testing.T) {
	g, _ := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(startSDKUpstream(t, "alpha").http.URL)}})
	id := `"mcpg-` + strings.Repeat("ab", 16) + `"`
	in := initBody + "\n" + `{"jsonrpc":"2.0","id":` + id + `,"result":{}}` + "\n" + `{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n"
	var out strings.Builder
	if err := g.ServeStdioAs(context.Background(), "", strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	// The answers, in order; an upstream that connects meanwhile may also
	// send its list_changed notifications, which are not what is tested.
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.Contains(l, `"method":"notifications/`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 3 || lines[1] != notPendingBody(id, true) || lines[2] != `{"jsonrpc":"2.0","id":2,"result":{}}` {
		t.Errorf("stdout:\n%s\nwant the initialize result, then\n%s\nthen the ping's", out.String(), notPendingBody(id, true))
	}
}

// S24 for the 2026-07-28 era: a requestState is the caller's on the route
// its call was made on. The same caller's retry on another route is
// refused, and the call goes on waiting for the retry on its own route.
func TestRetryOnlyOnTheRouteOfTheCall(t *testing.T) {
	url, _, _ := answerGateway(t, true)
	hdr := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "ask"}
	call := func(route, extra string) (int, string) {
		return post(t, url+route, hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask","arguments":{"text":"Who?"}`+extra+
			`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`)
	}
	code, body := call("/mcp/alpha", "")
	var first struct {
		Result struct {
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  string                     `json:"requestState"`
		} `json:"result"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &first) != nil || len(first.Result.InputRequests) != 1 {
		t.Fatalf("first round: %d %s", code, body)
	}
	var answer string
	for k := range first.Result.InputRequests {
		answer = `,"inputResponses":{"` + k + `":{"action":"accept","content":{"name":"%s"}}},"requestState":"` + first.Result.RequestState + `"`
	}
	const refused = `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params: requestState was not issued on this route; retry where the request was first sent"}}`
	if code, body := call("/mcp/beta", fmt.Sprintf(answer, "Beta")); code != http.StatusBadRequest || strings.TrimSpace(body) != refused {
		t.Errorf("retry on /mcp/beta: %d %s\nwant 400 %s", code, body, refused)
	}
	if code, body := call("/mcp/alpha", fmt.Sprintf(answer, "Alpha")); code != 200 || !strings.Contains(body, `"text":"accept:Alpha"`) {
		t.Errorf("retry on the call's route: %d %s", code, body)
	}
}

// S24 for progress: an upstream sees the progress tokens of its own calls
// and nothing else. A hostile one that sprays the tokens a counter would
// have given other calls puts nothing on another caller's stream.
func TestProgressTokensCannotBeGuessed(t *testing.T) {
	release := make(chan struct{})
	good := mcp.NewServer(&mcp.Implementation{Name: "good", Version: "1"}, nil)
	mcp.AddTool(good, &mcp.Tool{Name: "hold"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Message: "honest"}); err != nil {
			return nil, nil, err
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return textResult("held"), nil, nil
	})
	goodURL := serveSDK(t, good).URL
	evil := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "evil-1")
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"evil","version":"0"}}`
		case "tools/list":
			return `{"tools":[{"name":"spray","inputSchema":{"type":"object"}}]}`
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for n := range 200 {
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"mcpg-p-%d\",\"progress\":1,\"message\":\"injected\"}}\n\n", n)
		}
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"sprayed\"}]}}\n\n", m.ID.Raw())
		return ""
	})
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"good": httpServer(goodURL), "evil": httpServer(evil.URL + "/mcp")}})

	alice := streamOf(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"good__hold","arguments":{},"_meta":{"progressToken":"alice-1"}}}`)
	first := nextMessage(t, alice, "alice's progress", func(m *jsonrpc.Message) bool { return m.Method == mcpwire.NotifyProgress })
	if !strings.Contains(string(first.Params), `"honest"`) || !strings.Contains(string(first.Params), `"alice-1"`) {
		t.Fatalf("alice's first progress: %s", first.Params)
	}
	if code, body := post(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"evil__spray","arguments":{},"_meta":{"progressToken":"bob-1"}}}`); code != 200 || !strings.Contains(body, "sprayed") {
		t.Fatalf("the spraying call: %d %s", code, body)
	}
	close(release)
	var heard []string
	for m := range alice {
		if m.Method == mcpwire.NotifyProgress {
			heard = append(heard, string(m.Params))
		}
		if m.IsResponse() {
			if got := resultText(t, m); got != "held" {
				t.Errorf("alice's result %q", got)
			}
		}
	}
	if len(heard) != 0 {
		t.Errorf("alice's stream carried another upstream's progress: %s", heard)
	}
}

// The class review, cancellation: notifications/cancelled cancels only a
// call of the session it is sent on. Another owner's session, another
// session of the same owner and a request without a session naming the
// call's id cancel nothing; the call completes.
func TestCancellationStaysInItsSession(t *testing.T) {
	_, url, _ := busyGateway(t, config.Limits{})
	sid := initOwned(t, url, "alice")
	var wg sync.WaitGroup
	wg.Go(func() { callsAtOnce(t, url, sid, "wait", 1) }) // id 100; asserts its result
	time.Sleep(100 * time.Millisecond)
	cancel := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":100}}`
	for name, c := range map[string]struct{ owner, sid string }{
		"bob's session":           {"bob", initOwned(t, url, "bob")},
		"alice's other session":   {"alice", initOwned(t, url, "alice")},
		"alice without a session": {"alice", ""},
	} {
		if code, body := send(t, http.MethodPost, url+"/mcp", c.owner, c.sid, cancel); code != http.StatusAccepted {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
	wg.Wait()
}

// Hole 1 across a fleet: alice's call on replica A waits on an
// elicitation. Bob's answer with its id, sent to replica B, is forwarded
// to A with who sent it (inside the peer MAC) and A refuses it; so does a
// second session of alice's key on B. A hop whose party was changed on
// the way (bob's, relabelled alice's session) fails the MAC. Alice's own
// answer, through B, completes her call.
func TestAnswerOnlyFromTheAskedSessionAcrossReplicas(t *testing.T) {
	up := askingUpstream(t)
	reg := state.NewMemory(state.MemoryOptions{})
	a, b := startMember(t, up, reg), startMember(t, up, reg)
	waitFor(t, "the replicas to see each other", func() bool { return a.g.FleetSize() == 2 && b.g.FleetSize() == 2 })
	alice, bob := map[string]string{"X-Test-Owner": "alice"}, map[string]string{"X-Test-Owner": "bob"}
	sid := rawSession(t, a.url+"/mcp", alice, `{"elicitation":{}}`)
	mine := with(alice, mcpwire.HeaderSessionID, sid)
	call := streamOf(t, a.url+"/mcp", mine, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"f__ask","arguments":{}}}`)
	id := nextMessage(t, call, "the elicitation", isRequest(mcpwire.MethodElicitationCreate)).ID.Raw()
	if !regexp.MustCompile(`^"mcpg-` + a.g.instance + `-[0-9a-f]{32}"$`).MatchString(id) {
		t.Errorf("relayed id %s: want A's id (%s) and 128 random bits", id, a.g.instance)
	}
	theirs := `{"jsonrpc":"2.0","id":` + id + `,"result":{"action":"accept","content":{"name":"Bob"}}}`
	other := rawSession(t, b.url+"/mcp", alice, `{"elicitation":{}}`)
	for _, c := range []struct {
		name    string
		hdr     map[string]string
		session bool
	}{
		{"bob on B, no session", bob, false},
		{"alice's key on B, another session", with(alice, mcpwire.HeaderSessionID, other), true},
		{"alice's key on B, no session", alice, false},
	} {
		if code, body := post(t, b.url+"/mcp", c.hdr, theirs); code != http.StatusBadRequest || strings.TrimSpace(body) != notPendingBody(id, c.session) {
			t.Errorf("%s: %d %s\nwant 400 %s", c.name, code, body, notPendingBody(id, c.session))
		}
	}

	// The hop B would send for bob, its party relabelled as alice's
	// session on the way: A refuses it before it looks at the reply.
	hop := func(signed, sent fleet.PeerParty) int {
		body := []byte(theirs)
		req, _ := http.NewRequest(http.MethodPost, a.url+fleetrelay.DeliverPath, strings.NewReader(theirs))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(fleetrelay.HeaderPeerOwner, sent.Owner)
		req.Header.Set(fleetrelay.HeaderPeerSession, sent.Session)
		req.Header.Set(fleetrelay.HeaderPeerRoute, sent.Route)
		req.Header.Set(fleetrelay.HeaderPeer, b.g.ring.SignPeer(fleet.PeerRequest{Method: http.MethodPost, Target: fleetrelay.DeliverPath, From: signed, Body: body}, time.Now()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	bobs := peerParty(party{owner: "key:" + hashHex("bob"), route: routeID("/mcp", nil)})
	alices := peerParty(sessionParty(a.g.lookupSession(sid)))
	if code := hop(bobs, alices); code != http.StatusUnauthorized {
		t.Errorf("bob's hop relabelled as alice's session: %d, want 401", code)
	}
	if code := hop(bobs, bobs); code != http.StatusNotFound {
		t.Errorf("bob's hop as signed: %d, want 404 (nothing waits for bob)", code)
	}

	// Alice's own answer, through B, is still awaited.
	if code, body := post(t, b.url+"/mcp", mine, `{"jsonrpc":"2.0","id":`+id+`,"result":{"action":"accept","content":{"name":"Alice"}}}`); code != http.StatusAccepted {
		t.Fatalf("alice's answer through B: %d %s", code, body)
	}
	if got := resultText(t, nextMessage(t, call, "alice's result", isResponseTo("7"))); got != "hello Alice" {
		t.Errorf("alice's call returned %q, want hello Alice", got)
	}
}

// recorder is a sender that keeps what it is sent.
type recorder struct {
	mu   sync.Mutex
	msgs []*jsonrpc.Message
}

func (r *recorder) send(m *jsonrpc.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// A progress token is owned by the server it was given to: even one that
// leaked to another upstream (which cannot guess it) carries that
// upstream's notification nowhere; the owner's reaches the caller, under
// the caller's own token.
func TestProgressTokenOwnedByItsServer(t *testing.T) {
	g, _ := startGateway(t, &config.Config{Servers: map[string]*config.Server{}})
	out := &recorder{}
	tok, forget := g.mintProgress(&scope{g: g, out: out}, "good", json.RawMessage(`"alice-1"`), nil)
	if !regexp.MustCompile(`^"mcpg-p-[0-9a-f]{32}"$`).MatchString(tok) {
		t.Errorf("token %s: want mcpg-p- and 128 random bits", tok)
	}
	progress := jsonrpc.NewNotification(mcpwire.NotifyProgress, json.RawMessage(`{"progressToken":`+tok+`,"progress":1}`))
	(*relay)(g).HandleNotification(context.Background(), "evil", nil, progress)
	if n := out.count(); n != 0 {
		t.Fatalf("another server's notification reached the caller (%d messages)", n)
	}
	(*relay)(g).HandleNotification(context.Background(), "good", nil, progress)
	if n := out.count(); n != 1 || string(out.msgs[0].Params) != `{"progressToken":"alice-1","progress":1}` {
		t.Errorf("the owner's notification: %d messages %v", n, out.msgs)
	}
	forget()
	(*relay)(g).HandleNotification(context.Background(), "good", nil, progress)
	if n := out.count(); n != 1 {
		t.Errorf("a forgotten token still routes (%d messages)", n)
	}
}

// ownedTable: only the owner reaches an entry; the zero owner is no
// one's (a request with no caller to answer it), even asked by the zero
// party; an entry is taken once however many try at the same time; put's
// remover removes only its own entry.
func TestOwnedTable(t *testing.T) {
	var tab ownedTable[party, int]
	alice := party{owner: "key:a", session: "s1"}
	tab.put("x", alice, 1)
	for _, by := range []party{{owner: "key:b", session: "s1"}, {owner: "key:a"}, {owner: "key:a", session: "s2"}, {}} {
		if _, ok, foreign := tab.get("x", by); ok || !foreign {
			t.Errorf("get by %+v: ok=%v foreign=%v", by, ok, foreign)
		}
	}
	if _, ok, foreign := tab.get("y", alice); ok || foreign {
		t.Errorf("an unknown id: ok=%v foreign=%v", ok, foreign)
	}
	tab.put("z", party{}, 3)
	if _, ok, _ := tab.take("z", party{}); ok {
		t.Error("the zero party took an entry of no one")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for range 16 {
		wg.Go(func() {
			if v, ok, _ := tab.take("x", alice); ok && v == 1 {
				mu.Lock()
				taken++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if taken != 1 || tab.has("x") {
		t.Errorf("taken %d times, still there: %v", taken, tab.has("x"))
	}
	first := tab.put("w", alice, 1)
	tab.put("w", alice, 2)
	first()
	if v, ok, _ := tab.get("w", alice); !ok || v != 2 {
		t.Errorf("an old remover removed the new entry: %v %v", v, ok)
	}
}

// Once ServeStdioAs has returned, its writer is its caller's again: a
// notification still on its way to the session (an upstream's
// list_changed broadcast) is refused, never written.
func TestStdioWritesNothingOnceEnded(t *testing.T) {
	var out strings.Builder
	lw := &lineWriter{w: &out}
	if err := lw.Send(jsonrpc.NewNotification("notifications/tools/list_changed", nil)); err != nil {
		t.Fatal(err)
	}
	lw.end()
	if err := lw.Send(jsonrpc.NewNotification("notifications/tools/list_changed", nil)); !errors.Is(err, errStdioEnded) {
		t.Fatalf("a send after the end: %v, want errStdioEnded", err)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("%d lines written, want the one sent before the end:\n%s", n, out.String())
	}
}
