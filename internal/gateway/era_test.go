package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
)

// The gateway serves two eras of MCP on the same endpoints: the handshake
// era (initialize, Mcp-Session-Id) and the stateless 2026-07-28 revision
// (per-request _meta and headers, no session). Every behaviour below must
// hold for a client of either era; where the eras legitimately differ, the
// difference is a field of era, not a skipped case.

// era is one way of speaking MCP to the gateway.
type era struct {
	name      string
	version   string // MCP-Protocol-Version and, for the stateless era, _meta's
	stateless bool   // stateless: _meta + Mcp-Method/Mcp-Name, no session
	// handshake is how many HTTP requests a client sends before its first
	// real one (initialize + notifications/initialized); they count
	// against a key's rate limit like any other.
	handshake int
	// methodNotFoundStatus is the HTTP status of a METHOD_NOT_FOUND reply
	// to a method the revision does not have (HTTP 404 in 2026-07-28).
	methodNotFoundStatus int
	// sessionInAudit: audit records carry a session id prefix (the new era
	// has no sessions).
	sessionInAudit bool
	// preflight is what a browser client of the era asks to send.
	preflight []string
}

var eras = []era{
	{name: "old-" + mcpwire.Rev20251125, version: mcpwire.Rev20251125, handshake: 2, methodNotFoundStatus: http.StatusOK, sessionInAudit: true,
		preflight: []string{"Content-Type", "Mcp-Protocol-Version", "Mcp-Session-Id"}},
	{name: "new-" + mcpwire.Rev20260728, version: mcpwire.Rev20260728, stateless: true, handshake: 0, methodNotFoundStatus: http.StatusNotFound,
		preflight: []string{"Content-Type", "Mcp-Protocol-Version", "Mcp-Method", "Mcp-Name"}},
}

// body is a JSON-RPC request as a client of the era writes it: the
// stateless era adds its _meta to params. id is raw JSON; params "" means
// none (the stateless era still needs params for its _meta).
func (e era) body(id, method, params string) string {
	if e.stateless {
		params = withMeta(params, e.version)
	}
	b := `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `"`
	if params != "" {
		b += `,"params":` + params
	}
	return b + "}"
}

// withMeta puts the stateless era's required _meta first in params,
// textually, so that the rest of params (repeated keys included) reaches
// the gateway exactly as written.
func withMeta(params, version string) string {
	meta := statelessMetaJSON
	if version != mcpwire.Rev20260728 {
		meta = strings.Replace(meta, mcpwire.Rev20260728, version, 1)
	}
	p := strings.TrimSpace(params)
	if p == "" || p == "{}" {
		return "{" + meta + "}"
	}
	return "{" + meta + "," + p[1:]
}

// eraClient is one client of an era at one URL: the handshake era's client
// initializes once, on its first request, and names its session on every
// later one.
type eraClient struct {
	t   *testing.T
	e   era
	url string
	hdr map[string]string // sent on every request (the caller's key, ...)
	sid string
	ok  bool // handshake done
}

func (e era) client(t *testing.T, url string, hdr map[string]string) *eraClient {
	return &eraClient{t: t, e: e, url: url, hdr: hdr}
}

// eraReply is what came back: status, headers, the JSON-RPC message (the
// body, or the last event of an SSE body) raw and decoded.
type eraReply struct {
	status int
	header http.Header
	raw    []byte
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (r *eraReply) String() string { return fmt.Sprintf("HTTP %d %s", r.status, r.raw) }

// errJSON is the error member, re-encoded (for comparing errors).
func (r *eraReply) errJSON() string {
	if r.Error == nil {
		return "<no error>"
	}
	b, _ := json.Marshal(r.Error)
	return string(b)
}

// handshake initializes the handshake era's session; a refusal is returned as
// the reply (it is what the client sees of its first request).
func (c *eraClient) handshake() *eraReply {
	if c.e.stateless || c.ok {
		return nil
	}
	r := c.post(nil, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+c.e.version+`","capabilities":{},"clientInfo":{"name":"era","version":"0"}}}`)
	if r.status != http.StatusOK || r.Error != nil {
		return r
	}
	c.sid = r.header.Get(mcpwire.HeaderSessionID)
	if c.sid == "" {
		c.t.Fatalf("initialize returned no session id: %s", r)
	}
	if r := c.post(nil, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.status != http.StatusAccepted {
		return r
	}
	c.ok = true
	return nil
}

// call sends one request the era's way.
func (c *eraClient) call(id, method, params string) *eraReply {
	c.t.Helper()
	return c.send(nil, c.e.body(id, method, params))
}

// send posts body (already in the era's form) after the handshake, with
// the era's headers; hdr adds or replaces headers for this request.
func (c *eraClient) send(hdr map[string]string, body string) *eraReply {
	c.t.Helper()
	if r := c.handshake(); r != nil {
		return r
	}
	return c.post(hdr, body)
}

func (c *eraClient) post(extra map[string]string, body string) *eraReply {
	c.t.Helper()
	h := c.headers(body)
	for k, v := range extra {
		h[k] = v
	}
	status, header, b := rpc(c.t, c.url, h, body)
	r := &eraReply{status: status, header: header, raw: b}
	if len(b) > 0 {
		if err := json.Unmarshal(b, r); err != nil {
			c.t.Fatalf("reply is not JSON: HTTP %d %q", status, b)
		}
	}
	return r
}

// headers are the era's request headers for body.
func (c *eraClient) headers(body string) map[string]string {
	h := map[string]string{}
	for k, v := range c.hdr {
		h[k] = v
	}
	h[mcpwire.HeaderProtocolVersion] = c.e.version
	if !c.e.stateless {
		if c.sid != "" {
			h[mcpwire.HeaderSessionID] = c.sid
		}
		return h
	}
	method, ok := jsonrpc.GetString([]byte(body), "method")
	if !ok {
		return h
	}
	h[mcpwire.HeaderMethod] = method
	if field, ok := mcpwire.NameParam(method); ok {
		params, _ := jsonrpc.Get([]byte(body), "params")
		if name, ok := jsonrpc.GetString(params, field); ok {
			h[mcpwire.HeaderName] = mcpwire.EncodeHeaderValue(name)
		}
	}
	return h
}

// notify sends a notification (the handshake era's cancellation).
func (c *eraClient) notify(method, params string) int {
	c.t.Helper()
	return c.post(nil, `{"jsonrpc":"2.0","method":"`+method+`","params":`+params+`}`).status
}

// toolNames lists the names of a tools/list result.
func toolNames(t *testing.T, r *eraReply) []string {
	t.Helper()
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if r.status != http.StatusOK || r.Error != nil || json.Unmarshal(r.Result, &res) != nil {
		t.Fatalf("tools/list: %s", r)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// firstText is the first text content of a tools/call result.
func firstText(r *eraReply) string {
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || len(res.Content) == 0 {
		return "<" + r.String() + ">"
	}
	return res.Content[0].Text
}

// checkResultType: the stateless era's results say resultType complete;
// the handshake era's results are relayed as they are, without one.
func checkResultType(t *testing.T, e era, r *eraReply) {
	t.Helper()
	_, has := jsonrpc.Get(r.Result, mcpwire.FieldResultType)
	if e.stateless && mcpwire.ResultTypeOf(r.Result) != mcpwire.ResultComplete || !e.stateless && has {
		t.Errorf("resultType in %s", r)
	}
}

// memKeys is an in-memory key store for a real callers.Authenticator.
type memKeys struct {
	mu   sync.Mutex
	keys map[string]store.Key // by hash
}

func (m *memKeys) GetKeyByHash(_ context.Context, hash string) (store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[hash]
	if !ok {
		return store.Key{}, store.ErrNotFound
	}
	return k, nil
}

func (m *memKeys) TouchKey(context.Context, string, time.Time) error { return nil }

// add stores k under a new secret and returns the secret.
func (m *memKeys) add(t *testing.T, k store.Key) string {
	t.Helper()
	sec, err := callers.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	k.KeyHash, k.KeyPrefix, k.Source = store.HashKey(sec), store.KeyPrefix(sec), store.SourceAPI
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys == nil {
		m.keys = map[string]store.Key{}
	}
	m.keys[k.KeyHash] = k
	return sec
}

// disable revokes the key of alias.
func (m *memKeys) disable(alias string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for h, k := range m.keys {
		if k.Alias == alias {
			k.Disabled = true
			m.keys[h] = k
		}
	}
}

// newAuth is an Authenticator over keys that caches nothing, so that a
// key changed in the store takes effect on the next request.
func newAuth(t *testing.T, keys *memKeys, logger *slog.Logger) *callers.Authenticator {
	a := callers.New(callers.Options{Keys: keys, CacheTTL: -1, Logger: logger})
	t.Cleanup(func() { a.Close() })
	return a
}

func withKey(secret string) map[string]string { return map[string]string{callers.HeaderAPIKey: secret} }

// Authentication (S5): no key, an unknown key, a disabled or expired key,
// and a key revoked while in use all get the one 401, byte for byte the
// same in both eras; a valid key works; a spent rate limit is 429 with
// Retry-After, the handshake era's handshake counting against it.
func TestEraAuthentication(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	keys := &memKeys{}
	auth := newAuth(t, keys, nil)
	_, gw := startGatewayWith(t, Options{Authenticator: auth, Config: &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}}})
	url := gw.URL + "/mcp"
	disabled := keys.add(t, store.Key{Alias: "disabled", Disabled: true})
	expired := keys.add(t, store.Key{Alias: "expired", ExpiresAt: time.Now().Add(-time.Hour)})
	var unauthorized []string // every 401 body, both eras
	check401 := func(t *testing.T, what string, r *eraReply) {
		t.Helper()
		if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != `Bearer realm="mcpgate"` || r.Error == nil || r.Error.Code != callers.CodeUnauthorized {
			t.Errorf("%s: %s, want the 401", what, r)
		}
		unauthorized = append(unauthorized, string(r.raw))
	}
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			wrong, _ := callers.NewSecret()
			for _, tc := range []struct {
				what string
				hdr  map[string]string
			}{
				{"no key", nil},
				{"unknown key", withKey(wrong)},
				{"unknown bearer key", map[string]string{"Authorization": "Bearer " + wrong}},
				{"disabled key", withKey(disabled)},
				{"expired key", withKey(expired)},
			} {
				check401(t, tc.what, e.client(t, url, tc.hdr).call("1", "tools/list", ""))
			}

			// A valid key works, in the key header and as a bearer token;
			// revoked while in use (mid-session in the handshake era), it gets
			// the same 401 on the next request.
			live := keys.add(t, store.Key{Alias: "live-" + e.name})
			for _, hdr := range []map[string]string{withKey(live), {"Authorization": "Bearer " + live}} {
				c := e.client(t, url, hdr)
				if names := toolNames(t, c.call("1", "tools/list", "")); !slices.Contains(names, "alpha__add") {
					t.Errorf("valid key: tools %v", names)
				}
				if got := firstText(c.call("2", "tools/call", `{"name":"alpha__add","arguments":{"a":2,"b":3}}`)); got != "5" {
					t.Errorf("valid key: add = %s", got)
				}
			}
			c := e.client(t, url, withKey(live))
			if r := c.call("1", "tools/list", ""); r.status != http.StatusOK {
				t.Fatalf("before revocation: %s", r)
			}
			keys.disable("live-" + e.name)
			check401(t, "revoked key", c.call("2", "tools/call", `{"name":"alpha__add","arguments":{"a":2,"b":3}}`))

			// Rate limit: rpm requests a minute, handshake included.
			const rpm = 5
			limited := keys.add(t, store.Key{Alias: "limited-" + e.name, RateLimitRPM: rpm})
			c = e.client(t, url, withKey(limited))
			served := 0
			var r *eraReply
			for i := 0; i < rpm+1; i++ {
				if r = c.call(strconv.Itoa(i+1), "tools/list", ""); r.status != http.StatusOK {
					break
				}
				served++
			}
			if want := rpm - e.handshake; served != want {
				t.Errorf("rate limit %d/min: %d requests served after a handshake of %d, want %d", rpm, served, e.handshake, want)
			}
			retry, err := strconv.Atoi(r.header.Get("Retry-After"))
			if r.status != http.StatusTooManyRequests || err != nil || retry < 1 || r.Error == nil || r.Error.Code != callers.CodeRateLimited {
				t.Errorf("over the rate limit: %s Retry-After %q", r, r.header.Get("Retry-After"))
			}
		})
	}
	for _, b := range unauthorized {
		if b != unauthorized[0] {
			t.Errorf("401 bodies differ:\n%s\n%s", unauthorized[0], b)
		}
	}
	if len(unauthorized) != 2*6 {
		t.Errorf("%d 401s seen, want 12", len(unauthorized))
	}
}

// Access policy (S6.2): a key limited to some tools of one server sees
// exactly those; a hidden tool and a tool of a server the key may not use
// fail exactly like an unknown tool; a route naming a server the key may
// not use is the 404 of an unknown server.
func TestEraAccessPolicy(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	beta := startSDKUpstream(t, "beta")
	keys := &memKeys{}
	narrow := keys.add(t, store.Key{Alias: "narrow", Servers: []string{"alpha"}, Tools: map[string][]string{"alpha": {"echo", "add"}}})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Config: &config.Config{Servers: map[string]*config.Server{
		"alpha": httpServer(alpha.http.URL), "beta": httpServer(beta.http.URL),
	}}})
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			c := e.client(t, gw.URL+"/mcp", withKey(narrow))
			r := c.call("1", "tools/list", "")
			if names := toolNames(t, r); !slices.Equal(names, []string{"alpha__add", "alpha__echo"}) {
				t.Errorf("merged list %v, want exactly the allowed tools", names)
			}
			checkResultType(t, e, r)
			if got := firstText(c.call("2", "tools/call", `{"name":"alpha__echo","arguments":{"text":"hi"}}`)); got != "alpha:hi" {
				t.Errorf("allowed tool: %s", got)
			}
			unknown := c.call("3", "tools/call", `{"name":"alpha__nosuch","arguments":{}}`)
			if unknown.status != http.StatusOK || unknown.Error == nil || unknown.Error.Code != jsonrpc.CodeInvalidParams || unknown.Error.Message != "Unknown tool: alpha__nosuch" {
				t.Fatalf("unknown tool: %s", unknown)
			}
			for _, hidden := range []string{"alpha__log", "beta__echo", "beta__nosuch"} {
				r := c.call("3", "tools/call", `{"name":"`+hidden+`","arguments":{"text":"x"}}`)
				got := strings.ReplaceAll(string(r.raw), hidden, "alpha__nosuch")
				if r.status != unknown.status || got != string(unknown.raw) {
					t.Errorf("hidden %s: %s\nwant it like an unknown tool: %s", hidden, r, unknown)
				}
			}

			// The single-server route: unprefixed names, same view.
			c = e.client(t, gw.URL+"/mcp/alpha", withKey(narrow))
			if names := toolNames(t, c.call("1", "tools/list", "")); !slices.Equal(names, []string{"add", "echo"}) {
				t.Errorf("/mcp/alpha list %v", names)
			}
			if r := c.call("2", "tools/call", `{"name":"log","arguments":{"text":"x"}}`); r.Error == nil || r.Error.Message != "Unknown tool: log" {
				t.Errorf("/mcp/alpha hidden tool: %s", r)
			}

			// A forbidden server in the path is an unknown one.
			none := e.client(t, gw.URL+"/mcp/nosuch", withKey(narrow)).call("1", "tools/list", "")
			if none.status != http.StatusNotFound || none.Error == nil || !strings.Contains(none.Error.Message, `"nosuch"`) {
				t.Fatalf("unknown server route: %s", none)
			}
			for _, path := range []string{"/mcp/beta", "/beta/mcp"} {
				r := e.client(t, gw.URL+path, withKey(narrow)).call("1", "tools/list", "")
				if got := strings.ReplaceAll(string(r.raw), `\"beta\"`, `\"nosuch\"`); r.status != none.status || got != string(none.raw) {
					t.Errorf("%s: %s\nwant it like an unknown server: %s", path, r, none)
				}
			}
		})
	}
}

// Routes (S1.2, S6.1): /mcp merges and prefixes, /mcp/<server> and
// /<server>/mcp are one server unprefixed, /mcp/a,b several prefixed, a
// toolset route its tools, /mcp/proxy tools only.
func TestEraRoutes(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	beta := startSDKUpstream(t, "beta")
	_, gw := startGateway(t, &config.Config{
		Servers:  map[string]*config.Server{"alpha": httpServer(alpha.http.URL), "beta": httpServer(beta.http.URL)},
		Toolsets: map[string]*config.Toolset{"ts": {Servers: map[string][]string{"alpha": {"echo"}, "beta": {"add"}}}},
	})
	alphaTools := []string{"add", "ask", "echo", "log", "progress", "roots", "sample", "touch"}
	prefixed := func(servers ...string) []string {
		var out []string
		for _, s := range servers {
			for _, n := range alphaTools {
				out = append(out, s+"__"+n)
			}
		}
		return out
	}
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			for _, tc := range []struct {
				path  string
				tools []string
				call  string
				want  string
			}{
				{"/mcp", prefixed("alpha", "beta"), "beta__echo", "beta:hi"},
				{"/mcp/alpha", alphaTools, "echo", "alpha:hi"},
				{"/beta/mcp", alphaTools, "echo", "beta:hi"},
				{"/mcp/alpha,beta", prefixed("alpha", "beta"), "alpha__echo", "alpha:hi"},
				{"/toolset/ts/mcp", []string{"alpha__echo", "beta__add"}, "alpha__echo", "alpha:hi"},
				{"/mcp/proxy", prefixed("alpha", "beta"), "beta__echo", "beta:hi"},
			} {
				c := e.client(t, gw.URL+tc.path, nil)
				r := c.call("1", "tools/list", "")
				if names := toolNames(t, r); !slices.Equal(names, tc.tools) {
					t.Errorf("%s: tools %v, want %v", tc.path, names, tc.tools)
				}
				checkResultType(t, e, r)
				r = c.call("2", "tools/call", `{"name":"`+tc.call+`","arguments":{"text":"hi"}}`)
				if got := firstText(r); got != tc.want {
					t.Errorf("%s: %s = %s, want %s", tc.path, tc.call, got, tc.want)
				}
				checkResultType(t, e, r)
			}
			r := e.client(t, gw.URL+"/mcp/proxy", nil).call("3", "prompts/list", "")
			if r.Error == nil || r.Error.Code != jsonrpc.CodeMethodNotFound || r.Error.Message != "Operation unavailable on /mcp/proxy" {
				t.Errorf("prompts/list on /mcp/proxy: %s", r)
			}
		})
	}
}

// Fidelity: list items and results pass byte-exact (unknown members,
// _meta, integers beyond 2^53, unicode), in both eras; the new era only
// adds resultType (and the cache hints on lists). Arguments reach the
// upstream unchanged.
func TestEraFidelity(t *testing.T) {
	var lastParams atomic.Value
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"0"}}`
		case "tools/list":
			return `{"tools":[` + exoticTool + `]}`
		case "tools/call":
			lastParams.Store(string(m.Params))
			return exoticResult
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"nope"}}`, m.ID.Raw())
		return ""
	})
	raw := httpServer(up.URL + "/mcp")
	// Tasks off: a 2025-11-25 session would be told the tools run as
	// gateway tasks (execution.taskSupport, TestTasksPerEraAndMode).
	raw.Tasks = &config.ServerTasks{Mode: config.TasksOff}
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"raw": raw}})
	// strip removes what the new era adds to a result.
	strip := func(e era, res json.RawMessage, members ...string) string {
		if !e.stateless {
			return string(res)
		}
		for _, k := range members {
			if _, ok := jsonrpc.Get(res, k); !ok {
				t.Errorf("result lacks %s: %s", k, res)
			}
			res, _ = jsonrpc.Delete(res, k)
		}
		// The gateway says who answered (its own serverInfo, never the
		// upstream's); everything else is the upstream's bytes.
		info, _ := jsonrpc.GetPath(res, "_meta", mcpwire.MetaKeyServerInfo)
		if !strings.Contains(string(info), `"version":"test"`) {
			t.Errorf("result lacks the gateway's serverInfo: %s", res)
		}
		return string(mcpwire.WithoutMetaKey(res, mcpwire.MetaKeyServerInfo))
	}
	const args = `{"n":9007199254740993,"s":"\u00e9\u2028 ✓","f":1.50,"o":{"z":1,"a":[true,null]}}`
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			for _, tc := range []struct{ path, name string }{{"/mcp", "raw__weird"}, {"/mcp/raw", "weird"}} {
				c := e.client(t, gw.URL+tc.path, nil)
				r := c.call("2", "tools/list", "")
				wantTool, _ := jsonrpc.Set([]byte(exoticTool), "name", jsonrpc.String(tc.name))
				if got, want := strip(e, r.Result, "resultType", "ttlMs", "cacheScope"), `{"tools":[`+string(wantTool)+`]}`; got != want {
					t.Errorf("%s tools/list not byte-exact:\n got %s\nwant %s", tc.path, got, want)
				}
				r = c.call(`"c-9007199254740993"`, "tools/call", `{"name":"`+tc.name+`","arguments":`+args+`}`)
				if got := strip(e, r.Result, "resultType"); got != exoticResult {
					t.Errorf("%s tools/call not byte-exact:\n got %s\nwant %s", tc.path, got, exoticResult)
				}
				if !strings.HasPrefix(string(r.raw), `{"jsonrpc":"2.0","id":"c-9007199254740993",`) {
					t.Errorf("%s: the id did not come back as sent: %s", tc.path, r.raw)
				}
				p, _ := lastParams.Load().(string)
				if got, _ := jsonrpc.Get([]byte(p), "arguments"); string(got) != args {
					t.Errorf("%s: the upstream got arguments %s, want %s", tc.path, got, args)
				}
				if strings.Contains(p, "io.modelcontextprotocol/") {
					t.Errorf("%s: the handshake-era upstream got stateless-era _meta: %s", tc.path, p)
				}
			}
		})
	}
}

// Bad input gets the same precise error in both eras; the new era answers
// METHOD_NOT_FOUND with HTTP 404, and names the versions it speaks when
// asked for one it does not. A repeated "name" cannot smuggle a tool name.
func TestEraBadInput(t *testing.T) {
	var seen atomic.Value
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"0"}}`
		case "tools/list":
			return `{"tools":[{"name":"safe","inputSchema":{"type":"object"}},{"name":"danger","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			seen.Store(string(m.Params))
			return `{"content":[{"type":"text","text":"called"}]}`
		}
		return `{}`
	})
	_, gw := startGateway(t, &config.Config{MaxBodyBytes: 1 << 10, Servers: map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")}})
	url := gw.URL + "/mcp"
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			c := e.client(t, url, nil)
			for _, tc := range []badInput{
				{"malformed JSON", nil, e.body("1", "tools/list", "")[:40], 400, jsonrpc.CodeParseError, "Parse error"},
				{"wrong jsonrpc version", nil, strings.Replace(e.body("1", "tools/list", ""), `"2.0"`, `"1.0"`, 1), 400, jsonrpc.CodeInvalidRequest, "jsonrpc"},
				{"no jsonrpc member", nil, strings.Replace(e.body("1", "tools/list", ""), `"jsonrpc":"2.0",`, ``, 1), 400, jsonrpc.CodeInvalidRequest, "jsonrpc"},
				{"scalar body", nil, `42`, 400, jsonrpc.CodeInvalidRequest, "Invalid Request"},
				{"oversized body", nil, e.body("1", "tools/list", `{"pad":"`+strings.Repeat("x", 2<<10)+`"}`), 413, jsonrpc.CodeInvalidRequest, "exceeds 1024 bytes"},
				{"unknown tool", nil, e.body("1", "tools/call", `{"name":"raw__nope","arguments":{}}`), 200, jsonrpc.CodeInvalidParams, "Unknown tool: raw__nope"},
				{"tool of unknown server", nil, e.body("1", "tools/call", `{"name":"secret__x","arguments":{}}`), 200, jsonrpc.CodeInvalidParams, "Unknown tool: secret__x"},
				{"unknown method", nil, e.body("1", "tools/explode", ""), e.methodNotFoundStatus, jsonrpc.CodeMethodNotFound, "tools/explode"},
				// The name travels in a header too in the new era; no name,
				// no Mcp-Name header: that check comes first.
				missingName(e),
			} {
				r := c.send(tc.hdr, tc.body)
				if r.status != tc.status || r.Error == nil || r.Error.Code != tc.code || !strings.Contains(r.Error.Message, tc.msg) {
					t.Errorf("%s: %s, want HTTP %d, error %d containing %q", tc.name, r, tc.status, tc.code, tc.msg)
				}
			}

			// An unsupported revision: the handshake era's header gate; a
			// stateless client names it in its header and _meta alike
			// and gets UnsupportedProtocolVersion with the list.
			hdr := map[string]string{mcpwire.HeaderProtocolVersion: "1999-01-01"}
			body := e.body("9", "tools/list", "")
			wantCode, wantMsg := int64(jsonrpc.CodeInvalidRequest), "Unsupported MCP-Protocol-Version 1999-01-01"
			if e.stateless {
				body = `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":` + withMeta("", "1999-01-01") + `}`
				wantCode, wantMsg = -32022, "Unsupported protocol version"
			}
			r := c.send(hdr, body)
			if r.status != http.StatusBadRequest || r.Error == nil || r.Error.Code != wantCode || !strings.Contains(r.Error.Message, wantMsg) {
				t.Errorf("unsupported version: %s, want HTTP 400, error %d %q", r, wantCode, wantMsg)
			} else if e.stateless && !strings.Contains(string(r.Error.Data), `"supported":["2026-07-28","2025-11-25"`) {
				t.Errorf("unsupported version lists no supported versions: %s", r)
			}

			// The gateway checks and forwards the last "name" (as
			// encoding/json does); the first never reaches the upstream.
			for _, tc := range []struct{ path, name string }{{"/mcp", "raw__safe"}, {"/mcp/raw", "safe"}} {
				seen.Store("")
				c := e.client(t, gw.URL+tc.path, nil)
				r := c.call("4", "tools/call", `{"name":"danger","name":"`+tc.name+`","arguments":{}}`)
				got, _ := seen.Load().(string)
				if firstText(r) != "called" || strings.Count(got, `"name"`) != 1 || !strings.Contains(got, `"name":"safe"`) {
					t.Errorf("%s: reply %s; upstream saw %s, want exactly one name \"safe\"", tc.path, r, got)
				}
			}

			// Still serving.
			if r := c.call("5", "tools/call", `{"name":"raw__safe","arguments":{}}`); firstText(r) != "called" {
				t.Errorf("after bad input: %s", r)
			}
		})
	}
}

type badInput struct {
	name   string
	hdr    map[string]string
	body   string
	status int
	code   int64
	msg    string
}

// missingName is a tools/call without a name, and what each era answers.
func missingName(e era) badInput {
	tc := badInput{"missing tool name", nil, e.body("1", "tools/call", `{"arguments":{}}`), 200, jsonrpc.CodeInvalidParams, "missing tool name"}
	if e.stateless {
		tc.status, tc.code, tc.msg = 400, -32020, "missing required Mcp-Name header for method tools/call"
	}
	return tc
}

// Fault classes (C6.6) reach a client of either era as the same JSON-RPC
// error: code, message, data.fault, data.status and data.server.
func TestEraFaultClasses(t *testing.T) {
	up := faultyUpstream(t)
	srv := httpServer(up.URL + "/mcp")
	srv.Timeout = 300 * time.Millisecond
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"f":    srv,
		"gone": httpServer("http://127.0.0.1:1/mcp"),
	}})
	tests := []struct {
		tool   string
		code   int64
		fault  string
		status int
	}{
		{"f__slow", -32001, "timeout", 504},
		{"f__unauth", -32603, "auth", 401},
		{"f__forbidden", -32603, "auth", 403},
		{"f__limited", -32603, "rate_limited", 429},
		{"f__broken", -32603, "upstream_error", 502},
		{"f__badjson", -32603, "invalid_response", 502},
		{"gone__x", -32603, "unreachable", 502},
		{"f__rpc408", 408, "", 0},
	}
	seen := map[string]*eraReply{} // tool -> the first era's reply
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			c := e.client(t, gw.URL+"/mcp", nil)
			for _, tc := range tests {
				r := c.call("7", "tools/call", `{"name":"`+tc.tool+`","arguments":{}}`)
				var data struct {
					Fault  string `json:"fault"`
					Status int    `json:"status"`
					Server string `json:"server"`
				}
				if r.Error == nil || r.Error.Code != tc.code {
					t.Errorf("%s: %s, want error %d", tc.tool, r, tc.code)
					continue
				}
				if tc.fault == "" {
					if r.Error.Data != nil {
						t.Errorf("%s: a relayed upstream error carries gateway data: %s", tc.tool, r)
					}
				} else if json.Unmarshal(r.Error.Data, &data) != nil || data.Fault != tc.fault || data.Status != tc.status || data.Server != strings.Split(tc.tool, "__")[0] {
					t.Errorf("%s: %s, want fault %s status %d", tc.tool, r, tc.fault, tc.status)
				}
				if strings.Contains(string(r.raw), "secret") {
					t.Errorf("%s: the upstream's body leaked: %s", tc.tool, r)
				}
				if first, ok := seen[tc.tool]; !ok {
					seen[tc.tool] = r
				} else if r.status != first.status || r.errJSON() != first.errJSON() {
					t.Errorf("%s differs between eras:\n%s\n%s", tc.tool, first, r)
				}
			}
			if got := firstText(c.call("8", "tools/call", `{"name":"f__ok","arguments":{}}`)); got != "fine" {
				t.Errorf("after the faults: %s", got)
			}
			// Listing (S6.6, C8.2): the merged list leaves the dead server
			// out; its own route fails with the fault.
			if names := toolNames(t, c.call("9", "tools/list", "")); !slices.Contains(names, "f__ok") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "gone__") }) {
				t.Errorf("merged list with a dead server: %v", names)
			}
			r := e.client(t, gw.URL+"/mcp/gone", nil).call("10", "tools/list", "")
			if r.Error == nil || !strings.Contains(string(r.Error.Data), `"fault":"unreachable"`) || r.Result != nil {
				t.Errorf("list on the dead server's route: %s", r)
			}
		})
	}
}

// Pagination (S6.4): the merged tools/list over two upstreams comes in
// pages of the gateway's size with an opaque cursor, in a deterministic
// order, in both eras; a bogus cursor is refused.
func TestEraPagination(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	beta := startSDKUpstream(t, "beta")
	_, gw := startGatewayWith(t, Options{PageSize: 5, Config: &config.Config{Servers: map[string]*config.Server{
		"alpha": httpServer(alpha.http.URL), "beta": httpServer(beta.http.URL),
	}}})
	var firstEra []string
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			c := e.client(t, gw.URL+"/mcp", nil)
			var names []string
			pages, cursor := 0, ""
			for pages < 10 {
				params := ""
				if cursor != "" {
					params = `{"cursor":` + string(jsonrpc.String(cursor)) + `}`
				}
				r := c.call(strconv.Itoa(pages+1), "tools/list", params)
				page := toolNames(t, r)
				checkResultType(t, e, r)
				pages++
				names = append(names, page...)
				cursor, _ = jsonrpc.GetString(r.Result, "nextCursor")
				if cursor == "" {
					break
				}
				if len(page) != 5 || strings.Contains(cursor, "alpha") || strings.Contains(cursor, "5") {
					t.Errorf("page %d: %d tools, cursor %q", pages, len(page), cursor)
				}
			}
			if len(names) != 16 || pages != 4 || !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != 16 {
				t.Errorf("%d tools in %d pages, want 16 distinct, sorted, in 4: %v", len(names), pages, names)
			}
			if firstEra == nil {
				firstEra = names
			} else if !slices.Equal(names, firstEra) {
				t.Errorf("the eras walk different lists:\n%v\n%v", firstEra, names)
			}
			r := c.call("99", "tools/list", `{"cursor":"bogus"}`)
			if r.Error == nil || r.Error.Code != jsonrpc.CodeInvalidParams || !strings.Contains(r.Error.Message, "Invalid cursor") {
				t.Errorf("bogus cursor: %s", r)
			}
		})
	}
}

// No tool argument and no key reaches the log, even at debug level and
// when calls fail, in either era.
func TestEraNoSecretsInLogs(t *testing.T) {
	const secretArg = "sk-live-TOPSECRET-4242"
	up := rawUpstream(t, exoticTool, `{"content":[],"isError":true}`, nil)
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	keys := &memKeys{}
	key := keys.add(t, store.Key{Alias: "logged"})
	_, gw := startGatewayWith(t, Options{Logger: logger, Authenticator: newAuth(t, keys, logger), Config: &config.Config{Servers: map[string]*config.Server{
		"raw":  httpServer(up.URL + "/mcp"),
		"gone": httpServer("http://127.0.0.1:1/mcp"),
	}}})
	args := `{"n":1,"token":"` + secretArg + `"}`
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			before := logs.Len()
			c := e.client(t, gw.URL+"/mcp", withKey(key))
			for _, name := range []string{"raw__weird", "gone__x", "raw__missing"} {
				if r := c.call("1", "tools/call", `{"name":"`+name+`","arguments":`+args+`}`); r.status != http.StatusOK {
					t.Errorf("%s: %s", name, r)
				}
			}
			wrong, _ := callers.NewSecret()
			if r := e.client(t, gw.URL+"/mcp", withKey(wrong)).call("1", "tools/call", `{"name":"raw__weird","arguments":`+args+`}`); r.status != http.StatusUnauthorized {
				t.Errorf("wrong key: %s", r)
			}
			l := logs.String()
			if len(l) == before {
				t.Fatal("nothing was logged at debug level; the check would prove nothing")
			}
			for _, s := range []string{secretArg, key, wrong} {
				if strings.Contains(l, s) {
					t.Errorf("a secret (%.12s...) reached the log:\n%s", s, l[before:])
				}
			}
		})
	}
}

// memAudit collects audit records.
type memAudit struct {
	mu   sync.Mutex
	recs []store.ToolCall
}

func (a *memAudit) Record(r store.ToolCall) { a.mu.Lock(); a.recs = append(a.recs, r); a.mu.Unlock() }
func (a *memAudit) records() []store.ToolCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.recs)
}

// Observability (S16.1, S16.3): one audit record and one tool_calls_total
// count per call, with caller, server, tool and outcome, in both eras; a
// call of an unknown name is recorded as denied, against no server (the
// name may not say which server it would have been). Only the handshake era has
// a session to name.
func TestEraAuditAndMetrics(t *testing.T) {
	up := faultyUpstream(t)
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			keys := &memKeys{}
			key := keys.add(t, store.Key{Alias: "auditor", User: "u1", Team: "t1"})
			audit := &memAudit{}
			_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Audit: audit, Metrics: metrics.New(), MetricsOnMain: true,
				Config: &config.Config{Servers: map[string]*config.Server{"f": httpServer(up.URL + "/mcp")}}})
			c := e.client(t, gw.URL+"/mcp", withKey(key))
			for _, tool := range []string{"f__ok", "f__broken", "f__nope", "f__ok"} {
				c.call("1", "tools/call", `{"name":"`+tool+`","arguments":{"secret":"x"}}`)
			}
			recs := audit.records()
			var got []string
			for _, r := range recs {
				got = append(got, r.Server+"/"+r.Tool+"/"+r.Outcome)
				if r.KeyAlias != "auditor" || r.User != "u1" || r.Team != "t1" || r.RequestBytes == 0 || (r.SessionIDPrefix != "") != e.sessionInAudit {
					t.Errorf("record %+v: caller or session (want session: %v)", r, e.sessionInAudit)
				}
			}
			if want := []string{"f/ok/ok", "f/broken/upstream_error", "/f__nope/denied", "f/ok/ok"}; !slices.Equal(got, want) {
				t.Errorf("audit records %v, want %v", got, want)
			}
			resp, err := http.Get(gw.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			counts := map[string]string{}
			sc := bufio.NewScanner(strings.NewReader(string(body)))
			for sc.Scan() {
				if line := sc.Text(); strings.HasPrefix(line, "mcpgate_tool_calls_total{") {
					i := strings.LastIndexByte(line, ' ')
					counts[line[:i]] = line[i+1:]
				}
			}
			want := map[string]string{
				`mcpgate_tool_calls_total{outcome="ok",server="f",tool="ok"}`:                 "2",
				`mcpgate_tool_calls_total{outcome="upstream_error",server="f",tool="broken"}`: "1",
				`mcpgate_tool_calls_total{outcome="denied",server="",tool="unknown"}`:         "1",
			}
			if fmt.Sprint(counts) != fmt.Sprint(want) {
				t.Errorf("tool call metrics %v, want %v", counts, want)
			}
		})
	}
}

// Origin and Host gates (S2.1) hold on every request of either era, an
// established session included; an allowed origin gets CORS headers, and
// a browser client's preflight admits the headers its era sends.
func TestEraOriginHostAndCORS(t *testing.T) {
	up := rawUpstream(t, exoticTool, exoticResult, nil)
	_, gw := startGateway(t, &config.Config{
		AllowedOrigins: []string{"https://app.example.com"},
		AllowedHosts:   []string{"mcp.internal"},
		Servers:        map[string]*config.Server{"raw": httpServer(up.URL + "/mcp")},
	})
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			c := e.client(t, gw.URL+"/mcp", map[string]string{"Origin": "https://app.example.com"})
			r := c.call("1", "tools/list", "")
			if names := toolNames(t, r); !slices.Equal(names, []string{"raw__weird"}) || r.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
				t.Errorf("allowed origin: %v %v", names, r.header)
			}
			for _, origin := range []string{"https://evil.example.com", "null", "http://app.example.com"} {
				// On the established client (its session, in the handshake era)
				// and on a fresh one.
				for _, cl := range []*eraClient{c, e.client(t, gw.URL+"/mcp", map[string]string{"Origin": origin})} {
					r := cl.send(map[string]string{"Origin": origin}, e.body("2", "tools/call", `{"name":"raw__weird","arguments":{"n":1}}`))
					if r.status != http.StatusForbidden || r.Error == nil || r.Error.Message != "Invalid Origin header" || r.header.Get("Access-Control-Allow-Origin") != "" {
						t.Errorf("origin %s: %s", origin, r)
					}
				}
			}
			for host, want := range map[string]int{"attacker.example": 403, "mcp.internal:4000": 200} {
				req, _ := http.NewRequest(http.MethodPost, gw.URL+"/mcp", strings.NewReader(e.body("3", "tools/list", "")))
				req.Host = host
				for k, v := range c.headers(e.body("3", "tools/list", "")) {
					req.Header.Set(k, v)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want || want == 403 && !strings.Contains(string(b), "Invalid Host header") {
					t.Errorf("host %s: %d %s, want %d", host, resp.StatusCode, b, want)
				}
			}
			pre, _ := http.NewRequest(http.MethodOptions, gw.URL+"/mcp", nil)
			pre.Header.Set("Origin", "https://app.example.com")
			pre.Header.Set("Access-Control-Request-Method", "POST")
			pre.Header.Set("Access-Control-Request-Headers", strings.ToLower(strings.Join(e.preflight, ", ")))
			resp, err := http.DefaultClient.Do(pre)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			allowed := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers"))
			for _, h := range e.preflight {
				if !slices.Contains(strings.Split(strings.ReplaceAll(allowed, " ", ""), ","), strings.ToLower(h)) {
					t.Errorf("preflight: %s is not allowed (Access-Control-Allow-Headers: %s)", h, resp.Header.Get("Access-Control-Allow-Headers"))
				}
			}
			if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
				t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
			}
		})
	}
}

// Cancellation: a client that gives up on a call cancels the upstream's
// work; the handshake era says so with notifications/cancelled, the new era by
// closing the request's stream (there is no cancellation notification on
// HTTP in 2026-07-28).
func TestEraCancellation(t *testing.T) {
	srv, started, cancelled := slowServer(4 * time.Second)
	mcp.AddTool(srv, &mcp.Tool{Name: "quick"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return textResult("quick"), nil, nil
	})
	up := serveSDK(t, srv)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"slow": httpServer(up.URL)}})
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			c := e.client(t, gw.URL+"/mcp", nil)
			if got := firstText(c.call("1", "tools/call", `{"name":"slow__quick","arguments":{}}`)); got != "quick" {
				t.Fatalf("quick: %s", got)
			}
			body := e.body("2", "tools/call", `{"name":"slow__wait","arguments":{}}`)
			ctx, closeStream := context.WithCancel(context.Background())
			defer closeStream()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/mcp", strings.NewReader(body))
			for k, v := range c.headers(body) {
				req.Header.Set(k, v)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream never got the call")
			}
			if e.stateless {
				closeStream()
			} else if status := c.notify("notifications/cancelled", `{"requestId":2,"reason":"changed my mind"}`); status != http.StatusAccepted {
				t.Errorf("notifications/cancelled: HTTP %d", status)
			}
			select {
			case <-cancelled:
			case <-time.After(2 * time.Second):
				t.Error("the upstream tool was not cancelled after the client gave up")
			}
			closeStream()
			<-done
			if got := firstText(c.call("3", "tools/call", `{"name":"slow__quick","arguments":{}}`)); got != "quick" {
				t.Errorf("after the cancellation: %s", got)
			}
		})
	}
}

// A stream outlives the request that checked its key: a session's GET
// stream and a subscriptions/listen stream end once their key is revoked
// (the listen request answered with an error saying why), while streams of
// other keys go on.
func TestStreamsEndWithTheirKey(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	keys := &memKeys{}
	doomed := keys.add(t, store.Key{Alias: "doomed"})
	kept := keys.add(t, store.Key{Alias: "kept"})
	g, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}}})
	g.recheck = 50 * time.Millisecond // before any stream opens
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The upstream's session coming up announces a list change; let that
	// pass before any stream opens.
	waitFor(t, "upstream ready", func() bool { return g.Upstreams().Health()["alpha"].State == "ready" })
	time.Sleep(100 * time.Millisecond)

	open := func(secret string, stateless bool) *jsonrpc.SSEReader {
		var req *http.Request
		if stateless {
			req, _ = http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/mcp", strings.NewReader(
				`{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},`+statelessMetaJSON+`}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("MCP-Protocol-Version", "2026-07-28")
			req.Header.Set("Mcp-Method", "subscriptions/listen")
		} else {
			code, hdr, body := rpc(t, gw.URL+"/mcp", withKey(secret), initBody)
			if code != 200 {
				t.Fatalf("initialize: %d %s", code, body)
			}
			req, _ = http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+"/mcp", nil)
			req.Header.Set(mcpwire.HeaderSessionID, hdr.Get(mcpwire.HeaderSessionID))
		}
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(callers.HeaderAPIKey, secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("open stream: %v %+v", err, resp)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return jsonrpc.NewSSEReader(resp.Body, 0)
	}
	listen, get := open(doomed, true), open(doomed, false)
	other := open(kept, true)
	for _, st := range []*jsonrpc.SSEReader{listen, other} {
		if ev, err := st.Next(); err != nil || !strings.Contains(string(ev.Data), "subscriptions/acknowledged") {
			t.Fatalf("ack: %s %v", ev.Data, err)
		}
	}
	keys.disable("doomed")
	ev, err := listen.Next()
	if err != nil || !strings.Contains(string(ev.Data), `"id":"L"`) || !strings.Contains(string(ev.Data), "no longer valid") {
		t.Errorf("listen stream after revocation: %s %v", ev.Data, err)
	}
	if _, err := listen.Next(); err == nil {
		t.Error("the listen stream went on after its key was revoked")
	}
	if _, err := get.Next(); err == nil {
		t.Error("the GET stream went on after its key was revoked")
	}
	// The other key's stream is untouched: it still hears of changes.
	mcp.AddTool(alpha.server, &mcp.Tool{Name: "later"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return textResult("later"), nil, nil
	})
	if ev, err := other.Next(); err != nil || !strings.Contains(string(ev.Data), "tools/list_changed") {
		t.Errorf("the other key's stream: %s %v", ev.Data, err)
	}
}
