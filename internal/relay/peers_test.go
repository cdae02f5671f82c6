package relay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/state"
)

func TestAskReplica(t *testing.T) {
	const r = "0123456789abcdef0123456789abcdef" // randomID's form
	for raw, want := range map[string]string{
		`"mcpg-0a1b2c3d4e5f-` + r + `"`:         "0a1b2c3d4e5f",
		`"mcpg-` + r + `"`:                      "", // one replica's form names none
		`"mcpg--` + r + `"`:                     "",
		`"mcpg-abc-"`:                           "",
		`"mcpg-abc-` + r[1:] + `"`:              "", // too short
		`"mcpg-abc-` + r + `0"`:                 "", // too long
		`"mcpg-abc-` + strings.ToUpper(r) + `"`: "",
		`"mcpg-abc-` + r[1:] + `x"`:             "",
		`"mcpg-p-` + r + `"`:                    "", // a progress token
		`"mcpg-abc-` + r + `"`:                  "abc",
		`"mcpg-abc-12"`:                         "", // the old counter form
		`"mcpg-\u0061-` + r + `"`:               "",
		`12`:                                    "",
		`"other-abc-` + r + `"`:                 "",
	} {
		id, err := jsonrpc.RawID([]byte(raw))
		if err != nil {
			t.Fatal(raw, err)
		}
		got, ok := AskReplica(id)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", raw, got, ok, want)
		}
	}
}

// FuzzAskReplica: whatever id a client's reply carries, the replica it
// names is read without panicking, and only from an id of askID's form.
func FuzzAskReplica(f *testing.F) {
	const r = "0123456789abcdef0123456789abcdef"
	for _, s := range []string{`"mcpg-0a1b2c3d4e5f-` + r + `"`, `"mcpg-0a1b2c3d4e5f-12"`, `"mcpg-` + r + `"`, `7`, `"mcpg-\u0061-` + r + `"`, `"mcpg-a-1-` + r + `"`, `""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		id, err := jsonrpc.RawID([]byte(raw))
		if err != nil {
			return
		}
		replica, ok := AskReplica(id)
		if !ok {
			return
		}
		// The id is read as its JSON text, without the whitespace around
		// it (a leading space was the input CI's fuzz run found).
		n, found := strings.CutPrefix(id.Raw(), `"mcpg-`+replica+`-`)
		random, quoted := strings.CutSuffix(n, `"`)
		if !found || !quoted || replica == "" || strings.Trim(replica, "0123456789abcdef") != "" || len(random) != 32 || strings.Trim(random, "0123456789abcdef") != "" {
			t.Fatalf("%s named replica %q", raw, replica)
		}
	})
}

func testRing(t testing.TB, b byte) *fleet.Ring {
	t.Helper()
	r, err := fleet.NewRing([][]byte{[]byte(strings.Repeat(string(rune(b)), fleet.KeyLen))})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// member is a Peers started on reg, serving h at its advertised URL.
type member struct {
	p      *Peers
	srv    *httptest.Server
	cancel context.CancelFunc
}

func startPeer(t *testing.T, reg state.Replicas, ring *fleet.Ring, id string, h http.Handler) *member {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	p := NewPeers(PeersOptions{Registry: reg, Ring: ring, ID: id, Advertise: srv.URL + "/"})
	if p == nil {
		t.Fatal("NewPeers: nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.Start(ctx)
	m := &member{p: p, srv: srv, cancel: cancel}
	t.Cleanup(func() { m.stop() })
	return m
}

func (m *member) stop() { m.cancel(); m.p.Close() }

func TestNewPeersOutsideAFleet(t *testing.T) {
	reg := memState(t)
	for name, o := range map[string]PeersOptions{
		"no ring":      {Registry: reg, ID: instA, Advertise: "http://x"},
		"no registry":  {Ring: testRing(t, 1), ID: instA, Advertise: "http://x"},
		"no advertise": {Registry: reg, Ring: testRing(t, 1), ID: instA},
	} {
		if p := NewPeers(o); p != nil {
			t.Errorf("%s: a fleet member", name)
		}
	}
	var p *Peers
	if p.Count() != 0 || p.LiveIDs() != nil || p.IsPeerRequest(httptest.NewRequest("POST", DeliverPath, nil)) {
		t.Error("a nil Peers acts as a fleet member")
	}
	if _, ok := AskReplica(p.AskID(strings.Repeat("0", 32))); ok {
		t.Error("a single replica's ask id names a replica")
	}
}

// Replicas join the registry when they start, see each other, and leave
// it when their context ends; Close waits for the heartbeat loop.
func TestPeersJoinAndLeave(t *testing.T) {
	reg, ring := memState(t), testRing(t, 1)
	a := startPeer(t, reg, ring, instA, http.NotFoundHandler())
	b := startPeer(t, reg, ring, instB, http.NotFoundHandler())
	if n := b.p.Count(); n != 2 {
		t.Errorf("b counts %d replicas after Start, want 2 (itself and a)", n)
	}
	deadline := time.Now().Add(3 * HeartbeatInterval)
	for a.p.Count() != 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if ids := a.p.LiveIDs(); !ids[instA] || !ids[instB] || len(ids) != 2 {
		t.Errorf("a sees %v, want both after a heartbeat", ids)
	}
	if r, ok := b.p.Find(context.Background(), func(r state.Replica) bool { return r.ID == instA }); !ok || r.URL != a.srv.URL {
		t.Errorf("Find(a) = %+v %v, want a's URL without its slash", r, ok)
	}
	if id, ok := AskReplica(a.p.AskID(strings.Repeat("0", 32))); !ok || id != instA {
		t.Errorf("a's ask id names %q %v", id, ok)
	}
	a.stop()
	if b.p.Alive(context.Background(), instA) {
		t.Error("a is alive after it left")
	}
	if !b.p.Alive(context.Background(), instB) {
		t.Error("b is not alive")
	}
}

// takes is a replica's delivery endpoint: it verifies the hop and takes
// a reply only from want.
func takes(p **Peers, want fleet.PeerParty) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(body)
		hop, err := (*p).Verify(r, body)
		switch {
		case err != nil:
			w.WriteHeader(http.StatusUnauthorized)
		case !hop.Deliver || hop.From != want:
			w.WriteHeader(http.StatusNotFound)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
}

// A reply is delivered to the replica its id names, signed with the
// party that sent it: taken by the party it was asked of, refused for
// another, and a replica gone or unreachable is told apart.
func TestDeliver(t *testing.T) {
	reg, ring := memState(t), testRing(t, 1)
	asker := fleet.PeerParty{Owner: "o1", Session: "s1", Route: "/mcp"}
	var ap *Peers
	a := startPeer(t, reg, ring, instA, takes(&ap, asker))
	ap = a.p
	b := startPeer(t, reg, ring, instB, http.NotFoundHandler())
	m := jsonrpc.NewResult(a.p.AskID(strings.Repeat("1", 32)), []byte(`{}`))
	ctx := context.Background()
	if got := b.p.Deliver(ctx, instA, m, asker); got != DeliveredTaken {
		t.Errorf("to the asking party: %d, want DeliveredTaken", got)
	}
	if got := b.p.Deliver(ctx, instA, m, fleet.PeerParty{Owner: "o2", Session: "s1", Route: "/mcp"}); got != DeliveredNotPending {
		t.Errorf("from another owner: %d, want DeliveredNotPending", got)
	}
	if got := b.p.Deliver(ctx, "cccccccccccc", m, asker); got != DeliveredGone {
		t.Errorf("to a replica never seen: %d, want DeliveredGone", got)
	}
	// A replica of another fleet (other keys) refuses the MAC.
	c := startPeer(t, reg, testRing(t, 2), "cccccccccccc", http.NotFoundHandler())
	if got := c.p.Deliver(ctx, instA, m, asker); got != DeliveredRefused {
		t.Errorf("signed with other keys: %d, want DeliveredRefused", got)
	}
	a.srv.Close() // in the registry still, its port refuses
	if got := b.p.Deliver(ctx, instA, m, asker); got != DeliveredUnreachable {
		t.Errorf("to a dead process: %d, want DeliveredUnreachable", got)
	}
}

// A forwarded request carries the client's credentials and address, is
// signed for the hop, and arrives marked as a hop, with the peer headers
// gone and its rate limits counted; a client's own party headers do not
// travel.
func TestForward(t *testing.T) {
	reg, ring := memState(t), testRing(t, 1)
	var mu sync.Mutex
	var got *http.Request
	var ap *Peers
	a := startPeer(t, reg, ring, instA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(body)
		hop, err := ap.Verify(r, body)
		if err != nil || hop.Deliver {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got = Arrived(r, hop, body)
		mu.Unlock()
		_, _ = fmt.Fprint(w, "from a")
	}))
	ap = a.p
	b := startPeer(t, reg, ring, instB, http.NotFoundHandler())

	in := httptest.NewRequest(http.MethodPost, "/mcp?x=1", strings.NewReader("ignored"))
	in.RemoteAddr = "192.0.2.7:1234"
	in.Header.Set("Authorization", "Bearer k")
	in.Header.Set(HeaderPeerOwner, "forged")
	in = in.WithContext(b.p.KeepCredentials(in.Context(), in.Header))
	in.Header.Del("Authorization") // as authentication strips it
	w := httptest.NewRecorder()
	if !b.p.Forward(w, in, a.srv.URL+"/", []byte(`{"jsonrpc":"2.0"}`)) {
		t.Fatal("Forward to a live replica failed")
	}
	if w.Code != 200 || w.Body.String() != "from a" {
		t.Fatalf("relayed %d %q", w.Code, w.Body.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if got == nil {
		t.Fatal("nothing arrived")
	}
	if !IsHop(got) || got.RemoteAddr != in.RemoteAddr || got.Header.Get("Authorization") != "Bearer k" ||
		got.Header.Get(HeaderPeer) != "" || got.Header.Get(HeaderPeerOwner) != "" || got.URL.RawQuery != "x=1" {
		t.Errorf("arrived: hop=%v remote=%q auth=%q peer=%q owner=%q query=%q", IsHop(got), got.RemoteAddr,
			got.Header.Get("Authorization"), got.Header.Get(HeaderPeer), got.Header.Get(HeaderPeerOwner), got.URL.RawQuery)
	}
	if IsHop(in) {
		t.Error("the client's own request is marked a hop")
	}
	// Nobody at that URL: false, nothing written.
	w = httptest.NewRecorder()
	if b.p.Forward(w, in, "http://192.0.2.1:9", []byte(`{}`)) || w.Body.Len() != 0 {
		t.Errorf("Forward to no replica: wrote %q", w.Body.String())
	}
}
