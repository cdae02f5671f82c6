package security

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// frugalKey is frugal's: a budget of one call a day.
const frugalKey = "mcpg_sec-frugal-fleet-0123456789"

// fleetCallers is the auth: block of the fleet cases: alice, and frugal,
// whose budget is one call a day (every call of alpha costs 1).
func fleetCallers() string {
	return fmt.Sprintf(`auth:
  master_key: %q
  keys:
    - {alias: alice, key: %q, user: alice, servers: [alpha]}
    - {alias: frugal, key: %q, user: fru, budget: {amount: 1, period: day}}
`, masterKey, aliceKey, frugalKey)
}

// costly is alpha's servers: entry with every call costing 1.
func costly(u *upstream) string {
	return fmt.Sprintf("  %s: {transport: http, url: %q, tools: {costs: {\"*\": 1}}}\n", u.name, u.url())
}

// TestBudgetAcrossReplicas is hole 15: a key with a budget of one call a
// day, its lookups warm on both replicas, gets exactly one call answered
// across the fleet, not one per replica.
func TestBudgetAcrossReplicas(t *testing.T) {
	alpha, free := newUpstream(t, "alpha"), newUpstream(t, "free")
	f := newFleet(t, 2, fleetCallers(), costly(alpha)+free.server())
	for i, g := range f.replicas {
		// Warm: the key is in each replica's cache, and its spending read
		// (a call of a tool that costs nothing).
		m := g.client(t, "/mcp/free", frugalKey).start("w", "tools/call", `{"name":"echo","arguments":{"text":"warm"}}`).result(t, 10*time.Second)
		if m.Error != nil {
			t.Fatalf("a free call on replica %d: %+v", i, m.Error)
		}
	}
	answered := 0
	for i, g := range append(f.replicas, f.replicas...) {
		m := g.client(t, "/mcp/alpha", frugalKey).start(fmt.Sprint("c", i), "tools/call", fmt.Sprintf(`{"name":"echo","arguments":{"text":"call %d"}}`, i)).result(t, 10*time.Second)
		switch {
		case m.Error == nil:
			answered++
		case m.Error.Code != -32029 || !strings.HasPrefix(m.Error.Message, "Budget exceeded: key frugal has spent 1 of its daily budget of 1"):
			t.Errorf("call %d on replica %d: %d %q, want -32029 Budget exceeded", i, i%2, m.Error.Code, m.Error.Message)
		}
	}
	ran := 0
	for _, s := range alpha.received() {
		if strings.HasPrefix(s, "echo call ") {
			ran++
		}
	}
	if answered != 1 || ran != 1 {
		t.Errorf("a one-call budget across two replicas: %d answered, the upstream ran %d; want exactly 1", answered, ran)
	}
}

// TestAdminSessionsAcrossReplicas is hole 16: the admin view and a
// termination through one replica cover the sessions of every replica.
func TestAdminSessionsAcrossReplicas(t *testing.T) {
	alpha := newUpstream(t, "alpha")
	f := newFleet(t, 2, fleetCallers(), alpha.server())
	a, b := f.replicas[0], f.replicas[1]
	alice := a.client(t, "/mcp/alpha", aliceKey)
	alice.initialize(clientCaps)
	var rep struct {
		Total    int `json:"total"`
		Sessions []struct {
			User string `json:"user"`
		} `json:"sessions"`
	}
	st, body := b.admin(t, http.MethodGet, "/sessions", "")
	if err := json.Unmarshal([]byte(body), &rep); st != http.StatusOK || err != nil {
		t.Fatalf("sessions through b: %d %s", st, body)
	}
	seen := false
	for _, s := range rep.Sessions {
		seen = seen || s.User == "alice"
	}
	if !seen {
		t.Errorf("the sessions through b do not show alice's session on a: %s", body)
	}
	var res struct {
		Terminated int `json:"terminated"`
	}
	st, body = b.admin(t, http.MethodPost, "/sessions/terminate", `{"user":"alice"}`)
	if err := json.Unmarshal([]byte(body), &res); st != http.StatusOK || err != nil || res.Terminated != 1 {
		t.Fatalf("terminate alice's sessions through b: %d %s, want 1 terminated", st, body)
	}
	for _, g := range f.replicas {
		if st, _, body := alice.onReplica(g).post(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); st != http.StatusNotFound {
			t.Errorf("alice's session, terminated through b, on %s: HTTP %d %s, want 404", g.base, st, body)
		}
	}
}

// TestOutageKeepsEndsEnded is hole 17: while Redis is down, a session
// deleted on a is not served by b, and a runtime server removed on a is
// not called through b; a change that cannot be made durable is refused.
func TestOutageKeepsEndsEnded(t *testing.T) {
	alpha, rt := newUpstream(t, "alpha"), newUpstream(t, "rt")
	f := newFleet(t, 2, fleetCallers(), alpha.server())
	a, b := f.replicas[0], f.replicas[1]
	if st, body := a.admin(t, http.MethodPost, "/servers", fmt.Sprintf(`{"name":"rt","transport":"http","url":%q}`, rt.url())); st != http.StatusCreated {
		t.Fatalf("add rt on a: %d %s", st, body)
	}
	onB := b.client(t, "/mcp/rt", masterKey)
	if !eventually(5*time.Second, func() bool {
		st, _, _ := onB.post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		return st == http.StatusOK
	}) {
		t.Fatal("rt added on a is not served on b")
	}
	alice := a.client(t, "/mcp/alpha", aliceKey)
	alice.initialize(clientCaps)
	if st, _, body := alice.onReplica(b).post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); st != http.StatusOK {
		t.Fatalf("alice's session on b: %d %s", st, body)
	}

	f.redis.Stop()
	defer func() {
		if err := f.redis.Restart(); err != nil {
			t.Error(err)
		}
	}()
	// Until each replica's probe has seen it (every second).
	time.Sleep(2500 * time.Millisecond)

	st, _, body := a.request(t, http.MethodDelete, "/mcp/alpha", alice.headers(), "")
	switch st {
	case http.StatusOK:
		if st, _, body := alice.onReplica(b).post(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); st != http.StatusNotFound && st != http.StatusServiceUnavailable {
			t.Errorf("alice's session DELETEd on a (200) while Redis is down, on b: HTTP %d %s, want 404 (or 503: cannot check)", st, body)
		}
	case http.StatusServiceUnavailable:
	default:
		t.Errorf("DELETE alice's session on a while Redis is down: HTTP %d %s, want 200 (durable) or 503", st, body)
	}

	before := len(rt.received())
	switch st, body := a.admin(t, http.MethodDelete, "/servers/rt", ""); st {
	case http.StatusNoContent:
		m := b.client(t, "/mcp", masterKey).start("r1", "tools/call", `{"name":"rt__echo","arguments":{"text":"after removal"}}`).result(t, 10*time.Second)
		if m.Error == nil || len(rt.received()) != before {
			t.Errorf("rt removed on a (204) while Redis is down, called through b: %s %+v (upstream ran %q); want refused, not called", m.Result, m.Error, rt.received())
		}
	case http.StatusServiceUnavailable:
	default:
		t.Errorf("remove rt on a while Redis is down: HTTP %d %s, want 204 or 503", st, body)
	}
}

// TestRevokedKeyAcrossReplicas: a key revoked through one replica is
// refused by the other as soon as the revocation is answered, though the
// other replica had the key cached and a session open with it: a leaked
// key stops working everywhere the moment an administrator is told it
// was revoked, not when each replica gets round to it.
func TestRevokedKeyAcrossReplicas(t *testing.T) {
	alpha := newUpstream(t, "alpha")
	f := newFleet(t, 2, fleetCallers(), alpha.server())
	a, b := f.replicas[0], f.replicas[1]
	revokeInUse(t, a, b, "leaked", alpha)
}
