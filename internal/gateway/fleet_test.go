package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	sessions "github.com/mcpgate/mcpgate/internal/session"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// fleetConfig is one replica's config: the same servers and session keys
// on every replica of the fleet.
func fleetConfig(upURL string, keys ...byte) *config.Config {
	f := &config.Fleet{Advertise: "http://10.0.0.5:4000"}
	for _, k := range keys {
		f.SessionKeys = append(f.SessionKeys, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{k}, 32)))
	}
	return &config.Config{Servers: map[string]*config.Server{"f": httpServer(upURL + "/mcp")}, Fleet: f}
}

// testClock is a fake clock the replicas of a test share.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const (
	listBody = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	callBody = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"f__ok","arguments":{}}}`
)

// S15, S8.3: with fleet.session_keys a session started on one replica
// continues on another (and on a restarted one), for its owner only; a
// forged, tampered or foreign-fleet id is refused like an id never
// issued; an ended one stays refused.
func TestSealedSessionContinuesOnAnotherReplica(t *testing.T) {
	up := faultyUpstream(t)
	clock := &testClock{now: time.Unix(1_800_000_000, 0)}
	// Separate processes in all but the address space: each replica has
	// its own sessions and upstream sessions; they share the termination
	// memory, as replicas share a store.
	terms := sessions.NewMemTerminations()
	replica := func(keys ...byte) (*Gateway, string) {
		return ownerGateway(t, Options{Config: fleetConfig(up.URL, keys...), Terminations: terms, Now: clock.Now, IdleTimeout: time.Minute})
	}
	a, urlA := replica(1)
	b, urlB := replica(1)

	sid := initOwned(t, urlA, "alice")
	if len(sid) <= 32 || strings.ContainsFunc(sid, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		t.Fatalf("session id %q: want a sealed token of visible ASCII", sid)
	}
	if code, _ := send(t, http.MethodPost, urlA+"/mcp", "alice", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized: %d", code)
	}

	// Another owner presenting it on B: refused from the id itself, before
	// B holds anything.
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "bob", sid, listBody); code != http.StatusForbidden || !strings.Contains(body, "bound to a different caller") {
		t.Errorf("bob on B: %d %s", code, body)
	}
	if code, _ := send(t, http.MethodDelete, urlB+"/mcp", "bob", sid, ""); code != http.StatusForbidden {
		t.Errorf("bob's DELETE on B: %d", code)
	}
	// A 2026-07-28 request ignores the id: it resumes nothing.
	if code, body := statelessPost(t, urlB+"/mcp", map[string]string{"X-Test-Owner": "alice", mcpwire.HeaderSessionID: sid, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
		`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{`+statelessMetaJSON+`}}`); code != 200 || !strings.Contains(body, "f__ok") {
		t.Errorf("sessionless request with the sealed id on B: %d %s", code, body)
	}
	if rep := localReport(b); rep.Total != 0 {
		t.Errorf("a refused id or a sessionless request left a session on B: %+v", rep.Sessions)
	}

	// Its owner continues on B with the same id.
	code, hdr, body := rpc(t, urlB+"/mcp", map[string]string{"X-Test-Owner": "alice", mcpwire.HeaderSessionID: sid}, listBody)
	if code != 200 || !strings.Contains(string(body), "f__ok") || hdr.Get(mcpwire.HeaderSessionID) != sid {
		t.Fatalf("tools/list on B: %d %s (session id %q)", code, body, hdr.Get(mcpwire.HeaderSessionID))
	}
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "alice", sid, callBody); code != 200 || !strings.Contains(body, "fine") {
		t.Errorf("tools/call on B: %d %s", code, body)
	}
	if code, body := send(t, http.MethodPost, urlA+"/mcp", "alice", sid, callBody); code != 200 || !strings.Contains(body, "fine") {
		t.Errorf("tools/call back on A: %d %s", code, body)
	}
	// Now B holds a copy: another owner is refused by it too.
	if code, _ := send(t, http.MethodPost, urlB+"/mcp", "bob", sid, listBody); code != http.StatusForbidden {
		t.Errorf("bob on B, once B holds it: %d", code)
	}

	// Both replicas report the same session by a prefix of its own random
	// id, never of the token; B's copy has A's owner and creation time.
	repA, repB := localReport(a), localReport(b)
	if repA.Total != 1 || repB.Total != 1 {
		t.Fatalf("reports: A %+v, B %+v", repA.Sessions, repB.Sessions)
	}
	pa, pb := repA.Sessions[0], repB.Sessions[0]
	if pa.IDPrefix != pb.IDPrefix || strings.HasPrefix(sid, pa.IDPrefix) || pb.User != "alice-user" || pb.Created != pa.Created {
		t.Errorf("A reports %+v, B %+v", pa, pb)
	}
	for _, rep := range []SessionsReport{repA, repB} {
		if j, _ := json.Marshal(rep); strings.Contains(string(j), sid) || strings.Contains(string(j), sid[:16]) {
			t.Errorf("a report shows the token: %s", j)
		}
	}

	// A restarted replica (nothing in memory) continues it as well.
	_, urlB2 := replica(1)
	if code, body := send(t, http.MethodPost, urlB2+"/mcp", "alice", sid, callBody); code != 200 || !strings.Contains(body, "fine") {
		t.Errorf("tools/call on a restarted replica: %d %s", code, body)
	}

	// Forged, tampered, another fleet's: the 404 of an id never issued.
	tampered := []byte(sid)
	tampered[len(tampered)/2] ^= 1
	_, urlC := replica(2)
	for name, c := range map[string]struct{ url, sid string }{
		"tampered":      {urlB2, string(tampered)},
		"truncated":     {urlB2, sid[:len(sid)-4]},
		"the inner id":  {urlA, innerID(a)},
		"another fleet": {urlC, sid},
	} {
		if code, body := send(t, http.MethodPost, c.url+"/mcp", "alice", c.sid, listBody); code != http.StatusNotFound || body != bodyNeverIssued {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}

	// Ended by its client on B: refused there and on any replica that
	// shares the termination memory and holds no copy. (Copies other
	// replicas hold, A's and B2's here, live on until they idle out: these
	// replicas share no bus. With one, the fan-out ends them at once:
	// TestClientDeleteEndsCopiesEverywhere.)
	if code, _ := send(t, http.MethodDelete, urlB+"/mcp", "alice", sid, ""); code != 200 {
		t.Fatalf("DELETE on B: %d", code)
	}
	_, urlD := replica(1)
	for _, u := range []string{urlB, urlD} {
		if code, body := send(t, http.MethodPost, u+"/mcp", "alice", sid, listBody); code != http.StatusNotFound || body != bodyEnded {
			t.Errorf("ended id at %s: %d %s", u, code, body)
		}
	}
	// An initialize carrying the ended id starts a new session, as
	// without keys.
	if code, hdr, _ := rpc(t, urlB+"/mcp", map[string]string{"X-Test-Owner": "alice", mcpwire.HeaderSessionID: sid}, initBody); code != 200 || hdr.Get(mcpwire.HeaderSessionID) == sid {
		t.Errorf("initialize with the ended id: %d", code)
	}
}

// S13, S12 with sealed ids: operators terminate by the prefix the report
// shows (of the session's own id, never the token), and an ended id stays
// ended fleet-wide; a replica's resumed copy that idles out is only
// dropped (its client may be active elsewhere), while the replica that
// created the session remembers its expiry.
func TestSealedSessionAdminAndExpiry(t *testing.T) {
	up := faultyUpstream(t)
	clock := &testClock{now: time.Unix(1_800_000_000, 0)}
	terms := sessions.NewMemTerminations()
	replica := func() (*Gateway, string) {
		return ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), Terminations: terms, Now: clock.Now, IdleTimeout: time.Minute})
	}
	a, urlA := replica()
	b, urlB := replica()

	sid := initOwned(t, urlA, "alice")
	other := initOwned(t, urlA, "bob")
	var prefix string
	for _, s := range localReport(a).Sessions {
		if s.User == "alice-user" {
			prefix = s.IDPrefix
		}
	}
	if code, _ := send(t, http.MethodPost, urlB+"/mcp", "alice", sid, listBody); code != 200 {
		t.Fatalf("resume on B: %d", code)
	}
	if res, _ := a.TerminateSessions(context.Background(), sid[:8], ""); res.Terminated != 0 {
		t.Errorf("a prefix of the token matched: %+v", res)
	}
	// As mcpgate sessions terminate --id PREFIX does.
	res, err := a.TerminateSessions(context.Background(), prefix, "")
	if err != nil || res.Terminated != 1 || res.Sessions[0].IDPrefix != prefix || res.Sessions[0].User != "alice-user" {
		t.Fatalf("terminate by prefix: %+v %v", res, err)
	}
	_, urlFresh := replica()
	for _, u := range []string{urlA, urlFresh} {
		if code, body := send(t, http.MethodPost, u+"/mcp", "alice", sid, listBody); code != http.StatusNotFound || body != bodyEnded {
			t.Errorf("terminated id at %s: %d %s", u, code, body)
		}
	}

	// Idle expiry, bob's session: B's copy first.
	if code, _ := send(t, http.MethodPost, urlB+"/mcp", "bob", other, listBody); code != 200 {
		t.Fatalf("resume bob's on B: %d", code)
	}
	clock.add(2 * time.Minute)
	b.expireIdle()
	if rep := localReport(b); rep.Total != 0 {
		t.Fatalf("B's copies did not expire: %+v", rep.Sessions)
	}
	// B only dropped its copy: the client may come back to it.
	if code, _ := send(t, http.MethodPost, urlB+"/mcp", "bob", other, listBody); code != 200 {
		t.Errorf("after B's copy expired: %d", code)
	}
	// A created it: its expiry there is remembered, fleet-wide.
	clock.add(2 * time.Minute)
	a.expireIdle()
	_, urlFresh2 := replica()
	if code, body := send(t, http.MethodPost, urlFresh2+"/mcp", "bob", other, listBody); code != http.StatusNotFound || body != bodyEnded {
		t.Errorf("expired id on a fresh replica: %d %s", code, body)
	}
}

// S17, S18.1: with session keys, a requestState is sealed under the ring,
// so another replica opens it (for the same caller only); the call it
// resumes runs on the replica that minted it.
func TestSealedRequestState(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	cfg := func() *config.Config {
		c := fleetConfig("", 1)
		c.Servers = map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}
		return c
	}
	a, gwA := startGateway(t, cfg())
	b, gwB := startGateway(t, cfg())
	call := func(url, extra string) (int, string) {
		return statelessPost(t, url+"/mcp", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "alpha__ask"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"alpha__ask","arguments":{"text":"Who?"}`+extra+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}`)
	}
	code, body := call(gwA.URL, "")
	var first struct {
		Result struct {
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  string                     `json:"requestState"`
		} `json:"result"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &first) != nil || len(first.Result.InputRequests) != 1 {
		t.Fatalf("first round on A: %d %s", code, body)
	}
	state := first.Result.RequestState
	if !strings.HasPrefix(state, sealedStatePrefix) {
		t.Fatalf("requestState %q is not sealed", state)
	}
	owner := identityOf(httptestRequest()).Owner
	idA, roundA, okA := a.openState(state, owner)
	idB, roundB, okB := b.openState(state, owner)
	if !okA || !okB || idA != idB || roundA != 1 || roundB != 1 {
		t.Fatalf("opened on A: %s %d %v; on B: %s %d %v", idA, roundA, okA, idB, roundB, okB)
	}
	if _, _, ok := b.openState(state, "key:mallory"); ok {
		t.Error("another caller's requestState opened on B")
	}
	var key string
	for k := range first.Result.InputRequests {
		key = k
	}
	answer := `,"inputResponses":{"` + key + `":{"action":"accept","content":{"name":"Bob"}}}`
	// B accepts the state as the fleet's, but the call runs on A: not
	// "not issued to this caller" (forwarding the retry is not built yet).
	if code, body := call(gwB.URL, answer+`,"requestState":"`+state+`"`); code != http.StatusBadRequest || !strings.Contains(body, "expired or already used") {
		t.Errorf("the retry on B: HTTP %d %s", code, body)
	}
	forged := state[:len(state)-2] + "AA"
	if code, body := call(gwB.URL, answer+`,"requestState":"`+forged+`"`); code != http.StatusBadRequest || !strings.Contains(body, "not issued to this caller") {
		t.Errorf("forged state on B: HTTP %d %s", code, body)
	}
	if code, body := call(gwA.URL, answer+`,"requestState":"`+state+`"`); code != 200 || !strings.Contains(body, "accept:Bob") {
		t.Errorf("the retry on A: HTTP %d %s", code, body)
	}
}

// innerID is the local id of g's only session.
func innerID(g *Gateway) string {
	for _, s := range g.sessions.All() {
		return s.ID()
	}
	return ""
}

// httptestRequest is a request from the loopback address the test
// clients use, for the owner a gateway gives them.
func httptestRequest() *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", nil)
	r.RemoteAddr = "127.0.0.1:12345"
	return r
}

// Without session keys, ids are what they were: 32 hex characters, local.
func TestUnsealedIDsUnchanged(t *testing.T) {
	_, url := ownerGateway(t, Options{})
	sid := initOwned(t, url, "alice")
	if len(sid) != 32 || strings.Trim(sid, "0123456789abcdef") != "" {
		t.Errorf("session id %q", sid)
	}
}
