package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Administrators list people's connections (both kinds, never a secret)
// and revoke one or all of a person's; a person lists and revokes their
// own; a revocation is in effect for the very next call although the
// entry was just read (guards connections.go and the vault delete's drop
// of its 5 s read cache: without the drop the revoked call still reaches
// the upstream with the token).
func TestConnectionsAdminAndRevoke(t *testing.T) {
	clearAdminEnv(t)
	up := newOAuthUpstream(t, time.Hour)
	byok := newBYOKUpstream(t)
	cfg := oauthUserConfig(t, t.TempDir(), up.mcp)
	cfg.Servers["byok"] = &config.Server{Name: "byok", Transport: config.TransportHTTP, URL: byok.URL + "/mcp", Timeout: 5 * time.Second,
		ProtocolVersion: "2025-06-18", Auth: &config.Auth{Type: config.AuthUserAPIKey, HeaderName: "X-API-Key"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, hs := gatewayAt(t, cfg, nil, "")
	defer stk.close(t.Context())
	defer hs.Close()
	t.Setenv("MCPGATE_URL", hs.URL)
	api := hs.URL + "/admin/v1/"

	connect(t, hs, up, aliceGatewayKey, upstreamAccountKey)
	connect(t, hs, up, bobGatewayKey, upstreamAccountKey2)
	const aliceCred = "ALICE-byok-secret-1f2e3d"
	if code, body := rest(t, "PUT", api+"me/credentials/byok", aliceGatewayKey, `{"value":"`+aliceCred+`"}`); code != 200 {
		t.Fatalf("put credential: %d %s", code, body)
	}
	aliceTok, _ := stk.vault.Get(t.Context(), "key:alice", "up")
	bobTok, _ := stk.vault.Get(t.Context(), "key:bob", "up")
	secrets := []string{aliceCred, aliceTok.AccessToken, aliceTok.RefreshToken, bobTok.AccessToken, bobTok.RefreshToken}
	noSecret := func(what, body string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s carries a secret: %s", what, body)
			}
		}
	}
	list := func(key, path string) []map[string]any {
		t.Helper()
		code, body := rest(t, "GET", api+path, key, "")
		noSecret(path, body)
		var l struct{ Connections []map[string]any }
		if code != 200 || json.Unmarshal([]byte(body), &l) != nil {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		return l.Connections
	}
	names := func(cs []map[string]any) (out []string) {
		for _, c := range cs {
			out = append(out, fmt.Sprint(c["person"], "/", c["server"], "/", c["kind"]))
		}
		return out
	}

	all := list(adminGatewayKey, "connections")
	if want := []string{"key:alice/byok/static", "key:alice/up/oauth", "key:bob/up/oauth"}; !slices.Equal(names(all), want) {
		t.Errorf("all connections %v, want %v", names(all), want)
	}
	for _, c := range all {
		if c["kind"] == "oauth" && (c["issuer"] != up.base || c["expires_at"] == nil || c["refreshable"] != true || c["scopes"] == nil || c["updated_at"] == nil) {
			t.Errorf("oauth connection %v", c)
		}
	}
	if got := names(list(adminGatewayKey, "connections?server=up")); !slices.Equal(got, []string{"key:alice/up/oauth", "key:bob/up/oauth"}) {
		t.Errorf("by server: %v", got)
	}
	if got := names(list(adminGatewayKey, "connections?person=key:alice&server=up")); !slices.Equal(got, []string{"key:alice/up/oauth"}) {
		t.Errorf("by person and server: %v", got)
	}
	if got := names(list(aliceGatewayKey, "me/connections")); !slices.Equal(got, []string{"key:alice/byok/static", "key:alice/up/oauth"}) {
		t.Errorf("alice's own: %v", got)
	}
	if code, body := rest(t, "GET", api+"me/credentials", aliceGatewayKey, ""); code != 200 || !strings.Contains(body, `"server":"byok"`) {
		t.Errorf("me/credentials: %d %s", code, body)
	}
	// Only an admin sees everyone's; the master key has no /me.
	for _, c := range []struct{ method, path, key string }{
		{"GET", "connections", aliceGatewayKey}, {"DELETE", "connections/key:bob/up", aliceGatewayKey},
		{"DELETE", "connections/key:bob", aliceGatewayKey},
	} {
		if code, _ := rest(t, c.method, api+c.path, c.key, ""); code != http.StatusForbidden {
			t.Errorf("%s %s as alice: %d", c.method, c.path, code)
		}
	}
	code, stdout, stderr := cli(t, "connections", "list", "--server", "up", "--admin-key", adminGatewayKey)
	if code != 0 || !strings.Contains(stdout, "key:alice") || !strings.Contains(stdout, "key:bob") || strings.Contains(stdout, "byok") || !strings.Contains(stdout, up.base) {
		t.Errorf("cli list: exit %d\n%s%s", code, stdout, stderr)
	}
	noSecret("cli list", stdout)
	if code, stdout, _ := cli(t, "connections", "list", "--person", "key:alice", "--json", "--admin-key", adminGatewayKey); code != 0 || !strings.Contains(stdout, `"kind": "static"`) {
		t.Errorf("cli list --json: exit %d %s", code, stdout)
	}

	// alice's calls read her entry (the first one's last-use write drops
	// it from the read cache, the second caches it); revoked through the
	// CLI, the next call has no token and the upstream sees nothing.
	for range 2 {
		if code, body := whoami(t, hs, aliceGatewayKey); code != 200 || !strings.Contains(body, "subject=key:ada-upstream") {
			t.Fatalf("alice before the revocation: %d %s", code, body)
		}
	}
	if code, stdout, stderr := cli(t, "connections", "revoke", "key:alice", "up", "--admin-key", adminGatewayKey); code != 0 || !strings.Contains(stdout, "revoked") {
		t.Fatalf("cli revoke: exit %d %s %s", code, stdout, stderr)
	}
	before := len(up.tokens())
	if _, body := whoami(t, hs, aliceGatewayKey); !strings.Contains(body, "connect your account for up") {
		t.Errorf("alice right after the revocation: %s", body)
	}
	if n := len(up.tokens()) - before; n != 0 {
		t.Errorf("the upstream saw %d requests after the revocation", n)
	}
	if code, _, _ := cli(t, "connections", "revoke", "key:alice", "up", "--admin-key", adminGatewayKey); code != 1 {
		t.Errorf("revoking again: exit %d, want 1", code)
	}

	// bob revokes his own; alice's credential is not his to touch.
	for range 2 {
		if code, body := whoami(t, hs, bobGatewayKey); code != 200 || !strings.Contains(body, "subject=key:bea-upstream") {
			t.Fatalf("bob: %d %s", code, body)
		}
	}
	if code, _ := rest(t, "DELETE", api+"me/connections/byok", bobGatewayKey, ""); code != http.StatusNotFound {
		t.Errorf("bob deleting alice's byok: %d", code)
	}
	if code, _ := rest(t, "DELETE", api+"me/connections/up", bobGatewayKey, ""); code != http.StatusNoContent {
		t.Errorf("bob's own revocation: %d", code)
	}
	if _, body := whoami(t, hs, bobGatewayKey); !strings.Contains(body, "connect your account for up") {
		t.Errorf("bob after his revocation: %s", body)
	}
	if code, _ := rest(t, "GET", api+"me/connections", "", ""); code != http.StatusUnauthorized {
		t.Errorf("me/connections without a key: %d", code)
	}

	// All of alice's: the static credential is left, and goes.
	connect(t, hs, up, aliceGatewayKey, upstreamAccountKey)
	code, stdout, stderr = cli(t, "connections", "revoke", "key:alice", "--admin-key", adminGatewayKey)
	if code != 0 || !strings.Contains(stdout, "revoked 2 connection(s) of key:alice: byok, up") {
		t.Errorf("cli revoke all: exit %d %s %s", code, stdout, stderr)
	}
	if got := list(adminGatewayKey, "connections"); len(got) != 0 {
		t.Errorf("left: %v", names(got))
	}
	if code, _ := rest(t, "DELETE", api+"connections/key:alice", adminGatewayKey, ""); code != http.StatusNotFound {
		t.Errorf("revoke all again: %d", code)
	}
	// A JWT person's id holds slashes: escaped, it is one path segment.
	if code, body := rest(t, "DELETE", api+"connections/"+url.PathEscape("oidc:https://idp.example.com/realm|sub-1")+"/up", adminGatewayKey, ""); code != http.StatusNotFound || !strings.Contains(body, "idp.example.com/realm|sub-1") {
		t.Errorf("an oidc person: %d %s", code, body)
	}
	_, body := rest(t, "GET", api+"audit/events?action=connection.revoke", adminGatewayKey, "")
	if strings.Count(body, `"action":"connection.revoke"`) != 2 {
		t.Errorf("audit: %s", body)
	}
}

// Two people connect their own upstream accounts to the same oauth2_user
// server; 1,000 calls each, interleaved and concurrent, each carry the
// caller's own token and never the other's: the upstream checks every
// token and answers its subject, and records every token it saw (guards
// the per-person lookup of callerTokens/oauthCredential and the vault's
// per-(person, server) read cache: with the cache keyed by server alone,
// 999 of the 2,000 calls carry the other person's token).
func TestOAuth2UserTwoPeopleIsolation(t *testing.T) {
	clearAdminEnv(t)
	up := newOAuthUpstream(t, time.Hour)
	cfg := oauthUserConfig(t, t.TempDir(), up.mcp)
	stk, hs := gatewayAt(t, cfg, nil, "")
	defer stk.close(t.Context())
	defer hs.Close()
	connect(t, hs, up, aliceGatewayKey, upstreamAccountKey)
	connect(t, hs, up, bobGatewayKey, upstreamAccountKey2)

	const perPerson, workers = 1000, 16
	before := len(up.tokens())
	start := time.Now()
	var next atomic.Int64
	var mu sync.Mutex
	var wrong []string
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= 2*perPerson {
					return
				}
				key, want, other := aliceGatewayKey, "subject=key:ada-upstream", "bea-upstream"
				if i%2 == 1 {
					key, want, other = bobGatewayKey, "subject=key:bea-upstream", "ada-upstream"
				}
				code, body := whoami(t, hs, key)
				if code != 200 || !strings.Contains(body, want) || strings.Contains(body, other) {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("call %d: %d %.200s", i, code, body))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d calls (%d concurrent) in %v", 2*perPerson, workers, time.Since(start))
	if len(wrong) > 0 {
		t.Fatalf("%d of %d calls wrong, e.g. %s", len(wrong), 2*perPerson, wrong[0])
	}
	// Every request carried a valid token of one of the two accounts,
	// each account's the same one throughout.
	counts, tokens := map[string]int{}, map[string]map[string]bool{}
	for _, tok := range up.tokens()[before:] {
		sub, ok := up.subject(tok)
		if !ok {
			sub = "no valid token"
		}
		counts[sub]++
		if tokens[sub] == nil {
			tokens[sub] = map[string]bool{}
		}
		tokens[sub][tok] = true
	}
	if len(counts) != 2 || counts["key:ada-upstream"] < perPerson || counts["key:bea-upstream"] < perPerson ||
		len(tokens["key:ada-upstream"]) != 1 || len(tokens["key:bea-upstream"]) != 1 {
		t.Errorf("the upstream saw %v", counts)
	}
}

// No authorization code, PKCE verifier, client secret, access or refresh
// token that crossed the upstream's authorization server during a connect,
// calls, a refresh and a failed refresh appears in the gateway's debug
// log, in an answer it gave (pages, tool errors), in /metrics or in any
// admin API answer (guards the redaction of vault.Entry, client.Token,
// client.Client and client.Saved in logs and errors, and the admin API's
// secret-free views: printing any of them whole fails it).
func TestOAuth2UserNoSecretLeaks(t *testing.T) {
	clearAdminEnv(t)
	up := newOAuthUpstream(t, 61*time.Second)
	cfg := oauthUserConfig(t, t.TempDir(), up.mcp)
	// A file: the gateway's goroutines may still write while it is read.
	logFile, err := os.Create(filepath.Join(t.TempDir(), "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	stk, hs := gatewayAt(t, cfg, slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})), "")
	defer stk.close(t.Context())
	defer hs.Close()
	var answers []string
	get := func(path, key string) {
		t.Helper()
		code, body := rest(t, "GET", hs.URL+path, key, "")
		if code >= 500 {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
		answers = append(answers, path+": "+body)
	}

	// A failed connect (a bad state), a connect, calls, a refresh.
	b := newTestBrowser(t, hs.URL+"/oauth/connect/callback")
	cb := b.authorizeAs(up, b.get(hs.URL+"/oauth/connect/up", aliceGatewayKey), upstreamAccountKey)
	bad := *cb
	q := bad.Query()
	q.Set("state", "forged")
	bad.RawQuery = q.Encode()
	answers = append(answers, b.get(bad.String(), "").Body, b.get(cb.String(), "").Body)
	for range 2 {
		_, body := whoami(t, hs, aliceGatewayKey)
		answers = append(answers, body)
	}
	_, body := whoami(t, hs, bobGatewayKey) // not connected: the error
	answers = append(answers, body)
	first, _ := stk.vault.Get(t.Context(), "key:alice", "up")
	time.Sleep(1100 * time.Millisecond)
	if _, body := whoami(t, hs, aliceGatewayKey); !strings.Contains(body, "subject=") {
		t.Fatalf("call after the expiry: %s", body)
	}
	if e, _ := stk.vault.Get(t.Context(), "key:alice", "up"); e.AccessToken == first.AccessToken {
		t.Fatal("no refresh happened")
	}
	// A refresh the authorization server refuses: logged, the entry goes.
	e, _ := stk.vault.Get(t.Context(), "key:alice", "up")
	stale := e
	e.Expiry = time.Now().Add(-time.Minute)
	e.RefreshToken = first.RefreshToken // rotated away: reuse is refused
	if err := stk.vault.Put(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	_, body = whoami(t, hs, aliceGatewayKey)
	answers = append(answers, body)

	get("/metrics", adminGatewayKey)
	for _, p := range []string{"connections", "me/connections", "me/credentials", "servers", "sessions", "audit", "audit/events", "keys", "servers/up/preview", "openapi.json"} {
		key := adminGatewayKey
		if strings.HasPrefix(p, "me/") {
			key = aliceGatewayKey
		}
		get("/admin/v1/"+p, key)
	}

	seen := up.secretsSeen()
	saved := keptRegistration(t, stk)
	for _, v := range []string{saved.Client.Secret, stale.AccessToken, stale.RefreshToken} {
		if seen[v] == "" {
			seen[v] = "secret kept in the vault"
		}
	}
	kinds := map[string]int{}
	for _, k := range seen {
		kinds[k]++
	}
	for _, k := range []string{"code", "code_verifier", "client_secret", "access_token", "refresh_token"} {
		if kinds[k] == 0 {
			t.Fatalf("no %s crossed the authorization server: %v", k, kinds)
		}
	}
	logs, err := os.ReadFile(logFile.Name())
	if err != nil || !bytes.Contains(logs, []byte("level=DEBUG")) {
		t.Fatalf("no debug log: %v", err)
	}
	secrets := slices.Collect(maps.Keys(seen))
	out := map[string]string{"the log": string(logs), "the answers": strings.Join(answers, "\n")}
	for where, text := range out {
		for _, s := range secrets {
			if len(s) >= 8 && strings.Contains(text, s) {
				t.Errorf("%s holds a %s", where, seen[s])
			}
		}
	}
}
