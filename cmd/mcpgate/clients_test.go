package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Issue 24 §2: a call that asked the person to connect through a URL
// elicitation ends at once, with the page's words, when the connect page
// fails: here the upstream's protected resource metadata names another
// resource, so no connect can be made. (The call waited for the client's
// own timeout.)
func TestFailedConnectEndsTheElicitingCall(t *testing.T) {
	clearAdminEnv(t)
	up := newOAuthUpstream(t, time.Hour)
	// The server is reached at front, but its metadata names its own
	// address: another resource than the URL configured.
	target, _ := url.Parse(up.base)
	front := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	t.Cleanup(front.Close)
	const aliceKey = "alice-gateway-key-0123456789"
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__",
		Auth:  &config.CallerAuth{Keys: []config.KeyConfig{{Alias: "alice", Key: aliceKey}}},
		Vault: &config.Vault{Keys: []config.VaultKey{{ID: "k1", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}}},
		Servers: map[string]*config.Server{
			"up": {Name: "up", Transport: config.TransportHTTP, URL: front.URL + "/mcp", Timeout: 5 * time.Second, ProtocolVersion: "2025-06-18", Auth: &config.Auth{Type: config.AuthOAuth2User}},
		}}
	hs := httptest.NewUnstartedServer(nil)
	cfg.PublicURL = "http://" + hs.Listener.Addr().String()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	stk.gw.Start(context.Background())
	t.Cleanup(func() { stk.close(context.Background()) })
	hs.Config.Handler = stk.handler
	hs.Start()
	t.Cleanup(hs.Close)

	asks := make(chan elicited, 2)
	cs := urlClient(t, hs.URL+"/mcp/up", aliceKey, "2025-11-25", asks, make(chan string, 2))
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
		done <- err
	}()
	var ask elicited
	select {
	case ask = <-asks:
	case err := <-done:
		t.Fatalf("no URL elicitation; the call: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no URL elicitation")
	}
	alice := newTestBrowser(t, hs.URL+"/oauth/connect/callback")
	alice.StopAt = up.base
	page := alice.Submit(hs.URL, alice.Get(ask.url), `name="key"`, url.Values{"key": {aliceKey}})
	if page.Status != http.StatusBadGateway || !strings.Contains(page.Body, "another resource") {
		t.Fatalf("the connect page: %d %s", page.Status, page.Body)
	}
	failed := time.Now()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "connect your account for up at "+hs.URL+"/oauth/connect/up") || !strings.Contains(err.Error(), "another resource") {
			t.Errorf("the call after the connect page failed: %v", err)
		}
		t.Logf("the call ended %v after the page failed: %v", time.Since(failed).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("the call still waits 5s after its connect page failed")
	}
}

// Issue 24 §2: a person who connects by hand (their client cannot be
// asked) and calls a tool whose upstream answers 403 insufficient_scope
// is told the connect link that asks for the wider scope, and that link
// asks the upstream's authorization server for it; once connected again,
// the tool works. (The error was a plain 403, and the plain link asked
// for the old scope again, so reconnecting never helped.)
func TestStepUpByHandAsksForTheWiderScope(t *testing.T) {
	clearAdminEnv(t)
	up := newOAuthUpstream(t, time.Hour)
	const aliceKey = "alice-gateway-key-0123456789"
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__",
		Auth:  &config.CallerAuth{Keys: []config.KeyConfig{{Alias: "alice", Key: aliceKey}}},
		Vault: &config.Vault{Keys: []config.VaultKey{{ID: "k1", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}}},
		Servers: map[string]*config.Server{
			"up": {Name: "up", Transport: config.TransportHTTP, URL: up.mcp, Timeout: 5 * time.Second, ProtocolVersion: "2025-06-18", Auth: &config.Auth{Type: config.AuthOAuth2User}},
		}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stk.close(context.Background()) })
	hs := httptest.NewServer(stk.handler)
	t.Cleanup(hs.Close)
	callback := hs.URL + "/oauth/connect/callback"
	call := func(tool string) string {
		_, body := rest(t, "POST", hs.URL+"/mcp", aliceKey, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__`+tool+`","arguments":{}}}`)
		return body
	}
	connectVia := func(alice *testBrowser, link string) *browserPage {
		t.Helper()
		start := alice.get(link, aliceKey)
		cb := alice.authorize(up, start)
		if p := alice.get(cb.String(), ""); p.Status != http.StatusOK {
			t.Fatalf("callback: %d %s", p.Status, p.Body)
		}
		return start
	}

	alice := newTestBrowser(t, callback)
	connectVia(alice, hs.URL+"/oauth/connect/up")
	if got := call("whoami"); !strings.Contains(got, "tool=whoami") {
		t.Fatalf("whoami after connecting: %s", got)
	}
	got := call("admin_op")
	m := regexp.MustCompile(`connect your account for up again at (` + regexp.QuoteMeta(hs.URL+"/oauth/connect/up?") + `[^"]+)"`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("admin_op without the admin scope: %s; want the step-up link", got)
	}
	link := m[1]
	if u, err := url.Parse(link); err != nil || !slices.Contains(strings.Fields(u.Query().Get("scope")), "admin") {
		t.Fatalf("the step-up link %s does not ask for admin", link)
	}
	start := connectVia(alice, link)
	if scope := strings.Fields(start.Location.Query().Get("scope")); !slices.Contains(scope, "admin") || !slices.Contains(scope, "mcp") {
		t.Errorf("the step-up link asked the authorization server for %q", scope)
	}
	if got := call("admin_op"); !strings.Contains(got, "tool=admin_op") {
		t.Errorf("admin_op after connecting with the wider scope: %s", got)
	}
	// A link whose scope is not a list of scopes is refused.
	if p := newTestBrowser(t, callback).get(hs.URL+"/oauth/connect/up?scope=%22x%22", aliceKey); p.Status != http.StatusBadRequest {
		t.Errorf("a link with a bad scope: %d", p.Status)
	}
}
