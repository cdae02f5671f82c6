package fleet

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// at is s as seen on another endpoint (a replica's /mcp): the same
// session id and key.
func (s *rawSession) at(url string) *rawSession {
	return &rawSession{url: url, key: s.key, hc: s.hc, sid: s.sid}
}

// Delete ends the session with DELETE (S8.1) and returns the status and
// body.
func (s *rawSession) Delete(ctx context.Context) (int, string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, s.url, nil)
	req.Header.Set("X-Mcpgate-Api-Key", s.key)
	req.Header.Set("Mcp-Session-Id", s.sid)
	req.Header.Set("Mcp-Protocol-Version", revStateful)
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// BlockPG takes the fleet's database away, as a PostgreSQL outage would:
// new connections are refused and the open ones are ended. UnblockPG
// brings it back. Other tests' databases on the server are untouched.
func (f *Fleet) BlockPG(t testing.TB) {
	t.Helper()
	f.PG.Exec(t, "postgres", "ALTER DATABASE "+f.DB+" ALLOW_CONNECTIONS false")
	f.PG.Exec(t, "postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", f.DB)
}

func (f *Fleet) UnblockPG(t testing.TB) {
	t.Helper()
	f.PG.Exec(t, "postgres", "ALTER DATABASE "+f.DB+" ALLOW_CONNECTIONS true")
	// A replica's pool pings a connection idle for over a second before
	// handing it out (pgxpool's default) and replaces a dead one: past
	// that, the connections the outage ended are gone unnoticed, as they
	// are after a real outage once its replicas idle a moment.
	time.Sleep(1200 * time.Millisecond)
	for _, r := range f.Replicas {
		if code := r.Admin(t, http.MethodGet, "/admin/v1/keys", "", nil); code != http.StatusOK {
			t.Fatalf("replica %s reads its store after the outage: %d", r.Name, code)
		}
	}
}

// instances maps each replica's instance id (what reports name it by) to
// the replica.
func instances(t *testing.T, f *Fleet) map[string]*Replica {
	t.Helper()
	out := map[string]*Replica{}
	for _, r := range f.Replicas {
		var rep struct{ Instance string }
		if code := r.Admin(t, http.MethodGet, "/admin/v1/sessions", "", &rep); code != http.StatusOK || rep.Instance == "" {
			t.Fatalf("sessions report of %s: %d %+v", r.Name, code, rep)
		}
		out[rep.Instance] = r
	}
	return out
}

// newUserKey creates, on r, a key of a user of its own for this run.
func newUserKey(t *testing.T, r *Replica, what string) (key, user string) {
	t.Helper()
	user = what + "-" + strings.ToLower(rand.Text()[:8])
	var created struct{ Key string }
	if code := r.Admin(t, http.MethodPost, "/admin/v1/keys", `{"alias":"`+user+`","user":"`+user+`","servers":["notes"]}`, &created); code != http.StatusCreated || created.Key == "" {
		t.Fatalf("create a key for %s on %s: %d", user, r.Name, code)
	}
	return created.Key, user
}

// reportSession is a session as GET /admin/v1/sessions shows it.
type reportSession struct {
	IDPrefix string   `json:"id_prefix"`
	User     string   `json:"user"`
	Replicas []string `json:"replicas"`
}

// testFleetSessionAdmin (issue 22, hole 16): the sessions report of any
// replica lists every replica's sessions, naming the replica holding each;
// terminating a user's sessions through C ends the one held on A, reports
// it (1), and the next request on A, B or C gets 404; another user's
// session on B is untouched.
func testFleetSessionAdmin(t *testing.T, f *Fleet) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a, b, c := f.Replicas[0], f.Replicas[1], f.Replicas[2]
	byInstance := instances(t, f)
	victimKey, victim := newUserKey(t, a, "victim")
	otherKey, other := newUserKey(t, a, "bystander")
	onA, err := newRawSession(ctx, http.DefaultClient, a.URL+"/mcp", victimKey)
	if err != nil {
		t.Fatalf("the victim's session on a: %v", err)
	}
	onB, err := newRawSession(ctx, http.DefaultClient, b.URL+"/mcp", otherKey)
	if err != nil {
		t.Fatalf("the bystander's session on b: %v", err)
	}

	for _, r := range []*Replica{b, c} {
		var rep struct {
			Sessions   []reportSession
			Incomplete string
		}
		if code := r.Admin(t, http.MethodGet, "/admin/v1/sessions", "", &rep); code != http.StatusOK {
			t.Fatalf("sessions on %s: %d", r.Name, code)
		}
		holders := map[string][]string{}
		for _, s := range rep.Sessions {
			if s.User == victim || s.User == other {
				var names []string
				for _, id := range s.Replicas {
					if h := byInstance[id]; h != nil {
						names = append(names, h.Name)
					}
				}
				holders[s.User] = names
			}
		}
		if !slices.Equal(holders[victim], []string{"a"}) || !slices.Equal(holders[other], []string{"b"}) || rep.Incomplete != "" {
			t.Errorf("sessions on %s: holders %v (incomplete %q); want %s's on a and %s's on b", r.Name, holders, rep.Incomplete, victim, other)
		}
	}

	var res struct {
		Terminated int
		Sessions   []reportSession
	}
	if code := c.Admin(t, http.MethodPost, "/admin/v1/sessions/terminate", `{"user":"`+victim+`"}`, &res); code != http.StatusOK || res.Terminated != 1 {
		t.Fatalf("terminate %s's sessions through c: %d %+v; want 1", victim, code, res)
	}
	ended := time.Now()
	var last *rpcReply
	for {
		rep, err := onA.Request(ctx, "tools/list", nil)
		if err != nil {
			t.Fatal(err)
		}
		if last = rep; rep.Status == http.StatusNotFound {
			break
		}
		if time.Since(ended) > announceWithin {
			t.Fatalf("the session terminated through c still served on a %v after: %v", announceWithin, rep)
		}
		time.Sleep(pollEvery)
	}
	t.Logf("terminated through c, refused on a %v after", time.Since(ended).Round(time.Millisecond))
	for _, r := range []*Replica{b, c} {
		if rep, err := onA.at(r.URL+"/mcp").Request(ctx, "tools/list", nil); err != nil || rep.Status != http.StatusNotFound {
			t.Errorf("the terminated session on %s: %v %v; want 404", r.Name, rep, err)
		}
	}
	if !strings.Contains(last.Body, "terminated or has expired") {
		t.Errorf("the terminated session's 404 on a: %s", last.Body)
	}
	if rep, err := onB.Request(ctx, "tools/list", nil); err != nil || !rep.OK() {
		t.Errorf("the bystander's session on b: %v %v", rep, err)
	}
}

// testRedisOutageHolds (hole 17): while Redis is down a replica cannot
// hear the others' announcements, yet what another replica removed,
// revoked or ended stays so on it: a runtime server removed on a is
// never called through b (it is refused, its upstream sees no call), a
// key revoked on a is refused on b at once (not after b's 5 s cache), and
// a session DELETEd on a is refused on b and c. (Each change may instead
// be refused on a with 503; an acknowledged one must hold.)
func testRedisOutageHolds(t *testing.T, f *Fleet) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	a, b, c := f.Replicas[0], f.Replicas[1], f.Replicas[2]
	var calls atomic.Int64
	srv := mcp.NewServer(&mcp.Implementation{Name: "fleet-outage", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "tick", Description: "counts its calls"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			calls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ticked"}}}, nil, nil
		})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer up.Close()
	name := "outage" + strings.ToLower(rand.Text()[:6])
	tool := name + "__tick"
	if code := a.Admin(t, http.MethodPost, "/admin/v1/servers", `{"name":"`+name+`","transport":"http","url":"`+up.URL+`"}`, nil); code != http.StatusCreated {
		t.Fatalf("add %s on a: %d", name, code)
	}
	t.Cleanup(func() { a.Admin(t, http.MethodDelete, "/admin/v1/servers/"+name, "", nil) })
	onB := statelessClient(http.DefaultClient, b.URL+"/mcp", masterKey)
	for start := time.Now(); ; time.Sleep(pollEvery) {
		rep, err := onB.Call(ctx, tool, map[string]any{})
		if err == nil && rep.OK() {
			break
		}
		if time.Since(start) > 3*announceWithin {
			t.Fatalf("%s added on a, on b: %v %v", tool, rep, err)
		}
	}
	// A key created on a, in b's cache (callers.DefaultCacheTTL, 5 s).
	doomedKey, doomed := newUserKey(t, a, "doomed")
	doomedOnB := statelessClient(http.DefaultClient, b.URL+"/mcp", doomedKey)
	if rep, err := doomedOnB.Request(ctx, "tools/list", nil); err != nil || !rep.OK() {
		t.Fatalf("the new key on b: %v %v", rep, err)
	}
	// A session created on a, resumed on b.
	sess, err := newRawSession(ctx, http.DefaultClient, a.URL+"/mcp", aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := sess.at(b.URL+"/mcp").Request(ctx, "tools/list", nil); err != nil || !rep.OK() {
		t.Fatalf("alice's session resumed on b: %v %v", rep, err)
	}

	f.Redis.Stop()
	restarted := false
	defer func() {
		if !restarted {
			if err := f.Redis.Restart(); err != nil {
				t.Error(err)
			}
			waitState(t, f, "ok")
		}
	}()
	t.Logf("redis stopped; degraded everywhere within %v", waitState(t, f, "degraded"))

	removed := a.Admin(t, http.MethodDelete, "/admin/v1/servers/"+name, "", nil)
	before := calls.Load()
	rep, err := onB.Call(ctx, tool, map[string]any{})
	switch removed {
	case http.StatusNoContent:
		if err != nil || rep.OK() || calls.Load() != before || !strings.Contains(rep.Body, "Unknown tool") {
			t.Errorf("%s removed on a (204) while redis is down, called through b: %v %v (upstream calls %d -> %d); want refused as unknown, not called",
				tool, rep, err, before, calls.Load())
		}
	case http.StatusServiceUnavailable:
		t.Logf("the removal on a was refused (503) while redis is down")
	default:
		t.Errorf("remove %s on a while redis is down: %d; want 204 or 503", name, removed)
	}

	switch code := a.Admin(t, http.MethodDelete, "/admin/v1/keys/"+doomed, "", nil); code {
	case http.StatusNoContent:
		if rep, err := doomedOnB.Request(ctx, "tools/list", nil); err != nil || rep.Status != http.StatusUnauthorized {
			t.Errorf("the key revoked on a (204) while redis is down, on b: %v %v; want 401 at once", rep, err)
		}
	case http.StatusServiceUnavailable:
		t.Logf("the revocation on a was refused (503) while redis is down")
	default:
		t.Errorf("revoke a key on a while redis is down: %d; want 204 or 503", code)
	}

	deleted, body := sess.Delete(ctx)
	switch deleted {
	case http.StatusOK:
		for _, r := range []*Replica{b, c} {
			if rep, err := sess.at(r.URL+"/mcp").Request(ctx, "tools/list", nil); err != nil || rep.Status != http.StatusNotFound {
				t.Errorf("alice's session DELETEd on a (200) while redis is down, on %s: %v %v; want 404", r.Name, rep, err)
			}
		}
	case http.StatusServiceUnavailable:
		t.Logf("the DELETE on a was refused (503) while redis is down: %s", body)
	default:
		t.Errorf("DELETE on a while redis is down: %d %s; want 200 or 503", deleted, body)
	}

	if err := f.Redis.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	t.Logf("redis restarted; ok everywhere within %v", waitState(t, f, "ok"))
	if removed == http.StatusNoContent {
		if rep, err := onB.Call(ctx, tool, map[string]any{}); err != nil || rep.OK() {
			t.Errorf("%s on b after the outage: %v %v; want still removed", tool, rep, err)
		}
	}
	if deleted == http.StatusOK {
		if rep, err := sess.at(c.URL+"/mcp").Request(ctx, "tools/list", nil); err != nil || rep.Status != http.StatusNotFound {
			t.Errorf("alice's deleted session on c after the outage: %v %v; want 404", rep, err)
		}
	}
}

// testPostgresOutageRefuses (hole 17): while PostgreSQL is down an end
// that cannot be recorded is refused (503), not acknowledged: a session
// DELETE on a, an administrator's termination through c; a replica asked
// to resume the session meanwhile cannot check it and refuses (503).
// After the outage the session is as it was (nothing was acknowledged),
// and once a DELETE is acknowledged no replica resumes it.
func testPostgresOutageRefuses(t *testing.T, f *Fleet) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	a, b, c := f.Replicas[0], f.Replicas[1], f.Replicas[2]
	key, user := newUserKey(t, a, "pgout")
	sess, err := newRawSession(ctx, http.DefaultClient, a.URL+"/mcp", key)
	if err != nil {
		t.Fatal(err)
	}
	// Every replica knows the key (cached for the outage's few seconds).
	for _, r := range f.Replicas {
		if rep, err := statelessClient(http.DefaultClient, r.URL+"/mcp", key).Request(ctx, "tools/list", nil); err != nil || !rep.OK() {
			t.Fatalf("the key on %s: %v %v", r.Name, rep, err)
		}
	}

	f.BlockPG(t)
	unblocked := false
	defer func() {
		if !unblocked {
			f.UnblockPG(t)
		}
	}()
	deleted, body := sess.Delete(ctx)
	if deleted != http.StatusServiceUnavailable {
		t.Errorf("DELETE on a with PostgreSQL down: %d %s; want 503 (the end cannot be recorded)", deleted, body)
	}
	var refused struct{ Error, Details string }
	if code := c.Admin(t, http.MethodPost, "/admin/v1/sessions/terminate", `{"user":"`+user+`"}`, &refused); code != http.StatusServiceUnavailable {
		t.Errorf("terminate through c with PostgreSQL down: %d %+v; want 503", code, refused)
	}
	if rep, err := sess.at(b.URL+"/mcp").Request(ctx, "tools/list", nil); err != nil || rep.Status != http.StatusServiceUnavailable {
		t.Errorf("resume on b with PostgreSQL down: %v %v; want 503 (it cannot check the session was not ended)", rep, err)
	}
	f.UnblockPG(t)
	unblocked = true

	if deleted == http.StatusOK {
		// Acknowledged: no replica may resume it.
		for _, r := range f.Replicas {
			if rep, err := sess.at(r.URL+"/mcp").Request(ctx, "tools/list", nil); err != nil || rep.Status != http.StatusNotFound {
				t.Errorf("the session whose DELETE was acknowledged during the outage, on %s after it: %v %v; want 404", r.Name, rep, err)
			}
		}
		return
	}
	// Refused: the session is as it was, on any replica, until its
	// DELETE is acknowledged.
	if rep, err := sess.at(b.URL+"/mcp").Request(ctx, "tools/list", nil); err != nil || !rep.OK() {
		t.Fatalf("the session on b after the outage (its DELETE was refused): %v %v", rep, err)
	}
	if code, body := sess.Delete(ctx); code != http.StatusOK {
		t.Fatalf("DELETE on a after the outage: %d %s", code, body)
	}
	for _, r := range f.Replicas {
		if rep, err := sess.at(r.URL+"/mcp").Request(ctx, "tools/list", nil); err != nil || rep.Status != http.StatusNotFound {
			t.Errorf("the deleted session on %s: %v %v; want 404", r.Name, rep, err)
		}
	}
}
