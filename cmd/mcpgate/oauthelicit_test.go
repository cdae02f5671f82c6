package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
)

// keyHeader sends a gateway key in X-Mcpgate-Api-Key.
type keyHeader struct {
	key  string
	base http.RoundTripper
}

func (k keyHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Mcpgate-Api-Key", k.key)
	return k.base.RoundTrip(r)
}

// elicited is one URL elicitation a client received.
type elicited struct {
	url, id, message string
}

// urlClient connects a go-sdk client as key to endpoint, declaring URL
// mode elicitation: each elicitation/create is handed to the test on
// asks, and answered accept; completions arrive on completed.
func urlClient(t *testing.T, endpoint, key, version string, asks chan<- elicited, completed chan<- string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "elicit-test", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asks <- elicited{url: req.Params.URL, id: req.Params.ElicitationID, message: req.Params.Message}
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
		ElicitationCompleteHandler: func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
			completed <- req.Params.ElicitationID
		},
	})
	tr := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: keyHeader{key, http.DefaultTransport}}}
	cs, err := c.Connect(t.Context(), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// During a session, a person who has not connected their account is asked
// with a URL elicitation; the link first makes the browser prove it is
// that person (a link opened with somebody else's key connects nothing),
// then runs the connect; the call goes on once the tokens are stored. A
// 403 insufficient_scope is the same, asking for the wider scopes. A
// client that cannot be asked gets 401 before its session (S9.1), with the
// connect link as authorization_uri.
func TestOAuth2UserURLElicitation(t *testing.T) {
	clearAdminEnv(t)
	// 2025-11-25: asked on the session; 2026-07-28 (go-sdk's default):
	// asked with an input_required round of the call.
	for _, version := range []string{"2025-11-25", ""} {
		name := version
		if name == "" {
			name = "2026-07-28"
		}
		t.Run(name, func(t *testing.T) { testURLElicitation(t, version, false) })
	}
}

// The same journey on a fleet: two replicas on one PostgreSQL store and
// one Redis, behind a balancer that sends every request to the other
// replica. The elicitation's answer, the link's confirmation, the
// redirect and the callback each land elsewhere than the step before, and
// the call waiting on one replica goes on when the other stores the
// tokens.
func TestOAuth2UserURLElicitationFleet(t *testing.T) {
	clearAdminEnv(t)
	for _, version := range []string{"2025-11-25", ""} {
		name := version
		if name == "" {
			name = "2026-07-28"
		}
		t.Run(name, func(t *testing.T) { testURLElicitation(t, version, true) })
	}
}

// roundRobin serves each request with the next of handlers in turn.
func roundRobin(handlers ...http.Handler) http.Handler {
	var n atomic.Uint64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers[(n.Add(1)-1)%uint64(len(handlers))].ServeHTTP(w, r)
	})
}

func testURLElicitation(t *testing.T, version string, fleet bool) {
	up := newOAuthUpstream(t, time.Hour)
	const (
		aliceKey = "alice-gateway-key-0123456789"
		bobKey   = "bob-gateway-key-0123456789"
	)
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__",
		Auth:  &config.CallerAuth{Keys: []config.KeyConfig{{Alias: "alice", Key: aliceKey}, {Alias: "bob", Key: bobKey}}},
		Vault: &config.Vault{Keys: []config.VaultKey{{ID: "k1", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}}},
		Servers: map[string]*config.Server{
			"up": {Name: "up", Transport: config.TransportHTTP, URL: up.mcp, Timeout: 5 * time.Second, ProtocolVersion: "2025-06-18", Auth: &config.Auth{Type: config.AuthOAuth2User}},
		}}
	// The balancer's URL is every replica's public_url: a link made on
	// one is opened through the balancer.
	hs := httptest.NewUnstartedServer(nil)
	cfg.PublicURL = "http://" + hs.Listener.Addr().String()
	if fleet {
		cfg.Store = config.Store{Driver: config.StorePostgres, DSN: pgtest.DSN(t)}
		cfg.State = config.State{Driver: config.StateRedis, URL: redistest.New(t).URL()}
		cfg.Fleet = &config.Fleet{SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))}}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var replicas []http.Handler
	for i := range 1 + btoi(fleet) {
		c := *cfg
		c.DataDir = filepath.Join(cfg.DataDir, strconv.Itoa(i))
		// Each replica is also reachable on its own, for the others.
		own := httptest.NewUnstartedServer(nil)
		if fleet {
			f := *cfg.Fleet
			f.Advertise = "http://" + own.Listener.Addr().String()
			c.Fleet = &f
		}
		log := slog.New(slog.DiscardHandler)
		if fleet {
			// Each replica's debug log, shown if the test fails: which
			// replica did what is the question then.
			buf := &lockedBuffer{}
			log = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", i)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("replica %d log:\n%s", i, buf.String())
				}
			})
		}
		stk, err := build(context.Background(), &c, log, c.Listen)
		if err != nil {
			t.Fatal(err)
		}
		stk.gw.Start(context.Background()) // heartbeats, followers
		t.Cleanup(func() { stk.close(context.Background()) })
		own.Config.Handler = stk.handler
		own.Start()
		t.Cleanup(own.Close)
		replicas = append(replicas, stk.handler)
	}
	hs.Config.Handler = roundRobin(replicas...)
	hs.Start()
	t.Cleanup(hs.Close) // after the clients' cleanups: their streams end first
	callback := hs.URL + "/oauth/connect/callback"
	connectLink := hs.URL + "/oauth/connect/up"

	// S9.1: bob's client declares no URL elicitation: 401 before a session.
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/mcp/up", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Mcpgate-Api-Key", bobKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ch := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(ch, `authorization_uri="`+connectLink+`"`) {
		t.Errorf("initialize without a connection: %d %q", resp.StatusCode, ch)
	}
	if resp.Header.Get("Mcp-Session-Id") != "" {
		t.Error("a session was started for the refused initialize")
	}
	// On a merged route the other servers keep serving: no challenge.
	req, _ = http.NewRequest(http.MethodPost, hs.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Mcpgate-Api-Key", bobKey)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Errorf("initialize on the merged route without a connection: %d", resp.StatusCode)
	}

	asks := make(chan elicited, 4)
	completed := make(chan string, 4)
	cs := urlClient(t, hs.URL+"/mcp/up", aliceKey, version, asks, completed)
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	call := func(name string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
			ch <- result{res, err}
		}()
		return ch
	}
	text := func(r result) string {
		if r.err != nil {
			return "error: " + r.err.Error()
		}
		var b strings.Builder
		for _, c := range r.res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	var pending <-chan result
	nextAsk := func() elicited {
		t.Helper()
		select {
		case a := <-asks:
			return a
		case r := <-pending:
			t.Fatalf("no URL elicitation; the call: %s", text(r))
		case <-time.After(10 * time.Second):
			t.Fatal("no URL elicitation")
		}
		return elicited{}
	}

	// alice's first call: a URL elicitation for the connect link.
	pending = call("whoami")
	ask := nextAsk()
	link, err := url.Parse(ask.url)
	if err != nil || !strings.HasPrefix(ask.url, connectLink+"?elicitation=") || ask.id == "" || link.Query().Get("elicitation") != ask.id {
		t.Fatalf("elicitation %+v", ask)
	}
	for _, secret := range []string{aliceKey, bobKey} {
		if strings.Contains(ask.url+ask.message, secret) {
			t.Fatal("the elicitation carries a key")
		}
	}

	// bob opens alice's link with his own key: refused, nothing connected.
	bob := newTestBrowser(t, callback)
	page := bob.Get(ask.url)
	if page.Status != http.StatusOK || !strings.Contains(page.Body, `name="key"`) {
		t.Fatalf("the link's confirmation page: %d %s", page.Status, page.Body)
	}
	if p := bob.Submit(hs.URL, page, `name="key"`, url.Values{"key": {bobKey}}); p.Status != http.StatusForbidden {
		t.Errorf("alice's link confirmed with bob's key: %d %s", p.Status, p.Body)
	}
	if p := bob.Submit(hs.URL, bob.Get(ask.url), `name="key"`, url.Values{"key": {"not-a-key"}}); p.Status != http.StatusUnauthorized {
		t.Errorf("alice's link confirmed with no key: %d", p.Status)
	}
	// A form without its CSRF cookie is refused.
	if p := newTestBrowser(t, callback).Submit(hs.URL, page, `name="key"`, url.Values{"key": {aliceKey}}); p.Status != http.StatusForbidden {
		t.Errorf("the form posted from another browser: %d", p.Status)
	}

	// alice confirms with her key and connects.
	alice := newTestBrowser(t, callback)
	alice.StopAt = up.base
	p := alice.Submit(hs.URL, alice.Get(ask.url), `name="key"`, url.Values{"key": {aliceKey}})
	alice.StopAt = callback
	cb := alice.authorize(up, p)
	if p := alice.get(cb.String(), ""); p.Status != http.StatusOK {
		t.Fatalf("callback: %d %s", p.Status, p.Body)
	}
	select {
	case r := <-pending:
		if got := text(r); !strings.Contains(got, "ada-upstream tool=whoami") {
			t.Fatalf("alice's call after connecting: %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not go on after the connect")
	}
	if version != "" {
		// A session hears the news; a 2026-07-28 call has none to hear
		// it on (its retry's answer is the news).
		select {
		case id := <-completed:
			if id != ask.id {
				t.Errorf("elicitation/complete for %q, want %q", id, ask.id)
			}
		case <-time.After(5 * time.Second):
			t.Error("no notifications/elicitation/complete")
		}
	}
	// The link is single use.
	if p := newTestBrowser(t, callback).Get(ask.url); p.Status != http.StatusBadRequest {
		t.Errorf("a used link: %d", p.Status)
	}

	// Step-up: admin_op needs the admin scope; the 403 insufficient_scope
	// becomes a second elicitation asking for "mcp admin".
	pending = call("admin_op")
	ask = nextAsk()
	if !strings.Contains(ask.message, "admin") {
		t.Errorf("the step-up elicitation does not say what it asks for: %q", ask.message)
	}
	alice.StopAt = up.base
	p = alice.Submit(hs.URL, alice.Get(ask.url), `name="key"`, url.Values{"key": {aliceKey}})
	alice.StopAt = callback
	if p.Location == nil || !slices.Contains(strings.Fields(p.Location.Query().Get("scope")), "admin") {
		t.Fatalf("the step-up authorization request: %v", p.Location)
	}
	cb = alice.authorize(up, p)
	if p := alice.get(cb.String(), ""); p.Status != http.StatusOK {
		t.Fatalf("step-up callback: %d %s", p.Status, p.Body)
	}
	select {
	case r := <-pending:
		if got := text(r); !strings.Contains(got, "tool=admin_op") {
			t.Fatalf("admin_op after the step-up: %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not go on after the step-up")
	}

	// A declined elicitation: the call fails with the connect link.
	asks2 := make(chan elicited, 1)
	c2 := mcp.NewClient(&mcp.Implementation{Name: "decliner", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asks2 <- elicited{url: req.Params.URL}
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	bs, err := c2.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp/up", HTTPClient: &http.Client{Transport: keyHeader{bobKey, http.DefaultTransport}}}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	_, err = bs.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err == nil || !strings.Contains(err.Error(), "connect your account for up at "+connectLink) {
		t.Errorf("bob declined: %v", err)
	}
	if len(asks2) != 1 {
		t.Errorf("bob's client was asked %d times", len(asks2))
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lockedBuffer is a bytes.Buffer several goroutines write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
