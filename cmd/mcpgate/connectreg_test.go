package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
)

const (
	aliceGatewayKey = "alice-gateway-key-0123456789"
	bobGatewayKey   = "bob-gateway-key-0123456789"
	carolGatewayKey = "carol-gateway-key-0123456789"
	adminGatewayKey = "admin-gateway-key-0123456789"
)

// oauthUserConfig is a gateway in dir with one oauth2_user server "up"
// at mcpURL, three people's keys, an admin key and a vault.
func oauthUserConfig(t *testing.T, dir, mcpURL string) *config.Config {
	t.Helper()
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: dir, ToolNameSeparator: "__",
		Auth: &config.CallerAuth{Keys: []config.KeyConfig{{Alias: "alice", Key: aliceGatewayKey}, {Alias: "bob", Key: bobGatewayKey},
			{Alias: "carol", Key: carolGatewayKey}, {Alias: "ops", Key: adminGatewayKey, Admin: true}}},
		Vault: &config.Vault{Keys: []config.VaultKey{{ID: "k1", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))}}},
		Servers: map[string]*config.Server{
			"up": {Name: "up", Transport: config.TransportHTTP, URL: mcpURL, Timeout: 5 * time.Second, ProtocolVersion: "2025-06-18", Auth: &config.Auth{Type: config.AuthOAuth2User}},
		}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// gatewayAt builds the gateway of cfg and serves it on addr ("" for any
// loopback port).
func gatewayAt(t *testing.T, cfg *config.Config, log *slog.Logger, addr string) (*stack, *httptest.Server) {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stk, err := build(context.Background(), cfg, log, cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(stk.handler)
	if addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			stk.close(context.Background())
			t.Fatal(err)
		}
		hs.Listener.Close()
		hs.Listener = l
	}
	hs.Start()
	return stk, hs
}

// connect runs key's connect flow for up in a browser of its own, logging
// in to the upstream account of accountKey.
func connect(t *testing.T, hs *httptest.Server, up *oauthUpstream, key, accountKey string) {
	t.Helper()
	b := newTestBrowser(t, hs.URL+"/oauth/connect/callback")
	cb := b.authorizeAs(up, b.get(hs.URL+"/oauth/connect/up", key), accountKey)
	if p := b.get(cb.String(), ""); p.Status != http.StatusOK || !strings.Contains(p.Body, "connected") {
		t.Fatalf("callback: %d %s", p.Status, p.Body)
	}
}

func whoami(t *testing.T, hs *httptest.Server, key string) (int, string) {
	return rest(t, "POST", hs.URL+"/mcp", key, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__whoami","arguments":{}}}`)
}

func keptRegistration(t *testing.T, stk *stack) client.Saved {
	t.Helper()
	doc, err := stk.vault.GetRegistration(t.Context(), "up")
	if err != nil {
		t.Fatalf("no kept registration: %v", err)
	}
	var s client.Saved
	if err := json.Unmarshal(doc, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// dbHolds reports the database files (db, -wal, -shm) of dir holding any
// of secrets in clear; it fails when there is no database file.
func dbHolds(t *testing.T, dir string, secrets ...string) []string {
	t.Helper()
	var found []string
	files := 0
	for _, suffix := range []string{"", "-wal", "-shm"} {
		matches, _ := filepath.Glob(filepath.Join(dir, "*.db"+suffix))
		for _, p := range matches {
			files++
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range secrets {
				if s != "" && bytes.Contains(b, []byte(s)) {
					found = append(found, filepath.Base(p))
				}
			}
		}
	}
	if files == 0 {
		t.Fatal("no database file found to inspect")
	}
	return found
}

// After a restart (a new gateway over the same SQLite file) a connected
// person's expiring token is refreshed without connecting again: the
// client registration was kept in the vault (connectreg.go; without it the
// new gateway has no registration and the call gets the connect link).
// The database files hold no client secret in clear. A registration made
// for another redirect URI is not reused; one for the same is.
func TestOAuth2UserRefreshAfterRestart(t *testing.T) {
	clearAdminEnv(t)
	// 61 s: fresh tokens are outside the 60 s refresh margin, and inside
	// it a second later.
	up := newOAuthUpstream(t, 61*time.Second)
	dir := t.TempDir()
	cfg := oauthUserConfig(t, dir, up.mcp)

	stk, hs := gatewayAt(t, cfg, nil, "")
	addr := hs.Listener.Addr().String()
	connect(t, hs, up, aliceGatewayKey, upstreamAccountKey)
	if code, body := whoami(t, hs, aliceGatewayKey); code != 200 || !strings.Contains(body, "subject=key:ada-upstream") {
		t.Fatalf("alice's call: %d %s", code, body)
	}
	saved := keptRegistration(t, stk)
	if saved.Client.Secret == "" || saved.Client.Source != client.SourceDynamic || saved.ServerURL != up.mcp ||
		saved.RedirectURI != hs.URL+"/oauth/connect/callback" || saved.AuthServer.TokenEndpoint == "" || saved.Resource != up.mcp {
		t.Fatalf("kept registration: %+v (secret set: %t)", saved, saved.Client.Secret != "")
	}
	first, err := stk.vault.Get(t.Context(), "key:alice", "up")
	if err != nil {
		t.Fatal(err)
	}
	hs.Close()
	if err := stk.close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if found := dbHolds(t, dir, saved.Client.Secret, first.AccessToken, first.RefreshToken); len(found) > 0 {
		t.Errorf("a secret in clear in %v", found)
	}

	// The new gateway, on the same address; the token now expires within
	// the refresh margin.
	time.Sleep(1100 * time.Millisecond)
	stk, hs = gatewayAt(t, cfg, nil, addr)
	before := len(up.tokens())
	if code, body := whoami(t, hs, aliceGatewayKey); code != 200 || !strings.Contains(body, "subject=key:ada-upstream") {
		t.Fatalf("alice's call after the restart: %d %s", code, body)
	}
	toks := up.tokens()[before:]
	if len(toks) == 0 || toks[len(toks)-1] == first.AccessToken {
		t.Fatal("the upstream did not get a refreshed token")
	}
	if e, err := stk.vault.Get(t.Context(), "key:alice", "up"); err != nil || e.RefreshToken == first.RefreshToken || !e.Expiry.After(first.Expiry) {
		t.Errorf("after the refresh: %v %v", e, err)
	}
	// bob connects through the same redirect URI: the same client.
	connect(t, hs, up, bobGatewayKey, upstreamAccountKey2)
	if again := keptRegistration(t, stk); again.Client.ID != saved.Client.ID {
		t.Errorf("same redirect URI: registered again (%s, was %s)", again.Client.ID, saved.Client.ID)
	}
	if found := dbHolds(t, dir, saved.Client.Secret); len(found) > 0 {
		t.Errorf("the client secret in clear in %v", found)
	}
	hs.Close()
	stk.close(context.Background())

	// Another address is another redirect URI: a registration of its own.
	stk, hs = gatewayAt(t, cfg, nil, "")
	defer stk.close(context.Background())
	defer hs.Close()
	connect(t, hs, up, carolGatewayKey, upstreamAccountKey)
	if other := keptRegistration(t, stk); other.Client.ID == saved.Client.ID || other.RedirectURI != hs.URL+"/oauth/connect/callback" {
		t.Errorf("another redirect URI reused the registration: %+v", other)
	}
}
