package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/redis"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/postgres"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// TestMain stops the throwaway PostgreSQL server if a test started one.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// propagation bounds how long an admin change may take to reach another
// replica (issue 14 §3).
const propagation = time.Second

// replica is one gateway of a fleet with its own admin API, authenticator
// and store connection, behind its own listener.
type replica struct {
	*rig
	api   *API
	vault *vault.Vault
	// keyChanged has each alias the API told the authenticator about,
	// here or from another replica's announcement (waitKeyChanged).
	keyChanged chan string
	metrics    *metrics.Metrics
}

// unconfirmed is r's mcpgate_fleet_unconfirmed_total of kind.
func (r *replica) unconfirmed(t *testing.T, kind string) float64 {
	t.Helper()
	fams, err := r.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "mcpgate_fleet_unconfirmed_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// waitKeyChanged waits, 5s at most, until r's API told its authenticator
// that alias changed.
func (r *replica) waitKeyChanged(t *testing.T, alias string) {
	t.Helper()
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case a := <-r.keyChanged:
			if a == alias {
				return
			}
		case <-timeout.C:
			t.Fatalf("key %q not changed on this replica within 5s", alias)
		}
	}
}

// fleetRig starts n replicas on one store (each opens its own) and one
// bus, each with the config file's server calc.
func fleetRig(t *testing.T, n int, open func(t *testing.T) store.Store, bus state.PubSub) []*replica {
	return fleetRigWith(t, n, open, bus, rigOptions{})
}

// rigOptions make fleetRigWith's replicas more like cmd/mcpgate's.
type rigOptions struct {
	// sessions: sealed session ids (fleet.session_keys) and bus as the
	// shared state (it must then be a state.Backend).
	sessions bool
	// probe: the bus's backend is probed for readiness (it must then be
	// a gateway.StateChecker), as the redis driver's is.
	probe bool
}

// fleetRigWith is fleetRig with o.
func fleetRigWith(t *testing.T, n int, open func(t *testing.T) store.Store, bus state.PubSub, o rigOptions) []*replica {
	t.Helper()
	calc := toolUpstream(t, "add", "sub")
	out := make([]*replica, n)
	for i := range out {
		cfg := &config.Config{
			Listen: "127.0.0.1:0", ToolNameSeparator: "__",
			Servers: map[string]*config.Server{"calc": {Name: "calc", Transport: config.TransportHTTP, URL: calc, Timeout: 5 * time.Second}},
			Auth:    &config.CallerAuth{MasterKey: master},
		}
		m := metrics.New()
		gopts := gateway.Options{Config: cfg, Metrics: m}
		if o.sessions || o.probe {
			gopts.Bus = bus // the gateway's own followers
		}
		if o.sessions {
			cfg.Fleet = &config.Fleet{SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}}
			gopts.State = bus.(state.Backend)
		}
		if o.probe {
			gopts.StateHealth = bus.(gateway.StateChecker)
		}
		st := open(t)
		auth := callers.New(callers.Options{Keys: st, MasterKey: master})
		vlt, err := vault.New(st, []config.VaultKey{{ID: "k1", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		gopts.Authenticator, gopts.Terminations, gopts.Vault = auth, st, vlt
		g := gateway.New(gopts)
		// As cmd/mcpgate wires it.
		auth.SetFresh(func() bool { return !g.BusHeard().Trusted() })
		keyChanged := make(chan string, 64)
		invalidate := func(alias string) {
			auth.Invalidate(alias)
			select {
			case keyChanged <- alias:
			default: // no test is waiting for so many
			}
		}
		api := New(Options{Gateway: g, Store: st, Config: cfg, Authenticate: auth.Authenticate, KeyChanged: invalidate, KeysFlushed: auth.Flush,
			Grants: callers.NewGrantSet(nil), Bus: bus, Vault: vlt, Servers: g.ServerNames, Toolsets: g.ToolsetNames, Metrics: m})
		if err := api.SyncServers(context.Background()); err != nil {
			t.Fatal(err)
		}
		api.Start()
		if o.probe || o.sessions {
			g.Start(context.Background()) // the probe, the followers
		}
		ts := httptest.NewServer(mounted(g, api))
		t.Cleanup(func() {
			ts.CloseClientConnections()
			ts.Close()
			api.Close()
			g.Close(context.Background())
			auth.Close()
			st.Close()
		})
		out[i] = &replica{rig: &rig{url: ts.URL, store: st, gw: g}, api: api, vault: vlt, keyChanged: keyChanged, metrics: m}
	}
	return out
}

// postgresStores opens the replicas' stores on one new PostgreSQL
// database.
func postgresStores(t *testing.T) func(*testing.T) store.Store {
	dsn := pgtest.DSN(t)
	return func(t *testing.T) store.Store {
		st, err := postgres.Open(context.Background(), dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
}

// sqliteStores opens the replicas' stores on one SQLite database.
func sqliteStores(t *testing.T) func(*testing.T) store.Store {
	dir := t.TempDir()
	return func(t *testing.T) store.Store {
		st, err := sqlite.Open(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
}

// redisBus opens a client of srv, closed at the end of t (after the
// replicas: cleanups run last in, first out).
func redisBus(t *testing.T, srv *redistest.Server) *redis.Backend {
	t.Helper()
	b, err := redis.Open(redis.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// within polls cond until it holds, failing t propagation after the
// change, and logs how long it took.
func within(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	return withinSince(t, time.Now(), what, cond)
}

// withinSince is within for a change made at start.
func withinSince(t *testing.T, start time.Time, what string, cond func() bool) time.Duration {
	t.Helper()
	for !cond() {
		if time.Since(start) > propagation {
			t.Fatalf("%s: not within %s", what, propagation)
		}
		time.Sleep(2 * time.Millisecond)
	}
	d := time.Since(start)
	t.Logf("%s: %s", what, d.Round(100*time.Microsecond))
	return d
}

const listBody = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`

// appliedNow fails unless cond holds at once: a change is answered only
// once every replica that heard it applied it (announce.go), so nothing
// is waited for.
func appliedNow(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !cond() {
		t.Errorf("%s: not so when the change was answered", what)
	}
}

// S15, issue 14 §3: admin changes made on one replica apply on the others
// before they are answered, on PostgreSQL and Redis, as in production.
func TestFleetAdminChangesPostgresRedis(t *testing.T) {
	bus := redisBus(t, redistest.New(t))
	testFleetAdminChanges(t, fleetRig(t, 2, postgresStores(t), bus))
}

// The same on the memory bus, as replicas in one process share it.
func TestFleetAdminChangesMemory(t *testing.T) {
	mem := memBus(t)
	testFleetAdminChanges(t, fleetRig(t, 2, sqliteStores(t), mem))
}

func testFleetAdminChanges(t *testing.T, rs []*replica) {
	a, b := rs[0], rs[1]
	waitFollowing(t, rs)

	t.Run("key revoke", func(t *testing.T) {
		secret := a.createKey(t, `{"alias":"doomed","user":"alice"}`)
		// B caches the key on first use, for longer than a second
		// (callers.DefaultCacheTTL): only the announcement can make it
		// forget in time.
		if code, _ := b.do(t, "POST", "/mcp", secret, listBody); code != 200 {
			t.Fatalf("the new key on B: %d", code)
		}
		stream := openStream(t, b.url, secret)
		revoked := time.Now()
		if code, _ := a.do(t, "DELETE", "/admin/v1/keys/doomed", master, ""); code != http.StatusNoContent {
			t.Fatalf("revoke on A: %d", code)
		}
		appliedNow(t, "key revoked on A refused on B", func() bool {
			code, _ := b.do(t, "POST", "/mcp", secret, listBody)
			return code == http.StatusUnauthorized
		})
		withinSince(t, revoked, "revoked key's GET stream on B ended", func() bool {
			select {
			case <-stream:
				return true
			default:
				return false
			}
		})
	})

	t.Run("key patch", func(t *testing.T) {
		secret := a.createKey(t, `{"alias":"narrow","servers":["calc"]}`)
		if _, body := b.do(t, "POST", "/mcp", secret, listBody); !strings.Contains(body, "calc__add") {
			t.Fatalf("before: %s", body)
		}
		if code, _ := a.do(t, "PATCH", "/admin/v1/keys/narrow", master, `{"deny_tools":{"calc":["add"]}}`); code != 200 {
			t.Fatalf("patch on A: %d", code)
		}
		appliedNow(t, "key patched on A applies on B", func() bool {
			_, body := b.do(t, "POST", "/mcp", secret, listBody)
			return strings.Contains(body, "calc__sub") && !strings.Contains(body, "calc__add")
		})
	})

	url := toolUpstream(t, "ping")
	t.Run("server add", func(t *testing.T) {
		if code, body := b.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+url+`","timeout":"5s"}`); code != http.StatusCreated {
			t.Fatalf("add on B: %d %s", code, body)
		}
		appliedNow(t, "server added on B listed by tools/list on A", func() bool {
			_, body := a.do(t, "POST", "/mcp", master, listBody)
			return strings.Contains(body, `"extra__ping"`)
		})
	})

	t.Run("server replace", func(t *testing.T) {
		other := toolUpstream(t, "pong")
		if code, body := a.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+other+`","timeout":"5s"}`); code != http.StatusCreated {
			t.Fatalf("replace on A: %d %s", code, body)
		}
		appliedNow(t, "server replaced on A served anew on B", func() bool {
			_, body := b.do(t, "POST", "/mcp", master, listBody)
			return strings.Contains(body, `"extra__pong"`) && !strings.Contains(body, `"extra__ping"`)
		})
	})

	t.Run("server remove", func(t *testing.T) {
		if code, body := a.do(t, "DELETE", "/admin/v1/servers/extra", master, ""); code != http.StatusNoContent {
			t.Fatalf("remove on A: %d %s", code, body)
		}
		appliedNow(t, "server removed on A gone from B", func() bool {
			_, body := b.do(t, "POST", "/mcp", master, listBody)
			return !strings.Contains(body, `extra__`) && strings.Contains(body, `calc__add`)
		})
	})

	t.Run("toolset put, change and delete", func(t *testing.T) {
		if code, body := a.do(t, "PUT", "/admin/v1/toolsets/math", master, `{"servers":{"calc":["add"]}}`); code != 200 {
			t.Fatalf("put on A: %d %s", code, body)
		}
		appliedNow(t, "toolset put on A served on B", func() bool {
			_, body := b.do(t, "POST", "/toolset/math/mcp", master, listBody)
			return strings.Contains(body, `add"`) && !strings.Contains(body, `sub"`)
		})
		if code, body := a.do(t, "PUT", "/admin/v1/toolsets/math", master, `{"servers":{"calc":["sub"]}}`); code != 200 {
			t.Fatalf("change on A: %d %s", code, body)
		}
		appliedNow(t, "toolset changed on A applies on B", func() bool {
			_, body := b.do(t, "POST", "/toolset/math/mcp", master, listBody)
			return strings.Contains(body, `sub"`) && !strings.Contains(body, `add"`)
		})
		if code, body := a.do(t, "DELETE", "/admin/v1/toolsets/math", master, ""); code != http.StatusNoContent {
			t.Fatalf("delete on A: %d %s", code, body)
		}
		appliedNow(t, "toolset deleted on A gone from B", func() bool {
			code, _ := b.do(t, "POST", "/toolset/math/mcp", master, listBody)
			return code == http.StatusNotFound
		})
	})

	t.Run("connection revoke", func(t *testing.T) {
		ctx := context.Background()
		e := vault.Entry{Person: "key:alice", Server: "calc", Kind: vault.KindStatic, AccessToken: "alice-calc-token"}
		if err := a.vault.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
		// B serves the entry from its cache for longer than a second.
		if _, err := b.vault.Get(ctx, e.Person, e.Server); err != nil {
			t.Fatal(err)
		}
		if code, body := a.do(t, "DELETE", "/admin/v1/connections/key:alice/calc", master, ""); code != http.StatusNoContent {
			t.Fatalf("revoke on A: %d %s", code, body)
		}
		appliedNow(t, "connection revoked on A no longer served on B", func() bool {
			_, err := b.vault.Get(ctx, e.Person, e.Server)
			return errors.Is(err, vault.ErrNotFound)
		})
	})

	t.Run("grant put and delete", func(t *testing.T) {
		if code, body := a.do(t, "PUT", "/admin/v1/grants/team/ops", master, `{"servers":["calc"]}`); code != 200 {
			t.Fatalf("put on A: %d %s", code, body)
		}
		appliedNow(t, "grant put on A applies on B", func() bool {
			_, body := b.do(t, "GET", "/admin/v1/grants", master, "")
			return strings.Contains(body, `"value":"ops"`)
		})
		if code, _ := a.do(t, "DELETE", "/admin/v1/grants/team/ops", master, ""); code != http.StatusNoContent {
			t.Fatalf("delete on A: %d", code)
		}
		appliedNow(t, "grant deleted on A gone from B", func() bool {
			_, body := b.do(t, "GET", "/admin/v1/grants", master, "")
			return !strings.Contains(body, `"value":"ops"`)
		})
	})
}

// After its subscription was lost (Redis restarted, empty), a replica
// resynchronises from the store: changes made while it could not hear
// them apply once it follows again.
func TestFleetAdminResyncAfterRedisRestart(t *testing.T) {
	srv := redistest.New(t)
	rs := fleetRig(t, 2, postgresStores(t), redisBus(t, srv))
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

	srv.Stop()
	// Committed while nobody hears: the announcements fail (logged).
	if code, _ := a.do(t, "DELETE", "/admin/v1/keys/doomed", master, ""); code != http.StatusNoContent {
		t.Fatalf("revoke on A: %d", code)
	}
	if code, _ := a.do(t, "DELETE", "/admin/v1/servers/gone", master, ""); code != http.StatusNoContent {
		t.Fatalf("remove on A: %d", code)
	}
	if code, body := a.do(t, "POST", "/admin/v1/servers", master, `{"name":"fresh","transport":"http","url":"`+url+`","timeout":"5s"}`); code != http.StatusCreated {
		t.Fatalf("add on A: %d %s", code, body)
	}
	if code, _ := a.do(t, "PUT", "/admin/v1/grants/role/ops", master, `{"servers":["calc"]}`); code != 200 {
		t.Fatalf("grant on A: %d", code)
	}
	if code, body := a.do(t, "PUT", "/admin/v1/toolsets/pings", master, `{"servers":{"fresh":["ping"]}}`); code != 200 {
		t.Fatalf("toolset on A: %d %s", code, body)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// The follower subscribes again within its retry pause, then
	// resyncs.
	deadline := restarted.Add(state.DefaultFollowRetry + 2*propagation)
	for {
		code, _ := b.do(t, "POST", "/mcp", secret, listBody)
		_, tools := b.do(t, "POST", "/mcp", master, listBody)
		_, grants := b.do(t, "GET", "/admin/v1/grants", master, "")
		_, toolset := b.do(t, "POST", "/toolset/pings/mcp", master, listBody)
		if code == http.StatusUnauthorized && !strings.Contains(tools, "gone__") && strings.Contains(tools, `"fresh__ping"`) &&
			strings.Contains(grants, `"value":"ops"`) && strings.Contains(toolset, `ping"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B not resynchronised %s after Redis came back: key %d, tools %s, grants %s, toolset %s", time.Since(restarted), code, tools, grants, toolset)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("resynchronised %s after Redis came back", time.Since(restarted).Round(time.Millisecond))
}

// A Lost marker (messages dropped in a gap) makes the follower resync:
// what it missed applies, though no message named it.
func TestFleetAdminResyncOnLost(t *testing.T) {
	mem := memBus(t)
	gap := &gapBus{PubSub: mem, lost: make(chan struct{}, 1)}
	rs := fleetRig(t, 2, sqliteStores(t), gap)
	a, b := rs[0], rs[1]
	waitFollowing(t, rs)
	secret := a.createKey(t, `{"alias":"doomed"}`)
	// B handles the creation's announcement first: handled after B's
	// lookup below, it would empty B's cache and B would see the
	// revocation in the store, not through the bus (seen once).
	b.waitKeyChanged(t, "doomed")
	if code, _ := b.do(t, "POST", "/mcp", secret, listBody); code != 200 {
		t.Fatalf("the new key on B: %d", code)
	}
	gap.drop(true)
	if code, _ := a.do(t, "DELETE", "/admin/v1/keys/doomed", master, ""); code != http.StatusNoContent {
		t.Fatalf("revoke on A: %d", code)
	}
	url := toolUpstream(t, "ping")
	if code, body := a.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+url+`","timeout":"5s"}`); code != http.StatusCreated {
		t.Fatalf("add on A: %d %s", code, body)
	}
	// Both announcements reached every follower's subscription and were
	// lost there (waited for, not slept on).
	gap.waitDropped(t, 2)
	if code, _ := b.do(t, "POST", "/mcp", secret, listBody); code != 200 {
		t.Fatalf("B heard of the revocation through a gap (the test proves nothing): %d", code)
	}
	gap.drop(false)
	within(t, "missed changes applied after Lost", func() bool {
		code, _ := b.do(t, "POST", "/mcp", secret, listBody)
		_, tools := b.do(t, "POST", "/mcp", master, listBody)
		return code == http.StatusUnauthorized && strings.Contains(tools, `"extra__ping"`)
	})
}

// A replica ignores unreadable announcements and those of unknown kinds,
// and keeps following.
func TestFleetAdminBadAnnouncements(t *testing.T) {
	mem := memBus(t)
	rs := fleetRig(t, 2, sqliteStores(t), mem)
	waitFollowing(t, rs)
	for _, m := range []string{`not json`, `{"kind":"key"}`, `{"kind":"comet","name":"x","from":"elsewhere"}`} {
		if _, err := mem.Publish(context.Background(), TopicChanges, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	secret := rs[0].createKey(t, `{"alias":"k"}`)
	if code, _ := rs[1].do(t, "POST", "/mcp", secret, listBody); code != 200 {
		t.Fatalf("key on B: %d", code)
	}
	if code, _ := rs[0].do(t, "DELETE", "/admin/v1/keys/k", master, ""); code != http.StatusNoContent {
		t.Fatal("revoke")
	}
	within(t, "revocation after bad announcements", func() bool {
		code, _ := rs[1].do(t, "POST", "/mcp", secret, listBody)
		return code == http.StatusUnauthorized
	})
}

// waitFollowing waits until every replica's follower subscribed: a change
// announced before would be applied only by its first resync.
func waitFollowing(t *testing.T, rs []*replica) {
	t.Helper()
	apis := make([]*API, len(rs))
	for i, r := range rs {
		apis[i] = r.api
	}
	waitFollowed(t, apis...)
}

// waitFollowed waits, 5s at most, until each API's follower subscribed
// and resynced.
func waitFollowed(t *testing.T, apis ...*API) {
	t.Helper()
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for _, a := range apis {
		select {
		case <-a.followed():
		case <-timeout.C:
			t.Fatal("a follower did not subscribe")
		}
	}
}

// openStream opens a session's GET stream on url with secret; the channel
// is closed when the stream ends.
func openStream(t *testing.T, url, secret string) <-chan struct{} {
	t.Helper()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(init))
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
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, url+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set(callers.HeaderAPIKey, secret)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET stream: %v %+v", err, resp)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				return
			}
		}
	}()
	return ended
}

// gapBus is a PubSub that can lose messages: while dropping, nothing
// reaches its subscribers; when it stops, they get a Lost marker, as
// after a backend reconnect.
type gapBus struct {
	state.PubSub
	mu       sync.Mutex // guards the fields below and each gapSub's
	dropping bool
	subs     []*gapSub
	// lost has a value after a message was dropped (waitDropped).
	lost chan struct{}
}

type gapSub struct {
	inner   state.Subscription
	c       chan state.Message
	closed  bool // c is closed
	dropped int  // messages dropped while the bus was dropping
}

func (b *gapBus) Subscribe(ctx context.Context, topics ...string) (state.Subscription, error) {
	inner, err := b.PubSub.Subscribe(ctx, topics...)
	if err != nil {
		return nil, err
	}
	s := &gapSub{inner: inner, c: make(chan state.Message, state.SubscriptionBuffer)}
	b.mu.Lock()
	b.subs = append(b.subs, s)
	b.mu.Unlock()
	go func() {
		for m := range inner.C() {
			b.mu.Lock()
			if !b.dropping {
				select {
				case s.c <- m:
				default: // a reader this far behind has lost messages anyway
				}
			} else {
				s.dropped++
				select {
				case b.lost <- struct{}{}:
				default: // the waiter has yet to look
				}
			}
			b.mu.Unlock()
		}
		b.mu.Lock()
		s.closed = true
		close(s.c)
		b.mu.Unlock()
	}()
	return s, nil
}

func (b *gapBus) drop(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropping = on
	if !on {
		for _, s := range b.subs {
			if !s.closed {
				s.c <- state.Message{Lost: true}
			}
		}
	}
}

// waitDropped waits, 5s at most, until every subscriber lost n messages.
func (b *gapBus) waitDropped(t *testing.T, n int) {
	t.Helper()
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for {
		b.mu.Lock()
		done := len(b.subs) > 0
		for _, s := range b.subs {
			done = done && s.dropped >= n
		}
		b.mu.Unlock()
		if done {
			return
		}
		select {
		case <-b.lost:
		case <-timeout.C:
			t.Fatalf("the subscribers did not each lose %d messages", n)
		}
	}
}

func (s *gapSub) C() <-chan state.Message { return s.c }
func (s *gapSub) Close() error            { return s.inner.Close() }

var _ state.PubSub = (*gapBus)(nil)

// The follower is gone when Close returns, and Close without Start (no
// bus) is a no-op.
func TestFollowerEndsWithClose(t *testing.T) {
	mem := memBus(t)
	st, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := &config.Config{Listen: "127.0.0.1:0", ToolNameSeparator: "__"}
	g := gateway.New(gateway.Options{Config: cfg})
	defer g.Close(context.Background())
	New(Options{Gateway: g, Store: st, Config: cfg}).Close()
	api := New(Options{Gateway: g, Store: st, Config: cfg, Bus: mem})
	api.Start()
	waitFollowing(t, []*replica{{api: api}})
	api.Close()
	// Close waits for the follower; its goroutine may still be on its
	// way out (past the WaitGroup's Done) for a moment, as goleak
	// allows too, so it is looked for a few times.
	buf := make([]byte, 1<<20)
	var stacks string
	for range 50 {
		if stacks = string(buf[:runtime.Stack(buf, true)]); !strings.Contains(stacks, "admin.(*API).Start") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the follower outlived Close:\n%s", stacks)
}

// An admin change some replica did not confirm in time is said so to
// whoever made it, not only to the log and the metric: its answer
// carries HeaderUnconfirmed and its audit record "unconfirmed". A
// confirmed change carries neither. A revoked connection, announced from
// inside the vault, is counted on the request that revoked it.
func TestUnconfirmedAdminChangeIsAnswered(t *testing.T) {
	mem := memBus(t)
	rs := fleetRig(t, 2, sqliteStores(t), mem)
	a := rs[0]
	waitFollowing(t, rs)
	a.createKey(t, `{"alias":"first"}`)
	a.createKey(t, `{"alias":"second"}`)
	ctx := context.Background()
	e := vault.Entry{Person: "key:alice", Server: "calc", Kind: vault.KindStatic, AccessToken: "alice-calc-token"}
	if err := a.vault.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	revokeAudit := func(alias string) string {
		t.Helper()
		_, events := a.do(t, "GET", "/admin/v1/audit/events?action=key.revoke", master, "")
		var page struct {
			Events []store.AuditEntry `json:"events"`
		}
		if err := json.Unmarshal([]byte(events), &page); err != nil {
			t.Fatalf("audit events: %v: %s", err, events)
		}
		for _, ev := range page.Events {
			if ev.Target == alias {
				return string(ev.Detail)
			}
		}
		t.Fatalf("no audit record of revoking %q: %s", alias, events)
		return ""
	}

	code, body, h := a.doH(t, "DELETE", "/admin/v1/keys/first", master, "")
	if code != http.StatusNoContent || h.Get(HeaderUnconfirmed) != "" {
		t.Errorf("revoke first, every replica confirming: %d %s, %s %q; want 204 without it", code, body, HeaderUnconfirmed, h.Get(HeaderUnconfirmed))
	}
	if d := revokeAudit("first"); strings.Contains(d, "unconfirmed") {
		t.Errorf("the confirmed revocation's audit record says unconfirmed: %s", d)
	}

	// A replica that hears changes and never confirms them.
	subscribeSilently(t, mem, TopicChanges)
	code, body, h = a.doH(t, "DELETE", "/admin/v1/keys/second", master, "")
	if code != http.StatusNoContent || h.Get(HeaderUnconfirmed) != "1" {
		t.Errorf("revoke second with a silent replica: %d %s, %s %q; want 204 with 1", code, body, HeaderUnconfirmed, h.Get(HeaderUnconfirmed))
	}
	if d := revokeAudit("second"); !strings.Contains(d, `"unconfirmed":1`) {
		t.Errorf("the audit record of the unconfirmed revocation does not say so: %s", d)
	}
	code, body, h = a.doH(t, "DELETE", "/admin/v1/connections/key:alice/calc", master, "")
	if code != http.StatusNoContent || h.Get(HeaderUnconfirmed) != "1" {
		t.Errorf("revoke alice's connection with a silent replica: %d %s, %s %q; want 204 with 1", code, body, HeaderUnconfirmed, h.Get(HeaderUnconfirmed))
	}
	if n := a.unconfirmed(t, metrics.UnconfirmedAdminChange); n != 2 {
		t.Errorf("mcpgate_fleet_unconfirmed_total{kind=admin_change} = %v, want 2", n)
	}
}

// memBus is a memory bus for a fleet of replicas in one process, closed
// when the test ends.
func memBus(t *testing.T) *state.Memory {
	t.Helper()
	mem := state.NewMemory(state.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	return mem
}

// subscribeSilently subscribes to topic on bus until the test ends,
// reading nothing: a replica that hears what is published there and
// never confirms it (stuck, or of a version before confirmations).
func subscribeSilently(t *testing.T, bus state.PubSub, topic string) {
	t.Helper()
	sub, err := bus.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
}

// A vault write (a new credential, a refresh, a last-use stamp: on the
// call path, under the entry's lock) is told without waiting for the
// other replicas; a deletion (a revocation) waits for them. A replica
// that hears and never confirms shows the difference: the write returns
// at once, the revocation after busTimeout.
func TestVaultWritesDoNotWait(t *testing.T) {
	mem := memBus(t)
	rs := fleetRig(t, 2, sqliteStores(t), mem)
	a := rs[0]
	waitFollowing(t, rs)
	subscribeSilently(t, mem, TopicChanges)
	ctx := context.Background()
	e := vault.Entry{Person: "key:alice", Server: "calc", Kind: vault.KindStatic, AccessToken: "alice-calc-token"}
	begin := time.Now()
	if err := a.vault.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d >= busTimeout/2 {
		t.Errorf("a vault write took %s with a silent replica: it waited for confirmations", d)
	}
	begin = time.Now()
	if err := a.vault.Delete(ctx, e.Person, e.Server); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < busTimeout {
		t.Errorf("a vault deletion took %s with a silent replica: it did not wait for confirmations", d)
	}
	// The operator sees the one change that was not confirmed.
	if n := a.unconfirmed(t, metrics.UnconfirmedAdminChange); n != 1 {
		t.Errorf("mcpgate_fleet_unconfirmed_total{kind=admin_change} = %v, want 1 (the deletion)", n)
	}
}
