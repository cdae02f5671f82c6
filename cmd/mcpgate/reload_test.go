package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The reload tests run the real binary (serve) in front of HTTP upstreams
// of this process, whose one tool waits on a gate: calls stay in flight
// across a reload for as long as the test wants.

// gatedUpstream is a minimal streamable HTTP MCP server (JSON answers, no
// session) with one tool, work, that answers its name once gate is
// closed.
type gatedUpstream struct {
	name    string
	gate    chan struct{}
	entered atomic.Int64 // tools/call requests received
	srv     *httptest.Server
}

func newGatedUpstream(t *testing.T, name string, open bool) *gatedUpstream {
	t.Helper()
	u := &gatedUpstream{name: name, gate: make(chan struct{})}
	if open {
		close(u.gate)
	}
	u.srv = httptest.NewServer(u)
	t.Cleanup(u.srv.Close)
	return u
}

func (u *gatedUpstream) url() string { return u.srv.URL + "/mcp" }

func (u *gatedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if len(m.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	var res any
	switch m.Method {
	case "initialize":
		res = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}},
			"serverInfo": map[string]any{"name": u.name, "version": "1"}}
	case "tools/list":
		res = map[string]any{"tools": []any{map[string]any{"name": "work", "inputSchema": map[string]any{"type": "object"}}}}
	case "tools/call":
		u.entered.Add(1)
		select {
		case <-u.gate:
		case <-r.Context().Done():
			return
		}
		res = map[string]any{"content": []any{map[string]any{"type": "text", "text": u.name}}}
	case "ping":
		res = map[string]any{}
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`, m.ID)
		return
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": res})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// reloadGateway is a running `mcpgate serve` with its log.
type reloadGateway struct {
	cmd  *exec.Cmd
	base string // http://host:port

	mu    sync.Mutex
	lines []string
}

func startReloadGateway(t *testing.T, bin, cfg string, env ...string) *reloadGateway {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &reloadGateway{cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			g.mu.Lock()
			g.lines = append(g.lines, sc.Text())
			g.mu.Unlock()
		}
	}()
	addrRE := regexp.MustCompile(`"addr":"(http://[^"]+)/mcp"`)
	g.waitLog(t, 0, func(l string) bool {
		if m := addrRE.FindStringSubmatch(l); m != nil {
			g.base = m[1]
			return true
		}
		return false
	})
	return g
}

// mark is the number of log lines so far: waitLog(mark, ...) looks at the
// lines after it.
func (g *reloadGateway) mark() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.lines)
}

// waitLog waits for a line after from that match accepts, and returns it.
func (g *reloadGateway) waitLog(t *testing.T, from int, match func(string) bool) string {
	t.Helper()
	var found string
	waitUntil(t, "a log line", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, l := range g.lines[min(from, len(g.lines)):] {
			if match(l) {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

func (g *reloadGateway) countLog(from int, substr string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, l := range g.lines[min(from, len(g.lines)):] {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

func (g *reloadGateway) dump(t *testing.T) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t.Logf("gateway log:\n%s", strings.Join(g.lines, "\n"))
}

// eventually polls cond until it holds, for at most 20 seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rpc posts one JSON-RPC message to /mcp with key (and session sid) and
// returns the status, the session id header and the message answered.
func postRPC(t *testing.T, base, key, sid, body string) (status int, session string, answer map[string]json.RawMessage) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("post: %v", err)
		return 0, "", nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(b), "\n") {
			if data, ok := strings.CutPrefix(line, "data:"); ok && strings.Contains(data, `"id"`) {
				b = []byte(strings.TrimSpace(data))
			}
		}
	}
	_ = json.Unmarshal(b, &answer)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), answer
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"reload-test","version":"1"}}}`

// openSession initializes a session for key and returns its id.
func openTestSession(t *testing.T, base, key string) string {
	t.Helper()
	status, sid, ans := postRPC(t, base, key, "", initBody)
	if status != http.StatusOK || sid == "" || ans["result"] == nil {
		t.Fatalf("initialize: %d %v", status, ans)
	}
	if status, _, _ := postRPC(t, base, key, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); status != http.StatusAccepted {
		t.Fatalf("initialized: %d", status)
	}
	return sid
}

// getStream is an open GET stream of a session.
type getStream struct {
	mu     sync.Mutex
	events []string
	ended  chan struct{}
}

func openGetStream(t *testing.T, base, key, sid string) *getStream {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %d", resp.StatusCode)
	}
	s := &getStream{ended: make(chan struct{})}
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(s.ended)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				s.mu.Lock()
				s.events = append(s.events, data)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

func (s *getStream) saw(substr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.events, func(e string) bool { return strings.Contains(e, substr) })
}

// toolNames lists the tools a session sees.
func sessionTools(t *testing.T, base, key, sid string) []string {
	t.Helper()
	status, _, ans := postRPC(t, base, key, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	var res struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if status != http.StatusOK || json.Unmarshal(ans["result"], &res) != nil {
		t.Fatalf("tools/list: %d %v", status, ans)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	slices.Sort(out)
	return out
}

// callText calls tool statelessly and returns its text, or the error.
func callTextOf(t *testing.T, base, key, tool string) (string, error) {
	t.Helper()
	status, _, ans := postRPC(t, base, key, "", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+tool+`","arguments":{}}}`)
	var res struct {
		IsError bool `json:"isError"`
		Content []struct{ Text string }
	}
	if status != http.StatusOK || ans["error"] != nil || json.Unmarshal(ans["result"], &res) != nil || res.IsError || len(res.Content) == 0 {
		return "", fmt.Errorf("status %d, answer %s %s", status, ans["error"], ans["result"])
	}
	return res.Content[0].Text, nil
}

func adminCall(t *testing.T, base, key, method, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, base+"/admin/v1"+path, nil)
	req.Header.Set("X-Mcpgate-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

const (
	masterKey = "master-key-0123456789abcdef"
	aliceKey  = "sk-alice-0123456789abcdef"
	bobKey    = "sk-bob-0123456789abcdef"
)

// reloadConfig is the gateway's config: servers by name -> URL, the key
// aliases kept of alice and bob, and extra YAML.
func reloadConfig(dataDir string, servers map[string]string, bob bool, extra string) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "data_dir: %s\nauth:\n  master_key: %s\n  keys:\n    - {alias: alice, key: %s}\n", dataDir, masterKey, aliceKey)
	if bob {
		fmt.Fprintf(&b, "    - {alias: bob, key: %s}\n", bobKey)
	}
	b.WriteString("servers:\n")
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		fmt.Fprintf(&b, "  %s: {transport: http, url: %q}\n", name, servers[name])
	}
	b.WriteString(extra)
	return b.String()
}

// writeLinked makes link point at a new file holding content, replacing
// the symlink atomically as a Kubernetes ConfigMap update does.
func writeLinked(t *testing.T, link, content string) {
	t.Helper()
	dir := filepath.Dir(link)
	f, err := os.CreateTemp(dir, "gw-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	f.Close()
	tmp := link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(f.Name(), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// TestReload is issue 15 §3 through the real binary: 200 calls in flight
// across a SIGHUP reload that removes one server, changes another's URL
// and revokes a key; then POST /admin/v1/reload with a bad file and with
// a restart-only change; then the file watcher following a symlink swap.
func TestReload(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, _ := buildBinary(t)
	dir := t.TempDir()
	a, b, c1 := newGatedUpstream(t, "a", false), newGatedUpstream(t, "b", false), newGatedUpstream(t, "c1", false)
	c2 := newGatedUpstream(t, "c2", true)
	cfgPath := filepath.Join(dir, "gw.yaml")
	dataDir := filepath.Join(dir, "data")
	writeLinked(t, cfgPath, reloadConfig(dataDir, map[string]string{"a": a.url(), "b": b.url(), "c": c1.url()}, true, ""))
	g := startReloadGateway(t, bin, cfgPath)
	defer func() {
		if t.Failed() {
			g.dump(t)
		}
	}()

	// Sessions open before the reload, each with a GET stream.
	aliceSID := openTestSession(t, g.base, aliceKey)
	bobSID := openTestSession(t, g.base, bobKey)
	aliceStream := openGetStream(t, g.base, aliceKey, aliceSID)
	bobStream := openGetStream(t, g.base, bobKey, bobSID)
	if got, want := sessionTools(t, g.base, aliceKey, aliceSID), []string{"a__work", "b__work", "c__work"}; !slices.Equal(got, want) {
		t.Fatalf("tools before: %v, want %v", got, want)
	}

	t.Run("SIGHUP with 200 calls in flight", func(t *testing.T) {
		const n = 200
		tools := []string{"a__work", "b__work", "c__work"}
		type outcome struct {
			tool, text string
			err        error
		}
		out := make([]outcome, n)
		var wg sync.WaitGroup
		for i := range n {
			tool := tools[i%3]
			wg.Go(func() {
				text, err := callTextOf(t, g.base, aliceKey, tool)
				out[i] = outcome{tool, text, err}
			})
		}
		waitUntil(t, "200 calls in flight upstream", func() bool {
			return a.entered.Load()+b.entered.Load()+c1.entered.Load() == n
		})

		from := g.mark()
		writeLinked(t, cfgPath, reloadConfig(dataDir, map[string]string{"a": a.url(), "c": c2.url()}, false, ""))
		if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		line := g.waitLog(t, from, func(l string) bool {
			return strings.Contains(l, `"msg":"config reloaded"`) || strings.Contains(l, `"msg":"config reload`)
		})
		for _, want := range []string{`"by":"SIGHUP"`, `"servers_removed":["b"]`, `"servers_changed":["c"]`, `"keys_removed":["bob"]`} {
			if !strings.Contains(line, want) {
				t.Errorf("reload log %s lacks %s", line, want)
			}
		}

		// The revoked key is refused at once: new requests, its session,
		// its stream.
		if status, _, _ := postRPC(t, g.base, bobKey, "", initBody); status != http.StatusUnauthorized {
			t.Errorf("revoked key, new session: %d, want 401", status)
		}
		if status, _, _ := postRPC(t, g.base, bobKey, bobSID, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); status != http.StatusUnauthorized {
			t.Errorf("revoked key, its open session: %d, want 401", status)
		}
		select {
		case <-bobStream.ended:
		case <-time.After(10 * time.Second):
			t.Error("the revoked key's GET stream is still open")
		}

		// The calls in flight were not disturbed: on removed and changed
		// servers too, they finish with their old upstream's answer.
		for _, u := range []*gatedUpstream{a, b, c1} {
			close(u.gate)
		}
		wg.Wait()
		failed := 0
		for _, o := range out {
			if want := map[string]string{"a__work": "a", "b__work": "b", "c__work": "c1"}[o.tool]; o.err != nil || o.text != want {
				failed++
				if failed <= 5 {
					t.Errorf("call %s across the reload: %q, %v", o.tool, o.text, o.err)
				}
			}
		}
		if failed > 0 {
			t.Errorf("%d of %d calls in flight failed", failed, n)
		}

		// The session survives with its id; its view is the new one.
		if got, want := sessionTools(t, g.base, aliceKey, aliceSID), []string{"a__work", "c__work"}; !slices.Equal(got, want) {
			t.Errorf("tools after: %v, want %v", got, want)
		}
		waitUntil(t, "tools/list_changed on the open GET stream", func() bool { return aliceStream.saw("notifications/tools/list_changed") })
		if text, err := callTextOf(t, g.base, aliceKey, "c__work"); err != nil || text != "c2" {
			t.Errorf("c after the reload: %q, %v; want the new URL's answer", text, err)
		}
		if _, err := callTextOf(t, g.base, aliceKey, "b__work"); err == nil {
			t.Error("b__work still callable after b was removed")
		}
	})

	t.Run("admin endpoint", func(t *testing.T) {
		if status, _ := adminCall(t, g.base, aliceKey, http.MethodPost, "/reload"); status != http.StatusForbidden {
			t.Errorf("reload by a non-admin key: %d, want 403", status)
		}
		// A bad file: nothing changes, the problems are named.
		badFile := strings.Replace(reloadConfig(dataDir, map[string]string{"a": a.url()}, false, ""),
			"servers:\n", "servers:\n  d: {transport: http}\n  e: {transport: http, url: \"http://x\", timeout: -1s}\n", 1)
		writeLinked(t, cfgPath, badFile)
		status, body := adminCall(t, g.base, masterKey, http.MethodPost, "/reload")
		var bad struct {
			Problems []struct {
				Path, Message string
				Line          int
			}
		}
		if err := json.Unmarshal(body, &bad); status != http.StatusUnprocessableEntity || err != nil {
			t.Fatalf("bad file: %d %s, want 422", status, body)
		}
		paths := []string{}
		for _, p := range bad.Problems {
			paths = append(paths, p.Path)
			if p.Line == 0 || p.Message == "" {
				t.Errorf("problem without line or message: %+v", p)
			}
		}
		if !slices.Contains(paths, "servers.d.url") || !slices.Contains(paths, "servers.e.timeout") {
			t.Errorf("problems name %v; want servers.d.url and servers.e.timeout", paths)
		}
		if got, want := sessionTools(t, g.base, aliceKey, aliceSID), []string{"a__work", "c__work"}; !slices.Equal(got, want) {
			t.Errorf("tools after a refused reload: %v, want %v (unchanged)", got, want)
		}

		// A change needing a restart is reported; the rest applies.
		writeLinked(t, cfgPath, reloadConfig(dataDir, map[string]string{"a": a.url(), "c": c2.url(), "d": c2.url()}, false,
			"sessions: {max_per_owner: 7}\nallowed_hosts: [gw.example]\n"))
		status, body = adminCall(t, g.base, masterKey, http.MethodPost, "/reload")
		var rep struct {
			Changed         bool
			Servers         struct{ Added []string }
			Sections        []string
			RestartRequired []string `json:"restart_required"`
			By              string
		}
		if err := json.Unmarshal(body, &rep); status != http.StatusOK || err != nil {
			t.Fatalf("reload: %d %s", status, body)
		}
		if !rep.Changed || !slices.Equal(rep.Servers.Added, []string{"d"}) || !slices.Equal(rep.RestartRequired, []string{"sessions"}) ||
			!slices.Equal(rep.Sections, []string{"allowed_hosts"}) || rep.By != "master" {
			t.Errorf("reload report: %s", body)
		}
		waitUntil(t, "d__work listed", func() bool { return slices.Contains(sessionTools(t, g.base, aliceKey, aliceSID), "d__work") })

		// The audit log has who reloaded and what changed.
		status, body = adminCall(t, g.base, masterKey, http.MethodGet, "/audit/events?action=config.reload")
		if status != http.StatusOK {
			t.Fatalf("audit events: %d %s", status, body)
		}
		for _, want := range []string{`"actor":"SIGHUP"`, `"actor":"master"`, `"removed":["bob"]`, `"restart_required":["sessions"]`} {
			if !bytes.Contains(body, []byte(want)) {
				t.Errorf("audit events lack %s: %s", want, body)
			}
		}
		if bytes.Contains(body, []byte(bobKey)) || bytes.Contains(body, []byte(masterKey)) {
			t.Error("audit events carry a secret")
		}
		status, body = adminCall(t, g.base, masterKey, http.MethodGet, "/audit/events?action=config.reload_failed")
		if status != http.StatusOK || !bytes.Contains(body, []byte(`servers.d.url`)) {
			t.Errorf("refused reload not audited: %d %s", status, body)
		}
	})

	t.Run("watch", func(t *testing.T) {
		// Watching is itself reloadable: turned on by a reload.
		watch := "reload: {watch: true, watch_interval: 50ms}\n"
		servers := map[string]string{"a": a.url(), "c": c2.url(), "d": c2.url()}
		writeLinked(t, cfgPath, reloadConfig(dataDir, servers, false, "sessions: {max_per_owner: 7}\nallowed_hosts: [gw.example]\n"+watch))
		if status, body := adminCall(t, g.base, masterKey, http.MethodPost, "/reload"); status != http.StatusOK {
			t.Fatalf("reload: %d %s", status, body)
		}
		// The log reader may lag the answer: start after its line.
		g.waitLog(t, 0, func(l string) bool { return strings.Contains(l, `"sections":["reload"]`) })
		// A half-written file is reported once, however many ticks see it.
		from := g.mark()
		full := reloadConfig(dataDir, map[string]string{"a": a.url(), "c": c2.url()}, false, "sessions: {max_per_owner: 7}\nallowed_hosts: [gw.example]\n"+watch)
		writeLinked(t, cfgPath, full[:strings.Index(full, "servers:")+len("servers:\n  a: {transport: ht")])
		g.waitLog(t, from, func(l string) bool {
			return strings.Contains(l, `"by":"watch"`) && strings.Contains(l, "config reload refused")
		})
		time.Sleep(10 * 50 * time.Millisecond) // ten ticks on the same content
		if n := g.countLog(from, "config reload refused"); n != 1 {
			t.Errorf("half-written file reported %d times, want once", n)
		}
		// The finished file applies: d goes.
		writeLinked(t, cfgPath, full)
		waitUntil(t, "d removed by the watcher", func() bool {
			return !slices.Contains(sessionTools(t, g.base, aliceKey, aliceSID), "d__work")
		})
		if text, err := callTextOf(t, g.base, aliceKey, "a__work"); err != nil || text != "a" {
			t.Errorf("a after the watcher's reload: %q, %v", text, err)
		}
		line := g.waitLog(t, from, func(l string) bool {
			return strings.Contains(l, `"msg":"config reloaded"`) && strings.Contains(l, `"by":"watch"`)
		})
		if !strings.Contains(line, `"by":"watch"`) || !strings.Contains(line, `"servers_removed":["d"]`) {
			t.Errorf("watcher reload log: %s", line)
		}
	})

	t.Run("cli", func(t *testing.T) {
		out, err := exec.Command(bin, "reload", "--url", g.base, "--admin-key", masterKey).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "reloaded") || !strings.Contains(string(out), "restart required  sessions") {
			t.Errorf("mcpgate reload: %v\n%s", err, out)
		}
		writeLinked(t, cfgPath, "servers: {x: {transport: http}}\n")
		out, err = exec.Command(bin, "reload", "--url", g.base, "--admin-key", masterKey).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "nothing changed") || !strings.Contains(string(out), "servers.x.url") {
			t.Errorf("mcpgate reload of a bad file: %v\n%s", err, out)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		resp, err := http.Get(g.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The watcher may see the CLI's bad file before the CLI does: at
		// least three invalid ones (two refused by the API, one by the
		// watcher, the last by either or both).
		for _, want := range []string{`mcpgate_config_reloads_total\{result="applied"\} [1-9]`, `mcpgate_config_reloads_total\{result="invalid"\} [3-9]`,
			`mcpgate_config_restart_required 1`, `mcpgate_config_last_reload_success_timestamp_seconds \d`} {
			if !regexp.MustCompile(want).Match(body) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}
