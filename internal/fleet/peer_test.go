package fleet

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPeerAuth(t *testing.T) {
	r := testRing(t, testKey(1), testKey(2))
	now := time.Unix(1_800_000_000, 0)
	req := PeerRequest{Method: "POST", Target: "/fleet/v1/deliver", Client: "192.0.2.7:4711", Body: []byte(`{"jsonrpc":"2.0","id":"mcpg-a-1","result":{}}`)}
	v := r.SignPeer(req, now)
	if !strings.HasPrefix(v, "v1;t=1800000000;k=") || len(v) > maxPeerAuth {
		t.Fatalf("value %q", v)
	}
	with := func(f func(*PeerRequest)) PeerRequest {
		c := req
		f(&c)
		return c
	}
	rotated := testRing(t, testKey(3), testKey(1))
	for _, c := range []struct {
		name  string
		ring  *Ring
		value string
		req   PeerRequest
		at    time.Time
		want  error
	}{
		{"as signed", r, v, req, now, nil},
		{"clock 59s ahead", r, v, req, now.Add(59 * time.Second), nil},
		{"clock 59s behind", r, v, req, now.Add(-59 * time.Second), nil},
		{"an old key after rotation", rotated, v, req, now, nil},
		{"stale", r, v, req, now.Add(61 * time.Second), ErrStale},
		{"from the future", r, v, req, now.Add(-61 * time.Second), ErrStale},
		{"another body", r, v, with(func(p *PeerRequest) { p.Body = p.Body[1:] }), now, ErrForged},
		{"no body", r, v, with(func(p *PeerRequest) { p.Body = nil }), now, ErrForged},
		{"another path", r, v, with(func(p *PeerRequest) { p.Target = "/mcp" }), now, ErrForged},
		{"another method", r, v, with(func(p *PeerRequest) { p.Method = "PUT" }), now, ErrForged},
		{"another client", r, v, with(func(p *PeerRequest) { p.Client = "192.0.2.8:4711" }), now, ErrForged},
		{"no client", r, v, with(func(p *PeerRequest) { p.Client = "" }), now, ErrForged},
		{"method and path shifted", r, v, with(func(p *PeerRequest) { p.Method, p.Target = "POST/", "fleet/v1/deliver" }), now, ErrForged},
		{"path and client shifted", r, v, with(func(p *PeerRequest) { p.Target, p.Client = "/fleet/v1/deliver192.0.2.7", ":4711" }), now, ErrForged},
		{"another fleet", testRing(t, testKey(9)), v, req, now, ErrUnknownKey},
		{"absent", r, "", req, now, ErrMalformed},
		{"garbage", r, "Bearer x", req, now, ErrMalformed},
	} {
		if err := c.ring.VerifyPeer(c.value, c.req, c.at); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}

	// A changed timestamp breaks the MAC (a replay cannot be freshened).
	pa, err := ParsePeerAuth(v)
	if err != nil {
		t.Fatal(err)
	}
	pa.Time += 30
	if err := r.VerifyPeer(pa.String(), req, now); !errors.Is(err, ErrForged) {
		t.Errorf("moved timestamp: %v", err)
	}
	pa.Time -= 30
	pa.MAC[0] ^= 1
	if err := r.VerifyPeer(pa.String(), req, now); !errors.Is(err, ErrForged) {
		t.Errorf("flipped MAC bit: %v", err)
	}
}

// SPEC S24: a delivered reply carries who sent it (owner fingerprint,
// session, route) inside the MAC: a hop whose party was changed on the
// way (another owner, a session added or dropped, another route, bytes
// shifted between the fields) does not verify, so the owning replica can
// trust the party it checks before it delivers.
func TestPeerAuthCoversTheParty(t *testing.T) {
	r := testRing(t, testKey(1))
	now := time.Unix(1_800_000_000, 0)
	alice := PeerParty{Owner: "key:" + strings.Repeat("a", 64), Session: strings.Repeat("5", 64)}
	req := PeerRequest{Method: "POST", Target: "/fleet/v1/deliver", From: alice, Body: []byte(`{"jsonrpc":"2.0","id":"mcpg-a-1","result":{}}`)}
	v := r.SignPeer(req, now)
	from := func(p PeerParty) PeerRequest {
		c := req
		c.From = p
		return c
	}
	for _, c := range []struct {
		name string
		req  PeerRequest
		want error
	}{
		{"as signed", req, nil},
		{"another owner", from(PeerParty{Owner: "key:" + strings.Repeat("b", 64), Session: alice.Session}), ErrForged},
		{"anonymous instead", from(PeerParty{Owner: "anonymous", Session: alice.Session}), ErrForged},
		{"no session", from(PeerParty{Owner: alice.Owner}), ErrForged},
		{"another session", from(PeerParty{Owner: alice.Owner, Session: strings.Repeat("6", 64)}), ErrForged},
		{"a route added", from(PeerParty{Owner: alice.Owner, Session: alice.Session, Route: "r"}), ErrForged},
		{"owner and session shifted", from(PeerParty{Owner: alice.Owner + alice.Session[:1], Session: alice.Session[1:]}), ErrForged},
		{"session moved to route", from(PeerParty{Owner: alice.Owner, Route: alice.Session}), ErrForged},
		{"no party", from(PeerParty{}), ErrForged},
	} {
		if err := r.VerifyPeer(v, c.req, now); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// And the other way: a hop signed without a party does not verify
	// with one added (a forwarded request cannot be turned into a reply
	// of someone).
	bare := req
	bare.From = PeerParty{}
	if err := r.VerifyPeer(r.SignPeer(bare, now), req, now); !errors.Is(err, ErrForged) {
		t.Errorf("party added to an unsigned hop: %v", err)
	}
}

func TestParsePeerAuth(t *testing.T) {
	r := testRing(t, testKey(1))
	good := r.SignPeer(PeerRequest{Method: "POST", Target: "/mcp"}, time.Unix(1_800_000_000, 0))
	pa, err := ParsePeerAuth(good)
	if err != nil || pa.Time != 1_800_000_000 || pa.String() != good {
		t.Fatalf("%q: %+v %v", good, pa, err)
	}
	mac := good[strings.Index(good, ";m=")+3:]
	for _, bad := range []string{
		"",
		"v1",
		"v2;t=1800000000;k=0a0b0c0d;m=" + mac,
		"v1;t=;k=0a0b0c0d;m=" + mac,
		"v1;t=-1;k=0a0b0c0d;m=" + mac,
		"v1;t=+1;k=0a0b0c0d;m=" + mac,
		"v1;t=01800000000;k=0a0b0c0d;m=" + mac,
		"v1;t=1800000000000000;k=0a0b0c0d;m=" + mac,
		"v1;t=1800000000;k=0A0B0C0D;m=" + mac,
		"v1;t=1800000000;k=0a0b0c0;m=" + mac,
		"v1;t=1800000000;k=0a0b0c0g;m=" + mac,
		"v1;t=1800000000;k=0a0b0c0d;m=" + mac[1:],
		"v1;t=1800000000;k=0a0b0c0d;m=" + mac + "A",
		"v1;t=1800000000;k=0a0b0c0d;m=" + mac[:42] + "=",
		"v1;t=1800000000;m=" + mac + ";k=0a0b0c0d",
		" v1;t=1800000000;k=0a0b0c0d;m=" + mac,
		"v1;t=1800000000;k=0a0b0c0d;m=" + mac + strings.Repeat(" ", 200),
	} {
		if _, err := ParsePeerAuth(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", bad, err)
		}
	}
}
