package gateway

import (
	"context"
	"encoding/json"
	"errors"
	sessions "github.com/mcpgate/mcpgate/internal/session"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state"
)

// flakyTerms is a store's terminations that fail, as a store that does
// not answer, while down is set.
type flakyTerms struct {
	Terminations
	down    atomic.Bool
	refused atomic.Int64 // IsTerminated calls answered errStoreDown
}

var errStoreDown = errors.New("store: connection refused")

func (f *flakyTerms) MarkTerminated(ctx context.Context, hash string, until time.Time) error {
	if f.down.Load() {
		return errStoreDown
	}
	return f.Terminations.MarkTerminated(ctx, hash, until)
}

func (f *flakyTerms) IsTerminated(ctx context.Context, hash string, now time.Time) (bool, error) {
	if f.down.Load() {
		f.refused.Add(1)
		return false, errStoreDown
	}
	return f.Terminations.IsTerminated(ctx, hash, now)
}

// unlisted is a shared state whose session listing fails while down is
// set (the rest works).
type unlisted struct {
	state.Backend
	down atomic.Bool
}

func (u *unlisted) ListSessions(ctx context.Context, limit int, prefixes ...string) ([]state.SessionState, bool, error) {
	if u.down.Load() {
		return nil, false, &state.UnavailableError{Op: "list sessions", Err: errors.New("connection refused")}
	}
	return u.Backend.ListSessions(ctx, limit, prefixes...)
}

// userOf finds the report's sessions of user.
func sessionsOf(rep SessionsReport, user string) []SessionInfo {
	var out []SessionInfo
	for _, s := range rep.Sessions {
		if s.User == user {
			out = append(out, s)
		}
	}
	return out
}

// closedNow fails unless g holds no live session of user: a termination
// elsewhere answers only once every copy ended (fanout.go), so nothing
// is waited for.
func closedNow(t *testing.T, g *Gateway, user string) {
	t.Helper()
	if n := len(sessionsOf(localReport(g), user)); n != 0 {
		t.Errorf("%s's session still live on replica %s after its termination elsewhere was answered", user, g.instance)
	}
}

// S13.2, S15 (issue 22, hole 16): an administrator's termination through
// any replica ends the matching sessions of every replica, and reports
// how many it ended: a session created and held on A, terminated by user
// through B, ends on A at once and is refused (404) on every replica;
// another user's session is untouched; terminating again ends nothing.
func TestFleetTerminationEndsEveryReplicasSessions(t *testing.T) {
	up := faultyUpstream(t)
	mem := state.NewMemory(state.MemoryOptions{}) // the fleet's Redis
	t.Cleanup(func() { mem.Close() })
	terms := sessions.NewMemTerminations() // the fleet's store
	replica := func() (*Gateway, string) {
		return ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), Terminations: terms, State: mem, IdleTimeout: time.Minute})
	}
	a, urlA := replica()
	b, urlB := replica()
	c, urlC := replica()

	alice := initOwned(t, urlA, "alice")
	bob := initOwned(t, urlB, "bob")
	for _, s := range []struct{ url, owner, sid string }{{urlA, "alice", alice}, {urlB, "bob", bob}} {
		if code, body := send(t, http.MethodPost, s.url+"/mcp", s.owner, s.sid, callBody); code != 200 || !strings.Contains(body, "fine") {
			t.Fatalf("%s's call: %d %s", s.owner, code, body)
		}
	}

	res, err := b.TerminateSessions(context.Background(), "", "alice-user")
	if err != nil || res.Terminated != 1 || len(res.Sessions) != 1 || res.Sessions[0].User != "alice-user" || res.Unconfirmed != 0 {
		t.Fatalf("terminate alice's sessions through B: %+v, %v; want 1 ended, confirmed", res, err)
	}
	closedNow(t, a, "alice-user")
	for name, u := range map[string]string{"A": urlA, "B": urlB, "C": urlC} {
		if code, body := send(t, http.MethodPost, u+"/mcp", "alice", alice, callBody); code != http.StatusNotFound || body != bodyEnded {
			t.Errorf("alice's terminated session on %s: %d %s", name, code, body)
		}
	}
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "bob", bob, callBody); code != 200 || !strings.Contains(body, "fine") {
		t.Errorf("bob's session after alice's termination: %d %s", code, body)
	}
	if res, err := c.TerminateSessions(context.Background(), "", "alice-user"); err != nil || res.Terminated != 0 {
		t.Errorf("terminate alice's sessions again through C: %+v, %v; want 0", res, err)
	}

	// By the prefix a report shows, through a replica that never held it.
	prefix := sessionsOf(localReport(b), "bob-user")[0].IDPrefix
	if res, err := c.TerminateSessions(context.Background(), prefix, ""); err != nil || res.Terminated != 1 || res.Sessions[0].IDPrefix != prefix {
		t.Fatalf("terminate bob's by prefix through C: %+v, %v", res, err)
	}
	closedNow(t, b, "bob-user")
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "bob", bob, listBody); code != http.StatusNotFound || body != bodyEnded {
		t.Errorf("bob's terminated session on B: %d %s", code, body)
	}
}

// S13.1, S15 (hole 16): every replica's report lists the fleet's sessions,
// each naming the replicas that hold a copy (one resumed elsewhere holds
// two), with what the replica that saw its initialize knows of it; when
// the shared state does not answer, a report says its list is only this
// replica's, and a termination says it could not reach the others'.
func TestFleetSessionsReport(t *testing.T) {
	up := faultyUpstream(t)
	mem := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	terms := sessions.NewMemTerminations()
	shared := &unlisted{Backend: mem}
	replica := func() (*Gateway, string) {
		return ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), Terminations: terms, State: shared, IdleTimeout: time.Minute})
	}
	a, urlA := replica()
	b, urlB := replica()
	c, _ := replica()

	alice := initOwned(t, urlA, "alice")
	if code, _ := send(t, http.MethodPost, urlB+"/mcp", "alice", alice, listBody); code != 200 {
		t.Fatalf("alice's session resumed on B: %d", code)
	}
	initOwned(t, urlB, "bob")
	// The copy resumed on B records itself on its first request, off
	// the request's path.
	want := []string{a.instance, b.instance}
	slices.Sort(want)
	deadline := time.Now().Add(time.Second)
	var rep SessionsReport
	for {
		rep = c.FleetSessionsReport(context.Background())
		if s := sessionsOf(rep, "alice-user"); len(s) == 1 && slices.Equal(s[0].Replicas, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("C's report: %+v; want alice's session held by %v", rep.Sessions, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if rep.Total != 2 || rep.Incomplete != "" || rep.Instance != c.instance {
		t.Errorf("C's report: total %d, incomplete %q, instance %s; want 2 sessions of the fleet", rep.Total, rep.Incomplete, rep.Instance)
	}
	s := sessionsOf(rep, "alice-user")[0]
	if s.ClientName != "test-client" || s.KeyAlias != "alice" || s.Route != "/mcp" || !slices.Equal(s.Servers, []string{"f"}) || len(s.IDPrefix) != idPrefixLen {
		t.Errorf("alice's session as C reports it: %+v", s)
	}
	if bs := sessionsOf(rep, "bob-user"); len(bs) != 1 || !slices.Equal(bs[0].Replicas, []string{b.instance}) {
		t.Errorf("bob's session as C reports it: %+v; want held by B", bs)
	}
	// A report never shows a token or the whole id.
	if rs := b.FleetSessionsReport(context.Background()); strings.Contains(jsonOf(t, rs), alice) || strings.Contains(jsonOf(t, rs), innerIDOf(b, "alice-user")) {
		t.Errorf("a report shows the session's token or id: %s", jsonOf(t, rs))
	}

	shared.down.Store(true)
	rep = c.FleetSessionsReport(context.Background())
	if rep.Total != 0 || !strings.Contains(rep.Incomplete, "did not answer") {
		t.Errorf("C's report with the shared state down: total %d, incomplete %q; want none listed and why", rep.Total, rep.Incomplete)
	}
	res, err := c.TerminateSessions(context.Background(), "", "alice-user")
	if !errors.Is(err, ErrFleetUnreachable) || res.Terminated != 0 {
		t.Errorf("terminate through C with the shared state down: %+v, %v; want ErrFleetUnreachable", res, err)
	}
	if code, _ := send(t, http.MethodPost, urlA+"/mcp", "alice", alice, listBody); code != 200 {
		t.Errorf("alice's session after a termination that could not reach it: %d", code)
	}
}

func innerIDOf(g *Gateway, user string) string {
	var id string
	for _, s := range g.sessions.All() {
		if s.Who().User == user {
			id = s.ID()
			break
		}
	}
	return id
}

// S8.1, S8.2, S15 (hole 17): a client's DELETE of a sealed session is
// made durable or refused: while the store does not answer it is refused
// with 503 and the session goes on as it was (it is not half-ended: no
// replica may resume an end it was told about); a replica asked to resume
// a sealed id it cannot check refuses (503) instead of serving it; once
// the store answers, the DELETE is acknowledged and the id is refused on
// every replica.
func TestSessionEndIsDurableOrRefused(t *testing.T) {
	up := faultyUpstream(t)
	terms := &flakyTerms{Terminations: sessions.NewMemTerminations()}
	replica := func() (*Gateway, string) {
		return ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), Terminations: terms, IdleTimeout: time.Minute})
	}
	_, urlA := replica()
	_, urlB := replica()
	_, urlC := replica()
	sid := initOwned(t, urlA, "alice")

	terms.down.Store(true)
	code, body := send(t, http.MethodDelete, urlA+"/mcp", "alice", sid, "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "could not be ended now") {
		t.Errorf("DELETE on A with the store down: %d %s; want 503", code, body)
	}
	if code, body := send(t, http.MethodPost, urlA+"/mcp", "alice", sid, callBody); code != 200 || !strings.Contains(body, "fine") {
		t.Errorf("the session on A after a refused DELETE: %d %s; want it unchanged", code, body)
	}
	// A DELETE reaching a replica that does not hold it: the same.
	if code, _ := send(t, http.MethodDelete, urlC+"/mcp", "alice", sid, ""); code != http.StatusServiceUnavailable {
		t.Errorf("DELETE on C (not holding it) with the store down: %d; want 503", code)
	}
	code, body = send(t, http.MethodPost, urlB+"/mcp", "alice", sid, listBody)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot check now whether the session was ended") {
		t.Errorf("resume on B with the store down: %d %s; want 503", code, body)
	}

	terms.down.Store(false)
	if code, _ := send(t, http.MethodPost, urlB+"/mcp", "alice", sid, listBody); code != 200 {
		t.Errorf("resume on B after the outage (no DELETE was acknowledged): %d", code)
	}
	if code, _ := send(t, http.MethodDelete, urlA+"/mcp", "alice", sid, ""); code != 200 {
		t.Fatalf("DELETE on A with the store back: %d", code)
	}
	_, urlD := replica()
	for name, u := range map[string]string{"A": urlA, "C": urlC, "a new replica": urlD} {
		if code, body := send(t, http.MethodPost, u+"/mcp", "alice", sid, listBody); code != http.StatusNotFound || body != bodyEnded {
			t.Errorf("the deleted session on %s: %d %s", name, code, body)
		}
	}
}

// S8.2, S15 (hole 17): a replica that cannot hear the bus (its backend
// down: the termination's announcement never reaches it) re-checks a
// session it holds against the store before serving it: one DELETEd on
// another replica meanwhile is refused (404) and its copy ends, one it
// cannot check is refused (503). With the bus heard again (the follower
// resubscribed and resynchronised) it serves its copies without a store
// read per request.
func TestHeldSessionRecheckedWhileBusUnheard(t *testing.T) {
	up := faultyUpstream(t)
	terms := &flakyTerms{Terminations: sessions.NewMemTerminations()}
	mem := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	probe := &fakeState{}
	// A announces on no bus, as a replica whose publish fails; B follows
	// one, and its probe of the backend says when it is down.
	_, urlA := ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), Terminations: terms, IdleTimeout: time.Minute})
	b, urlB := ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), Terminations: terms, Bus: mem, StateHealth: probe, IdleTimeout: time.Minute})
	waitTrusted := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for b.heard.Trusted() != want {
			if time.Now().After(deadline) {
				t.Fatalf("B's bus trusted stayed %v", !want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitTrusted(true)

	alice := initOwned(t, urlA, "alice")
	bob := initOwned(t, urlA, "bob")
	for _, s := range []struct{ owner, sid string }{{"alice", alice}, {"bob", bob}} {
		if code, _ := send(t, http.MethodPost, urlB+"/mcp", s.owner, s.sid, listBody); code != 200 {
			t.Fatalf("%s's session resumed on B: %d", s.owner, code)
		}
	}
	probe.down.Store(true)
	b.probeState(context.Background())
	if b.heard.Trusted() {
		t.Fatal("B trusts its bus with its backend down")
	}
	if code, _ := send(t, http.MethodDelete, urlA+"/mcp", "alice", alice, ""); code != 200 {
		t.Fatalf("DELETE on A: %d", code)
	}
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "alice", alice, callBody); code != http.StatusNotFound || body != bodyEnded {
		t.Errorf("alice's session on B, deleted on A while B could not hear: %d %s; want 404", code, body)
	}
	if len(sessionsOf(localReport(b), "alice-user")) != 0 {
		t.Error("B's copy of the deleted session lives on")
	}
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "bob", bob, callBody); code != 200 || !strings.Contains(body, "fine") {
		t.Errorf("bob's session on B, not deleted: %d %s", code, body)
	}
	terms.down.Store(true)
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "bob", bob, callBody); code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot check now") {
		t.Errorf("bob's session on B with neither bus nor store: %d %s; want 503", code, body)
	}

	// The bus back but not the store: the resynchronisation cannot check
	// what it missed, so B goes on checking (and refusing).
	probe.down.Store(false)
	tried := terms.refused.Load()
	b.probeState(context.Background())
	// Once the resynchronisation's read of the store was refused, B
	// still does not trust its bus.
	waitFor(t, "B's resynchronisation to read the store", func() bool { return terms.refused.Load() > tried })
	if b.heard.Trusted() {
		t.Error("B trusts its bus after a resynchronisation that could not read the store")
	}
	terms.down.Store(false)
	waitTrusted(true)
	terms.down.Store(true)
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "bob", bob, callBody); code != 200 || !strings.Contains(body, "fine") {
		t.Errorf("bob's session on B with the bus heard again (the store down): %d %s; want served without a store read", code, body)
	}
}

// S15 (hole 17): before a replica that cannot hear the bus calls or
// lists a runtime server, it re-reads it (ServerCheck): one removed
// elsewhere is neither called nor listed, and one it cannot re-read is
// not called; a server of the config file, or a replica hearing the bus,
// reads nothing.
func TestRuntimeServerRecheckedWhileBusUnheard(t *testing.T) {
	up := faultyUpstream(t)
	mem := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	probe := &fakeState{}
	g, url := ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), Bus: mem, StateHealth: probe, IdleTimeout: time.Minute})
	if err := g.AddServer(context.Background(), "rt", httpServer(up.URL+"/mcp"), nil); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		checks  []string
		gone    bool
		failing bool
	)
	g.SetServerCheck(func(_ context.Context, name string) error {
		mu.Lock()
		defer mu.Unlock()
		checks = append(checks, name)
		if failing {
			return errStoreDown
		}
		if gone {
			g.RemoveServer(name)
		}
		return nil
	})
	deadline := time.Now().Add(3 * time.Second)
	for !g.heard.Trusted() {
		if time.Now().After(deadline) {
			t.Fatal("the bus is not trusted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	call := func(tool string) (int, string) {
		t.Helper()
		return send(t, http.MethodPost, url+"/mcp", "alice", "", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"`+tool+`","arguments":{}}}`)
	}
	if code, body := call("rt__ok"); code != 200 || !strings.Contains(body, "fine") {
		t.Fatalf("rt__ok with the bus heard: %d %s", code, body)
	}
	if len(checks) != 0 {
		t.Errorf("re-read %v with the bus heard", checks)
	}

	probe.down.Store(true)
	g.probeState(context.Background())
	if code, body := call("rt__ok"); code != 200 || !strings.Contains(body, "fine") {
		t.Errorf("rt__ok, still stored: %d %s", code, body)
	}
	if code, _ := call("f__ok"); code != 200 {
		t.Errorf("f__ok (config file): %d", code)
	}
	mu.Lock()
	if !slices.Equal(checks, []string{"rt"}) {
		t.Errorf("re-read %v for a call of rt and one of f; want rt once", checks)
	}
	failing = true
	mu.Unlock()
	if code, body := call("rt__ok"); code != 200 || !strings.Contains(body, "cannot confirm now that it is still configured") || strings.Contains(body, "fine") {
		t.Errorf("rt__ok with neither bus nor store: %d %s; want an error, not the call", code, body)
	}
	mu.Lock()
	failing, gone = false, true
	mu.Unlock()
	if code, body := call("rt__ok"); !strings.Contains(body, "Unknown tool: rt__ok") || strings.Contains(body, "fine") {
		t.Errorf("rt__ok removed elsewhere: %d %s; want Unknown tool", code, body)
	}
	if _, body := send(t, http.MethodPost, url+"/mcp", "alice", "", listBody); strings.Contains(body, "rt__") || !strings.Contains(body, "f__ok") {
		t.Errorf("tools/list after rt was removed elsewhere: %s", body)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A session's record in the shared state stays within the backend's
// bounds whatever its client sent: a 10 KB client name is cut (the write
// would be refused, losing the session's fleet-wide liveness with it).
func TestSessionRecordBounded(t *testing.T) {
	up := faultyUpstream(t)
	mem := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	replica := func() (*Gateway, string) {
		return ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), State: mem, IdleTimeout: time.Minute})
	}
	a, urlA := replica()
	c, _ := replica()
	long := strings.Repeat("é", 5000)
	code, _, body := rpc(t, urlA+"/mcp", map[string]string{"X-Test-Owner": "alice"},
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"`+long+`","version":"1"}}}`)
	if code != 200 {
		t.Fatalf("initialize: %d %s", code, body)
	}
	fields, err := mem.SessionFields(context.Background(), hashHex(innerIDOf(a, "alice-user")))
	if err != nil || fields[fieldLive] != "1" || fields[fieldInfo] == "" {
		t.Fatalf("the session's record: %v %v; want it written", fields, err)
	}
	s := sessionsOf(c.FleetSessionsReport(context.Background()), "alice-user")
	if len(s) != 1 || len(s[0].ClientName) > maxRecordedClient || !strings.HasPrefix(long, s[0].ClientName) || s[0].ClientName == "" {
		t.Errorf("the session as another replica reports it: %+v", s)
	}
}

// Hole 16 in a fleet whose sessions are sticky (Redis, no
// fleet.session_keys): the sessions are recorded all the same, so a
// replica's report and terminations cover the others'.
func TestStickyFleetSessionsAdmin(t *testing.T) {
	mem := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	terms := sessions.NewMemTerminations()
	a, urlA := ownerGateway(t, Options{Terminations: terms, Bus: mem, Records: mem, IdleTimeout: time.Minute})
	b, _ := ownerGateway(t, Options{Terminations: terms, Bus: mem, Records: mem, IdleTimeout: time.Minute})
	sid := initOwned(t, urlA, "alice")
	deadline := time.Now().Add(time.Second)
	for len(sessionsOf(b.FleetSessionsReport(context.Background()), "alice-user")) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("B's report: %+v; want alice's session on A", b.FleetSessionsReport(context.Background()).Sessions)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res, err := b.TerminateSessions(context.Background(), "", "alice-user"); err != nil || res.Terminated != 1 || res.Unconfirmed != 0 {
		t.Fatalf("terminate alice's through B: %+v, %v", res, err)
	}
	closedNow(t, a, "alice-user")
	if code, body := send(t, http.MethodPost, urlA+"/mcp", "alice", sid, listBody); code != http.StatusNotFound || body != bodyEnded {
		t.Errorf("alice's terminated session on A: %d %s", code, body)
	}
}

// One way to end a session (endSessionFor), whoever ends it: with the
// store down a sealed id is left as it was (ErrNotRecorded: the caller
// refuses), a local id, which opens on this replica only, ends all the
// same and its shared state goes, the error saying only that its end was
// not remembered; an administrator's termination of a local id reports
// it ended. The gateway's own end (expiry, eviction) ends a sealed one
// anyway. With the store up either ends, remembered.
func TestEndSessionFor(t *testing.T) {
	terms := &flakyTerms{Terminations: sessions.NewMemTerminations()}
	mem := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	g := New(Options{Logger: testLogger(t), Version: "test", Terminations: terms, Records: mem,
		Config: &config.Config{ToolNameSeparator: config.DefaultSeparator, Servers: map[string]*config.Server{}}})
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	ctx := context.Background()
	open := func(sealed bool) *session {
		t.Helper()
		p := sessions.Params{ID: sessions.NewID()}
		if sealed {
			p.Token = "sealed:" + p.ID // what a ring would have sealed
		}
		s := g.storeSession(g.buildSession(route{}, nil, p), false)
		if err := mem.SetSessionFields(ctx, s.Hash(), map[string]string{fieldLive: "1"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		return s
	}
	hasState := func(s *session) bool {
		f, err := mem.SessionFields(ctx, s.Hash())
		return err != nil || len(f) > 0
	}

	terms.down.Store(true)
	sealed, local := open(true), open(false)
	if err := g.endSessionFor(ctx, sealed); !errors.Is(err, ErrNotRecorded) || sealed.Closed() || !hasState(sealed) {
		t.Errorf("a sealed id with the store down: %v (closed %v, state kept %v); want ErrNotRecorded and the session unchanged", err, sealed.Closed(), hasState(sealed))
	}
	if err := g.endSessionFor(ctx, local); err == nil || errors.Is(err, ErrNotRecorded) || !local.Closed() || hasState(local) {
		t.Errorf("a local id with the store down: %v (closed %v, state kept %v); want it ended, its state gone, told it was not remembered", err, local.Closed(), hasState(local))
	}
	byAdmin := open(false)
	res, err := g.TerminateSessions(ctx, byAdmin.ID()[:idPrefixLen], "")
	if err == nil || errors.Is(err, ErrNotRecorded) || res.Terminated != 1 || !byAdmin.Closed() || hasState(byAdmin) {
		t.Errorf("an administrator's termination of a local id with the store down: %+v, %v (closed %v, state kept %v); want it ended and reported", res, err, byAdmin.Closed(), hasState(byAdmin))
	}
	g.endSessionLogged(ctx, sealed)
	if !sealed.Closed() || hasState(sealed) {
		t.Errorf("the gateway's own end of a sealed id with the store down: closed %v, state kept %v; want it ended here", sealed.Closed(), hasState(sealed))
	}

	terms.down.Store(false)
	for _, isSealed := range []bool{true, false} {
		s := open(isSealed)
		err := g.endSessionFor(ctx, s)
		ended, _ := terms.IsTerminated(ctx, s.Hash(), g.now())
		if err != nil || !s.Closed() || hasState(s) || !ended {
			t.Errorf("sealed %v with the store up: %v (closed %v, state kept %v, remembered %v)", isSealed, err, s.Closed(), hasState(s), ended)
		}
	}
}
