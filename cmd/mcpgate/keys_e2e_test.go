package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// gatewayProc is a running mcpgate serve.
type gatewayProc struct {
	cmd  *exec.Cmd
	url  string // http://host:port
	done chan error

	mu  sync.Mutex
	log strings.Builder // stderr so far
}

// Log returns what the gateway wrote to stderr so far.
func (p *gatewayProc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func startGateway(t *testing.T, gw, cfgPath string, env ...string) *gatewayProc {
	t.Helper()
	cmd := exec.Command(gw, "serve", "--config", cfgPath, "--listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(), env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{cmd: cmd, done: make(chan error, 1)}
	t.Cleanup(func() { cmd.Process.Kill() })
	addrRE := regexp.MustCompile(`"addr":"(http://[^"/]+)/mcp"`)
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
		p.done <- cmd.Wait()
	}()
	select {
	case p.url = <-urlc:
	case err := <-p.done:
		t.Fatalf("gateway exited: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not log its address")
	}
	return p
}

func post(t *testing.T, url, key, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
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
	return resp.StatusCode, resp.Header, string(b)
}

// keyTransport adds the gateway key to every request of an SDK client.
type keyTransport struct{ key string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Mcpgate-Api-Key", k.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestKeysEndToEnd runs the real binary with declarative keys: the official
// go-sdk client connects to a scoped route with a key, keys see only what
// they are granted (list and call agree), the rate limit answers 429, the
// admin API creates a runtime key, and 1,000 calls followed by SIGTERM
// leave 1,000 audit rows.
func TestKeysEndToEnd(t *testing.T) {
	gw, notes := buildBinary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gw.yaml")
	cfg := fmt.Sprintf(`
data_dir: ./state
auth:
  master_key: ${MK}
  keys:
    - {alias: alice-bot, key: "${ALICE}", user: alice, servers: [notes]}
    - {alias: reader, key: "${READER}", servers: [notes], tools: {notes: [list_notes, get_note]}}
    - {alias: limited, key: "${LIMITED}", rate_limit_rpm: 3}
    - {alias: nothing, key: "${NOTHING}", no_mcp: true}
toolsets:
  readers: {servers: {notes: [list_notes]}}
servers:
  notes: {transport: stdio, command: %s}
  archive: {transport: stdio, command: %s}
`, notes, notes)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	const (
		mk      = "master-0123456789-abcdef"
		alice   = "alice-key-0123456789abcdef"
		reader  = "reader-key-0123456789abcdef"
		limited = "limited-key-0123456789abcdef"
		nothing = "nothing-key-0123456789abcdef"
	)
	p := startGateway(t, gw, cfgPath, "MK="+mk, "ALICE="+alice, "READER="+reader, "LIMITED="+limited, "NOTHING="+nothing)

	// No key, a wrong key: 401.
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	if code, hdr, _ := post(t, p.url+"/mcp", "", list); code != 401 || hdr.Get("WWW-Authenticate") == "" {
		t.Errorf("no key: %d", code)
	}
	if code, _, _ := post(t, p.url+"/mcp", "wrong-key-0123456789abc", list); code != 401 {
		t.Errorf("wrong key: %d", code)
	}

	// The official go-sdk client on a scoped route with a key.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "sdk-client", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url + "/mcp/notes",
		HTTPClient: &http.Client{Transport: keyTransport{alice}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 5 {
		t.Fatalf("tools on /mcp/notes: %v %v", tools, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"title": "t", "body": "b"}})
	if err != nil || res.IsError {
		t.Fatalf("add_note: %v %v", res, err)
	}
	cs.Close()
	// alice may not use archive: the route is refused as unknown.
	if code, _, body := post(t, p.url+"/mcp/archive", alice, list); code != 404 || !strings.Contains(body, `Unknown MCP server \"archive\"`) {
		t.Errorf("alice on /mcp/archive: %d %s", code, body)
	}

	// List and call agree for every key and tool on /mcp.
	allTools := []string{"add_note", "list_notes", "get_note", "delete_note", "search_notes"}
	for _, k := range []struct {
		key     string
		visible map[string]bool
	}{
		{alice, map[string]bool{"notes__add_note": true, "notes__list_notes": true, "notes__get_note": true, "notes__delete_note": true, "notes__search_notes": true}},
		{reader, map[string]bool{"notes__list_notes": true, "notes__get_note": true}},
		{mk, nil}, // everything
	} {
		_, _, body := post(t, p.url+"/mcp", k.key, list)
		for _, server := range []string{"notes", "archive"} {
			for _, tool := range allTools {
				name := server + "__" + tool
				listed := strings.Contains(body, `"`+name+`"`)
				want := k.visible == nil || k.visible[name]
				if listed != want {
					t.Errorf("key %s...: %s listed=%v, want %v", k.key[:6], name, listed, want)
				}
				_, _, out := post(t, p.url+"/mcp", k.key, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"`+name+`","arguments":{"title":"t","body":"b","query":"t"}}}`)
				called := strings.Contains(out, `"result"`)
				if called != listed {
					t.Errorf("key %s...: %s listed=%v but call %s", k.key[:6], name, listed, out)
				}
				if !called && !strings.Contains(out, "Unknown tool: "+name) {
					t.Errorf("refused call differs from an unknown tool: %s", out)
				}
			}
		}
	}
	// Toolset route: reader has no grant; the S7 messages.
	if code, _, body := post(t, p.url+"/toolset/readers/mcp", reader, list); code != 403 || !strings.Contains(body, "API key does not have access to toolset 'readers'.") {
		t.Errorf("toolset without grant: %d %s", code, body)
	}
	if code, _, body := post(t, p.url+"/toolset/readers/mcp", nothing, list); code != 403 || !strings.Contains(body, "API key is scoped to no MCP servers; toolset access is denied.") {
		t.Errorf("no-mcp key on a toolset: %d %s", code, body)
	}

	// Rate limit: 3 per minute.
	codes := []int{}
	var retry string
	for range 4 {
		code, hdr, _ := post(t, p.url+"/mcp", limited, list)
		codes = append(codes, code)
		if code == 429 {
			retry = hdr.Get("Retry-After")
		}
	}
	if fmt.Sprint(codes) != "[200 200 200 429]" || retry == "" {
		t.Errorf("rate limit: %v Retry-After %q", codes, retry)
	}

	// A runtime key from the admin API works at once.
	req, _ := http.NewRequest(http.MethodPost, p.url+"/admin/v1/keys", strings.NewReader(`{"alias":"runtime","servers":["archive"]}`))
	req.Header.Set("X-Mcpgate-Api-Key", mk)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ Key string }
	json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != 201 || !strings.HasPrefix(created.Key, "mcpg_") {
		t.Fatalf("admin create: %d %+v", resp.StatusCode, created)
	}
	if _, _, body := post(t, p.url+"/mcp", created.Key, list); !strings.Contains(body, "archive__list_notes") || strings.Contains(body, "notes__list_notes") {
		t.Errorf("runtime key's view: %s", body)
	}

	// 1,000 tool calls, then SIGTERM: every one is in the audit log.
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 1000; i += 8 {
				_, _, out := post(t, p.url+"/mcp/notes", alice, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_notes","arguments":{}}}`)
				if !strings.Contains(out, `"result"`) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d calls failed", n)
	}
	// The calls are in the metrics, labelled by server, tool and outcome.
	mresp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mbody, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`mcpgate_tool_calls_total{outcome="ok",server="notes",tool="list_notes"}`,
		`mcpgate_upstream_up{server="notes",state="ready"} 1`,
		`mcpgate_http_requests_total{code="401",method="POST",route="mcp"}`,
	} {
		if !strings.Contains(string(mbody), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(string(mbody), alice) || strings.Contains(string(mbody), "alice-bot") {
		t.Error("metrics carry a key or its alias")
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := 0
	f := store.ToolCallFilter{KeyAlias: "alice-bot", Tool: "list_notes", Outcome: "ok", Limit: 1000}
	for {
		calls, next, err := st.ListToolCalls(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range calls {
			if c.Server != "notes" || c.Outcome != "ok" || c.User != "alice" {
				t.Fatalf("record %+v", c)
			}
		}
		n += len(calls)
		if next == nil {
			break
		}
		f.Before = next
	}
	if n != 1000 {
		t.Errorf("%d audit rows for 1000 calls", n)
	}
}

// Listening beyond loopback without any auth is refused (unless
// auth.anonymous: true).
func TestServeRefusesExposedWithoutAuth(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "gw.yaml", "servers: {}\n")
	var out, errb strings.Builder
	code := run([]string{"serve", "--config", p, "--listen", "0.0.0.0:0"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "refusing to serve on 0.0.0.0:0 without authentication") {
		t.Errorf("exit %d: %s", code, errb.String())
	}
}
