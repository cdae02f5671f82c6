package gateway

import (
	"context"
	"encoding/json"
	sessions "github.com/mcpgate/mcpgate/internal/session"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// ownerGateway serves a gateway whose callers are named by the test: the
// X-Test-Owner header stands in for the authentication gate.
func ownerGateway(t *testing.T, o Options) (*Gateway, string) {
	t.Helper()
	up := faultyUpstream(t)
	if o.Config == nil {
		o.Config = &config.Config{Servers: map[string]*config.Server{"f": httpServer(up.URL + "/mcp")}}
	}
	g, _ := startGatewayWith(t, o)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("X-Test-Owner"); o != "" {
			r = r.WithContext(WithIdentity(r.Context(), &Identity{Owner: "key:" + hashHex(o), Alias: o, User: o + "-user"}))
		}
		g.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return g, ts.URL
}

// localReport is the sessions report of the copies g itself holds: in a
// fleet, one replica's part of FleetSessionsReport, as the admin API
// builds it.
func localReport(g *Gateway) SessionsReport {
	var infos []SessionInfo
	for _, fs := range g.localSessions(g.now()) {
		infos = append(infos, fs.info)
	}
	return g.report(infos)
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test-client","version":"1"}}}`

func initOwned(t *testing.T, url, owner string) string {
	t.Helper()
	code, hdr, body := rpc(t, url+"/mcp", map[string]string{"X-Test-Owner": owner}, initBody)
	if code != 200 || hdr.Get(mcpwire.HeaderSessionID) == "" {
		t.Fatalf("initialize as %s: %d %s", owner, code, body)
	}
	return hdr.Get(mcpwire.HeaderSessionID)
}

func send(t *testing.T, method, url, owner, sid, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if owner != "" {
		req.Header.Set("X-Test-Owner", owner)
	}
	if sid != "" {
		req.Header.Set(mcpwire.HeaderSessionID, sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	if method == http.MethodGet && resp.StatusCode == 200 {
		return resp.StatusCode, "" // a stream: don't wait for its end
	}
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// A session is bound to its creator: another caller gets exactly the S4.2
// 403 on every verb and transport, and cannot end it.
func TestSessionOwnerBinding(t *testing.T) {
	g, url := ownerGateway(t, Options{})
	sid := initOwned(t, url, "alice")
	const forbidden = `{"details":"mcp-session-id is bound to a different caller.","error":"Forbidden"}`
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	for _, tc := range []struct{ method, body string }{
		{http.MethodPost, list},
		{http.MethodPost, `{"jsonrpc":"2.0","id":9,"result":{}}`}, // even a response
		{http.MethodGet, ""},
		{http.MethodDelete, ""},
	} {
		code, body := send(t, tc.method, url+"/mcp", "mallory", sid, tc.body)
		if code != http.StatusForbidden || strings.TrimSpace(body) != forbidden {
			t.Errorf("%s by another caller: %d %s", tc.method, code, body)
		}
	}
	// The owner's session survived all that.
	if code, body := send(t, http.MethodPost, url+"/mcp", "alice", sid, list); code != 200 || !strings.Contains(body, "f__ok") {
		t.Errorf("owner after the attempts: %d %s", code, body)
	}
	if localReport(g).Total != 1 {
		t.Errorf("sessions: %+v", localReport(g))
	}
}

// Legacy HTTP+SSE: the session id in the message URL is no capability.
func TestLegacySSEOwnerBinding(t *testing.T) {
	_, url := ownerGateway(t, Options{})
	req, _ := http.NewRequest(http.MethodGet, url+"/sse", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Test-Owner", "alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1024)
	n, _ := resp.Body.Read(buf)
	ev := string(buf[:n])
	i := strings.Index(ev, "data: ")
	if i < 0 {
		t.Fatalf("no endpoint event: %q", ev)
	}
	endpoint := strings.TrimSpace(strings.SplitN(ev[i+6:], "\n", 2)[0])
	code, body := send(t, http.MethodPost, url+endpoint, "mallory", "", initBody)
	if code != http.StatusForbidden || !strings.Contains(body, "bound to a different caller") {
		t.Errorf("foreign POST to a legacy session: %d %s", code, body)
	}
	if code, _ := send(t, http.MethodPost, url+endpoint, "alice", "", initBody); code != http.StatusAccepted {
		t.Errorf("owner POST: %d", code)
	}
}

// The per-owner cap evicts the owner's own oldest idle session; when all
// of them are busy the new one is refused with the S4.3 429; other owners
// are never affected.
func TestSessionCapPerOwner(t *testing.T) {
	g, url := ownerGateway(t, Options{MaxSessionsPerOwner: 2})
	a1 := initOwned(t, url, "alice")
	time.Sleep(2 * time.Millisecond)
	a2 := initOwned(t, url, "alice")
	b1 := initOwned(t, url, "bob")
	a3 := initOwned(t, url, "alice") // evicts a1, the oldest idle
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	ids := map[string]bool{}
	for _, s := range localReport(g).Sessions {
		ids[s.IDPrefix] = true
	}
	if ids[a1[:8]] || !ids[a2[:8]] || !ids[a3[:8]] || !ids[b1[:8]] {
		t.Errorf("after eviction: %v (a1 %s a2 %s a3 %s b1 %s)", ids, a1[:8], a2[:8], a3[:8], b1[:8])
	}
	// Both of alice's sessions busy: a third is refused.
	var wg sync.WaitGroup
	for _, sid := range []string{a2, a3} {
		wg.Go(func() {
			send(t, http.MethodPost, url+"/mcp", "alice", sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"f__nap","arguments":{}}}`)
		})
	}
	deadline := time.Now().Add(2 * time.Second)
	for busy(g) < 2 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	code, _, body := rpc(t, url+"/mcp", map[string]string{"X-Test-Owner": "alice"}, initBody)
	if code != http.StatusTooManyRequests || strings.TrimSpace(string(body)) != `{"details":"Too many active MCP sessions for this caller.","error":"Too Many Requests"}` {
		t.Errorf("alice at the cap with busy sessions: %d %s", code, body)
	}
	initOwned(t, url, "bob") // bob has room
	wg.Wait()
	_ = list
}

func busy(g *Gateway) int {
	n := 0
	for _, s := range localReport(g).Sessions {
		n += s.InFlight
	}
	return n
}

// Stale ids (S8): DELETE of an unknown id is 200; an id an administrator
// ended is 404 until the client starts over, and so is an id the gateway
// never issued (S8.3; this test served it as a new session before the
// MCP transport's rule was adopted).
func TestStaleAndTerminatedSessions(t *testing.T) {
	g, url := ownerGateway(t, Options{})
	code, body := send(t, http.MethodDelete, url+"/mcp", "alice", "no-such-session", "")
	if code != 200 || strings.TrimSpace(body) != `{"message":"Session terminated successfully"}` {
		t.Errorf("DELETE unknown: %d %s", code, body)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if code, body := send(t, http.MethodPost, url+"/mcp", "alice", "no-such-session", list); code != http.StatusNotFound || body != bodyNeverIssued {
		t.Errorf("unknown id: %d %s", code, body)
	}
	sid := initOwned(t, url, "alice")
	other := initOwned(t, url, "bob")
	res, err := g.TerminateSessions(context.Background(), "", "alice-user")
	if err != nil || res.Terminated != 1 || res.Sessions[0].IDPrefix != sid[:8] {
		t.Fatalf("terminate: %+v %v", res, err)
	}
	for range 2 { // remembered while the client keeps trying
		code, body := send(t, http.MethodPost, url+"/mcp", "alice", sid, list)
		if code != http.StatusNotFound || body != bodyEnded {
			t.Errorf("terminated id: %d %s", code, body)
		}
	}
	if code, _ := send(t, http.MethodPost, url+"/mcp", "bob", other, list); code != 200 {
		t.Errorf("another user's session was ended: %d", code)
	}
	// A 2026-07-28 request ignores Mcp-Session-Id: a terminated or another
	// owner's id in it changes nothing.
	for _, stale := range []string{sid, other} {
		code, body := statelessPost(t, url+"/mcp", map[string]string{"X-Test-Owner": "alice", mcpwire.HeaderSessionID: stale, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
			`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{`+statelessMetaJSON+`}}`)
		if code != 200 || !strings.Contains(body, "f__ok") {
			t.Errorf("sessionless request with session id %s: %d %s", stale[:8], code, body)
		}
	}
	if _, err := g.TerminateSessions(context.Background(), "", ""); err == nil {
		t.Error("terminate without a selector succeeded")
	}
	rep := localReport(g)
	if rep.Total != 1 || rep.ByUser[0].Label != "bob-user" || rep.ByClient[0].Label != "test-client" {
		t.Errorf("report %+v", rep)
	}
	b, _ := json.Marshal(rep)
	if strings.Contains(string(b), other) {
		t.Error("the report shows a full session id")
	}
}

// Idle expiry never ends a session with a request in flight (S12), on a
// fake clock.
func TestIdleExpiryRespectsInFlight(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	g, url := ownerGateway(t, Options{Now: clock, IdleTimeout: time.Minute})
	busySID := initOwned(t, url, "alice")
	idleSID := initOwned(t, url, "alice")
	done := make(chan struct{})
	go func() {
		send(t, http.MethodPost, url+"/mcp", "alice", busySID, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"f__nap","arguments":{}}}`)
		close(done)
	}()
	for busy(g) < 1 {
		time.Sleep(2 * time.Millisecond)
	}
	advance(2 * time.Minute)
	g.expireIdle()
	ids := map[string]bool{}
	for _, s := range localReport(g).Sessions {
		ids[s.IDPrefix] = true
	}
	if !ids[busySID[:8]] || ids[idleSID[:8]] {
		t.Errorf("after expiry with one call in flight: %v", ids)
	}
	<-done
	g.expireIdle() // the call just ended: not idle yet
	if localReport(g).Total != 1 {
		t.Errorf("a session ended right after its call")
	}
	advance(2 * time.Minute)
	g.expireIdle()
	if n := localReport(g).Total; n != 0 {
		t.Errorf("%d sessions left after the idle timeout", n)
	}
}

// S13.1: breakdowns are sorted by count (descending), the unknown label
// last whatever its count, then by label.
func TestBreakdownOrder(t *testing.T) {
	got := breakdown(map[string]int{"": 9, "cursor": 2, "claude-code": 5, "agent": 2, "zed": 1})
	want := []Count{{"claude-code", 5}, {"agent", 2}, {"cursor", 2}, {"zed", 1}, {"unknown", 9}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("breakdown = %v, want %v", got, want)
			break
		}
	}
}

// The 404 bodies of S8: JSON-RPC errors that tell the client to send
// initialize.
const (
	bodyEnded       = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found: it was terminated or has expired; send initialize to start a new session"}}`
	bodyNeverIssued = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found: this gateway did not issue it or can no longer open it; send initialize to start a new session"}}`
)

// S8.2: a session its client deleted, that expired or that its owner's
// cap evicted is not served again: POST and GET get 404 and the tool does
// not run; DELETE stays idempotent; initialize starts a new session even
// when it still carries the old id. It held in both sessions.unknown_id
// modes, as the ids are remembered. (Before: a DELETEd id was served as
// a new sessionless request and the tool ran.)
func TestEndedSessionsAre404(t *testing.T) {
	for _, mode := range []string{config.UnknownIDReject, config.UnknownIDServe} {
		t.Run(mode, func(t *testing.T) {
			var calls atomic.Int64
			up := rawUpstream(t, exoticTool, exoticResult, &calls)
			var mu sync.Mutex
			now := time.Unix(1_800_000_000, 0)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			g, url := ownerGateway(t, Options{Now: clock, IdleTimeout: time.Minute, MaxSessionsPerOwner: 2, Config: &config.Config{
				Servers:  map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")},
				Sessions: config.SessionLimits{UnknownID: mode},
			}})
			call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"raw__weird","arguments":{"n":1}}}`

			advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
			expired := initOwned(t, url, "alice")
			advance(2 * time.Minute)
			g.expireIdle()
			deleted := initOwned(t, url, "alice")
			if code, body := send(t, http.MethodDelete, url+"/mcp", "alice", deleted, ""); code != 200 || body != `{"message":"Session terminated successfully"}` {
				t.Fatalf("DELETE: %d %s", code, body)
			}
			evicted := initOwned(t, url, "alice")
			advance(time.Second)
			initOwned(t, url, "alice")
			advance(time.Second)
			initOwned(t, url, "alice") // the cap of 2 evicts the oldest idle one
			for name, sid := range map[string]string{"deleted": deleted, "expired": expired, "evicted": evicted} {
				if code, body := send(t, http.MethodPost, url+"/mcp", "alice", sid, call); code != http.StatusNotFound || body != bodyEnded {
					t.Errorf("tools/call on the %s session: %d %s", name, code, body)
				}
				if code, body := send(t, http.MethodGet, url+"/mcp", "alice", sid, ""); code != http.StatusNotFound || body != bodyEnded {
					t.Errorf("GET stream of the %s session: %d %s", name, code, body)
				}
				if code, body := send(t, http.MethodDelete, url+"/mcp", "alice", sid, ""); code != 200 || body != `{"message":"Session terminated successfully"}` {
					t.Errorf("DELETE of the %s session again: %d %s", name, code, body)
				}
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("the tool ran %d times for ended sessions", n)
			}
			// What the 404 asks for works, old id or not.
			code, hdr, body := rpc(t, url+"/mcp", map[string]string{"X-Test-Owner": "alice", mcpwire.HeaderSessionID: deleted}, initBody)
			if fresh := hdr.Get(mcpwire.HeaderSessionID); code != 200 || fresh == "" || fresh == deleted {
				t.Errorf("initialize with the ended id: %d %s (session %q)", code, body, fresh)
			}
		})
	}
}

// S8.3: an id the gateway never issued is 404 by default (never 400) on
// every verb that can name a session, legacy SSE messages included;
// sessions.unknown_id: serve serves a POST as a new sessionless request
// instead (the reference gateway's behaviour). A stream cannot be
// stateless: GET is 404 either way.
func TestUnknownSessionID(t *testing.T) {
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	t.Run("reject", func(t *testing.T) {
		_, url := ownerGateway(t, Options{})
		for _, tc := range []struct{ method, path, sid, body string }{
			{http.MethodPost, "/mcp", "never-issued", list},
			{http.MethodPost, "/mcp", "never-issued", `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
			{http.MethodGet, "/mcp", "never-issued", ""},
			{http.MethodPost, "/sse/messages?session_id=never-issued", "", list},
			{http.MethodPost, "/mcp/sse/messages?session_id=never-issued", "", list},
		} {
			code, body := send(t, tc.method, url+tc.path, "alice", tc.sid, tc.body)
			if code != http.StatusNotFound || body != bodyNeverIssued {
				t.Errorf("%s %s: %d %s", tc.method, tc.path, code, body)
			}
		}
		if code, body := send(t, http.MethodDelete, url+"/mcp", "alice", "never-issued", ""); code != 200 || body != `{"message":"Session terminated successfully"}` {
			t.Errorf("DELETE: %d %s", code, body)
		}
	})
	t.Run("serve", func(t *testing.T) {
		_, url := ownerGateway(t, Options{Config: &config.Config{
			Servers:  map[string]*config.Server{"f": httpServer(faultyUpstream(t).URL + "/mcp")},
			Sessions: config.SessionLimits{UnknownID: config.UnknownIDServe},
		}})
		code, hdr, body := rpc(t, url+"/mcp", map[string]string{"X-Test-Owner": "alice", mcpwire.HeaderSessionID: "never-issued"}, list)
		if code != 200 || !strings.Contains(string(body), "f__ok") || hdr.Get(mcpwire.HeaderSessionID) != "" {
			t.Errorf("POST served as stateless: %d %s (session %q)", code, body, hdr.Get(mcpwire.HeaderSessionID))
		}
		if code, body := send(t, http.MethodGet, url+"/mcp", "alice", "never-issued", ""); code != http.StatusNotFound || body != bodyNeverIssued {
			t.Errorf("GET: %d %s", code, body)
		}
		if code, body := send(t, http.MethodPost, url+"/sse/messages?session_id=never-issued", "alice", "", list); code != http.StatusNotFound || body != bodyNeverIssued {
			t.Errorf("legacy POST: %d %s", code, body)
		}
	})
}

// Every ended session is remembered (S8.2), so the memory must be swept:
// the janitor forgets ids whose idle timeout has passed.
func TestRememberedIDsAreForgotten(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	terms := sessions.NewMemTerminations()
	g, url := ownerGateway(t, Options{Now: clock, IdleTimeout: time.Minute, Terminations: terms})
	for range 3 {
		sid := initOwned(t, url, "alice")
		if code, _ := send(t, http.MethodDelete, url+"/mcp", "alice", sid, ""); code != 200 {
			t.Fatalf("DELETE: %d", code)
		}
	}
	count := terms.Len
	if n := count(); n != 3 {
		t.Fatalf("%d ids remembered, want 3", n)
	}
	_ = g.terms.Purge(context.Background())
	if n := count(); n != 3 {
		t.Errorf("%d ids remembered before their time is up, want 3", n)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	_ = g.terms.Purge(context.Background())
	if n := count(); n != 0 {
		t.Errorf("%d ids still remembered after the idle timeout", n)
	}
}

// S8.2: an ended id is remembered for the idle timeout, refreshed while
// the client keeps using it: a client that keeps sending the dead id
// keeps getting the 404 that tells it to re-initialize, never the
// "never issued" answer (nor, with unknown_id: serve, a stateless
// reply), however long it goes on.
func TestRememberedIDRefreshedWhileUsed(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	terms := sessions.NewMemTerminations()
	g, url := ownerGateway(t, Options{Now: clock, IdleTimeout: time.Minute, Terminations: terms})
	sid := initOwned(t, url, "alice")
	if code, _ := send(t, http.MethodDelete, url+"/mcp", "alice", sid, ""); code != 200 {
		t.Fatalf("DELETE: %d", code)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	for i := range 4 { // 4 x 40s: well past the 1 minute after the DELETE
		advance(40 * time.Second)
		_ = g.terms.Purge(context.Background())
		code, body := send(t, http.MethodPost, url+"/mcp", "alice", sid, list)
		if code != http.StatusNotFound || !strings.Contains(body, "terminated or has expired") {
			t.Fatalf("use %d of the ended id, %ds after the DELETE: %d %s", i+1, 40*(i+1), code, body)
		}
	}
	// Left alone for the idle timeout, it is forgotten.
	advance(61 * time.Second)
	_ = g.terms.Purge(context.Background())
	if code, body := send(t, http.MethodPost, url+"/mcp", "alice", sid, list); code != http.StatusNotFound || !strings.Contains(body, "did not issue") {
		t.Errorf("the ended id after a minute unused: %d %s, want the never-issued 404", code, body)
	}
}

// lookupSession finds the live session whose client holds sid, as a
// request with it would.
func (g *Gateway) lookupSession(sid string) *session {
	_, local, sealed := g.openSessionID(sid)
	s, _ := g.sessions.Live(sid, local, sealed)
	return s
}
