package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// Defects found with real clients (issue 24 section 2).

// tsSDKNoSession is, byte for byte, what the TypeScript SDK's example
// servers (and server-everything) answer, with HTTP 400, a request whose
// session id they do not know: res.status(400).json(...) in Express.
const tsSDKNoSession = `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`

// forgetfulUpstream is a streamable-HTTP upstream that keeps its sessions
// in memory, as those servers do: restart forgets them all, and forgetAll
// makes it forget every session as soon as it is made (an upstream that
// cannot keep one). An unknown session id gets 400 and tsSDKNoSession.
type forgetfulUpstream struct {
	*httptest.Server
	mu        sync.Mutex
	sessions  map[string]bool
	next      int
	forgetAll bool
	inits     atomic.Int32
	runs      atomic.Int32
}

func newForgetfulUpstream(t *testing.T) *forgetfulUpstream {
	u := &forgetfulUpstream{sessions: map[string]bool{}}
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
		sid := r.Header.Get(mcpwire.HeaderSessionID)
		u.mu.Lock()
		if m.Method == mcpwire.MethodInitialize && sid == "" {
			u.next++
			sid = fmt.Sprint("s", u.next)
			u.sessions[sid] = !u.forgetAll
			u.inits.Add(1)
			u.mu.Unlock()
			w.Header().Set(mcpwire.HeaderSessionID, sid)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"forgetful","version":"0"}}}`, m.ID.Raw())
			return
		}
		known := u.sessions[sid]
		u.mu.Unlock()
		if !known {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, tsSDKNoSession)
			return
		}
		if !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		result := `{}`
		switch m.Method {
		case mcpwire.MethodToolsList:
			result = `{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}`
		case mcpwire.MethodToolsCall:
			u.runs.Add(1)
			result = `{"content":[{"type":"text","text":"ok"}]}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
	}))
	t.Cleanup(u.Close)
	return u
}

// restart is the upstream process starting again: every session is gone.
func (u *forgetfulUpstream) restart(forgetAll bool) {
	u.mu.Lock()
	u.sessions = map[string]bool{}
	u.forgetAll = forgetAll
	u.mu.Unlock()
}

// readyState is the state /readyz gives server.
func readyState(t *testing.T, gw *httptest.Server, server string) string {
	t.Helper()
	resp, err := http.Get(gw.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Servers map[string]struct {
			State string `json:"state"`
		} `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Servers[server].State
}

// Issue 24 §2.2: an upstream that answers 400 "No valid session ID
// provided" to the session of its previous life is an expiry: the
// gateway initializes a new session and sends the call again, once, so a
// restart of the upstream costs callers nothing. An upstream that forgets
// every session shows as not ready, and the error names the server. (The
// 400 was relayed as it was, for every call, for good, /readyz saying
// ready.)
func TestUpstreamAnswering400ToAStaleSession(t *testing.T) {
	up := newForgetfulUpstream(t)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"everything": httpServer(up.URL + "/mcp")}})
	const callBody = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"everything__echo","arguments":{}}}`
	want := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"ok"}]}}`, id)
	}
	call := func(id int) (int, string) {
		code, _, body := rpc(t, gw.URL+"/mcp", nil, fmt.Sprintf(callBody, id))
		return code, strings.TrimSpace(string(body))
	}
	if code, body := call(1); code != 200 || body != want(1) {
		t.Fatalf("first call: %d %s", code, body)
	}
	inits := up.inits.Load()
	up.restart(false)
	for id := 2; id <= 4; id++ {
		if code, body := call(id); code != 200 || body != want(id) {
			t.Fatalf("call %d after the upstream restarted: %d %s", id, code, body)
		}
	}
	if n := up.inits.Load() - inits; n != 1 {
		t.Errorf("%d new upstream sessions after the restart, want 1", n)
	}
	if n := up.runs.Load(); n != 4 {
		t.Errorf("the tool ran %d times for 4 calls", n)
	}
	if st := readyState(t, gw, "everything"); st != "ready" {
		t.Errorf("/readyz: everything is %q after it came back, want ready", st)
	}

	// Now it keeps no session at all: calls fail, saying which server,
	// and health says so.
	up.restart(true)
	code, body := call(5)
	e := rpcError(t, []byte(body))
	if code != 200 || e == nil || !strings.Contains(e.Message, "everything") {
		t.Errorf("a call to an upstream that keeps no session: %d %s; want an error naming everything", code, body)
	}
	t.Logf("a call to an upstream that keeps no session: %s", e.Message)
	if st := readyState(t, gw, "everything"); st == "ready" {
		t.Errorf("/readyz: everything is %q while it keeps no session", st)
	}
	if n := up.runs.Load(); n != 4 {
		t.Errorf("the tool ran %d times", n)
	}
}

// Issue 24 §2.4: a 2026-07-28 client retries an input_required call with a
// progress token of its own; the progress the call makes after the
// answer carries the retry's token, the one the client is waiting on. A
// retry without one gets no progress. (It carried the first request's
// token, which the client had forgotten, so the client dropped it.)
func TestProgressAfterInputRoundCarriesTheRetrysToken(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "chatty", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "chatty", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		tok := req.Params.GetProgressToken()
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "before-question"})
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Go on?", RequestedSchema: map[string]any{"type": "object"}})
		if err != nil {
			return nil, err
		}
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 2, Message: "after-answer"})
		return textResult("done:" + res.Action), nil
	})
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"c": httpServer(serveSDK(t, srv).URL)}})
	call := func(token, extra string) string {
		meta := `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}`
		if token != "" {
			meta = `"progressToken":"` + token + `",` + meta
		}
		_, body := statelessPost(t, gw.URL+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "c__chatty"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"c__chatty","arguments":{}`+extra+`,"_meta":{`+meta+`}}}`)
		return body
	}
	firstRound := func() (state, key string) {
		first := call("p-first", "")
		if !strings.Contains(first, `"progressToken":"p-first"`) || !strings.Contains(first, "before-question") {
			t.Fatalf("first round: %s", first)
		}
		s := regexp.MustCompile(`"requestState":"([^"]+)"`).FindStringSubmatch(first)
		k := regexp.MustCompile(`"inputRequests":\{"([^"]+)"`).FindStringSubmatch(first)
		if s == nil || k == nil {
			t.Fatalf("first round: %s", first)
		}
		return s[1], k[1]
	}
	answer := func(state, key string) string {
		return `,"inputResponses":{"` + key + `":{"action":"accept","content":{}}},"requestState":"` + state + `"`
	}

	state, key := firstRound()
	second := call("p-retry", answer(state, key))
	if !strings.Contains(second, "done:accept") || !strings.Contains(second, "after-answer") {
		t.Fatalf("retry: %s", second)
	}
	if !strings.Contains(second, `"progressToken":"p-retry"`) || strings.Contains(second, "p-first") {
		t.Errorf("progress on the retry does not carry the retry's token p-retry:\n%s", second)
	}

	state, key = firstRound()
	second = call("", answer(state, key))
	if !strings.Contains(second, "done:accept") || strings.Contains(second, "notifications/progress") {
		t.Errorf("a retry without a progress token: %s", second)
	}
}

// Issue 24 §2.3: an handshake-era client that sent no logging/setLevel is sent
// every log message, so a 2026-07-28 upstream (which logs only for
// requests naming a level) is asked for all of them: debug. (It was asked
// for none, and sent none.)
func TestLogsOfStatelessUpstreamWithoutSetLevel(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "talker", Version: "1"}, &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}}})
	srv.AddTool(&mcp.Tool{Name: "talk", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "debug", Data: "debug-line"})
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Data: "warning-line"})
		return textResult("said"), nil
	})
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"t": statelessUpstream(t, srv)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logs := make(chan string, 4)
	cs := connectTo(t, ctx, gw.URL+"/mcp", &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) { logs <- fmt.Sprint(req.Params.Data) },
	}, handshakeEra)
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "t__talk"}); got != "said" {
		t.Fatalf("call: %q", got)
	}
	var heard []string
	for len(heard) < 2 {
		select {
		case l := <-logs:
			heard = append(heard, l)
		case <-ctx.Done():
			t.Fatalf("a client that set no level heard %v, want debug-line and warning-line", heard)
		}
	}
	if heard[0] != "debug-line" || heard[1] != "warning-line" {
		t.Errorf("a client that set no level heard %v", heard)
	}

	// A stateless handshake-era request (no session) is sent every message too.
	var events []string
	rpcEvents(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t__talk","arguments":{}}}`, func(ev []byte) { events = append(events, string(ev)) })
	if all := strings.Join(events, "\n"); !strings.Contains(all, "debug-line") || !strings.Contains(all, "warning-line") {
		t.Errorf("a request without a session: %s", all)
	}
}

// sdkResourceAllowed is the TypeScript SDK's checkResourceAllowed
// (src/shared/auth-utils.ts), which mcp-remote and the Inspector apply to
// the resource of the protected resource metadata before they authorize:
// the same origin, and the requested URL's path under the resource's.
func sdkResourceAllowed(requested, configured string) bool {
	req, err1 := url.Parse(requested)
	conf, err2 := url.Parse(configured)
	if err1 != nil || err2 != nil || req.Scheme != conf.Scheme || req.Host != conf.Host {
		return false
	}
	rp, cp := req.EscapedPath(), conf.EscapedPath()
	if rp == "" {
		rp = "/"
	}
	if cp == "" {
		cp = "/"
	}
	if len(rp) < len(cp) {
		return false
	}
	if !strings.HasSuffix(rp, "/") {
		rp += "/"
	}
	if !strings.HasSuffix(cp, "/") {
		cp += "/"
	}
	return strings.HasPrefix(rp, cp)
}

// Issue 24 §2.1 (SPEC S22.4): a client that checks the resource as the
// TypeScript SDK does finds, on every documented OAuth endpoint (through
// the challenge's resource_metadata and through the path-inserted
// well-known URI it falls back to), a resource its URL starts with, and
// never the whole gateway. A token for /sse serves the legacy transport
// at /sse and its message endpoint, and nothing else; a token for /mcp
// does not serve /sse (a token names one resource). (/sse and /messages
// announced /mcp, and mcp-remote stopped with "Protected resource …/mcp
// does not match expected …/sse".)
func TestEveryEndpointNamesAResourceItsURLStartsWith(t *testing.T) {
	tokens, gw, _ := oauthGateway(t)
	for _, ep := range []struct{ method, path string }{
		{http.MethodPost, "/mcp"},
		{http.MethodPost, "/mcp/alpha"},
		{http.MethodPost, "/alpha/mcp"},
		{http.MethodPost, "/mcp/alpha,beta"},
		{http.MethodPost, "/toolset/ts/mcp"},
		{http.MethodGet, "/sse"},
		{http.MethodGet, "/mcp/sse"},
		{http.MethodGet, "/mcp/alpha/sse"},
		{http.MethodGet, "/alpha/mcp/sse"},
	} {
		req, _ := http.NewRequest(ep.method, gw.URL+ep.path, strings.NewReader(oauthInit))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var prm string
		for _, c := range oauth.ParseChallenges(resp.Header.Get("WWW-Authenticate")) {
			if strings.EqualFold(c.Scheme, "Bearer") {
				prm = c.Params["resource_metadata"]
			}
		}
		if resp.StatusCode != http.StatusUnauthorized || prm == "" {
			t.Errorf("%s %s: %d, challenge %q", ep.method, ep.path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			continue
		}
		// The challenge's document, and the one the SDK finds without it.
		for _, doc := range []string{prm, gw.URL + "/.well-known/oauth-protected-resource" + ep.path} {
			resp, err := http.Get(doc)
			if err != nil {
				t.Fatal(err)
			}
			var md oauth.ProtectedResourceMetadata
			err = json.NewDecoder(resp.Body).Decode(&md)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("%s: %d %v", doc, resp.StatusCode, err)
				continue
			}
			if !sdkResourceAllowed(gw.URL+ep.path, md.Resource) || md.Resource == gw.URL {
				t.Errorf("%s %s: %s names the resource %s, which a client connecting to %s refuses", ep.method, ep.path, doc, md.Resource, gw.URL+ep.path)
			}
		}
	}

	alice := &oauth.Identity{Issuer: "https://idp.example", Subject: "a-1", User: "alice", Teams: []string{"platform"}}
	sseTok, mcpTok := fakeJWT("alice-sse"), fakeJWT("alice-mcp")
	tokens.ids[sseTok], tokens.aud[sseTok] = alice, gw.URL+"/sse"
	tokens.ids[mcpTok], tokens.aud[mcpTok] = alice, gw.URL+"/mcp"
	// The whole legacy exchange (GET /sse, initialize and a call posted to
	// the endpoint it names) with the /sse token.
	endpoint, msgs := openLegacyAs(t, gw.URL, "", bearer(sseTok))
	if code, body := post(t, endpoint, bearer(sseTok), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__ping","arguments":{}}}`); code != http.StatusAccepted {
		t.Fatalf("a call posted to %s with the /sse token: %d %s", endpoint, code, body)
	}
	if got := resultText(t, nextMessage(t, msgs, "the call's result", isResponseTo("2"))); got != "pong" {
		t.Errorf("the call over /sse returned %q", got)
	}
	for _, c := range []struct {
		method, path, tok, what string
	}{
		{http.MethodGet, "/sse", mcpTok, "the /mcp token on GET /sse"},
		{http.MethodPost, strings.TrimPrefix(endpoint, gw.URL), mcpTok, "the /mcp token on the /sse message endpoint"},
		{http.MethodPost, "/mcp", sseTok, "the /sse token on /mcp"},
		{http.MethodGet, "/mcp/sse", sseTok, "the /sse token on /mcp/sse"},
	} {
		req, _ := http.NewRequest(c.method, gw.URL+c.path, strings.NewReader(oauthInit))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+c.tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", c.what, resp.StatusCode)
		}
	}
}
