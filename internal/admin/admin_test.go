package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

const master = "master-key-0123456789abcdef"

// toolUpstream is a streamable-HTTP MCP server with the given tools; each
// answers its own name.
func toolUpstream(t *testing.T, tools ...string) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result string
		switch m.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"0"}}`
		case "tools/list":
			var items []string
			for _, n := range tools {
				items = append(items, `{"name":"`+n+`","description":"the `+n+` tool","inputSchema":{"type":"object"}}`)
			}
			result = `{"tools":[` + strings.Join(items, ",") + `]}`
		default:
			name, _ := jsonrpc.GetString(m.Params, "name")
			result = `{"content":[{"type":"text","text":"called ` + name + `"}]}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

type rig struct {
	url   string
	store store.Store
	gw    *gateway.Gateway
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r, _ := newRigWith(t, nil)
	return r
}

// newRigWith is newRig with its API's options changed by opt first (when
// not nil); it returns the API too.
func newRigWith(t *testing.T, opt func(*Options)) (*rig, *API) {
	t.Helper()
	cfg := &config.Config{
		Listen: "127.0.0.1:0", ToolNameSeparator: "__",
		Servers: map[string]*config.Server{
			"calc":  {Name: "calc", Transport: config.TransportHTTP, URL: toolUpstream(t, "add", "sub", "drop"), Timeout: 5 * time.Second, Tools: &config.ToolPolicy{Deny: []string{"drop"}}},
			"notes": {Name: "notes", Transport: config.TransportHTTP, URL: toolUpstream(t, "read", "write"), Timeout: 5 * time.Second},
		},
		Toolsets:     map[string]*config.Toolset{"support": {Servers: map[string][]string{"notes": {"read"}}}},
		AccessGroups: map[string][]string{"readonly": {"notes"}},
		Auth: &config.CallerAuth{MasterKey: master, Grants: []config.Grant{
			{Team: "calc-team", Servers: []string{"calc"}, DenyTools: map[string][]string{"calc": {"sub"}}},
			{Role: "reader", AccessGroups: []string{"readonly"}, Servers: []string{}},
		}},
	}
	st, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	auth := callers.New(callers.Options{Keys: st, MasterKey: master})
	g := gateway.New(gateway.Options{Config: cfg, Authenticator: auth, Terminations: st})
	o := Options{Gateway: g, Store: st, Config: cfg, Authenticate: auth.Authenticate, KeyChanged: auth.Invalidate, Grants: callers.NewGrantSet(cfg.Auth.Grants),
		Servers: cfg.ServerNames, Toolsets: g.ToolsetNames, AccessGroups: func() []string { return []string{"readonly"} }}
	if opt != nil {
		opt(&o)
	}
	api := New(o)
	ts := httptest.NewServer(mounted(g, api))
	t.Cleanup(func() {
		ts.Close()
		g.Close(context.Background())
		auth.Close()
		st.Close()
	})
	return &rig{url: ts.URL, store: st, gw: g}, api
}

func (r *rig) do(t *testing.T, method, path, key, body string) (int, string) {
	t.Helper()
	code, out, _ := r.doH(t, method, path, key, body)
	return code, out
}

// doH is do with the answer's header.
func (r *rig) doH(t *testing.T, method, path, key, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, r.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("X-Mcpgate-Api-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func (r *rig) createKey(t *testing.T, body string) string {
	t.Helper()
	code, out := r.do(t, "POST", "/admin/v1/keys", master, body)
	if code != http.StatusCreated {
		t.Fatalf("create key %s: %d %s", body, code, out)
	}
	var ck CreatedKey
	if err := json.Unmarshal([]byte(out), &ck); err != nil || !strings.HasPrefix(ck.Key, "mcpg_") {
		t.Fatalf("created: %s", out)
	}
	return ck.Key
}

func TestKeysLifecycle(t *testing.T) {
	r := newRig(t)
	secret := r.createKey(t, `{"alias":"bot","user":"alice","servers":["calc"],"rate_limit_rpm":100}`)
	// The new key works on MCP at once, and sees only calc.
	code, body := r.do(t, "POST", "/mcp", secret, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if code != 200 || !strings.Contains(body, "calc__add") || strings.Contains(body, "notes__") || strings.Contains(body, "calc__drop") {
		t.Fatalf("tools as bot: %d %s", code, body)
	}
	// Listing and reading never show the secret.
	code, body = r.do(t, "GET", "/admin/v1/keys", master, "")
	if code != 200 || !strings.Contains(body, `"alias":"bot"`) || strings.Contains(body, secret) || strings.Contains(body, store.HashKey(secret)) {
		t.Errorf("list: %d %s", code, body)
	}
	code, body = r.do(t, "PATCH", "/admin/v1/keys/bot", master, `{"servers":["calc","notes"]}`)
	if code != 200 || !strings.Contains(body, `"servers":["calc","notes"]`) {
		t.Errorf("patch: %d %s", code, body)
	}
	if _, body = r.do(t, "POST", "/mcp", secret, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); !strings.Contains(body, "notes__read") {
		t.Errorf("the patch did not take effect at once: %s", body)
	}
	// A non-admin key gets a bare 403 on every admin endpoint.
	for _, p := range []string{"/admin/v1/keys", "/admin/v1/sessions", "/admin/v1/nope", "/admin/v1/keys/bot"} {
		code, body := r.do(t, "GET", p, secret, "")
		if code != http.StatusForbidden || strings.TrimSpace(body) != `{"error":"Forbidden"}` {
			t.Errorf("non-admin GET %s: %d %s", p, code, body)
		}
	}
	if code, _ := r.do(t, "GET", "/admin/v1/keys", "", ""); code != http.StatusUnauthorized {
		t.Errorf("no key: %d", code)
	}
	// Revoke: 204, then the key fails at once with the same 401 as a wrong key.
	if code, _ := r.do(t, "DELETE", "/admin/v1/keys/bot", master, ""); code != http.StatusNoContent {
		t.Errorf("revoke: %d", code)
	}
	code, revoked := r.do(t, "POST", "/mcp", secret, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	_, wrong := r.do(t, "POST", "/mcp", "mcpg_wrong", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if code != http.StatusUnauthorized || revoked != wrong {
		t.Errorf("revoked key: %d %s (wrong key: %s)", code, revoked, wrong)
	}
	if code, _ := r.do(t, "DELETE", "/admin/v1/keys/bot", master, ""); code != http.StatusNotFound {
		t.Errorf("second revoke: %d", code)
	}
	// Every change is in the admin audit log, newest first.
	_, body = r.do(t, "GET", "/admin/v1/audit/events", master, "")
	var ev struct{ Events []EventRecord }
	json.Unmarshal([]byte(body), &ev)
	var actions []string
	for _, e := range ev.Events {
		actions = append(actions, e.Action+":"+e.Actor)
	}
	if !slices.Equal(actions, []string{"key.revoke:master", "key.update:master", "key.create:master"}) {
		t.Errorf("audit events %v", actions)
	}
}

func TestKeyValidation(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct{ body, want string }{
		{`{"alias":"a","servers":["nope"]}`, `servers[0]: unknown server \"nope\"`},
		{`{"alias":"a","toolsets":["nope"]}`, `toolsets[0]: unknown toolset \"nope\"`},
		{`{"alias":"a","access_groups":["nope"]}`, `access_groups[0]: unknown access group \"nope\"`},
		{`{"alias":"a","allowed_cidrs":["10.0.0.0/33"]}`, `allowed_cidrs[0]: invalid CIDR \"10.0.0.0/33\"`},
		{`{"alias":"a","rate_limit_rpm":-1}`, `rate_limit_rpm: must be >= 0`},
		{`{"alias":"a","tools":{"nope":["x"]}}`, `tools: unknown server \"nope\"`},
		{`{"alias":"bad alias"}`, `alias: must match`},
		{`{"user":"x"}`, `alias: required`},
		{`{"alias":"a","colour":"red"}`, `unknown field \"colour\"`},
		{`{"alias":"a","rate_limit_rpm":"many"}`, `field \"rate_limit_rpm\" must be int`},
		{`not json`, `invalid JSON`},
	} {
		code, body := r.do(t, "POST", "/admin/v1/keys", master, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want 400 with %s", tc.body, code, body, tc.want)
		}
	}
	r.createKey(t, `{"alias":"dup"}`)
	if code, body := r.do(t, "POST", "/admin/v1/keys", master, `{"alias":"dup"}`); code != http.StatusConflict {
		t.Errorf("duplicate alias: %d %s", code, body)
	}
}

func TestToolsExplainAndCallAsKey(t *testing.T) {
	r := newRig(t)
	r.createKey(t, `{"alias":"support-bot","servers":[],"toolsets":["support"],"access_groups":[]}`)
	r.createKey(t, `{"alias":"calc-bot","servers":["calc"],"deny_tools":{"calc":["sub"]}}`)

	code, body := r.do(t, "GET", "/admin/v1/tools?key=calc-bot", master, "")
	var tl struct{ Tools []gateway.ToolInfo }
	json.Unmarshal([]byte(body), &tl)
	var names []string
	for _, x := range tl.Tools {
		names = append(names, x.Name)
	}
	if code != 200 || !slices.Equal(names, []string{"calc__add"}) {
		t.Errorf("tools as calc-bot: %d %v %s", code, names, body)
	}
	_, body = r.do(t, "GET", "/admin/v1/tools?key=support-bot&route=/toolset/support/mcp", master, "")
	if !strings.Contains(body, `"notes__read"`) || strings.Contains(body, "write") {
		t.Errorf("tools as support-bot on its toolset: %s", body)
	}
	code, body = r.do(t, "GET", "/admin/v1/tools?key=support-bot&route=/toolset/other/mcp", master, "")
	if code != http.StatusBadRequest || !strings.Contains(body, "does not have access to toolset 'other'") {
		t.Errorf("other toolset: %d %s", code, body)
	}
	for _, tc := range []struct {
		key, tool string
		allowed   bool
		rule      string
	}{
		{"calc-bot", "calc__add", true, ""},
		{"calc-bot", "calc__sub", false, "deny_tools"},
		{"calc-bot", "calc__drop", false, "deny"},
		{"calc-bot", "notes__read", false, "not granted"},
	} {
		_, body := r.do(t, "GET", "/admin/v1/explain?key="+tc.key+"&tool="+tc.tool, master, "")
		var ex ExplainView
		if err := json.Unmarshal([]byte(body), &ex); err != nil || ex.Allowed != tc.allowed || !strings.Contains(ex.Rule, tc.rule) {
			t.Errorf("explain %s %s: %s", tc.key, tc.tool, body)
		}
		// And the call agrees with the explanation.
		code, out := r.do(t, "POST", "/admin/v1/tools/call", master, `{"name":"`+tc.tool+`","arguments":{},"key":"`+tc.key+`"}`)
		if got := code == 200 && strings.Contains(out, "called "); got != tc.allowed {
			t.Errorf("call %s as %s: %d %s", tc.tool, tc.key, code, out)
		}
	}
	// A JWT caller's view, by user, team and role (SPEC S5.3): what the
	// grants give it.
	for _, tc := range []struct {
		query, tool string
		allowed     bool
	}{
		{"user=ann&team=calc-team", "calc__add", true},
		{"user=ann&team=calc-team", "calc__sub", false},
		{"user=ann&team=calc-team", "notes__read", false},
		{"user=ann&role=reader", "notes__read", true},
		{"user=ann&role=reader", "calc__add", false},
		{"user=ann&team=calc-team&role=reader", "notes__read", true},
		{"user=nobody", "calc__add", false},
	} {
		_, body := r.do(t, "GET", "/admin/v1/explain?"+tc.query+"&tool="+tc.tool, master, "")
		var ex ExplainView
		if err := json.Unmarshal([]byte(body), &ex); err != nil || ex.Allowed != tc.allowed || ex.User != "ann" && ex.User != "nobody" {
			t.Errorf("explain %s %s: %s", tc.query, tc.tool, body)
		}
	}
	if code, body := r.do(t, "POST", "/admin/v1/tools/call", master, `{"name":"calc__add","arguments":[1]}`); code != 400 || !strings.Contains(body, "arguments: must be a JSON object") {
		t.Errorf("bad arguments: %d %s", code, body)
	}
}

func TestSessionsEndpoints(t *testing.T) {
	r := newRig(t)
	secret := r.createKey(t, `{"alias":"bot","user":"alice"}`)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2"}}}`
	req, _ := http.NewRequest("POST", r.url+"/mcp", strings.NewReader(init))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Mcpgate-Api-Key", secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	code, body := r.do(t, "GET", "/admin/v1/sessions", master, "")
	var rep gateway.SessionsReport
	json.Unmarshal([]byte(body), &rep)
	if code != 200 || rep.Total != 1 || rep.Sessions[0].KeyAlias != "bot" || rep.Sessions[0].ClientName != "claude-code" || rep.ByUser[0].Label != "alice" {
		t.Fatalf("sessions: %d %s", code, body)
	}
	if strings.Contains(body, sid) {
		t.Error("the report shows the full session id")
	}
	if code, body := r.do(t, "POST", "/admin/v1/sessions/terminate", master, `{}`); code != 400 {
		t.Errorf("terminate without selector: %d %s", code, body)
	}
	code, body = r.do(t, "POST", "/admin/v1/sessions/terminate", master, `{"session_id_prefix":"`+sid[:8]+`"}`)
	if code != 200 || !strings.Contains(body, `"terminated":1`) {
		t.Errorf("terminate: %d %s", code, body)
	}
}

// The OpenAPI document lists exactly the routes the API serves.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	r := newRig(t)
	code, body := r.do(t, "GET", "/admin/v1/openapi.json", master, "")
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &doc) != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi: %d %.200s", code, body)
	}
	var inDoc, served []string
	for p, ops := range doc.Paths {
		for m := range ops {
			inDoc = append(inDoc, strings.ToUpper(m)+" "+p)
		}
	}
	for _, rt := range routes {
		served = append(served, rt.method+" "+Prefix+rt.path)
	}
	slices.Sort(inDoc)
	slices.Sort(served)
	if !slices.Equal(inDoc, served) {
		t.Errorf("documented:\n%v\nserved:\n%v", inDoc, served)
	}
}

// Runtime servers: added with the fields of a config-file entry, served at
// once, validated like the file, refused for stdio and for names the file
// owns, stored, and removed again.
func TestRuntimeServers(t *testing.T) {
	r := newRig(t)
	url := toolUpstream(t, "ping")
	code, body := r.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+url+`","timeout":"5s","auth":{"type":"bearer_token","value":"tok"}}`)
	if code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, body)
	}
	if _, body := r.do(t, "POST", "/mcp", master, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); !strings.Contains(body, `"extra__ping"`) {
		t.Errorf("runtime server's tools not served: %s", body)
	}
	if _, body := r.do(t, "POST", "/mcp/extra", master, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ping","arguments":{}}}`); !strings.Contains(body, "called ping") {
		t.Errorf("call on the runtime server: %s", body)
	}
	_, body = r.do(t, "GET", "/admin/v1/servers", master, "")
	if !strings.Contains(body, `"name":"extra"`) || !strings.Contains(body, `"source":"api"`) || !strings.Contains(body, `"source":"config"`) {
		t.Errorf("servers: %s", body)
	}
	if obj, err := r.store.GetObject(context.Background(), store.KindServer, "extra"); err != nil || !strings.Contains(string(obj.Doc), url) {
		t.Errorf("stored: %v %s", err, obj.Doc)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"name":"x","transport":"stdio","command":"/bin/sh"}`, "stdio servers run a command"},
		{`{"name":"x","transport":"http","url":"ftp://h"}`, "servers.x.url: must be an http or https URL"},
		{`{"name":"x","transport":"http","url":"http://h","auth":{"type":"basic","value":"nocolon"}}`, `servers.x.auth.value: must be \"user:password\"`},
		{`{"name":"x","transport":"http","url":"http://h","timout":"1s"}`, "servers.x.timout: unknown field (did you mean timeout?)"},
		{`{"name":"Bad!","transport":"http","url":"http://h"}`, "name: must match"},
		// Its tools would read as another server's: calc_ + __ + x is calc + __ + _x.
		{`{"name":"calc_","transport":"http","url":"http://h"}`, `servers.calc_: name must not begin or end with a character of the tool name separator \"__\"`},
	} {
		code, body := r.do(t, "POST", "/admin/v1/servers", master, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %s", tc.body, code, body, tc.want)
		}
	}
	if code, body := r.do(t, "POST", "/admin/v1/servers", master, `{"name":"calc","transport":"http","url":"http://h"}`); code != http.StatusConflict {
		t.Errorf("replacing a file server: %d %s", code, body)
	}
	if code, _ := r.do(t, "DELETE", "/admin/v1/servers/calc", master, ""); code != http.StatusConflict {
		t.Errorf("removing a file server: %d", code)
	}
	if code, _ := r.do(t, "DELETE", "/admin/v1/servers/extra", master, ""); code != http.StatusNoContent {
		t.Errorf("remove: %d", code)
	}
	if _, body := r.do(t, "POST", "/mcp", master, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); strings.Contains(body, "extra__") {
		t.Errorf("removed server still served: %s", body)
	}
	if code, _ := r.do(t, "DELETE", "/admin/v1/servers/extra", master, ""); code != http.StatusNotFound {
		t.Errorf("second remove: %d", code)
	}
}

// A key that grants no server is told so at initialize (S6.5).
func TestKeyWithoutServers(t *testing.T) {
	r := newRig(t)
	secret := r.createKey(t, `{"alias":"empty","servers":[]}`)
	code, body := r.do(t, "POST", "/mcp", secret, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	if code != 200 || !strings.Contains(body, `API key \"empty\" grants no MCP servers on this route`) {
		t.Errorf("initialize: %d %s", code, body)
	}
}

// Runtime grants (SPEC S5.3): PUT adds or replaces a user's, team's or
// role's grant and it applies at once (explain agrees); the list shows the
// config file's beside them; DELETE removes it; bad input is a 400 naming
// the field.
func TestGrantsEndpoints(t *testing.T) {
	r := newRig(t)
	explain := func(q string) bool {
		_, body := r.do(t, "GET", "/admin/v1/explain?"+q, master, "")
		var ex ExplainView
		if err := json.Unmarshal([]byte(body), &ex); err != nil {
			t.Fatalf("explain %s: %s", q, body)
		}
		return ex.Allowed
	}
	if explain("team=ops&tool=calc__add") {
		t.Fatal("team ops may call calc__add before any grant")
	}
	code, body := r.do(t, "PUT", "/admin/v1/grants/team/ops", master, `{"servers":["calc"],"deny_tools":{"calc":["sub"]}}`)
	if code != 200 || !strings.Contains(body, `"kind":"team"`) {
		t.Fatalf("put: %d %s", code, body)
	}
	if !explain("team=ops&tool=calc__add") || explain("team=ops&tool=calc__sub") || explain("team=ops&tool=notes__read") {
		t.Error("the runtime grant does not apply as written")
	}
	code, body = r.do(t, "GET", "/admin/v1/grants", master, "")
	var list struct{ Grants []GrantView }
	json.Unmarshal([]byte(body), &list)
	var sources []string
	for _, g := range list.Grants {
		sources = append(sources, g.Source+":"+g.Kind+":"+g.Value)
	}
	if code != 200 || !slices.Equal(sources, []string{"config:team:calc-team", "config:role:reader", "api:team:ops"}) {
		t.Errorf("list: %d %v", code, sources)
	}
	for _, tc := range []struct{ method, path, body, want string }{
		{"PUT", "/admin/v1/grants/group/ops", `{}`, "kind: must be user, team or role"},
		{"PUT", "/admin/v1/grants/team/ops", `{"servers":["nope"]}`, "unknown server"},
		{"PUT", "/admin/v1/grants/team/ops", `{"alias":"x"}`, "a grant takes servers"},
		{"PUT", "/admin/v1/grants/user/%01", `{}`, "value: must be"},
	} {
		if code, body := r.do(t, tc.method, tc.path, master, tc.body); code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %s: %d %s", tc.method, tc.path, tc.body, code, body)
		}
	}
	if code, body := r.do(t, "DELETE", "/admin/v1/grants/team/ops", master, ""); code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if explain("team=ops&tool=calc__add") {
		t.Error("the grant still applies after DELETE")
	}
	if code, _ := r.do(t, "DELETE", "/admin/v1/grants/team/ops", master, ""); code != 404 {
		t.Errorf("delete twice: %d", code)
	}
}

// The /me routes are open to every person: their 403 is not "Not an admin
// key" (the admin routes' is).
func TestOpenAPIForbiddenText(t *testing.T) {
	doc := document()
	paths := doc["paths"].(map[string]any)
	for key := range docs() {
		method, path, _ := strings.Cut(key, " ")
		op := paths[Prefix+path].(map[string]any)[strings.ToLower(method)].(map[string]any)
		got := op["responses"].(map[string]any)["403"].(map[string]any)["description"]
		self := selfRoutes[method+" "+Prefix+path]
		if (got == "Not an admin key") == self {
			t.Errorf("%s: 403 %q", key, got)
		}
	}
}

// Issue 22 hole 3's class: a call made as a key is the key's call. Its
// budget applies (the second call of a one-call budget is refused with
// the budget's error, 429) and so does its rate limit; a key without
// either is not affected.
func TestCallAsKeyCountsAgainstItsLimits(t *testing.T) {
	cfg := &config.Config{
		Listen: "127.0.0.1:0", ToolNameSeparator: "__",
		Servers: map[string]*config.Server{
			"calc": {Name: "calc", Transport: config.TransportHTTP, URL: toolUpstream(t, "add"), Timeout: 5 * time.Second,
				Tools: &config.ToolPolicy{Costs: map[string]float64{"*": 1}}},
		},
		Auth: &config.CallerAuth{MasterKey: master},
	}
	st, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	auth := callers.New(callers.Options{Keys: st, MasterKey: master})
	usage := func(context.Context, string, time.Time) (float64, error) { return 0, nil }
	g := gateway.New(gateway.Options{Config: cfg, Authenticator: auth, Terminations: st, Usage: usage})
	api := New(Options{Gateway: g, Store: st, Config: cfg, Authenticate: auth.Authenticate, KeyChanged: auth.Invalidate,
		Servers: cfg.ServerNames, Toolsets: g.ToolsetNames, AccessGroups: func() []string { return nil }})
	ts := httptest.NewServer(mounted(g, api))
	t.Cleanup(func() {
		ts.Close()
		_ = g.Close(context.Background())
		auth.Close()
		st.Close()
	})
	r := &rig{url: ts.URL, store: st, gw: g}
	r.createKey(t, `{"alias":"capped","budget":{"amount":1,"period":"day"}}`)
	r.createKey(t, `{"alias":"slow","rate_limit_rpm":1}`)
	r.createKey(t, `{"alias":"free"}`)
	call := func(key string) (int, string) {
		return r.do(t, "POST", "/admin/v1/tools/call", master, `{"name":"calc__add","arguments":{},"key":"`+key+`"}`)
	}
	for _, key := range []string{"capped", "slow"} {
		if code, body := call(key); code != 200 || !strings.Contains(body, "called ") {
			t.Fatalf("first call as %s: %d %s", key, code, body)
		}
	}
	if code, body := call("capped"); code != http.StatusTooManyRequests || !strings.Contains(body, `"details":"Budget exceeded: key capped has spent 1 of its daily budget of 1; it renews at `) {
		t.Errorf("second call as capped: %d %s; want 429 with the budget's error", code, body)
	}
	if code, body := call("slow"); code != http.StatusTooManyRequests || !strings.Contains(body, `"details":"Too Many Requests: rate limit exceeded for this API key"`) {
		t.Errorf("second call as slow: %d %s; want 429 with the rate limit's error", code, body)
	}
	for range 3 {
		if code, body := call("free"); code != 200 {
			t.Errorf("a call as a key without limits: %d %s", code, body)
		}
	}
}

// GET /stats names what the gateway dropped since start, read from its
// metrics: the console's overview shows it (the log and /metrics say it
// too). Only the master key reads it.
func TestStatsNameLosses(t *testing.T) {
	m := metrics.New()
	r, _ := newRigWith(t, func(o *Options) { o.Stats = m.Overview })
	read := func() metrics.Losses {
		t.Helper()
		code, body := r.do(t, "GET", "/admin/v1/stats", master, "")
		if code != http.StatusOK {
			t.Fatalf("stats: %d %s", code, body)
		}
		var out struct {
			Losses *metrics.Losses `json:"losses"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil || out.Losses == nil {
			t.Fatalf("stats without losses: %s (%v)", body, err)
		}
		return *out.Losses
	}
	if l := read(); l.AuditRecords != 0 || l.AuditUnconfirmed != 0 || l.LogLines != 0 || len(l.ExportRecords) != 0 {
		t.Fatalf("losses before any drop: %+v", l)
	}
	m.AuditDropped(3)
	m.AuditExportDropped("siem", 2)
	if l := read(); l.AuditRecords != 3 || l.ExportRecords["siem"] != 2 {
		t.Fatalf("losses after drops: %+v", l)
	}
	key := r.createKey(t, `{"alias":"pat"}`)
	if code, _ := r.do(t, "GET", "/admin/v1/stats", key, ""); code != http.StatusForbidden {
		t.Fatalf("a personal key read /stats: %d", code)
	}
}
