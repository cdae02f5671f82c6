package security

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
)

// fleet is replicas of the real binary sharing one PostgreSQL database,
// one Redis and one config, each reached directly (no balancer: a case
// picks the replica each request goes to).
type fleet struct {
	replicas []*gateway
	redis    *redistest.Server
}

// newFleet starts n replicas serving servers (a servers: block body) with
// auth (an auth: block), in fleet mode.
func newFleet(t *testing.T, n int, auth, servers string) *fleet {
	t.Helper()
	pg := pgtest.Get(t)
	f := &fleet{redis: redistest.New(t)}
	dsn := pg.DSN(pg.NewDatabase(t), pgtest.Superuser, "")
	key := make([]byte, 32)
	rand.Read(key)
	for i := range n {
		addr := freeLoopback(t)
		cfg := fmt.Sprintf(`store: {driver: postgres, dsn: %q}
state: {driver: redis, url: %q, replicas: %d}
fleet:
  session_keys: [%q]
  advertise: "http://%s"
%sservers:
%s`, dsn, f.redis.URL(), n, base64.StdEncoding.EncodeToString(key), addr, auth, servers)
		// One after the other: the first migrates the database alone.
		g, err := tryStartGateway(t, cfg, "--listen", addr)
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		f.replicas = append(f.replicas, g)
	}
	// Each replica is in the registry once it serves; wait until every
	// one is ready (the registry is read before /readyz says 200).
	for i, g := range f.replicas {
		if !eventually(20*time.Second, func() bool {
			st, _, _ := g.request(t, http.MethodGet, "/readyz", nil, "")
			return st == http.StatusOK
		}) {
			t.Fatalf("replica %d not ready", i)
		}
	}
	return f
}

// freeLoopback is a loopback address with a port free now (fleet.advertise
// must name it before the replica starts).
func freeLoopback(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// onReplica is c pointed at another replica, keeping its session id.
func (c *client) onReplica(g *gateway) *client {
	c2 := *c
	c2.g = g
	return &c2
}

// TestRelayedAnswerAcrossReplicas is hole 1 in a fleet: alice's call runs
// on replica a; bob sends an answer with alice's relayed id to replica b,
// which forwards replies to the replica that asked. a must refuse it (the
// answering caller and session travel inside the signed hop), and alice's
// own answer, sent to b, must still reach her call on a.
func TestRelayedAnswerAcrossReplicas(t *testing.T) {
	alpha, beta := newUpstream(t, "alpha"), newUpstream(t, "beta")
	auth := fmt.Sprintf(`auth:
  master_key: %q
  keys:
    - {alias: alice, key: %q, user: alice, servers: [alpha]}
    - {alias: bob, key: %q, user: bob, servers: [beta]}
`, masterKey, aliceKey, bobKey)
	f := newFleet(t, 2, auth, alpha.server()+beta.server())
	a, b := f.replicas[0], f.replicas[1]
	for _, sr := range serverRequests {
		t.Run(sr.method, func(t *testing.T) {
			alpha.mu.Lock()
			alpha.got = nil
			alpha.mu.Unlock()
			alice := a.client(t, "/mcp/alpha", aliceKey)
			alice.initialize(clientCaps)
			cl := alice.start("a1", "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, sr.tool, sr.args))
			req := cl.request(t, 10*time.Second)
			answer := response(req.ID, sr.attack)

			st, _, body := b.client(t, "/mcp/beta", bobKey).post(answer)
			refusedAnswer(t, "bob without a session, on replica b", st, body)
			bob := b.client(t, "/mcp/beta", bobKey)
			bob.initialize(clientCaps)
			st, _, body = bob.post(answer)
			refusedAnswer(t, "bob's session on replica b", st, body)
			other := b.client(t, "/mcp/alpha", aliceKey)
			other.initialize(clientCaps)
			st, _, body = other.post(answer)
			refusedAnswer(t, "another session of alice's key, on replica b", st, body)

			// alice's own answer, on the other replica: forwarded to a.
			victimUntouched(t, alpha, alice.onReplica(b), cl, req, sr)
		})
	}
}

// TestForgedPeerHops: what held. A request to the fleet's internal
// endpoint without the fleet's MAC, with a MAC over another body, or with
// the peer header on a client request, is refused 401 before anything is
// delivered; the victim's pending request keeps waiting.
func TestForgedPeerHops(t *testing.T) {
	alpha := newUpstream(t, "alpha")
	auth := fmt.Sprintf("auth:\n  master_key: %q\n  keys:\n    - {alias: alice, key: %q, user: alice, servers: [alpha]}\n", masterKey, aliceKey)
	f := newFleet(t, 2, auth, alpha.server())
	a := f.replicas[0]
	alice := a.client(t, "/mcp/alpha", aliceKey)
	alice.initialize(clientCaps)
	sr := serverRequests[0]
	cl := alice.start("a1", "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, sr.tool, sr.args))
	req := cl.request(t, 10*time.Second)
	answer := response(req.ID, sr.attack)
	now := time.Now().Unix()
	for _, tc := range []struct {
		name, path, peer string
	}{
		{"no peer header", "/fleet/v1/deliver", ""},
		{"a made-up MAC", "/fleet/v1/deliver", fmt.Sprintf("v1;t=%d;k=0;m=%s", now, strings.Repeat("A", 43))},
		{"garbage", "/fleet/v1/deliver", "v1;;;;"},
		{"a peer header on a client route", "/mcp/alpha", fmt.Sprintf("v1;t=%d;k=0;m=%s", now, strings.Repeat("A", 43))},
	} {
		h := http.Header{"Content-Type": {"application/json"}}
		if tc.peer != "" {
			h.Set("X-Mcpgate-Peer", tc.peer)
		}
		h.Set("X-Mcpgate-Peer-Client", "10.0.0.1:1234")
		st, _, body := a.request(t, http.MethodPost, tc.path, h, answer)
		if st != http.StatusUnauthorized {
			t.Errorf("%s: HTTP %d %s, want 401", tc.name, st, body)
		}
	}
	victimUntouched(t, alpha, alice, cl, req, sr)
}
