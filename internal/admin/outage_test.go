package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/relay"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store"
)

// initSession starts a session on url with secret and returns its id.
func initSession(t *testing.T, r *replica, secret string) string {
	t.Helper()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"outage-client","version":"3"}}}`
	req, _ := http.NewRequest("POST", r.url+"/mcp", strings.NewReader(init))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(callers.HeaderAPIKey, secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	return sid
}

// onSession sends a request on session sid with secret.
func onSession(t *testing.T, r *replica, secret, sid, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", r.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(callers.HeaderAPIKey, secret)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// S13, S15 (issue 22, hole 16): the admin API of any replica shows the
// sessions of every replica, each with the replica holding it, and a
// termination by user through any replica ends them where they are held:
// reported as one, refused (404) there at the next request; another
// user's session is untouched.
func TestFleetSessionsThroughAnyReplica(t *testing.T) {
	mem := memBus(t)
	rs := fleetRigWith(t, 3, sqliteStores(t), mem, rigOptions{sessions: true})
	a, b, c := rs[0], rs[1], rs[2]
	waitFollowing(t, rs)
	alice := a.createKey(t, `{"alias":"al","user":"alice"}`)
	bob := a.createKey(t, `{"alias":"bo","user":"bob"}`)
	aliceSID := initSession(t, a, alice)
	bobSID := initSession(t, b, bob)

	instance := func(r *replica) string {
		_, body := r.do(t, "GET", "/admin/v1/sessions", master, "")
		var rep gateway.SessionsReport
		_ = json.Unmarshal([]byte(body), &rep)
		return rep.Instance
	}
	code, body := c.do(t, "GET", "/admin/v1/sessions", master, "")
	var rep gateway.SessionsReport
	if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil {
		t.Fatalf("sessions on C: %d %s", code, body)
	}
	held := map[string][]string{}
	for _, s := range rep.Sessions {
		held[s.User] = s.Replicas
	}
	if rep.Total != 2 || !slices.Equal(held["alice"], []string{instance(a)}) || !slices.Equal(held["bob"], []string{instance(b)}) || rep.Incomplete != "" {
		t.Errorf("sessions on C: %s; want alice's held by A (%s) and bob's by B (%s)", body, instance(a), instance(b))
	}

	code, body = c.do(t, "POST", "/admin/v1/sessions/terminate", master, `{"user":"alice"}`)
	var res gateway.TerminateResult
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil || res.Terminated != 1 || res.Sessions[0].User != "alice" {
		t.Fatalf("terminate alice through C: %d %s; want 1 ended", code, body)
	}
	if res.Unconfirmed != 0 {
		t.Errorf("terminate alice through C: %s; want every replica's confirmation", body)
	}
	// Answered once A ended its copy: refused there at once.
	if code, body := onSession(t, a, alice, aliceSID, listBody); code != http.StatusNotFound {
		t.Errorf("alice's session on A after its termination through C was answered: %d %s; want 404", code, body)
	}
	if code, body := onSession(t, b, bob, bobSID, listBody); code != 200 || !strings.Contains(body, "calc__add") {
		t.Errorf("bob's session on B: %d %s", code, body)
	}
	if code, body := c.do(t, "POST", "/admin/v1/sessions/terminate", master, `{"user":"alice"}`); code != 200 || !strings.Contains(body, `"terminated":0`) {
		t.Errorf("terminate alice again: %d %s; want 0", code, body)
	}

	// A replica that hears terminations and never confirms (stuck, or
	// of a version before confirmations): bob's end is answered after
	// the wait, said unconfirmed to the operator and in the audit log.
	subscribeSilently(t, mem, relay.TopicTerminated)
	code, body = c.do(t, "POST", "/admin/v1/sessions/terminate", master, `{"user":"bob"}`)
	res = gateway.TerminateResult{}
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil || res.Terminated != 1 || res.Unconfirmed != 1 {
		t.Errorf("terminate bob with a silent replica: %d %s; want 1 ended, 1 unconfirmed", code, body)
	}
	_, events := c.do(t, "GET", "/admin/v1/audit/events?action=session.terminate", master, "")
	if !strings.Contains(events, `"unconfirmed":1`) {
		t.Errorf("the audit log does not say bob's end was unconfirmed: %s", events)
	}
	if n := c.unconfirmed(t, metrics.UnconfirmedTermination); n != 1 {
		t.Errorf("mcpgate_fleet_unconfirmed_total{kind=termination} on C = %v, want 1", n)
	}
}

// downStore is a store that does not answer while down is set: every
// read and write the admin API and the vault make fails.
type downStore struct {
	store.Store
	down *atomic.Bool
}

var errDown = errors.New("store: connection refused")

func (d downStore) err() error {
	if d.down.Load() {
		return errDown
	}
	return nil
}

func (d downStore) CreateKey(ctx context.Context, k store.Key) (store.Key, error) {
	if err := d.err(); err != nil {
		return store.Key{}, err
	}
	return d.Store.CreateKey(ctx, k)
}

func (d downStore) GetKeyByAlias(ctx context.Context, alias string) (store.Key, error) {
	if err := d.err(); err != nil {
		return store.Key{}, err
	}
	return d.Store.GetKeyByAlias(ctx, alias)
}

func (d downStore) UpdateKey(ctx context.Context, k store.Key) (store.Key, error) {
	if err := d.err(); err != nil {
		return store.Key{}, err
	}
	return d.Store.UpdateKey(ctx, k)
}

func (d downStore) DeleteKey(ctx context.Context, alias string) error {
	if err := d.err(); err != nil {
		return err
	}
	return d.Store.DeleteKey(ctx, alias)
}

func (d downStore) PutObject(ctx context.Context, kind, name string, doc json.RawMessage) (store.Object, error) {
	if err := d.err(); err != nil {
		return store.Object{}, err
	}
	return d.Store.PutObject(ctx, kind, name, doc)
}

func (d downStore) DeleteObject(ctx context.Context, kind, name string) error {
	if err := d.err(); err != nil {
		return err
	}
	return d.Store.DeleteObject(ctx, kind, name)
}

func (d downStore) MarkTerminated(ctx context.Context, hash string, until time.Time) error {
	if err := d.err(); err != nil {
		return err
	}
	return d.Store.MarkTerminated(ctx, hash, until)
}

func (d downStore) IsTerminated(ctx context.Context, hash string, now time.Time) (bool, error) {
	if err := d.err(); err != nil {
		return false, err
	}
	return d.Store.IsTerminated(ctx, hash, now)
}

// S15 (hole 17): a change the store does not record is refused with 503
// and a clear error, never acknowledged, and nothing of it is in force:
// keys, runtime servers (a failed change keeps the stored version
// served), toolsets, grants, a person's credential and session
// terminations (the session goes on).
func TestAdminWritesRefusedWhenStoreDown(t *testing.T) {
	down := &atomic.Bool{}
	stores := sqliteStores(t)
	mem := memBus(t)
	rs := fleetRigWith(t, 1, func(t *testing.T) store.Store { return downStore{Store: stores(t), down: down} }, mem, rigOptions{sessions: true})
	r := rs[0]
	waitFollowing(t, rs)
	secret := r.createKey(t, `{"alias":"kept","user":"alice"}`)
	up := toolUpstream(t, "ping")
	if code, body := r.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+up+`","timeout":"5s"}`); code != http.StatusCreated {
		t.Fatalf("add a server: %d %s", code, body)
	}
	if code, body := r.do(t, "PUT", "/admin/v1/toolsets/ts", master, `{"servers":{"calc":["add"]}}`); code != 200 {
		t.Fatalf("put a toolset: %d %s", code, body)
	}
	sid := initSession(t, r, secret)

	down.Store(true)
	for _, w := range []struct{ method, path, key, body string }{
		{"POST", "/admin/v1/keys", master, `{"alias":"new"}`},
		{"PATCH", "/admin/v1/keys/kept", master, `{"disabled":true}`},
		{"DELETE", "/admin/v1/keys/kept", master, ""},
		{"POST", "/admin/v1/servers", master, `{"name":"more","transport":"http","url":"` + up + `","timeout":"5s"}`},
		{"PATCH", "/admin/v1/servers/extra", master, `{"timeout":"9s"}`},
		{"PUT", "/admin/v1/servers/extra/tools", master, `{"deny":["ping"]}`},
		{"DELETE", "/admin/v1/servers/extra", master, ""},
		{"PUT", "/admin/v1/toolsets/ts", master, `{"servers":{"calc":["sub"]}}`},
		{"DELETE", "/admin/v1/toolsets/ts", master, ""},
		{"PUT", "/admin/v1/grants/team/ops", master, `{"servers":["calc"]}`},
		{"DELETE", "/admin/v1/grants/team/ops", master, ""},
		{"POST", "/admin/v1/sessions/terminate", master, `{"user":"alice"}`},
	} {
		code, body := r.do(t, w.method, w.path, w.key, w.body)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "Service Unavailable") || !strings.Contains(body, "try again") {
			t.Errorf("%s %s with the store down: %d %s; want 503 with a clear error", w.method, w.path, code, body)
		}
	}
	// Nothing of it is in force, while the store is down or after.
	check := func(when string) {
		t.Helper()
		_, tools := r.do(t, "POST", "/mcp", master, listBody)
		if !strings.Contains(tools, `"extra__ping"`) || strings.Contains(tools, "more__") {
			t.Errorf("%s: tools %s; want extra__ping served as stored, more not added", when, tools)
		}
		if code, body := onSession(t, r, secret, sid, listBody); code != 200 || !strings.Contains(body, "calc__add") {
			t.Errorf("%s: alice's key and session: %d %s; want both in force", when, code, body)
		}
		if _, ts := r.do(t, "POST", "/toolset/ts/mcp", master, listBody); !strings.Contains(ts, `add"`) || strings.Contains(ts, `sub"`) {
			t.Errorf("%s: toolset ts lists %s; want add only, as stored", when, ts)
		}
	}
	check("the store down")
	down.Store(false)
	check("the store back")
	if _, grants := r.do(t, "GET", "/admin/v1/grants", master, ""); strings.Contains(grants, `"value":"ops"`) {
		t.Errorf("a refused grant is in force: %s", grants)
	}
}

// S15 (hole 17), PostgreSQL and Redis as in production: while Redis is
// down, a runtime server removed on A is never called through B, nor
// listed there, and a key revoked on A is refused on B at once, although
// B cannot hear the announcements: it re-reads them from the store per
// use until it follows the bus again.
func TestFleetAdminWhileRedisDown(t *testing.T) {
	srv := redistest.New(t)
	rs := fleetRigWith(t, 2, postgresStores(t), redisBus(t, srv), rigOptions{probe: true})
	a, b := rs[0], rs[1]
	waitFollowing(t, rs)
	secret := a.createKey(t, `{"alias":"doomed"}`)
	if code, _ := b.do(t, "POST", "/mcp", secret, listBody); code != 200 {
		t.Fatalf("the new key on B: %d", code)
	}
	url := toolUpstream(t, "ping")
	if code, body := a.do(t, "POST", "/admin/v1/servers", master, `{"name":"gone","transport":"http","url":"`+url+`","timeout":"5s"}`); code != http.StatusCreated {
		t.Fatalf("add on A: %d %s", code, body)
	}
	within(t, "server added on A served on B", func() bool {
		_, body := b.do(t, "POST", "/mcp", master, listBody)
		return strings.Contains(body, `"gone__ping"`)
	})
	callGone := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"gone__ping","arguments":{}}}`
	if _, body := b.do(t, "POST", "/mcp", master, callGone); !strings.Contains(body, `"result"`) {
		t.Fatalf("gone__ping on B before: %s", body)
	}

	srv.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for b.gw.BusHeard().Trusted() {
		if time.Now().After(deadline) {
			t.Fatal("B did not notice Redis stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, _ := a.do(t, "DELETE", "/admin/v1/servers/gone", master, ""); code != http.StatusNoContent {
		t.Fatalf("remove on A: %d", code)
	}
	if _, body := b.do(t, "POST", "/mcp", master, callGone); !strings.Contains(body, "Unknown tool: gone__ping") {
		t.Errorf("gone__ping on B after its removal on A, Redis down: %s; want Unknown tool, not called", body)
	}
	if _, body := b.do(t, "POST", "/mcp", master, listBody); strings.Contains(body, "gone__") || !strings.Contains(body, "calc__add") {
		t.Errorf("tools/list on B after the removal on A: %s", body)
	}
	if code, _ := a.do(t, "DELETE", "/admin/v1/keys/doomed", master, ""); code != http.StatusNoContent {
		t.Fatalf("revoke on A: %d", code)
	}
	if code, body := b.do(t, "POST", "/mcp", secret, listBody); code != http.StatusUnauthorized {
		t.Errorf("the key revoked on A, on B with Redis down: %d %s; want 401 at once", code, body)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !b.gw.BusHeard().Trusted() {
		if time.Now().After(deadline) {
			t.Fatal("B does not follow the bus again 5s after Redis came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
