package security

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers of the cases about who a call runs as (holes 3, 12, 13, 14),
// names (4), documents (6) and the admin surface (8, 9, 10): the admin
// API, the audit log, the legacy transport's replies, the stdio front, the
// CLI, and upstreams that record or lie.

// adminHeader is the header set of an admin API caller with key.
func adminHeader(key string) http.Header {
	h := http.Header{}
	if key != "" {
		h.Set("X-Mcpgate-Api-Key", key)
	}
	h.Set("Content-Type", "application/json")
	return h
}

// admin sends one admin API request (path below /admin/v1) with the
// master key.
func (g *gateway) admin(t testing.TB, method, path, body string) (int, string) {
	t.Helper()
	return g.adminAs(t, masterKey, method, path, body)
}

// createKey creates a key through g's admin API (body: POST /keys's) and
// returns its secret.
func (g *gateway) createKey(t testing.TB, body string) string {
	t.Helper()
	st, resp := g.admin(t, http.MethodPost, "/keys", body)
	var created struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal([]byte(resp), &created); st != http.StatusCreated || err != nil || created.Key == "" {
		t.Fatalf("POST /admin/v1/keys on %s: HTTP %d %s", g.base, st, resp)
	}
	return created.Key
}

// revokeInUse creates key alias (of a user, for server up) through via,
// opens a session with it on on and calls up's echo there, revokes it
// through via, and checks that on refuses it at once: on its open
// session, and initializing anew; up never runs a call made after the
// revocation. It returns the key for further checks.
func revokeInUse(t *testing.T, on, via *gateway, alias string, up *upstream) string {
	t.Helper()
	key := via.createKey(t, fmt.Sprintf(`{"alias":%q,"user":"u-%s","servers":[%q]}`, alias, alias, up.name))
	inUse := on.client(t, "/mcp/"+up.name, key)
	inUse.initialize("")
	if res := inUse.callTool("before", "echo", `{"text":"before"}`); isToolError(res) {
		t.Fatalf("the new key's call on %s: %s", on.base, describe(res))
	}
	if st, body := via.admin(t, http.MethodDelete, "/keys/"+alias, ""); st != http.StatusNoContent {
		t.Fatalf("DELETE /admin/v1/keys/%s on %s: HTTP %d %s", alias, via.base, st, body)
	}
	st, _, body := inUse.post(`{"jsonrpc":"2.0","id":"after","method":"tools/call","params":{"name":"echo","arguments":{"text":"after revoke"}}}`)
	unauthorized(t, "the revoked key's open session on "+on.base, st, body)
	st, _, body = on.client(t, "/mcp/"+up.name, key).post(initJSON)
	unauthorized(t, "the revoked key initializing on "+on.base, st, body)
	for _, s := range up.received() {
		if strings.Contains(s, "after revoke") {
			t.Errorf("the upstream ran a call of the revoked key: %q", s)
		}
	}
	return key
}

// adminAs is admin with another key.
func (g *gateway) adminAs(t testing.TB, key, method, path, body string) (int, string) {
	t.Helper()
	st, _, b := g.request(t, method, "/admin/v1"+path, adminHeader(key), body)
	return st, b
}

// auditRow is one row of GET /admin/v1/audit.
type auditRow struct {
	KeyAlias  string  `json:"key_alias"`
	User      string  `json:"user"`
	Team      string  `json:"team"`
	Server    string  `json:"server"`
	Tool      string  `json:"tool"`
	Outcome   string  `json:"outcome"`
	Guardrail string  `json:"guardrail"`
	Cost      float64 `json:"cost"`
}

// auditRows waits (records are written in batches) until the audit log
// has at least want rows matching query (a query string of GET
// /admin/v1/audit, e.g. "server=alpha&tool=echo"), and returns them, or
// what there is after within.
func (g *gateway) auditRows(t testing.TB, query string, want int, within time.Duration) []auditRow {
	t.Helper()
	return g.auditRowsAs(t, masterKey, query, want, within)
}

// auditRowsAs is auditRows read with key ("": none, a gateway without
// auth).
func (g *gateway) auditRowsAs(t testing.TB, key, query string, want int, within time.Duration) []auditRow {
	t.Helper()
	var rows []auditRow
	deadline := time.Now().Add(within)
	for {
		st, body := g.adminAs(t, key, http.MethodGet, "/audit?"+query, "")
		if st != http.StatusOK {
			t.Fatalf("GET /admin/v1/audit?%s: HTTP %d %s", query, st, body)
		}
		var page struct {
			Calls []auditRow `json:"calls"`
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("audit page %s: %v", body, err)
		}
		rows = page.Calls
		if len(rows) >= want || time.Now().After(deadline) {
			return rows
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// callTool sends tools/call on c (a session, or stateless) and waits for
// its answer.
func (c *client) callTool(id, name, args string) *rpcMsg {
	c.t.Helper()
	if args == "" {
		args = "{}"
	}
	return c.start(id, "tools/call", fmt.Sprintf(`{"name":%s,"arguments":%s}`, mustJSON(name), args)).result(c.t, 15*time.Second)
}

// toolNames is the names tools/list gives c.
func (c *client) toolNames() []string {
	c.t.Helper()
	res := c.start("list", "tools/list", `{}`).result(c.t, 15*time.Second)
	if res.Error != nil {
		c.t.Fatalf("tools/list on %s: %d %s", c.path, res.Error.Code, res.Error.Message)
	}
	var list struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(res.Result, &list); err != nil {
		c.t.Fatalf("tools/list result %s: %v", res.Result, err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// isToolError reports whether m is a tools/call that did not succeed: a
// JSON-RPC error or a result with isError.
func isToolError(m *rpcMsg) bool {
	if m.Error != nil {
		return true
	}
	var res struct {
		IsError bool `json:"isError"`
	}
	_ = json.Unmarshal(m.Result, &res)
	return res.IsError
}

// legacyStream is a 2024-11-05 HTTP+SSE session whose stream is read to
// the end: the replies to its POSTs arrive there as "message" events.
type legacyStream struct {
	g        *gateway
	endpoint string
	hdr      http.Header
	msgs     chan *rpcMsg
}

// openLegacyStream opens path's legacy SSE stream with hdr (the caller's
// credentials) and initializes the session.
func openLegacyStream(t *testing.T, g *gateway, path string, hdr http.Header) *legacyStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.base+path+"/sse", nil)
	req.Header = hdr.Clone()
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatalf("legacy GET %s/sse: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("legacy GET %s/sse: HTTP %d %s", path, resp.StatusCode, b)
	}
	l := &legacyStream{g: g, hdr: hdr.Clone(), msgs: make(chan *rpcMsg, 256)}
	endpoint := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		defer close(l.msgs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var event string
		var data bytes.Buffer
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if event == "endpoint" {
					endpoint <- data.String()
				} else if data.Len() > 0 {
					var m rpcMsg
					if json.Unmarshal(data.Bytes(), &m) == nil {
						l.msgs <- &m
					}
				}
				event = ""
				data.Reset()
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:"):
				data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			}
		}
	}()
	select {
	case ep := <-endpoint:
		l.endpoint = ep
	case <-time.After(10 * time.Second):
		t.Fatalf("legacy stream of %s: no endpoint within 10s", path)
	}
	init := l.call(t, "init", "initialize", `{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"security-suite","version":"1"}}`)
	if init.Error != nil {
		t.Fatalf("legacy initialize on %s: %+v", path, init.Error)
	}
	if st, body := l.post(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); st != http.StatusAccepted {
		t.Fatalf("legacy notifications/initialized: HTTP %d %s", st, body)
	}
	return l
}

func (l *legacyStream) post(t *testing.T, body string) (int, string) {
	t.Helper()
	h := l.hdr.Clone()
	h.Set("Content-Type", "application/json")
	st, _, b := l.g.request(t, http.MethodPost, l.endpoint, h, body)
	return st, b
}

// call POSTs one request and waits for its reply on the stream. A POST
// the gateway refuses is returned as an error of code -status.
func (l *legacyStream) call(t *testing.T, id, method, params string) *rpcMsg {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q,"params":%s}`, id, method, params)
	st, b := l.post(t, body)
	if st != http.StatusAccepted {
		var m rpcMsg
		if json.Unmarshal([]byte(b), &m) != nil || m.Error == nil {
			m = rpcMsg{Error: &rpcError{Code: int64(-st), Message: b}}
		}
		m.Error.Data = json.RawMessage(fmt.Sprintf(`{"http_status":%d}`, st))
		return &m
	}
	want, _ := json.Marshal(id)
	deadline := time.After(15 * time.Second)
	for {
		select {
		case m, ok := <-l.msgs:
			if !ok {
				t.Fatalf("legacy stream ended before the reply to %s", id)
			}
			if m.isResponse() && bytes.Equal(m.ID, want) {
				return m
			}
		case <-deadline:
			t.Fatalf("legacy stream: no reply to %s within 15s", id)
		}
	}
}

// callTool is tools/call over the legacy transport.
func (l *legacyStream) callTool(t *testing.T, id, name, args string) *rpcMsg {
	t.Helper()
	return l.call(t, id, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, name, args))
}

// hit is one request an HTTP recorder received.
type hit struct {
	Method string
	Path   string
	Header http.Header
	Body   string
}

// recorder is an HTTP server that records every request and answers with
// handle (nil: 200 "{}").
type recorder struct {
	srv    *httptest.Server
	mu     sync.Mutex
	hits   []hit
	handle func(w http.ResponseWriter, r *http.Request, body []byte)
}

func newRecorder(t testing.TB, handle func(w http.ResponseWriter, r *http.Request, body []byte)) *recorder {
	t.Helper()
	rec := &recorder{handle: handle}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		rec.mu.Lock()
		rec.hits = append(rec.hits, hit{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: string(body)})
		rec.mu.Unlock()
		if rec.handle != nil {
			rec.handle(w, r, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) all() []hit {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]hit(nil), rec.hits...)
}

// rawTool is one tool a hostile upstream lists, as it lists it.
type rawTool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// rawUpstream is an MCP server that lists whatever tools it is given,
// names outside every rule included (the go-sdk refuses to serve such
// names), and answers a call with "<server>/<tool>: <arguments>",
// recording every call it gets; it offers a prompt of each tool's name
// too (prompts/get is recorded as "prompt <name> <arguments>").
type rawUpstream struct {
	name  string
	srv   *httptest.Server
	mu    sync.Mutex
	calls []string // "<tool> <arguments JSON>"
}

func newRawUpstream(t testing.TB, name string, tools ...rawTool) *rawUpstream {
	t.Helper()
	u := &rawUpstream{name: name}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &m) != nil || len(m.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result any
		switch m.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}, "prompts": map[string]any{}},
				"serverInfo": map[string]any{"name": name, "version": "1"}}
		case "tools/list":
			ts := []map[string]any{}
			for _, tl := range tools {
				ts = append(ts, map[string]any{"name": tl.Name, "description": tl.Description, "inputSchema": map[string]any{"type": "object"}})
			}
			result = map[string]any{"tools": ts}
		case "prompts/list":
			ps := []map[string]any{}
			for _, tl := range tools {
				ps = append(ps, map[string]any{"name": tl.Name, "description": tl.Description})
			}
			result = map[string]any{"prompts": ps}
		case "prompts/get":
			u.mu.Lock()
			u.calls = append(u.calls, "prompt "+m.Params.Name+" "+string(m.Params.Arguments))
			u.mu.Unlock()
			result = map[string]any{"messages": []map[string]any{{"role": "user", "content": map[string]any{"type": "text", "text": name + "/" + m.Params.Name}}}}
		case "tools/call":
			u.mu.Lock()
			u.calls = append(u.calls, m.Params.Name+" "+string(m.Params.Arguments))
			u.mu.Unlock()
			result = map[string]any{"content": []map[string]any{{"type": "text", "text": name + "/" + m.Params.Name + ": " + string(m.Params.Arguments)}}}
		default:
			result = map[string]any{}
		}
		resp, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *rawUpstream) url() string { return u.srv.URL + "/mcp" }

func (u *rawUpstream) server() string {
	return fmt.Sprintf("  %s: {transport: http, url: %q}\n", u.name, u.url())
}

func (u *rawUpstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.calls...)
}

// runCLI runs the binary with args (and env added to the test's) and
// returns its stdout, stderr and exit code.
func runCLI(t testing.TB, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.gateway, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("mcpgate %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), code
}

// writeConfig writes cfg to a file of its own and returns the path.
func writeConfig(t testing.TB, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mcpgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// stdioFront is a running `mcpgate stdio`: JSON-RPC lines in on stdin,
// out on stdout.
type stdioFront struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	msgs   chan *rpcMsg
	stderr *bytes.Buffer
	exited chan struct{}
}

// startStdio runs `mcpgate stdio --config <cfg> args...` and initializes
// its session. It fails the test if the front exits before answering.
func startStdio(t testing.TB, cfg string, args ...string) *stdioFront {
	t.Helper()
	f, err := tryStartStdio(t, cfg, args...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func tryStartStdio(t testing.TB, cfg string, args ...string) (*stdioFront, error) {
	t.Helper()
	path := writeConfig(t, cfg)
	cmd := exec.Command(bins.gateway, append([]string{"stdio", "--config", path, "--log-format", "json"}, args...)...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	f := &stdioFront{t: t, cmd: cmd, stdin: stdin, msgs: make(chan *rpcMsg, 256), stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = &lockedWriter{w: f.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(f.msgs)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var m rpcMsg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				f.msgs <- &m
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(f.exited) }()
	t.Cleanup(f.stop)
	init, err := f.tryCall("init", "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"security-suite","version":"1"}}`)
	if err != nil {
		return nil, fmt.Errorf("mcpgate stdio %s: %v\n%s", strings.Join(args, " "), err, f.stderrText())
	}
	if init.Error != nil {
		return nil, fmt.Errorf("mcpgate stdio initialize: %+v", init.Error)
	}
	f.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return f, nil
}

// lockedWriter serialises writes to w (the child's stderr is copied by
// another goroutine than the one reading it).
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

func (f *stdioFront) stderrText() string {
	lw := f.cmd.Stderr.(*lockedWriter)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.String()
}

func (f *stdioFront) send(line string) {
	f.t.Helper()
	if _, err := io.WriteString(f.stdin, line+"\n"); err != nil {
		f.t.Fatalf("stdio front: write: %v", err)
	}
}

func (f *stdioFront) tryCall(id, method, params string) (*rpcMsg, error) {
	if _, err := io.WriteString(f.stdin, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q,"params":%s}`+"\n", id, method, params)); err != nil {
		return nil, err
	}
	want, _ := json.Marshal(id)
	deadline := time.After(15 * time.Second)
	for {
		select {
		case m, ok := <-f.msgs:
			if !ok {
				return nil, fmt.Errorf("the front exited before answering %s", id)
			}
			if m.isResponse() && bytes.Equal(m.ID, want) {
				return m, nil
			}
		case <-deadline:
			return nil, fmt.Errorf("no answer to %s within 15s", id)
		}
	}
}

func (f *stdioFront) call(id, method, params string) *rpcMsg {
	f.t.Helper()
	m, err := f.tryCall(id, method, params)
	if err != nil {
		f.t.Fatalf("stdio front: %v\n%s", err, f.stderrText())
	}
	return m
}

// stop closes stdin (the front's end of input) and waits for it to exit.
func (f *stdioFront) stop() {
	_ = f.stdin.Close()
	select {
	case <-f.exited:
	case <-time.After(15 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.exited
	}
}

// hostOf is the host:port of a URL.
func hostOf(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// describe is a message for a test failure: its error or its result.
func describe(m *rpcMsg) string {
	if m == nil {
		return "no message"
	}
	if m.Error != nil {
		s := fmt.Sprintf("JSON-RPC %d %q", m.Error.Code, m.Error.Message)
		if len(m.Error.Data) > 0 {
			s += " data " + string(m.Error.Data)
		}
		return s
	}
	return "result " + string(m.Result)
}
