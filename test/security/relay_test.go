package security

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clientCaps declares everything a server may ask a client for.
const clientCaps = `{"elicitation":{},"sampling":{},"roots":{"listChanged":true}}`

// serverRequest is one kind of server-initiated request: the tool of
// upstream that sends it, the answer the victim gives, one an attacker
// would, and what the upstream reports for each.
type serverRequest struct {
	method  string
	tool    string
	args    string
	victim  string // result JSON
	attack  string // result JSON
	wantGot string // what the upstream's tool reports of the victim's answer
}

var serverRequests = []serverRequest{
	{method: "elicitation/create", tool: "ask", args: `{"message":"Delete everything?"}`,
		victim: `{"action":"decline"}`, attack: `{"action":"accept","content":{"confirm":true,"by":"mallory"}}`,
		wantGot: "ask decline null"},
	{method: "sampling/createMessage", tool: "sample", args: `{}`,
		victim:  `{"role":"assistant","content":{"type":"text","text":"from alice"},"model":"m"}`,
		attack:  `{"role":"assistant","content":{"type":"text","text":"from mallory"},"model":"m"}`,
		wantGot: "sample from alice"},
	{method: "roots/list", tool: "roots", args: `{}`,
		victim:  `{"roots":[{"uri":"file:///home/alice","name":"alice"}]}`,
		attack:  `{"roots":[{"uri":"file:///etc","name":"mallory"}]}`,
		wantGot: "roots file:///home/alice"},
}

// relayFixture is a gateway with two servers and two callers who may use
// one each: alice (alpha) and bob (beta).
type relayFixture struct {
	g           *gateway
	alpha, beta *upstream
}

func newRelayFixture(t *testing.T, auth string) *relayFixture {
	t.Helper()
	f := &relayFixture{alpha: newUpstream(t, "alpha"), beta: newUpstream(t, "beta")}
	if auth == "" {
		auth = fmt.Sprintf(`auth:
  master_key: %q
  keys:
    - {alias: alice, key: %q, user: alice, servers: [alpha]}
    - {alias: bob, key: %q, user: bob, servers: [beta]}
`, masterKey, aliceKey, bobKey)
	}
	f.g = startGateway(t, auth+"servers:\n"+f.alpha.server()+f.beta.server())
	return f
}

// refusedAnswer checks that an answer to someone else's relayed request
// was refused as SPEC S24 says: 400 with a JSON-RPC error -32600 naming
// the answer's id, the same whether the id is unknown, spent or another
// party's (so the sender learns nothing of other callers' requests).
func refusedAnswer(t *testing.T, who string, status int, body string) {
	t.Helper()
	if status == http.StatusAccepted || status == http.StatusOK {
		t.Errorf("%s: an answer to another caller's relayed request was accepted (HTTP %d %q)", who, status, body)
		return
	}
	if status != http.StatusBadRequest {
		t.Errorf("%s: HTTP %d %q, want 400", who, status, body)
	}
	var m rpcMsg
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		// A batch: its one element is the refusal.
		var ms []rpcMsg
		if json.Unmarshal([]byte(body), &ms) != nil || len(ms) != 1 {
			t.Errorf("%s: body %q is not a JSON-RPC error", who, body)
			return
		}
		m = ms[0]
	}
	checkNotPending(t, who, &m)
}

var notPendingRE = regexp.MustCompile(`^Invalid Request: no request with id "mcpg-[0-9a-f-]+" is pending for (this session|this caller on this route)$`)

// checkNotPending checks one refusal message of an answer (see
// refusedAnswer).
func checkNotPending(t *testing.T, who string, m *rpcMsg) {
	t.Helper()
	if m.Error == nil || m.Error.Code != -32600 || !notPendingRE.MatchString(m.Error.Message) || len(m.ID) == 0 {
		t.Errorf("%s: %+v (error %+v), want -32600 \"Invalid Request: no request with id … is pending for …\" with the answer's id", who, m, m.Error)
	}
}

// victimUntouched checks that the upstream received nothing yet, then
// that the victim's own answer completes the call with the victim's
// answer alone.
func victimUntouched(t *testing.T, up *upstream, victim *client, cl *call, req *rpcMsg, sr serverRequest) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // what an accepted answer would take to arrive
	if got := up.received(); len(got) != 0 {
		t.Fatalf("the upstream received %q before the victim answered", got)
	}
	if st, _, body := victim.post(response(req.ID, sr.victim)); st != http.StatusAccepted {
		t.Fatalf("the victim's own answer: HTTP %d %s", st, body)
	}
	res := cl.result(t, 10*time.Second)
	if got := toolText(t, res); sr.tool+" "+got != sr.wantGot {
		t.Errorf("the victim's call returned %q, want the victim's answer (%q)", got, sr.wantGot)
	}
	if got := up.received(); len(got) != 1 || got[0] != sr.wantGot {
		t.Errorf("the upstream received %q, want exactly the victim's answer %q", got, sr.wantGot)
	}
}

// TestRelayedAnswerFromAnotherCaller is hole 1: while alice's call waits
// on a request its upstream sent her, nobody but alice's session may
// answer it: not bob (another key, another route, with or without a
// session, alone or in a batch, on the legacy transport), not a second
// session of alice's own key.
func TestRelayedAnswerFromAnotherCaller(t *testing.T) {
	f := newRelayFixture(t, "")
	for _, sr := range serverRequests {
		t.Run(sr.method, func(t *testing.T) {
			f.alpha.mu.Lock() // fresh answers per kind
			f.alpha.got = nil
			f.alpha.mu.Unlock()

			alice := f.g.client(t, "/mcp/alpha", aliceKey)
			alice.initialize(clientCaps)
			cl := alice.start("a1", "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, sr.tool, sr.args))
			req := cl.request(t, 10*time.Second)
			if req.Method != sr.method {
				t.Fatalf("alice was asked %q, want %q", req.Method, sr.method)
			}
			answer := response(req.ID, sr.attack)

			bobNoSession := f.g.client(t, "/mcp/beta", bobKey)
			st, _, body := bobNoSession.post(answer)
			refusedAnswer(t, "bob without a session on /mcp/beta", st, body)

			bob := f.g.client(t, "/mcp/beta", bobKey)
			bob.initialize(clientCaps)
			st, _, body = bob.post(answer)
			refusedAnswer(t, "bob's session on /mcp/beta", st, body)

			st, _, body = bob.post("[" + answer + "]")
			refusedAnswer(t, "bob's session, the answer in a batch", st, body)

			st, _, body = f.g.client(t, "/mcp", bobKey).post(answer)
			refusedAnswer(t, "bob on /mcp", st, body)

			aliceAgain := f.g.client(t, "/mcp/alpha", aliceKey)
			aliceAgain.initialize(clientCaps)
			st, _, body = aliceAgain.post(answer)
			refusedAnswer(t, "a second session of alice's key", st, body)

			st, _, body = f.g.client(t, "/mcp/alpha", aliceKey).post(answer)
			refusedAnswer(t, "alice's key without a session", st, body)

			// The legacy transport acknowledges every POST (its clients
			// drop the connection on anything else) and refuses on the
			// sender's own stream.
			legacy := openLegacyStream(t, f.g, "/mcp/beta", keyHeader(bobKey))
			if st, body := legacy.post(t, answer); st != http.StatusAccepted {
				t.Errorf("bob on the legacy /messages endpoint: HTTP %d %s, want 202 and the refusal on his stream", st, body)
			}
			refusedOnStream(t, "bob on the legacy /messages endpoint", legacy, req.ID)

			victimUntouched(t, f.alpha, alice, cl, req, sr)
		})
	}
	// What an operator sees: each attempt counted (seven per kind).
	if n := f.g.metric(t, `mcpgate_security_refusals_total{kind="foreign_answer"}`); n < 7*float64(len(serverRequests)) {
		t.Errorf("mcpgate_security_refusals_total{kind=\"foreign_answer\"} = %v after %d refused answers", n, 7*len(serverRequests))
	}
}

// TestRelayedAnswerAnonymous is hole 1 with auth.anonymous: callers
// without a key are told apart by their session alone.
func TestRelayedAnswerAnonymous(t *testing.T) {
	f := newRelayFixture(t, "auth: {anonymous: true}\n")
	sr := serverRequests[0]
	alice := f.g.client(t, "/mcp/alpha", "")
	alice.initialize(clientCaps)
	cl := alice.start("a1", "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, sr.tool, sr.args))
	req := cl.request(t, 10*time.Second)
	answer := response(req.ID, sr.attack)

	st, _, body := f.g.client(t, "/mcp/beta", "").post(answer)
	refusedAnswer(t, "an anonymous caller without a session", st, body)
	other := f.g.client(t, "/mcp/alpha", "")
	other.initialize(clientCaps)
	st, _, body = other.post(answer)
	refusedAnswer(t, "another anonymous session on the same route", st, body)

	victimUntouched(t, f.alpha, alice, cl, req, sr)
}

// TestRelayedIDsUnguessable: bob learns the ids the gateway gives relayed
// requests from an elicitation of his own; alice's id, minted next, must
// not be among the ids he could derive from his.
func TestRelayedIDsUnguessable(t *testing.T) {
	f := newRelayFixture(t, "")
	sr := serverRequests[0]
	bob := f.g.client(t, "/mcp/beta", bobKey)
	bob.initialize(clientCaps)
	bcl := bob.start("b1", "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, sr.tool, sr.args))
	breq := bcl.request(t, 10*time.Second)

	alice := f.g.client(t, "/mcp/alpha", aliceKey)
	alice.initialize(clientCaps)
	cl := alice.start("a1", "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, sr.tool, sr.args))
	req := cl.request(t, 10*time.Second)

	var bid, aid string
	if json.Unmarshal(breq.ID, &bid) != nil || json.Unmarshal(req.ID, &aid) != nil {
		t.Fatalf("relayed ids are not strings: %s %s", breq.ID, req.ID)
	}
	// Every id bob can make from his by counting up or down a number in it.
	num := regexp.MustCompile(`[0-9]+`)
	guessed := map[string]bool{}
	var nearest []string // the guesses nearest bob's id first
	for d := uint64(0); d <= 1000; d++ {
		for _, loc := range num.FindAllStringIndex(bid, -1) {
			n, err := strconv.ParseUint(bid[loc[0]:loc[1]], 10, 64)
			if err != nil {
				continue
			}
			for _, m := range []uint64{n + d, n - d} {
				id := bid[:loc[0]] + strconv.FormatUint(m, 10) + bid[loc[1]:]
				if !guessed[id] && id != bid { // his own would answer his own call
					guessed[id] = true
					nearest = append(nearest, id)
				}
			}
		}
	}
	if guessed[aid] {
		t.Errorf("alice's relayed id %q follows from bob's %q", aid, bid)
	}
	if len(aid) < 22 {
		t.Errorf("alice's relayed id %q is too short to be unguessable (want at least 128 random bits)", aid)
	}
	// Bob sprays his guesses anyway: none reaches alice's upstream.
	var spray []string
	for _, id := range nearest[:min(len(nearest), 50)] {
		spray = append(spray, response(json.RawMessage(strconv.Quote(id)), sr.attack))
	}
	_, _, _ = bob.post("[" + strings.Join(spray, ",") + "]")
	victimUntouched(t, f.alpha, alice, cl, req, sr)
	if st, _, body := bob.post(response(breq.ID, `{"action":"cancel"}`)); st != http.StatusAccepted {
		t.Errorf("bob's answer to his own request: HTTP %d %s", st, body)
	}
}

// refusedOnStream waits for the refusal of an answer with id on a legacy
// session's stream.
func refusedOnStream(t *testing.T, who string, l *legacyStream, id json.RawMessage) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-l.msgs:
			if !ok {
				t.Fatalf("%s: the stream ended before the refusal", who)
			}
			if m.isResponse() && string(m.ID) == string(id) {
				checkNotPending(t, who, m)
				return
			}
		case <-deadline:
			t.Fatalf("%s: no refusal on the sender's stream within 10s", who)
		}
	}
}

// TestRelayedAnswerFromJWTCallers is hole 1 with identities from an IdP:
// alice calls with a JWT; bob, with his own JWT for alice's route (a
// grant to the same server), and alice's own token without her session,
// cannot answer what alice's session was asked.
func TestRelayedAnswerFromJWTCallers(t *testing.T) {
	is := newJWTIssuer(t)
	alpha := newUpstream(t, "alpha")
	g := startGateway(t, fmt.Sprintf(`auth:
  master_key: %q
  oidc:
    - issuer: %q
  grants:
    - {user: alice, servers: [alpha]}
    - {user: bob, servers: [alpha]}
servers:
`, masterKey, is.url())+alpha.server())
	res := g.base + "/mcp/alpha"
	jwtClient := func(user string) *client {
		c := g.client(t, "/mcp/alpha", "")
		c.hdr.Set("Authorization", "Bearer "+is.sign(t, is.claims(user, res)))
		return c
	}
	sr := serverRequests[0]
	alice := jwtClient("alice")
	alice.initialize(clientCaps)
	cl := alice.start("a1", "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, sr.tool, sr.args))
	req := cl.request(t, 10*time.Second)
	answer := response(req.ID, sr.attack)

	st, _, body := jwtClient("bob").post(answer)
	refusedAnswer(t, "bob's JWT on alice's route, without a session", st, body)
	bob := jwtClient("bob")
	bob.initialize(clientCaps)
	st, _, body = bob.post(answer)
	refusedAnswer(t, "bob's JWT session on alice's route", st, body)
	st, _, body = jwtClient("alice").post(answer)
	refusedAnswer(t, "alice's own JWT without her session", st, body)

	victimUntouched(t, alpha, alice, cl, req, sr)
}
