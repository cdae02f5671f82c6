package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/admin"
	"github.com/mcpgate/mcpgate/internal/config"
)

// adminRequest is one request the fake admin API got.
type adminRequest struct {
	Method, Path, EscapedPath, Query string
	Key                              string // X-Mcpgate-Api-Key
	ContentType                      string
	Body                             []byte
}

// bodyMap decodes the request body as a JSON object.
func (r adminRequest) bodyMap(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("request body %q: %v", r.Body, err)
	}
	return m
}

// fakeAdmin fakes the admin API: it records every request and answers
// with what answer returns (default: 200 {}).
type fakeAdmin struct {
	*httptest.Server
	answer func(adminRequest) (status int, body string)

	mu   sync.Mutex
	reqs []adminRequest
	// header is set on every answer (setHeader).
	header http.Header
}

// setHeader makes every answer from now on carry h.
func (f *fakeAdmin) setHeader(h http.Header) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.header = h
}

func newFakeAdmin(t testing.TB, answer func(adminRequest) (int, string)) *fakeAdmin {
	t.Helper()
	f := &fakeAdmin{answer: answer}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := adminRequest{Method: r.Method, Path: r.URL.Path, EscapedPath: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Key: r.Header.Get("X-Mcpgate-Api-Key"), ContentType: r.Header.Get("Content-Type"), Body: body}
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		for k, v := range f.header {
			w.Header()[k] = v
		}
		f.mu.Unlock()
		status, out := http.StatusOK, "{}"
		if f.answer != nil {
			status, out = f.answer(req)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, out)
	}))
	t.Cleanup(f.Close)
	return f
}

// canned answers body with status 200 (201 for POST /keys, 204 for DELETE).
func canned(body string) func(adminRequest) (int, string) {
	return func(r adminRequest) (int, string) {
		switch {
		case r.Method == http.MethodDelete:
			return http.StatusNoContent, ""
		case r.Method == http.MethodPost && r.Path == "/admin/v1/keys":
			return http.StatusCreated, body
		}
		return http.StatusOK, body
	}
}

func (f *fakeAdmin) requests() []adminRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]adminRequest(nil), f.reqs...)
}

// last is the last request, failing the test when there was none.
func (f *fakeAdmin) last(t testing.TB) adminRequest {
	t.Helper()
	reqs := f.requests()
	if len(reqs) == 0 {
		t.Fatal("the fake admin API got no request")
	}
	return reqs[len(reqs)-1]
}

// clearAdminEnv makes the tests independent of the environment they run in.
func clearAdminEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"MCPGATE_URL", "MCPGATE_ADMIN_KEY", "MCPGATE_MASTER_KEY"} {
		t.Setenv(k, "")
	}
}

// cli runs the command line args.
func cli(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cliContext(context.Background(), t, args...)
}

func cliContext(ctx context.Context, t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runContext(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// The gateway is --url, else $MCPGATE_URL, else --config's listen address,
// else the default; the key --admin-key, else $MCPGATE_ADMIN_KEY, else
// $MCPGATE_MASTER_KEY.
func TestAdminConnectionResolution(t *testing.T) {
	flagSrv := newFakeAdmin(t, canned(`{"keys":[]}`))
	envSrv := newFakeAdmin(t, canned(`{"keys":[]}`))
	cfgSrv := newFakeAdmin(t, canned(`{"keys":[]}`))
	cfgPath := writeFile(t, t.TempDir(), "c.yaml", "listen: "+strings.TrimPrefix(cfgSrv.URL, "http://")+
		"\nservers:\n  calc:\n    transport: http\n    url: http://127.0.0.1:4100/mcp\n")
	for _, tc := range []struct {
		name                 string
		env                  map[string]string
		flags                []string
		wantSrv              *fakeAdmin
		wantKey              string
		wantNoneOf           []*fakeAdmin
		wantCode             int
		wantStderrContaining string
	}{
		{name: "flag beats env", env: map[string]string{"MCPGATE_URL": envSrv.URL}, flags: []string{"--url", flagSrv.URL, "--config", cfgPath},
			wantSrv: flagSrv, wantNoneOf: []*fakeAdmin{envSrv, cfgSrv}},
		{name: "env beats config", env: map[string]string{"MCPGATE_URL": envSrv.URL}, flags: []string{"--config", cfgPath},
			wantSrv: envSrv, wantNoneOf: []*fakeAdmin{flagSrv, cfgSrv}},
		{name: "config listen", flags: []string{"--config", cfgPath}, wantSrv: cfgSrv, wantNoneOf: []*fakeAdmin{flagSrv, envSrv}},
		{name: "url without scheme", flags: []string{"--url", strings.TrimPrefix(flagSrv.URL, "http://")}, wantSrv: flagSrv},
		{name: "admin key flag beats env", env: map[string]string{"MCPGATE_ADMIN_KEY": "env-admin", "MCPGATE_MASTER_KEY": "env-master"},
			flags: []string{"--url", flagSrv.URL, "--admin-key", "flag-key"}, wantSrv: flagSrv, wantKey: "flag-key"},
		{name: "admin key env beats master key env", env: map[string]string{"MCPGATE_ADMIN_KEY": "env-admin", "MCPGATE_MASTER_KEY": "env-master"},
			flags: []string{"--url", flagSrv.URL}, wantSrv: flagSrv, wantKey: "env-admin"},
		{name: "master key env", env: map[string]string{"MCPGATE_MASTER_KEY": "env-master"},
			flags: []string{"--url", flagSrv.URL}, wantSrv: flagSrv, wantKey: "env-master"},
		{name: "no key", flags: []string{"--url", flagSrv.URL}, wantSrv: flagSrv, wantKey: ""},
		{name: "bad url", flags: []string{"--url", "ftp://x"}, wantCode: 2, wantStderrContaining: "--url: want an http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearAdminEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			before := map[*fakeAdmin]int{}
			for _, s := range []*fakeAdmin{flagSrv, envSrv, cfgSrv} {
				before[s] = len(s.requests())
			}
			code, _, stderr := cli(t, append([]string{"keys", "list"}, tc.flags...)...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tc.wantCode, stderr)
			}
			if !strings.Contains(stderr, tc.wantStderrContaining) {
				t.Errorf("stderr %q lacks %q", stderr, tc.wantStderrContaining)
			}
			if tc.wantSrv == nil {
				return
			}
			if got := len(tc.wantSrv.requests()) - before[tc.wantSrv]; got != 1 {
				t.Fatalf("the expected gateway got %d requests, want 1", got)
			}
			for _, s := range tc.wantNoneOf {
				if len(s.requests()) != before[s] {
					t.Errorf("another gateway was asked")
				}
			}
			r := tc.wantSrv.last(t)
			if r.Method != http.MethodGet || r.Path != "/admin/v1/keys" || r.Key != tc.wantKey {
				t.Errorf("got %s %s with key %q, want GET /admin/v1/keys with key %q", r.Method, r.Path, r.Key, tc.wantKey)
			}
		})
	}
	t.Run("default", func(t *testing.T) {
		clearAdminEnv(t)
		cl, err := (&adminFlags{}).client(nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := "http://" + config.DefaultListen; cl.base != want || cl.timeout != 10*time.Second {
			t.Errorf("base %q timeout %v, want %q 10s", cl.base, cl.timeout, want)
		}
	})
}

// keys create sends only the attributes given: no servers field means
// every server, --no-servers [], and --tools may repeat.
func TestKeysCreate(t *testing.T) {
	clearAdminEnv(t)
	const secret = "mcpg_0123456789abcdefghijkl"
	f := newFakeAdmin(t, canned(`{"alias":"bot","key":"`+secret+`"}`))
	for _, tc := range []struct {
		name  string
		flags []string
		want  map[string]any
	}{
		{"servers omitted", nil, map[string]any{"alias": "bot"}},
		{"no servers", []string{"--no-servers"}, map[string]any{"alias": "bot", "servers": []any{}}},
		{"some servers", []string{"--servers", "a, b"}, map[string]any{"alias": "bot", "servers": []any{"a", "b"}}},
		{"tools repeat", []string{"--tools", "calc=add,sub", "--tools", "notes=read", "--tools", "calc=mul", "--deny-tools", "calc=div"},
			map[string]any{"alias": "bot", "tools": map[string]any{"calc": []any{"add", "sub", "mul"}, "notes": []any{"read"}},
				"deny_tools": map[string]any{"calc": []any{"div"}}}},
		{"everything", []string{"--user", "u1", "--team", "t1", "--toolsets", "support,ops", "--access-groups", "g", "--cidrs", "10.0.0.0/8,192.168.1.1",
			"--rate-limit", "0", "--expires", "2026-12-31T23:59:59Z", "--admin", "--no-mcp"},
			map[string]any{"alias": "bot", "user": "u1", "team": "t1", "toolsets": []any{"support", "ops"}, "access_groups": []any{"g"},
				"allowed_cidrs": []any{"10.0.0.0/8", "192.168.1.1"}, "rate_limit_rpm": float64(0), "expires": "2026-12-31T23:59:59Z",
				"admin": true, "no_mcp": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := cli(t, append([]string{"keys", "create", "--url", f.URL, "--admin-key", "k", "--alias", "bot"}, tc.flags...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			r := f.last(t)
			if r.Method != http.MethodPost || r.Path != "/admin/v1/keys" || r.ContentType != "application/json" {
				t.Errorf("got %s %s (%s)", r.Method, r.Path, r.ContentType)
			}
			if got := r.bodyMap(t); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("body %s, want %v", r.Body, tc.want)
			}
			if stdout != secret+"\n" {
				t.Errorf("stdout %q, want the key on its own line", stdout)
			}
			if !strings.Contains(stderr, "only time") {
				t.Errorf("stderr %q lacks the shown-once note", stderr)
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		code, stdout, _ := cli(t, "keys", "create", "--url", f.URL, "--alias", "bot", "--json")
		var got map[string]string
		if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got["key"] != secret {
			t.Errorf("exit %d, stdout %q", code, stdout)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no alias", nil, "--alias is required"},
		{"servers and no servers", []string{"--alias", "bot", "--servers", "a", "--no-servers"}, "exclude each other"},
		{"empty servers", []string{"--alias", "bot", "--servers", ""}, "--no-servers for none"},
		{"tools without server", []string{"--alias", "bot", "--tools", "add"}, "want SERVER=tool1,tool2"},
		{"tools without tools", []string{"--alias", "bot", "--tools", "calc="}, "calc: want at least one tool"},
		{"bad expiry", []string{"--alias", "bot", "--expires", "tomorrow"}, "--expires"},
		{"negative rate", []string{"--alias", "bot", "--rate-limit", "-1"}, "--rate-limit"},
		{"stray argument", []string{"--alias", "bot", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(f.requests())
			code, _, stderr := cli(t, append([]string{"keys", "create", "--url", f.URL}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
			if len(f.requests()) != n {
				t.Errorf("a usage error reached the gateway")
			}
		})
	}
}

func TestKeysList(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, canned(`{"keys":[
		{"alias":"all","key_prefix":"mcpg_ab","user":"alice","team":"eng","servers":null,"source":"api","last_used_at":"2026-01-02T03:04:05Z","admin":false},
		{"alias":"none","key_prefix":"mcpg_cd","servers":[],"source":"config"},
		{"alias":"some","key_prefix":"mcpg_ef","user":"bob","servers":["calc","notes"],"source":"api"}]}`))
	code, stdout, stderr := cli(t, "keys", "list", "--url", f.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(stdout, "\n"), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	want := [][]string{
		{"ALIAS", "PREFIX", "USER", "TEAM", "SERVERS", "SOURCE", "LAST", "USED"},
		{"all", "mcpg_ab", "alice", "eng", "all", "api", "2026-01-02T03:04:05Z"},
		{"none", "mcpg_cd", "-", "-", "none", "config", "never"},
		{"some", "mcpg_ef", "bob", "-", "calc,notes", "api", "never"},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("table:\n%s\nwant rows %q", stdout, want)
	}
}

// The alias is one path segment, escaped; @ and . need no escaping.
func TestKeysRevoke(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, canned(""))
	for _, tc := range []struct{ alias, wantPath string }{
		{"alice@example.com", "/admin/v1/keys/alice@example.com"},
		{"ci.bot-1", "/admin/v1/keys/ci.bot-1"},
		{"a/b?c", "/admin/v1/keys/a%2Fb%3Fc"},
	} {
		t.Run(tc.alias, func(t *testing.T) {
			// The alias may come after the flags too.
			code, stdout, stderr := cli(t, "keys", "revoke", "--url", f.URL, tc.alias)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			r := f.last(t)
			if r.Method != http.MethodDelete || r.EscapedPath != tc.wantPath || len(r.Body) != 0 {
				t.Errorf("got %s %s body %q, want DELETE %s", r.Method, r.EscapedPath, r.Body, tc.wantPath)
			}
			if !strings.Contains(stdout, "revoked") {
				t.Errorf("stdout %q", stdout)
			}
		})
	}
	if code, _, stderr := cli(t, "keys", "revoke", "--url", f.URL); code != 2 || !strings.Contains(stderr, "ALIAS") {
		t.Errorf("no alias: exit %d, %q", code, stderr)
	}
	if code, _, _ := cli(t, "keys", "revoke", "--url", f.URL, "a", "b"); code != 2 {
		t.Errorf("two aliases: exit %d", code)
	}
}

// Non-2xx answers become "HTTP <status> <text>: <details>" on stderr and
// exit 1.
func TestAdminErrors(t *testing.T) {
	clearAdminEnv(t)
	for _, tc := range []struct {
		name   string
		status int
		body   string
		key    string
		want   string
	}{
		{"forbidden", 403, `{"error":"Forbidden"}`, "k", "mcpgate keys: HTTP 403 Forbidden\n"},
		{"details", 400, `{"error":"Bad Request","details":"alias: required"}`, "k", "HTTP 400 Bad Request: alias: required\n"},
		{"title and details", 502, `{"error":"Tool call failed","details":"boom","code":-32000}`, "k", "HTTP 502 Bad Gateway: Tool call failed: boom\n"},
		{"json-rpc refusal", 401, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Unauthorized: a valid mcpgate API key is required"}}`, "k",
			"HTTP 401 Unauthorized: a valid mcpgate API key is required\n"},
		{"no key hint", 401, `{"error":"Unauthorized"}`, "", "HTTP 401 Unauthorized: no key given: use --admin-key"},
		{"no key hint after message", 401, `{"error":"Unauthorized","details":"x"}`, "", "HTTP 401 Unauthorized: x (no key given: use --admin-key"},
		{"not json", 500, "<html>\n<b>oops</b></html>", "k", "HTTP 500 Internal Server Error: <html> <b>oops</b></html>\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t, func(adminRequest) (int, string) { return tc.status, tc.body })
			args := []string{"keys", "list", "--url", f.URL}
			if tc.key != "" {
				args = append(args, "--admin-key", tc.key)
			}
			code, stdout, stderr := cli(t, args...)
			if code != 1 || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 1 and %q", code, stdout, stderr, tc.want)
			}
		})
	}
	t.Run("no gateway", func(t *testing.T) {
		f := newFakeAdmin(t, nil)
		f.Close()
		if code, _, stderr := cli(t, "servers", "list", "--url", f.URL); code != 1 || !strings.Contains(stderr, "ask the gateway at "+f.URL) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
}

func TestServersList(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, canned(`{"servers":[{"name":"calc","transport":"http","target":"http://x/mcp","session_mode":"shared","auth":"none","state":"ready","since":"2026-01-02T03:04:05Z","sessions":2}]}`))
	code, stdout, stderr := cli(t, "servers", "list", "--url", f.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || !reflect.DeepEqual(strings.Fields(lines[1]), []string{"calc", "ready", "2026-01-02T03:04:05Z", "http", "shared", "2", "-"}) {
		t.Errorf("table:\n%s", stdout)
	}
	if r := f.last(t); r.Method != http.MethodGet || r.Path != "/admin/v1/servers" {
		t.Errorf("got %s %s", r.Method, r.Path)
	}
}

func TestToolsetsList(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, canned(`{"toolsets":[{"name":"support","servers":{"everything":["echo"],"calc":["add","sub"]}}]}`))
	code, stdout, stderr := cli(t, "toolsets", "list", "--url", f.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := "NAME     SERVER      TOOLS\nsupport  calc        add,sub\nsupport  everything  echo\n"
	if stdout != want {
		t.Errorf("table:\n%s\nwant:\n%s", stdout, want)
	}
	if r := f.last(t); r.Path != "/admin/v1/toolsets" {
		t.Errorf("path %s", r.Path)
	}
}

const sessionsJSON = `{"instance":"gw-1","total":3,
	"by_client":[{"label":"claude-code","count":2},{"label":"unknown","count":1}],
	"by_user":[{"label":"alice","count":2},{"label":"unknown","count":1}],
	"sessions":[
	 {"id_prefix":"abcd1234","client_name":"claude-code","client_version":"1.2","user":"alice","key_alias":"alice-key","client_ip":"10.0.0.1","route":"/mcp","servers":["calc"],"created":"2026-01-02T03:04:05Z","idle_seconds":75.5,"in_flight":1,"upstream_sessions":1},
	 {"id_prefix":"bcde2345","client_name":"claude-code","user":"alice","route":"/toolset/support/mcp","servers":[],"created":"2026-01-02T03:05:05Z","idle_seconds":3,"in_flight":0,"upstream_sessions":0},
	 {"id_prefix":"cdef3456","route":"/mcp","servers":[],"created":"2026-01-02T03:06:05Z","idle_seconds":0,"in_flight":0,"upstream_sessions":0}]}`

func TestSessions(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, func(r adminRequest) (int, string) {
		if r.Path == "/admin/v1/sessions/terminate" {
			return 200, `{"terminated":2,"sessions":[{"id_prefix":"abcd1234","user":"alice","client_name":"claude-code","route":"/mcp","servers":[],"created":"","idle_seconds":0,"in_flight":0,"upstream_sessions":0},{"id_prefix":"bcde2345","user":"alice","route":"/mcp","servers":[],"created":"","idle_seconds":0,"in_flight":0,"upstream_sessions":0}]}`
		}
		return 200, sessionsJSON
	})
	code, stdout, stderr := cli(t, "sessions", "list", "--url", f.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("output:\n%s", stdout)
	}
	for i, want := range [][]string{
		{"ID", "CLIENT", "USER", "KEY", "IP", "ROUTE", "CREATED", "IDLE", "IN", "FLIGHT"},
		{"abcd1234", "claude-code/1.2", "alice", "alice-key", "10.0.0.1", "/mcp", "2026-01-02T03:04:05Z", "1m15s", "1"},
		{"bcde2345", "claude-code", "alice", "-", "-", "/toolset/support/mcp", "2026-01-02T03:05:05Z", "3s", "0"},
		{"cdef3456", "-", "-", "-", "-", "/mcp", "2026-01-02T03:06:05Z", "0s", "0"},
	} {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("row %d: %q, want %q", i, got, want)
		}
	}
	if want := "3 session(s) on gw-1; by client: claude-code 2, unknown 1; by user: alice 2, unknown 1"; lines[4] != want {
		t.Errorf("summary %q, want %q", lines[4], want)
	}

	n := len(f.requests())
	if code, _, stderr := cli(t, "sessions", "terminate", "--url", f.URL); code != 2 || !strings.Contains(stderr, "--id PREFIX and/or --user USER") {
		t.Errorf("no selector: exit %d, %q", code, stderr)
	}
	if len(f.requests()) != n {
		t.Errorf("terminate without a selector reached the gateway")
	}

	code, stdout, stderr = cli(t, "sessions", "terminate", "--url", f.URL, "--user", "alice")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := f.last(t)
	if got, want := r.bodyMap(t), map[string]any{"user": "alice"}; r.Method != http.MethodPost || !reflect.DeepEqual(got, want) {
		t.Errorf("got %s %s %s", r.Method, r.Path, r.Body)
	}
	if want := "terminated 2 session(s)\nabcd1234 user=alice client=claude-code\nbcde2345 user=alice\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	cli(t, "sessions", "terminate", "--url", f.URL, "--id", "abcd")
	if got, want := f.last(t).bodyMap(t), map[string]any{"session_id_prefix": "abcd"}; !reflect.DeepEqual(got, want) {
		t.Errorf("body %v, want %v", got, want)
	}
}

// A change some replica of a fleet did not confirm in time was made: the
// command succeeds and says so on stderr, with the count only (the
// header is the server's, not text for a terminal). A termination says
// how many of its sessions were not confirmed ended.
func TestUnconfirmedWarning(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, func(r adminRequest) (int, string) {
		if r.Path == "/admin/v1/sessions/terminate" {
			return 200, `{"terminated":1,"sessions":[{"id_prefix":"abcd1234","user":"alice","route":"/mcp","servers":[],"created":"","idle_seconds":0,"in_flight":0,"upstream_sessions":0}],"unconfirmed":1}`
		}
		return http.StatusNoContent, ""
	})
	code, stdout, stderr := cli(t, "keys", "revoke", "ci", "--url", f.URL)
	if code != 0 || stdout != "revoked key \"ci\"\n" || stderr != "" {
		t.Errorf("confirmed: exit %d, stdout %q, stderr %q; want no warning", code, stdout, stderr)
	}
	f.setHeader(http.Header{admin.HeaderUnconfirmed: {"1"}})
	code, stdout, stderr = cli(t, "keys", "revoke", "ci", "--url", f.URL)
	if code != 0 || stdout != "revoked key \"ci\"\n" || !strings.Contains(stderr, "warning: 1 change(s) made, but not every replica confirmed") {
		t.Errorf("unconfirmed: exit %d, stdout %q, stderr %q; want the revocation and a warning", code, stdout, stderr)
	}
	code, _, stderr = cli(t, "connections", "revoke", "key:alice", "calc", "--url", f.URL)
	if code != 0 || !strings.Contains(stderr, "warning: 1 change(s)") {
		t.Errorf("connection revoked, unconfirmed: exit %d, stderr %q; want a warning", code, stderr)
	}
	f.setHeader(http.Header{admin.HeaderUnconfirmed: {"all of them; rm -rf"}})
	if code, _, stderr = cli(t, "keys", "revoke", "ci", "--url", f.URL); code != 0 || stderr != "" {
		t.Errorf("a header that is not a count: exit %d, stderr %q; want nothing printed", code, stderr)
	}
	f.setHeader(nil)
	code, stdout, stderr = cli(t, "sessions", "terminate", "--url", f.URL, "--user", "alice")
	if code != 0 || !strings.HasPrefix(stdout, "terminated 1 session(s)") || !strings.Contains(stderr, "warning: 1 of them not confirmed ended by every replica") {
		t.Errorf("termination unconfirmed: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// A fleet's report: each session's replicas in a column, the replicas
// the report covers in the summary, and why it may miss sessions.
func TestSessionsListFleet(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, func(adminRequest) (int, string) {
		return 200, `{"instance":"r1","total":2,"by_client":[],"by_user":[],"replicas":["r1","r2"],
		"incomplete":"the shared state holds more sessions than a report lists (100000)",
		"sessions":[
		 {"id_prefix":"abcd1234","route":"/mcp","servers":[],"created":"2026-01-02T03:04:05Z","idle_seconds":0,"in_flight":0,"upstream_sessions":0,"replicas":["r1","r2"]},
		 {"id_prefix":"bcde2345","route":"/mcp","servers":[],"created":"2026-01-02T03:05:05Z","idle_seconds":0,"in_flight":0,"upstream_sessions":0,"replicas":[]}]}`
	})
	code, stdout, stderr := cli(t, "sessions", "list", "--url", f.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("output:\n%s", stdout)
	}
	for i, want := range [][]string{
		{"ID", "CLIENT", "USER", "KEY", "IP", "ROUTE", "CREATED", "IDLE", "IN", "FLIGHT", "REPLICAS"},
		{"abcd1234", "-", "-", "-", "-", "/mcp", "2026-01-02T03:04:05Z", "0s", "0", "r1,r2"},
		{"bcde2345", "-", "-", "-", "-", "/mcp", "2026-01-02T03:05:05Z", "0s", "0", "-"},
	} {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("row %d: %q, want %q", i, got, want)
		}
	}
	if want := "2 session(s) on replicas r1, r2 (asked r1)"; lines[3] != want {
		t.Errorf("summary %q, want %q", lines[3], want)
	}
	if want := "incomplete: the shared state holds more sessions than a report lists (100000)"; lines[4] != want {
		t.Errorf("last line %q, want %q", lines[4], want)
	}
}

func TestToolsList(t *testing.T) {
	clearAdminEnv(t)
	long := strings.Repeat("word ", 20)
	f := newFakeAdmin(t, canned(`{"tools":[{"name":"calc_add","server":"calc","upstream_name":"add","description":"Adds\ttwo numbers."},
		{"name":"notes_read","server":"notes","upstream_name":"read","description":"`+long+`"}]}`))
	code, stdout, stderr := cli(t, "tools", "list", "--url", f.URL, "--as", "bob@example.com", "--route", "/toolset/support/mcp")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := f.last(t)
	if r.Path != "/admin/v1/tools" || r.Query != "key=bob%40example.com&route=%2Ftoolset%2Fsupport%2Fmcp" {
		t.Errorf("got %s?%s", r.Path, r.Query)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "calc    Adds two numbers.") {
		t.Fatalf("table:\n%s", stdout)
	}
	desc := lines[2][strings.Index(lines[0], "DESCRIPTION"):]
	if len([]rune(desc)) != descriptionWidth || !strings.HasSuffix(desc, "...") {
		t.Errorf("description %q: want %d runes ending in ...", desc, descriptionWidth)
	}
	cli(t, "tools", "list", "--url", f.URL)
	if r := f.last(t); r.Query != "" {
		t.Errorf("query %q without --as and --route", r.Query)
	}
}

func TestCall(t *testing.T) {
	clearAdminEnv(t)
	result := `{"content":[{"type":"text","text":"3"},{"type":"image","data":"AAA=","mimeType":"image/png"},{"type":"text","text":"done"}]}`
	f := newFakeAdmin(t, func(r adminRequest) (int, string) {
		var in struct{ Name string }
		json.Unmarshal(r.Body, &in)
		if in.Name == "fail" {
			return 200, `{"content":[{"type":"text","text":"division by zero"}],"isError":true}`
		}
		return 200, result
	})
	code, stdout, stderr := cli(t, "call", "--url", f.URL, "calc_add", "--args", ` {"a": 1, "b": 2} `, "--as", "bot", "--route", "/mcp")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := f.last(t)
	want := map[string]any{"name": "calc_add", "arguments": map[string]any{"a": float64(1), "b": float64(2)}, "key": "bot", "route": "/mcp"}
	if got := r.bodyMap(t); r.Method != http.MethodPost || r.Path != "/admin/v1/tools/call" || !reflect.DeepEqual(got, want) {
		t.Errorf("got %s %s %s", r.Method, r.Path, r.Body)
	}
	if want := "3\n" + `{"type":"image","data":"AAA=","mimeType":"image/png"}` + "\ndone\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}

	cli(t, "call", "calc_add", "--url", f.URL)
	if got := f.last(t).bodyMap(t); !reflect.DeepEqual(got, map[string]any{"name": "calc_add"}) {
		t.Errorf("without --args: body %v", got)
	}

	code, stdout, stderr = cli(t, "call", "fail", "--url", f.URL, "--args", "{}")
	if code != 1 || stdout != "division by zero\n" || !strings.Contains(stderr, "tool fail returned an error") {
		t.Errorf("isError: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, "call", "fail", "--url", f.URL, "--json")
	if code != 1 || !json.Valid([]byte(stdout)) {
		t.Errorf("isError --json: exit %d, stdout %q", code, stdout)
	}

	n := len(f.requests())
	for _, args := range []string{"[1]", "nope", "null", `"s"`, `{"a":1} {}`} {
		if code, _, stderr := cli(t, "call", "calc_add", "--url", f.URL, "--args", args); code != 2 || !strings.Contains(stderr, "--args: want a JSON object") {
			t.Errorf("--args %s: exit %d, %q", args, code, stderr)
		}
	}
	if code, _, _ := cli(t, "call", "--url", f.URL); code != 2 {
		t.Errorf("no tool: exit %d", code)
	}
	if len(f.requests()) != n {
		t.Errorf("a usage error reached the gateway")
	}
}

// auditCall is one canned audit record.
func auditCall(ms int, tool string) string {
	return fmt.Sprintf(`{"time":"2026-01-02T03:04:05.%03dZ","key_alias":"bot","server":"calc","tool":%q,"outcome":"ok","duration_ms":%d,"request_bytes":1,"response_bytes":2}`, ms, tool, ms)
}

func auditPageJSON(next string, calls ...string) string {
	return `{"calls":[` + strings.Join(calls, ",") + `],"next":"` + next + `"}`
}

func TestAuditList(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, canned(auditPageJSON("1767323045100.7", auditCall(200, "add"),
		`{"time":"2026-01-02T03:04:05.100Z","server":"calc","tool":"div","outcome":"error","fault":"upstream_error","duration_ms":12,"request_bytes":1,"response_bytes":2}`)))
	code, stdout, stderr := cli(t, "audit", "--url", f.URL, "--key", "bot", "--server", "calc", "--tool", "add", "--outcome", "ok", "--limit", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r := f.last(t); r.Path != "/admin/v1/audit" || r.Query != "key=bot&limit=2&outcome=ok&server=calc&tool=add" {
		t.Errorf("got %s?%s", r.Path, r.Query)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(stdout, "\n"), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	want := [][]string{
		{"TIME", "KEY", "SERVER", "TOOL", "OUTCOME", "MS"},
		{"2026-01-02T03:04:05.200Z", "bot", "calc", "add", "ok", "200"},
		{"2026-01-02T03:04:05.100Z", "-", "calc", "div", "error/upstream_error", "12"},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("table:\n%s", stdout)
	}
	if !strings.Contains(stderr, "--before 1767323045100.7") {
		t.Errorf("stderr %q lacks the next page", stderr)
	}
	if code, _, _ := cli(t, "audit", "--url", f.URL, "--follow", "--before", "1.2"); code != 2 {
		t.Errorf("--follow --before: exit %d", code)
	}
}

// --follow prints the newest page oldest first, then each new record
// once, and ends without error when its context does.
func TestAuditFollow(t *testing.T) {
	clearAdminEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c1, c2, c3, c4, c5 := auditCall(100, "one"), auditCall(200, "two"), auditCall(300, "three"), auditCall(300, "four"), auditCall(400, "five")
	// The answers in order, newest first, each poll holding every record
	// at or after the since it was asked for.
	pages := []string{
		auditPageJSON("", c2, c1),
		auditPageJSON("", c2),                    // nothing new
		auditPageJSON("", c4, c3, c2),            // two new in the same millisecond
		auditPageJSON("1767323045300.9", c4, c3), // a poll of two pages...
		auditPageJSON("", c5),                    // ...joined
		auditPageJSON("", c5),
	}
	var mu sync.Mutex
	i := 0
	f := newFakeAdmin(t, func(adminRequest) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if i == len(pages)-1 {
			cancel() // as if the user pressed Ctrl-C
		}
		p := pages[min(i, len(pages)-1)]
		i++
		return 200, p
	})
	done := make(chan struct{})
	var code int
	var stdout, stderr string
	go func() {
		defer close(done)
		code, stdout, stderr = cliContext(ctx, t, "audit", "--url", f.URL, "--follow", "--interval", "5ms", "--tool", "x", "--limit", "2")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("audit --follow did not stop when its context ended")
	}
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var tools []string
	for _, l := range strings.Split(strings.TrimRight(stdout, "\n"), "\n")[1:] {
		tools = append(tools, strings.Fields(l)[3])
	}
	if want := []string{"one", "two", "three", "four", "five"}; !reflect.DeepEqual(tools, want) {
		t.Errorf("printed %q, want %q:\n%s", tools, want, stdout)
	}
	reqs := f.requests()
	wantQueries := []string{
		"limit=2&tool=x",
		"limit=1000&since=2026-01-02T03%3A04%3A05.2Z&tool=x",
		"limit=1000&since=2026-01-02T03%3A04%3A05.2Z&tool=x",
		"limit=1000&since=2026-01-02T03%3A04%3A05.3Z&tool=x",
		"before=1767323045300.9&limit=1000&since=2026-01-02T03%3A04%3A05.3Z&tool=x",
		"limit=1000&since=2026-01-02T03%3A04%3A05.4Z&tool=x",
	}
	for j, want := range wantQueries {
		if j >= len(reqs) || reqs[j].Query != want {
			t.Errorf("request %d: query %q, want %q", j, reqs[j].Query, want)
		}
	}
}

// The follower's window with a lookback: a call recorded late, older
// than the newest seen, still prints once.
func TestAuditFollowerLookback(t *testing.T) {
	entry := func(ms int, tool string) auditEntry {
		var e auditEntry
		e.raw = json.RawMessage(auditCall(ms, tool))
		if err := json.Unmarshal(e.raw, &e.rec); err != nil {
			t.Fatal(err)
		}
		return e
	}
	tools := func(es []auditEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.rec.Tool)
		}
		return out
	}
	f := &follower{lookback: time.Second}
	if got := tools(f.advance([]auditEntry{entry(500, "b"), entry(100, "a")})); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("first page: %q", got)
	}
	if got := f.since().Format(time.RFC3339Nano); got != "2026-01-02T03:04:04.5Z" {
		t.Errorf("since %s", got)
	}
	// "late" started at .300 but was recorded after "b".
	if got := tools(f.advance([]auditEntry{entry(600, "c"), entry(500, "b"), entry(300, "late"), entry(100, "a")})); !reflect.DeepEqual(got, []string{"late", "c"}) {
		t.Errorf("second poll: %q", got)
	}
	if got := tools(f.advance([]auditEntry{entry(600, "c"), entry(500, "b"), entry(300, "late"), entry(100, "a")})); got != nil {
		t.Errorf("repeated poll: %q", got)
	}
}

// Every command's --json prints the API's answer, indented.
func TestAdminJSONOutput(t *testing.T) {
	clearAdminEnv(t)
	answers := map[string]string{
		"/admin/v1/keys":               `{"keys":[{"alias":"a","servers":null,"source":"api"}]}`,
		"/admin/v1/servers":            `{"servers":[]}`,
		"/admin/v1/toolsets":           `{"toolsets":[]}`,
		"/admin/v1/sessions":           sessionsJSON,
		"/admin/v1/sessions/terminate": `{"terminated":0,"sessions":[]}`,
		"/admin/v1/tools":              `{"tools":[]}`,
		"/admin/v1/tools/call":         `{"content":[{"type":"text","text":"hi"}]}`,
		"/admin/v1/audit":              auditPageJSON("", auditCall(1, "t")),
	}
	f := newFakeAdmin(t, func(r adminRequest) (int, string) { return 200, answers[r.Path] })
	for _, args := range [][]string{
		{"keys", "list"}, {"servers", "status"}, {"servers", "list"}, {"toolsets", "list"}, {"sessions", "list"},
		{"sessions", "terminate", "--user", "u"}, {"tools", "list"}, {"call", "t"}, {"audit"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := cli(t, append(args, "--url", f.URL, "--json")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if !json.Valid([]byte(stdout)) || !strings.HasPrefix(stdout, "{\n  \"") || !strings.HasSuffix(stdout, "}\n") {
				t.Errorf("not indented JSON: %q", stdout)
			}
		})
	}
}

// Against a real gateway: a key made by keys create is listed, and is
// gone once revoked; the API takes the bodies the CLI sends.
func TestAdminCLIAgainstGateway(t *testing.T) {
	clearAdminEnv(t)
	const master = "master-key-0123456789"
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Auth: &config.CallerAuth{MasterKey: master},
		Servers: map[string]*config.Server{
			"calc": {Name: "calc", Transport: config.TransportHTTP, URL: "http://127.0.0.1:1/mcp", Timeout: time.Second},
		}}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.close(context.Background())
	hs := httptest.NewServer(stk.handler)
	defer hs.Close()
	t.Setenv("MCPGATE_URL", hs.URL)
	t.Setenv("MCPGATE_MASTER_KEY", master)

	code, stdout, stderr := cli(t, "keys", "create", "--alias", "alice@example.com", "--user", "alice", "--servers", "calc",
		"--tools", "calc=add", "--deny-tools", "calc=div", "--cidrs", "10.0.0.0/8", "--rate-limit", "60", "--expires", "2099-01-01T00:00:00Z")
	if code != 0 || !strings.HasPrefix(stdout, "mcpg") {
		t.Fatalf("create: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := cli(t, "keys", "create", "--alias", "nobody", "--no-servers", "--admin", "--no-mcp"); code != 0 {
		t.Fatalf("create --no-servers: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = cli(t, "keys", "list")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, stderr)
	}
	for _, want := range [][]string{{"alice@example.com", "alice", "-", "calc", "api", "never"}, {"nobody", "-", "-", "none", "api", "never"}} {
		found := false
		for _, l := range strings.Split(stdout, "\n") {
			f := strings.Fields(l)
			if len(f) == 7 && f[0] == want[0] && reflect.DeepEqual(append(f[:1:1], f[2:]...), want) {
				found = true
			}
		}
		if !found {
			t.Errorf("list lacks %q:\n%s", want, stdout)
		}
	}
	if code, _, stderr := cli(t, "keys", "create", "--alias", "x", "--servers", "nope"); code != 1 || !strings.Contains(stderr, `HTTP 400 Bad Request: servers[0]: unknown server "nope"`) {
		t.Errorf("unknown server: exit %d, %q", code, stderr)
	}
	if code, _, stderr := cli(t, "keys", "revoke", "alice@example.com"); code != 0 {
		t.Fatalf("revoke: exit %d: %s", code, stderr)
	}
	if code, _, stderr := cli(t, "keys", "revoke", "alice@example.com"); code != 1 || !strings.Contains(stderr, "HTTP 404 Not Found") {
		t.Errorf("revoke again: exit %d, %q", code, stderr)
	}
	if code, stdout, _ := cli(t, "keys", "list"); code != 0 || strings.Contains(stdout, "alice@example.com") {
		t.Errorf("revoked key still listed:\n%s", stdout)
	}
	if code, _, stderr := cli(t, "keys", "list", "--admin-key", "wrong-key-0123456789"); code != 1 || !strings.Contains(stderr, "HTTP 401 Unauthorized") {
		t.Errorf("wrong key: exit %d, %q", code, stderr)
	}
	if code, stdout, stderr := cli(t, "sessions", "list"); code != 0 || !strings.Contains(stdout, "0 session(s)") {
		t.Errorf("sessions: exit %d, %q %q", code, stdout, stderr)
	}
	if code, stdout, stderr := cli(t, "audit"); code != 0 || !strings.HasPrefix(stdout, "TIME") {
		t.Errorf("audit: exit %d, %q %q", code, stdout, stderr)
	}
}

func TestUsageCommand(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, canned(`{"by":"team","total":2.75,"usage":[{"group":"ops","calls":2,"cost":2},{"group":"","calls":3,"cost":0.75}]}`))
	code, stdout, stderr := cli(t, "usage", "--url", f.URL, "--by", "team", "--since", "2026-11-01T00:00:00Z", "--until", "2026-12-01T00:00:00Z")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r := f.last(t); r.Path != "/admin/v1/usage" || r.Query != "by=team&since=2026-11-01T00%3A00%3A00Z&until=2026-12-01T00%3A00%3A00Z" {
		t.Errorf("got %s?%s", r.Path, r.Query)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(stdout, "\n"), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	want := [][]string{{"TEAM", "CALLS", "COST"}, {"ops", "2", "2"}, {"-", "3", "0.75"}, {"TOTAL", "2.75"}}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("table:\n%s", stdout)
	}
	n := len(f.requests())
	for _, args := range [][]string{{"--by", "server"}, {"--since", "yesterday"}, {"extra"}} {
		if code, _, _ := cli(t, append([]string{"usage", "--url", f.URL}, args...)...); code != 2 {
			t.Errorf("%v: exit %d", args, code)
		}
	}
	if len(f.requests()) != n {
		t.Error("a usage error reached the gateway")
	}
}

// TestCellNeutralisesTerminalControls: a table cell never carries a
// control or bidi character to the terminal (a hostile upstream's tool
// name with an ESC sequence, a client's name with an override).
func TestCellNeutralisesTerminalControls(t *testing.T) {
	for in, want := range map[string]string{
		"echo":                  "echo",
		"":                      "-",
		"a\tb\nc":               "a b c",
		"x\x1b]0;pwned\x07y":    `x\u001b]0;pwned\u0007y`,
		"\x1b[2Jclear":          `\u001b[2Jclear`,
		"\u009b31mred":          `\u009b31mred`,
		"safe\u202egnp.exe":     `safe\u202egnp.exe`,
		"héllo wörld":           "héllo wörld",
		"\u2066isolate\u2069ok": `\u2066isolate\u2069ok`,
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
}
