package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

// byokUpstream is a minimal stateless MCP server that records the
// X-API-Key of every request and answers the tool "whoami" with it.
type byokUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string // X-API-Key per request ("" when absent)
}

func newBYOKUpstream(t *testing.T) *byokUpstream {
	u := &byokUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		key := r.Header.Get("X-API-Key")
		u.mu.Lock()
		u.seen = append(u.seen, key)
		u.mu.Unlock()
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &m)
		if m.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result any
		switch m.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "byok", "version": "1"}}
		case "tools/list":
			result = map[string]any{"tools": []any{map[string]any{"name": "whoami", "inputSchema": map[string]any{"type": "object"}}}}
		case "tools/call":
			result = map[string]any{"content": []any{map[string]any{"type": "text", "text": key}}}
		default:
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "Method not found"}})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *byokUpstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// rest calls the gateway with key and returns status and body.
func rest(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, r)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Mcpgate-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Two people store their own credentials for a user_api_key server; 200
// concurrent interleaved calls each carry their caller's own; a person
// without one gets the clear error and the upstream sees nothing; the
// listing never shows a value; the database holds none in clear.
func TestUserAPIKeyEndToEnd(t *testing.T) {
	clearAdminEnv(t)
	up := newBYOKUpstream(t)
	const (
		aliceKey  = "alice-gateway-key-0123456789"
		bobKey    = "bob-gateway-key-0123456789"
		carolKey  = "carol-gateway-key-0123456789"
		aliceCred = "ALICE-upstream-secret-4f8a2c"
		bobCred   = "BOB-upstream-secret-9d1e7b"
	)
	dir := t.TempDir()
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: dir, ToolNameSeparator: "__",
		Auth:  &config.CallerAuth{Keys: []config.KeyConfig{{Alias: "alice", Key: aliceKey}, {Alias: "bob", Key: bobKey}, {Alias: "carol", Key: carolKey}}},
		Vault: &config.Vault{Keys: []config.VaultKey{{ID: "k1", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))}}},
		Servers: map[string]*config.Server{
			"byok":  {Name: "byok", Transport: config.TransportHTTP, URL: up.URL + "/mcp", Timeout: 5 * time.Second, ProtocolVersion: "2025-06-18", Auth: &config.Auth{Type: config.AuthUserAPIKey, HeaderName: "X-API-Key"}},
			"plain": {Name: "plain", Transport: config.TransportHTTP, URL: up.URL + "/mcp", Timeout: 5 * time.Second, ProtocolVersion: "2025-06-18"},
		}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.close(context.Background())
	hs := httptest.NewServer(stk.handler)
	defer hs.Close()
	me := hs.URL + "/admin/v1/me/credentials"

	// Every person may store their own; alice through the CLI.
	t.Setenv("MCPGATE_URL", hs.URL)
	if code, stdout, stderr := cli(t, "credentials", "set", "byok", "--value", aliceCred, "--admin-key", aliceKey); code != 0 || strings.Contains(stdout+stderr, aliceCred) {
		t.Fatalf("cli set: exit %d, %q %q", code, stdout, stderr)
	}
	// bob at the root alias /me/credentials/<server>.
	if code, body := rest(t, "PUT", hs.URL+"/me/credentials/byok", bobKey, `{"value":"`+bobCred+`"}`); code != 200 || strings.Contains(body, bobCred) {
		t.Fatalf("bob put: %d %s", code, body)
	}
	// /me/servers: the servers that need the person's own credential
	// (never plain), and whether they stored one.
	for key, want := range map[string]string{aliceKey: `{"servers":[{"server":"byok","auth":"user_api_key","connected":true}]}`,
		carolKey: `{"servers":[{"server":"byok","auth":"user_api_key","connected":false}]}`} {
		if code, body := rest(t, "GET", hs.URL+"/admin/v1/me/servers", key, ""); code != 200 || strings.TrimSpace(body) != want {
			t.Errorf("GET /me/servers: %d %s, want %s", code, body, want)
		}
	}
	// Refusals: a server that is not user_api_key, an unknown one, bad values, no person.
	for _, c := range []struct {
		path, body string
		want       int
	}{
		{"/plain", `{"value":"x"}`, 400}, {"/nope", `{"value":"x"}`, 400},
		{"/byok", `{"value":"a\nb"}`, 400}, {"/byok", `{"value":""}`, 400},
		{"/byok", `{"value":"` + strings.Repeat("x", 9000) + `"}`, 400},
	} {
		if code, body := rest(t, "PUT", me+c.path, carolKey, c.body); code != c.want {
			t.Errorf("PUT %s: %d %s, want %d", c.path, code, body, c.want)
		}
	}
	if code, _ := rest(t, "DELETE", me+"/plain", carolKey, ""); code != 400 {
		t.Errorf("DELETE on a non-user_api_key server: %d", code)
	}
	if code, _ := rest(t, "GET", me, "", ""); code != 401 {
		t.Errorf("GET without a key: %d", code)
	}
	// A non-admin key may not use the rest of the admin API.
	if code, _ := rest(t, "GET", hs.URL+"/admin/v1/keys", aliceKey, ""); code != 403 {
		t.Errorf("GET /keys as a person: %d", code)
	}

	call := func(key string, _ int) (int, string) {
		return rest(t, "POST", hs.URL+"/mcp", key, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"byok__whoami","arguments":{}}}`)
	}
	before := len(up.requests())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrong []string
	for i := range 200 {
		wg.Go(func() {
			key, want, other := aliceKey, aliceCred, bobCred
			if i%2 == 1 {
				key, want, other = bobKey, bobCred, aliceCred
			}
			code, body := call(key, i)
			if code != 200 || !strings.Contains(body, want) || strings.Contains(body, other) {
				mu.Lock()
				wrong = append(wrong, body)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Fatalf("%d of 200 calls wrong, e.g. %.300s", len(wrong), wrong[0])
	}
	counts := map[string]int{}
	for _, k := range up.requests()[before:] {
		counts[k]++
	}
	if len(counts) != 2 || counts[aliceCred] < 100 || counts[bobCred] < 100 {
		t.Errorf("the upstream saw credentials %v", counts)
	}

	// carol has none: a clear error, and the upstream sees nothing.
	before = len(up.requests())
	code, body := call(carolKey, 1)
	if want := "store your credential for byok: PUT /admin/v1/me/credentials/byok"; !strings.Contains(body, want) {
		t.Errorf("carol: %d %s, want %q", code, body, want)
	}
	if strings.Contains(body, aliceCred) || strings.Contains(body, bobCred) {
		t.Errorf("carol's error carries a credential: %s", body)
	}
	if n := len(up.requests()) - before; n != 0 {
		t.Errorf("the upstream saw %d requests for a caller without a credential", n)
	}

	// The listing: the server and times, never the value.
	code, body = rest(t, "GET", me, aliceKey, "")
	var list struct {
		Credentials []map[string]string `json:"credentials"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Credentials) != 1 || list.Credentials[0]["server"] != "byok" ||
		list.Credentials[0]["updated_at"] == "" || strings.Contains(body, aliceCred) || strings.Contains(body, bobCred) {
		t.Errorf("alice's list: %d %s", code, body)
	}
	if code, stdout, stderr := cli(t, "credentials", "list", "--admin-key", carolKey); code != 0 || strings.Contains(stdout, "byok") {
		t.Errorf("carol's list: exit %d, %q %q", code, stdout, stderr)
	}

	// The database holds no credential in clear.
	if found := dbHolds(t, dir, aliceCred, bobCred); len(found) > 0 {
		t.Errorf("a credential in clear in %v", found)
	}

	// After DELETE, the error again; bob is unaffected.
	if code, _ := rest(t, "DELETE", me+"/byok", aliceKey, ""); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := rest(t, "DELETE", me+"/byok", aliceKey, ""); code != 404 {
		t.Errorf("delete again: %d", code)
	}
	before = len(up.requests())
	if _, body := call(aliceKey, 1); !strings.Contains(body, "store your credential for byok") || strings.Contains(body, bobCred) {
		t.Errorf("alice after delete: %s", body)
	}
	if n := len(up.requests()) - before; n != 0 {
		t.Errorf("the upstream saw %d requests after alice's delete", n)
	}
	if _, body := call(bobKey, 1); !strings.Contains(body, bobCred) {
		t.Errorf("bob after alice's delete: %s", body)
	}
}
