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
