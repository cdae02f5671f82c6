//go:build interop

// Package eras is an interop test across MCP eras: the official go-sdk
// client (v1.8.0), speaking the stateless revision 2026-07-28, talks through
// the real mcpgate binary to @modelcontextprotocol/server-everything, a
// TypeScript reference server that speaks only the handshake era (2025-11-25). The
// gateway reaches server-everything as a stdio child process (evstdio) and
// over streamable HTTP (evhttp).
//
// TestDirectControl runs every feature check against server-everything
// directly, with the go-sdk client pinned to 2025-11-25 over stdio: that
// control proves the expectations are server-everything's, not ours.
// TestGatewayStateless runs them through mcpgate with the client unpinned
// (2026-07-28: server/discover, then stateless requests; sampling,
// elicitation and roots come back as input_required rounds), and checks on
// the wire that it stayed stateless. TestGatewayBothEras runs them with a
// client pinned to 2025-11-25 while an unpinned one uses the same endpoint.
//
// Run it (scripts/interop-ts.sh does):
//
//	MCPGATE_NODE=/path/to/node22 \
//	MCPGATE_EVERYTHING=test/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js \
//	go test -tags interop -count=1 ./test/interop/stateless/
//
// Env:
//
//	MCPGATE_NODE        node (>= 22) binary; required.
//	MCPGATE_EVERYTHING  server-everything's dist/index.js; required.
//	MCPGATE_GATEWAY_BIN test this mcpgate binary instead of building one.
package eras

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	statelessVersion = "2026-07-28"
	legacyVersion    = "2025-11-25"

	sampledText  = "SAMPLED-TEXT-mcpgate-go-interop-51c9"
	sampledModel = "interop-go-model"
	rootURI      = "file:///tmp/mcpgate-go-interop-root"
	rootName     = "go-interop-root"
	staticDoc    = "architecture.md"
	staticURI    = "demo://resource/static/document/" + staticDoc

	callTimeout = 20 * time.Second
)

// The server-everything tools; the last three are registered only for
// clients (here: the gateway's upstream session) declaring the capability.
var expectedTools = []string{
	"echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference",
	"get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource",
	"toggle-simulated-logging", "toggle-subscriber-updates", "trigger-long-running-operation",
	"get-roots-list", "trigger-elicitation-request", "trigger-sampling-request",
}

var expectedPrompts = []string{"simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"}

var (
	nodeBin      string // MCPGATE_NODE
	everythingJS string // MCPGATE_EVERYTHING
	gatewayBin   string // built in TestMain
	setupErr     error  // reported by every test
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "mcpgate-stateless-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(tmp)
	setupErr = setup(tmp)
	return m.Run()
}

func setup(tmp string) error {
	nodeBin = os.Getenv("MCPGATE_NODE")
	everythingJS = os.Getenv("MCPGATE_EVERYTHING")
	var missing []string
	if nodeBin == "" {
		missing = append(missing, "MCPGATE_NODE (node 22 binary)")
	}
	if everythingJS == "" {
		missing = append(missing, "MCPGATE_EVERYTHING (server-everything dist/index.js)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing env: %s; run scripts/interop-ts.sh, or see scripts/install-test-deps.sh", strings.Join(missing, ", "))
	}
	for _, p := range []*string{&nodeBin, &everythingJS} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return err
		}
		*p = abs
	}
	if bin := os.Getenv("MCPGATE_GATEWAY_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			return err
		}
		gatewayBin = abs
		return nil
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return err
	}
	gatewayBin = filepath.Join(tmp, "mcpgate")
	cmd := exec.Command("go", "build", "-o", gatewayBin, "./cmd/mcpgate")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/mcpgate: %v\n%s", err, out)
	}
	return nil
}

func requireSetup(t *testing.T) {
	t.Helper()
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

// ---------------------------------------------------------------------------
// child processes

// logBuf keeps a bounded tail of a child's output, and lets a test wait for
// a line.
type logBuf struct {
	mu    sync.Mutex
	lines []string
	cond  chan struct{} // closed and replaced on every line
}

func newLogBuf() *logBuf { return &logBuf{cond: make(chan struct{})} }

func (b *logBuf) add(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, line)
	if len(b.lines) > 4000 {
		b.lines = slices.Clone(b.lines[len(b.lines)-3000:])
	}
	close(b.cond)
	b.cond = make(chan struct{})
}

func (b *logBuf) follow(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		b.add(sc.Text())
	}
}

// waitLine waits until match returns a non-empty string for some line.
func (b *logBuf) waitLine(ctx context.Context, match func(string) string) (string, error) {
	seen := 0
	for {
		b.mu.Lock()
		lines, cond := b.lines, b.cond
		b.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if v := match(lines[seen]); v != "" {
				return v, nil
			}
		}
		select {
		case <-cond:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (b *logBuf) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.lines
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// startChild starts cmd with stdout and stderr into one logBuf, and stops it
// (SIGTERM, then SIGKILL) when the test ends, printing its log tail if the
// test failed.
func startChild(t *testing.T, label string, cmd *exec.Cmd) (*logBuf, <-chan error) {
	t.Helper()
	lb := newLogBuf()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", label, err)
	}
	go lb.follow(pr)
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		exited <- err
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second): // mcpgate drains for up to 10 s
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("--- %s output (tail) ---\n%s", label, lb.tail(80))
		}
	})
	return lb, exited
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startEverythingHTTP runs server-everything over streamable HTTP and
// returns its MCP endpoint.
func startEverythingHTTP(t *testing.T) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(nodeBin, everythingJS, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.Dir = t.TempDir()
	lb, exited := startChild(t, "server-everything (streamableHttp)", cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	want := fmt.Sprintf("listening on port %d", port)
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	if _, err := lb.waitLine(ctx, func(l string) string {
		if strings.Contains(l, want) {
			return l
		}
		return ""
	}); err != nil {
		t.Fatalf("server-everything streamableHttp did not listen on %d: %v\n%s", port, err, lb.tail(40))
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

// gatewayProc is a running `mcpgate serve`.
type gatewayProc struct {
	base string // http://127.0.0.1:PORT
	log  *logBuf
}

// startGateway writes a config with server-everything as evstdio (stdio)
// and, if httpURL is set, as evhttp (streamable HTTP), and serves it on a
// loopback port the kernel picks.
func startGateway(t *testing.T, httpURL string) *gatewayProc {
	t.Helper()
	dir := t.TempDir()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) } // JSON strings are YAML scalars
	cfg := strings.Join([]string{
		"listen: 127.0.0.1:0",
		"servers:",
		"  evstdio:",
		"    transport: stdio",
		"    command: " + q(nodeBin),
		"    args: [" + q(everythingJS) + ", \"stdio\"]",
		"    timeout: 30s",
	}, "\n") + "\n"
	if httpURL != "" {
		cfg += "  evhttp:\n    transport: http\n    url: " + q(httpURL) + "\n    timeout: 30s\n"
	}
	path := filepath.Join(dir, "mcpgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gatewayBin, "serve", "--config", path, "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug")
	cmd.Dir = dir
	lb, exited := startChild(t, "mcpgate", cmd)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	addr, err := lb.waitLine(ctx, func(l string) string {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "mcpgate serving" {
			return rec.Addr
		}
		return ""
	})
	if err != nil {
		t.Fatalf("mcpgate did not report its address: %v\nconfig:\n%s\nlog:\n%s", err, cfg, lb.tail(40))
	}
	base := strings.TrimSuffix(addr, "/mcp")
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("mcpgate GET /healthz never answered 200 (last error %v)\n%s", err, lb.tail(40))
		case <-time.After(50 * time.Millisecond):
		}
	}
	// server-everything asks its client (the gateway's upstream session)
	// for roots/list 350 ms after initialization, outside any call. The
	// gateway refuses that; but were a test's call in flight by then, the
	// request would be tied to that call, which is not what the call is
	// testing. Wait for the refusals.
	servers := []string{"evstdio"}
	if httpURL != "" {
		servers = append(servers, "evhttp")
	}
	for _, server := range servers {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := lb.waitLine(wctx, func(l string) string {
			var rec struct{ Msg, Server, Method string }
			if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "refused a server-initiated request outside any client request" &&
				rec.Server == server && rec.Method == "roots/list" {
				return l
			}
			return ""
		})
		wcancel()
		if err != nil {
			t.Logf("note: did not see %s's start-up roots/list being refused (%v); going on", server, err)
		}
	}
	return &gatewayProc{base: base, log: lb}
}

// ---------------------------------------------------------------------------
// what goes over the wire

// wirePost is one POST the client sent.
type wirePost struct {
	method        string // body method
	name          string // body params.name
	headerVersion string // MCP-Protocol-Version
	headerMethod  string // Mcp-Method
	metaVersion   string // params._meta["io.modelcontextprotocol/protocolVersion"]
	sessionID     string // Mcp-Session-Id
	retry         bool   // carries requestState and inputResponses
	status        int
	body          []byte   // the request body
	resp          *teeBody // the start of the response body (diagnostics)
}

// String is one line of a failure's wire dump.
func (p wirePost) String() string {
	resp := ""
	if p.resp != nil {
		resp = p.resp.kept()
	}
	return fmt.Sprintf("POST %s [HTTP %d]\n  > %s\n  < %s", p.method, p.status, p.body, strings.ReplaceAll(resp, "\n", "\n    "))
}

// wireLog is an http.RoundTripper that records every POST.
type wireLog struct {
	mu    sync.Mutex
	posts []wirePost
}

func (w *wireLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || r.Body == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name           string          `json:"name"`
			RequestState   string          `json:"requestState"`
			InputResponses json.RawMessage `json:"inputResponses"`
			Meta           map[string]any  `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &msg)
	p := wirePost{
		method:        msg.Method,
		name:          msg.Params.Name,
		headerVersion: r.Header.Get("MCP-Protocol-Version"),
		headerMethod:  r.Header.Get("Mcp-Method"),
		sessionID:     r.Header.Get("Mcp-Session-Id"),
		retry:         msg.Params.RequestState != "" && len(msg.Params.InputResponses) > 0,
	}
	p.metaVersion, _ = msg.Params.Meta["io.modelcontextprotocol/protocolVersion"].(string)
	p.body = body
	res, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		p.status = res.StatusCode
		p.resp = &teeBody{ReadCloser: res.Body}
		res.Body = p.resp
	}
	w.mu.Lock()
	w.posts = append(w.posts, p)
	w.mu.Unlock()
	return res, err
}

// teeBody keeps the first 8 KiB of a response body.
type teeBody struct {
	io.ReadCloser
	mu   sync.Mutex
	keep bytes.Buffer
}

func (b *teeBody) kept() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.keep.String()
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	if room := 8<<10 - b.keep.Len(); room > 0 {
		b.keep.Write(p[:min(n, room)])
	}
	b.mu.Unlock()
	return n, err
}

func (w *wireLog) snapshot() []wirePost {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.posts)
}

// since returns the POSTs after the first n.
func (w *wireLog) since(n int) []wirePost {
	return w.snapshot()[n:]
}

func (w *wireLog) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.posts)
}

// ---------------------------------------------------------------------------
// the go-sdk client

// seen records what the client's handlers were given.
type seen struct {
	tag      string // makes this client's sampling answer its own
	mu       sync.Mutex
	sampling []*mcp.CreateMessageParams
	elicit   []*mcp.ElicitParams
	logs     []*mcp.LoggingMessageParams
	progress []*mcp.ProgressNotificationParams
}

// sampled is the text this client's sampling handler answers with.
func (s *seen) sampled() string { return sampledText + "-" + s.tag }

func (s *seen) samplingLen() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.sampling) }
func (s *seen) elicitLen() int   { s.mu.Lock(); defer s.mu.Unlock(); return len(s.elicit) }
func (s *seen) logsSince(n int) []*mcp.LoggingMessageParams {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.logs[min(n, len(s.logs)):])
}
func (s *seen) logsLen() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.logs) }
func (s *seen) progressSince(n int) []*mcp.ProgressNotificationParams {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.progress[min(n, len(s.progress)):])
}
func (s *seen) progressLen() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.progress) }

// elicitAnswer is what the client's elicitation handler accepts with.
var elicitAnswer = map[string]any{
	"name":                     "Ada Lovelace",
	"check":                    true,
	"email":                    "ada@example.com",
	"integer":                  7,
	"number":                   2.5,
	"untitledSingleSelectEnum": "Joey",
}

// newClient returns a go-sdk client declaring sampling, elicitation and
// roots (one root), with handlers that record what they were given.
func newClient(name string, s *seen) *mcp.Client {
	c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1.0.0"}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			s.mu.Lock()
			s.sampling = append(s.sampling, req.Params)
			s.mu.Unlock()
			return &mcp.CreateMessageResult{
				Model:      sampledModel,
				Role:       "assistant",
				Content:    &mcp.TextContent{Text: s.sampled()},
				StopReason: "endTurn",
			}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			s.mu.Lock()
			s.elicit = append(s.elicit, req.Params)
			s.mu.Unlock()
			content := map[string]any{}
			for k, v := range elicitAnswer {
				content[k] = v
			}
			return &mcp.ElicitResult{Action: "accept", Content: content}, nil
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			s.mu.Lock()
			s.logs = append(s.logs, req.Params)
			s.mu.Unlock()
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			s.mu.Lock()
			s.progress = append(s.progress, req.Params)
			s.mu.Unlock()
		},
	})
	c.AddRoots(&mcp.Root{URI: rootURI, Name: rootName})
	return c
}

// connectHTTP connects a client to endpoint through a wireLog; version ""
// leaves the go-sdk default (2026-07-28, server/discover first).
func connectHTTP(t *testing.T, endpoint, version string, s *seen) (*mcp.ClientSession, *wireLog) {
	t.Helper()
	wl := &wireLog{}
	tr := &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: wl},
		MaxRetries: -1,
	}
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := newClient("mcpgate-go-interop-"+s.tag, s).Connect(ctx, tr, opts)
	if err != nil {
		t.Fatalf("connect to %s (version %q): %v", endpoint, version, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, wl
}

func textOf(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func callTool(t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) *mcp.CallToolResult {
	t.Helper()
	r, err := cs.CallTool(callCtx(t), params)
	if err != nil {
		t.Fatalf("tools/call %s: %v", params.Name, err)
	}
	if r.IsError {
		t.Fatalf("tools/call %s: isError result: %s", params.Name, textOf(t, r))
	}
	return r
}

// ---------------------------------------------------------------------------
// the checks, shared by the direct control and the gateway runs

type target struct {
	cs    *mcp.ClientSession
	seen  *seen
	name  func(string) string // server-everything name -> what the client calls it
	wire  *wireLog            // nil on stdio
	era   string              // the negotiated revision
	roots bool                // check get-roots-list
	// logging: check notifications/message (per-request logLevel in the
	// new era, logging/setLevel in the old one).
	logging bool
}

func (tg *target) stateless() bool { return tg.era == statelessVersion }

// exercise runs every feature check as subtests of t.
func exercise(t *testing.T, tg *target) {
	cs, n := tg.cs, tg.name

	tg.run(t, "tools/list", func(t *testing.T) {
		var names []string
		for tool, err := range cs.Tools(callCtx(t), nil) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, tool.Name)
			if tool.Name == n("echo") {
				schema, _ := json.Marshal(tool.InputSchema)
				var s struct {
					Type       string                     `json:"type"`
					Properties map[string]json.RawMessage `json:"properties"`
				}
				if err := json.Unmarshal(schema, &s); err != nil || s.Type != "object" || s.Properties["message"] == nil {
					t.Errorf("%s inputSchema = %s, want an object with a message property", tool.Name, schema)
				}
				if tool.Annotations == nil || !tool.Annotations.ReadOnlyHint {
					t.Errorf("%s annotations = %+v, want readOnlyHint", tool.Name, tool.Annotations)
				}
			}
		}
		for _, want := range expectedTools {
			if !slices.Contains(names, n(want)) {
				t.Errorf("tools/list lacks %s; got %v", n(want), names)
			}
		}
	})

	tg.run(t, "tools/call echo", func(t *testing.T) {
		r := callTool(t, cs, &mcp.CallToolParams{Name: n("echo"), Arguments: map[string]any{"message": "hello through mcpgate ✓"}})
		if got, want := textOf(t, r), "Echo: hello through mcpgate ✓"; got != want {
			t.Errorf("echo = %q, want %q", got, want)
		}
	})

	tg.run(t, "tools/call get-sum", func(t *testing.T) {
		r := callTool(t, cs, &mcp.CallToolParams{Name: n("get-sum"), Arguments: map[string]any{"a": 19.5, "b": 22.5}})
		text := textOf(t, r)
		m := regexp.MustCompile(`^The sum of 19\.5 and 22\.5 is (-?[\d.]+)\.$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("get-sum = %q", text)
		}
		if v, err := strconv.ParseFloat(m[1], 64); err != nil || v != 42 {
			t.Errorf("get-sum reported %s, want 42", m[1])
		}
	})

	tg.run(t, "tools/call with a bad argument is a tool error", func(t *testing.T) {
		r, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: n("get-sum"), Arguments: map[string]any{"a": "x", "b": 1}})
		if err != nil {
			t.Fatalf("tools/call: %v (want a result with isError)", err)
		}
		if !r.IsError {
			t.Errorf("isError = false, result %q", textOf(t, r))
		}
	})

	tg.run(t, "progress", func(t *testing.T) {
		before := tg.seen.progressLen()
		params := &mcp.CallToolParams{Name: n("trigger-long-running-operation"), Arguments: map[string]any{"duration": 0.6, "steps": 3}}
		params.SetProgressToken("go-interop-progress")
		r := callTool(t, cs, params)
		if got, want := textOf(t, r), "Long running operation completed. Duration: 0.6 seconds, Steps: 3."; got != want {
			t.Errorf("result = %q, want %q", got, want)
		}
		// Steps 1 and 2 come well before the result (step 3 may race it).
		var got [][2]float64
		deadline := time.Now().Add(2 * time.Second)
		for {
			got = got[:0]
			for _, p := range tg.seen.progressSince(before) {
				if p.ProgressToken != "go-interop-progress" {
					t.Errorf("progress token %v, want go-interop-progress", p.ProgressToken)
				}
				got = append(got, [2]float64{p.Progress, p.Total})
			}
			if len(got) >= 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(got) < 2 || got[0] != [2]float64{1, 3} || got[1] != [2]float64{2, 3} {
			t.Errorf("progress notifications = %v, want [[1 3] [2 3] ...]", got)
		}
	})

	tg.run(t, "sampling", func(t *testing.T) {
		before, posts := tg.seen.samplingLen(), tg.wireLen()
		r := callTool(t, cs, &mcp.CallToolParams{Name: n("trigger-sampling-request"), Arguments: map[string]any{"prompt": "say the magic word", "maxTokens": 33}})
		tg.seen.mu.Lock()
		calls := slices.Clone(tg.seen.sampling[before:])
		tg.seen.mu.Unlock()
		if len(calls) != 1 {
			t.Fatalf("sampling handler called %d times, want 1", len(calls))
		}
		req := calls[0]
		if req.MaxTokens != 33 || req.SystemPrompt != "You are a helpful test server." {
			t.Errorf("sampling request maxTokens=%d systemPrompt=%q", req.MaxTokens, req.SystemPrompt)
		}
		if len(req.Messages) != 1 {
			t.Fatalf("sampling request has %d messages, want 1", len(req.Messages))
		}
		if tc, ok := req.Messages[0].Content.(*mcp.TextContent); !ok || tc.Text != "Resource trigger-sampling-request context: say the magic word" {
			t.Errorf("sampling message content = %#v", req.Messages[0].Content)
		}
		text := textOf(t, r)
		if !strings.HasPrefix(text, "LLM sampling result:") {
			t.Fatalf("result = %q", text)
		}
		var got struct {
			Model   string `json:"model"`
			Role    string `json:"role"`
			Content struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal([]byte(text[strings.Index(text, "{"):]), &got); err != nil {
			t.Fatalf("result JSON: %v in %q", err, text)
		}
		if got.Content.Text != tg.seen.sampled() || got.Model != sampledModel || got.Role != "assistant" {
			t.Errorf("sampling result seen by the server = %+v, want text %q model %q role assistant", got, tg.seen.sampled(), sampledModel)
		}
		tg.checkRoundTrips(t, posts, n("trigger-sampling-request"))
	})

	tg.run(t, "elicitation", func(t *testing.T) {
		before, posts := tg.seen.elicitLen(), tg.wireLen()
		r := callTool(t, cs, &mcp.CallToolParams{Name: n("trigger-elicitation-request")})
		tg.seen.mu.Lock()
		calls := slices.Clone(tg.seen.elicit[before:])
		tg.seen.mu.Unlock()
		if len(calls) != 1 {
			t.Fatalf("elicitation handler called %d times, want 1", len(calls))
		}
		if calls[0].Message != "Please provide inputs for the following fields:" {
			t.Errorf("elicitation message = %q", calls[0].Message)
		}
		schema, _ := json.Marshal(calls[0].RequestedSchema)
		var s struct {
			Required   []string `json:"required"`
			Properties map[string]struct {
				Format string `json:"format"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(schema, &s); err != nil || !slices.Equal(s.Required, []string{"name"}) || s.Properties["email"].Format != "email" {
			t.Errorf("requestedSchema = %s", schema)
		}
		text := textOf(t, r)
		if !strings.Contains(text, "User provided the requested information!") {
			t.Errorf("result does not say the user provided the information:\n%s", text)
		}
		for _, line := range []string{
			"- Name: Ada Lovelace",
			"- Agreed to terms: true",
			"- Email: ada@example.com",
			"- Favorite Integer: 7",
			"- Favorite Number: 2.5",
		} {
			if !strings.Contains(text, line) {
				t.Errorf("result lacks %q:\n%s", line, text)
			}
		}
		i := strings.Index(text, "Raw result:")
		if i < 0 {
			t.Fatalf("no raw result in:\n%s", text)
		}
		var raw struct {
			Action  string         `json:"action"`
			Content map[string]any `json:"content"`
		}
		if err := json.Unmarshal([]byte(text[i+len("Raw result:"):]), &raw); err != nil {
			t.Fatalf("raw result: %v", err)
		}
		if raw.Action != "accept" || raw.Content["untitledSingleSelectEnum"] != "Joey" || raw.Content["name"] != "Ada Lovelace" {
			t.Errorf("raw result seen by the server = %+v", raw)
		}
		tg.checkRoundTrips(t, posts, n("trigger-elicitation-request"))
	})

	if tg.logging {
		tg.run(t, "logging", func(t *testing.T) { checkLogging(t, tg) })
	}

	tg.run(t, "prompts", func(t *testing.T) {
		var names []string
		var args []*mcp.PromptArgument
		for p, err := range cs.Prompts(callCtx(t), nil) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, p.Name)
			if p.Name == n("args-prompt") {
				args = p.Arguments
			}
		}
		for _, want := range expectedPrompts {
			if !slices.Contains(names, n(want)) {
				t.Errorf("prompts/list lacks %s; got %v", n(want), names)
			}
		}
		var gotArgs []string
		for _, a := range args {
			gotArgs = append(gotArgs, fmt.Sprintf("%s:%v", a.Name, a.Required))
		}
		if !slices.Equal(gotArgs, []string{"city:true", "state:false"}) {
			t.Errorf("args-prompt arguments = %v", gotArgs)
		}

		simple, err := cs.GetPrompt(callCtx(t), &mcp.GetPromptParams{Name: n("simple-prompt")})
		if err != nil {
			t.Fatalf("prompts/get simple-prompt: %v", err)
		}
		if len(simple.Messages) != 1 || promptText(simple.Messages[0]) != "This is a simple prompt without arguments." {
			t.Errorf("simple-prompt messages = %s", jsonOf(simple.Messages))
		}
		p, err := cs.GetPrompt(callCtx(t), &mcp.GetPromptParams{Name: n("args-prompt"), Arguments: map[string]string{"city": "Lisbon", "state": "Estremadura"}})
		if err != nil {
			t.Fatalf("prompts/get args-prompt: %v", err)
		}
		if len(p.Messages) != 1 || p.Messages[0].Role != "user" || promptText(p.Messages[0]) != "What's weather in Lisbon, Estremadura?" {
			t.Errorf("args-prompt messages = %s", jsonOf(p.Messages))
		}
	})

	// Last: a failure here can leave the upstream waiting for an answer.
	if tg.roots {
		tg.run(t, "roots", func(t *testing.T) {
			r := callTool(t, cs, &mcp.CallToolParams{Name: n("get-roots-list")})
			text := textOf(t, r)
			if !strings.HasPrefix(text, "Current MCP Roots (1 total):") {
				t.Errorf("get-roots-list = %q, want 1 root", text)
			}
			if want := "1. " + rootName + "\n   URI: " + rootURI; !strings.Contains(text, want) {
				t.Errorf("get-roots-list lacks %q:\n%s", want, text)
			}
		})
	}
}

// exerciseResources checks resources/list, resources/read of a static
// document and resources/templates/list. The gateway does not namespace
// URIs, and a URI two servers of a route claim is served by neither
// (SPEC S6.1: no silent pick): evstdio and evhttp are the same server, so
// these run on one server's route, and ambiguousResources checks the
// merged one.
func exerciseResources(t *testing.T, cs *mcp.ClientSession) {
	t.Run("resources", func(t *testing.T) {
		var found *mcp.Resource
		var uris []string
		for r, err := range cs.Resources(callCtx(t), nil) {
			if err != nil {
				t.Fatal(err)
			}
			uris = append(uris, r.URI)
			if r.URI == staticURI && found == nil {
				found = r
			}
		}
		if found == nil {
			t.Fatalf("resources/list lacks %s; got %v", staticURI, uris)
		}
		if found.Name != staticDoc || found.MIMEType != "text/markdown" {
			t.Errorf("%s: name %q mimeType %q", staticURI, found.Name, found.MIMEType)
		}
		want, err := os.ReadFile(filepath.Join(filepath.Dir(everythingJS), "docs", staticDoc))
		if err != nil {
			t.Fatal(err)
		}
		rr, err := cs.ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: staticURI})
		if err != nil {
			t.Fatalf("resources/read %s: %v", staticURI, err)
		}
		if len(rr.Contents) != 1 {
			t.Fatalf("resources/read: %d contents, want 1", len(rr.Contents))
		}
		c := rr.Contents[0]
		if c.URI != staticURI || c.MIMEType != "text/markdown" || c.Text != string(want) {
			t.Errorf("resources/read = uri %q mimeType %q text %d bytes (want %d bytes of %s)", c.URI, c.MIMEType, len(c.Text), len(want), staticDoc)
		}
	})

	t.Run("resource templates", func(t *testing.T) {
		var templates []string
		for rt, err := range cs.ResourceTemplates(callCtx(t), nil) {
			if err != nil {
				t.Fatal(err)
			}
			templates = append(templates, rt.URITemplate)
		}
		for _, want := range []string{"demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/blob/{resourceId}"} {
			if !slices.Contains(templates, want) {
				t.Errorf("resources/templates/list lacks %s; got %v", want, templates)
			}
		}
		rr, err := cs.ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/7"})
		if err != nil {
			t.Fatalf("resources/read templated: %v", err)
		}
		if len(rr.Contents) != 1 || rr.Contents[0].URI != "demo://resource/dynamic/text/7" ||
			!strings.HasPrefix(rr.Contents[0].Text, "Resource 7: This is a plaintext resource created at ") {
			t.Errorf("resources/read demo://resource/dynamic/text/7 = %s", jsonOf(rr.Contents))
		}
	})
}

// ambiguousResources: on a route of two servers that both claim a URI
// (two copies of server-everything), the URI is not listed and reading it
// is refused as ambiguous, never answered by a silently picked server.
func ambiguousResources(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	for r, err := range cs.Resources(callCtx(t), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if r.URI == staticURI {
			t.Errorf("the merged route lists %s, which both servers claim", staticURI)
		}
	}
	if _, err := cs.ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: staticURI}); err == nil || !strings.Contains(err.Error(), "Ambiguous resource") {
		t.Errorf("resources/read %s on the merged route: %v, want refused as ambiguous", staticURI, err)
	}
}

// checkLogging turns server-everything's simulated logging on (it sends
// one message right away, then one every 5 s) and back off. A 2026-07-28
// client asks for messages per request, with _meta logLevel; the message
// sent while the call is running is the only one it can receive, and it
// must arrive on that call's stream, so before the result.
func checkLogging(t *testing.T, tg *target) {
	cs, n := tg.cs, tg.name
	simulated := regexp.MustCompile(`(-level message|level-message)`)
	toggle := func(level string) string {
		params := &mcp.CallToolParams{Name: n("toggle-simulated-logging")}
		if level != "" {
			params.Meta = mcp.Meta{mcp.MetaKeyLogLevel: level}
		}
		return textOf(t, callTool(t, cs, params))
	}
	if !tg.stateless() {
		if err := cs.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			t.Fatalf("logging/setLevel: %v", err)
		}
	}
	before := tg.seen.logsLen()
	on := toggle("debug")
	if !strings.HasPrefix(on, "Started simulated, random-leveled logging") {
		t.Fatalf("toggle-simulated-logging = %q, want it started", on)
	}
	defer func() {
		off := toggle("")
		if !tg.stateless() && !strings.HasPrefix(off, "Stopped simulated logging") {
			t.Errorf("toggle-simulated-logging (off) = %q", off)
		}
	}()
	// The new era has the message on the call's own stream, before the
	// result (the client may still be dispatching it); in the handshake era it
	// is not tied to the call and may come later.
	wait := 7 * time.Second
	if tg.stateless() {
		wait = time.Second
	}
	isSimulated := func(m *mcp.LoggingMessageParams) bool { return simulated.MatchString(fmt.Sprint(m.Data)) }
	var msgs []*mcp.LoggingMessageParams
	for deadline := time.Now().Add(wait); ; {
		msgs = tg.seen.logsSince(before)
		if slices.ContainsFunc(msgs, isSimulated) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	i := slices.IndexFunc(msgs, isSimulated)
	if i < 0 {
		t.Fatalf("no simulated log message (notifications/message) arrived with the toggle call; got %s", jsonOf(msgs))
	}
	if !slices.Contains([]mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}, msgs[i].Level) {
		t.Errorf("log level %q", msgs[i].Level)
	}
	if !tg.stateless() {
		return
	}
	// A request without io.modelcontextprotocol/logLevel gets no log
	// messages (basic/index.md: the server MUST NOT send them).
	//
	// The toggle is server-everything's per-session state, and this client
	// declares roots: each of its calls runs on an upstream session of its
	// own, a fresh one or one an earlier call of it left clean (the
	// gateway's bound sessions), so whether logging is still on for the
	// next call is not this client's to know. Toggle until it starts.
	before = tg.seen.logsLen()
	on = toggle("")
	if strings.HasPrefix(on, "Stopped simulated logging") {
		before = tg.seen.logsLen()
		on = toggle("")
	}
	if !strings.HasPrefix(on, "Started simulated, random-leveled logging") {
		t.Fatalf("toggle-simulated-logging (on, no logLevel) = %q", on)
	}
	time.Sleep(300 * time.Millisecond)
	if got := tg.seen.logsSince(before); slices.ContainsFunc(got, isSimulated) {
		t.Errorf("a call without a logLevel got log messages: %s", jsonOf(got))
	}
}

// run runs fn as a subtest; when it fails, the POSTs it made are dumped.
func (tg *target) run(t *testing.T, name string, fn func(t *testing.T)) {
	t.Run(name, func(t *testing.T) {
		from := tg.wireLen()
		defer func() {
			if t.Failed() && tg.wire != nil {
				var b strings.Builder
				for _, p := range tg.wire.since(from) {
					b.WriteString(p.String())
					b.WriteByte('\n')
				}
				t.Logf("--- wire (the client's POSTs in this check) ---\n%s", b.String())
			}
		}()
		fn(t)
	})
}

func (tg *target) wireLen() int {
	if tg.wire == nil {
		return 0
	}
	return tg.wire.len()
}

// checkRoundTrips checks, for a 2026-07-28 client, that the call took an
// input_required round: the retry carried requestState and inputResponses.
func (tg *target) checkRoundTrips(t *testing.T, from int, tool string) {
	t.Helper()
	if tg.wire == nil || !tg.stateless() {
		return
	}
	var calls, retries int
	for _, p := range tg.wire.since(from) {
		if p.method == "tools/call" && p.name == tool {
			calls++
			if p.retry {
				retries++
			}
		}
	}
	if calls < 2 || retries < 1 {
		t.Errorf("tools/call %s went out %d times (%d with requestState+inputResponses); want an input_required round and a retry", tool, calls, retries)
	}
}

func promptText(m *mcp.PromptMessage) string {
	if tc, ok := m.Content.(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// the tests

// TestDirectControl runs the checks against server-everything itself, with
// the go-sdk client pinned to 2025-11-25 over stdio: the expectations are
// the reference server's.
func TestDirectControl(t *testing.T) {
	requireSetup(t)
	s := &seen{tag: "direct"}
	cmd := exec.Command(nodeBin, everythingJS, "stdio")
	cmd.Dir = t.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := newClient("mcpgate-go-interop-direct", s).Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion})
	if err != nil {
		t.Fatalf("connect to server-everything over stdio: %v\n%s", err, stderr.String())
	}
	defer cs.Close()
	if got := cs.InitializeResult().ProtocolVersion; got != legacyVersion {
		t.Fatalf("negotiated %q, want %q", got, legacyVersion)
	}
	same := func(s string) string { return s }
	// server-everything registers its capability-dependent tools after
	// notifications/initialized.
	waitTools(t, cs, same)
	exercise(t, &target{cs: cs, seen: s, name: same, era: legacyVersion, roots: true, logging: true})
	exerciseResources(t, cs)
}

// waitTools waits (briefly) until tools/list has every expected tool.
func waitTools(t *testing.T, cs *mcp.ClientSession, n func(string) string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := cs.ListTools(callCtx(t), nil)
		if err == nil {
			missing := slices.ContainsFunc(expectedTools, func(w string) bool {
				return !slices.ContainsFunc(res.Tools, func(x *mcp.Tool) bool { return x.Name == n(w) })
			})
			if !missing {
				return
			}
		}
		if time.Now().After(deadline) {
			return // the tools/list check reports what is missing
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func prefixed(server string) func(string) string {
	return func(x string) string { return server + "__" + x }
}

// TestGatewayStateless: the go-sdk client, unpinned, negotiates 2026-07-28
// with mcpgate and uses server-everything (handshake era only) over stdio and
// streamable HTTP through it, statelessly: sampling, elicitation and roots
// come back as input_required rounds the client answers.
func TestGatewayStateless(t *testing.T) {
	requireSetup(t)
	gw := startGateway(t, startEverythingHTTP(t))

	s := &seen{tag: "stateless"}
	cs, wl := connectHTTP(t, gw.base+"/mcp", "", s)
	if got := cs.InitializeResult().ProtocolVersion; got != statelessVersion {
		t.Fatalf("InitializeResult().ProtocolVersion = %q, want %q", got, statelessVersion)
	}
	if id := cs.ID(); id != "" {
		t.Errorf("a 2026-07-28 session has session id %q, want none", id)
	}
	if si := cs.InitializeResult().ServerInfo; si == nil || si.Name == "" {
		t.Errorf("server/discover gave no serverInfo: %+v", si)
	}
	t.Run("connect was server/discover only", func(t *testing.T) {
		checkStatelessWire(t, wl.snapshot())
	})
	for _, server := range []string{"evstdio", "evhttp"} {
		t.Run(server, func(t *testing.T) {
			// Logging is checked on stdio only. server-everything sends its
			// log messages unrelated to any request; a stateless client can
			// only get one on the stream of the call running when it comes,
			// before that call's result. Over stdio it comes before the
			// result; over streamable HTTP it goes on server-everything's
			// standalone GET stream and races the result (lost about 1 run
			// in 5): not something the gateway can order.
			exercise(t, &target{
				cs: cs, seen: s, wire: wl, era: statelessVersion, name: prefixed(server),
				roots: true, logging: server == "evstdio",
			})
		})
	}
	t.Run("resources", func(t *testing.T) {
		one, _ := connectHTTP(t, gw.base+"/mcp/evhttp", "", &seen{tag: "stateless-evhttp"})
		exerciseResources(t, one)
		ambiguousResources(t, cs)
	})
	t.Run("every request was stateless", func(t *testing.T) {
		checkStatelessWire(t, wl.snapshot())
	})
}

// TestGatewayBothEras: a client pinned to 2025-11-25 and an unpinned one
// (2026-07-28) on the same endpoint at the same time.
func TestGatewayBothEras(t *testing.T) {
	requireSetup(t)
	gw := startGateway(t, startEverythingHTTP(t))
	endpoint := gw.base + "/mcp"

	ls := &seen{tag: "legacy"}
	legacy, lwl := connectHTTP(t, endpoint, legacyVersion, ls)
	if got := legacy.InitializeResult().ProtocolVersion; got != legacyVersion {
		t.Fatalf("pinned client: ProtocolVersion = %q, want %q", got, legacyVersion)
	}
	if posts := lwl.snapshot(); len(posts) == 0 || posts[0].method != "initialize" {
		t.Errorf("pinned client: first POST is not initialize: %v", posts)
	}
	if legacy.ID() == "" {
		t.Errorf("pinned client: no Mcp-Session-Id from the gateway")
	}
	ms := &seen{tag: "stateless"}
	stateless, mwl := connectHTTP(t, endpoint, "", ms)
	if got := stateless.InitializeResult().ProtocolVersion; got != statelessVersion {
		t.Fatalf("unpinned client: ProtocolVersion = %q, want %q", got, statelessVersion)
	}

	for _, server := range []string{"evstdio", "evhttp"} {
		t.Run("2025-11-25/"+server, func(t *testing.T) {
			waitTools(t, legacy, prefixed(server))
			exercise(t, &target{
				cs: legacy, seen: ls, wire: lwl, era: legacyVersion, name: prefixed(server),
				roots: true, logging: true,
			})
		})
	}
	t.Run("2025-11-25/resources", func(t *testing.T) {
		one, _ := connectHTTP(t, gw.base+"/mcp/evstdio", legacyVersion, &seen{tag: "legacy-evstdio"})
		exerciseResources(t, one)
		ambiguousResources(t, legacy)
	})

	// The unpinned client, with the pinned one still connected: each one's
	// sampling answer goes to its own call.
	for _, server := range []string{"evstdio", "evhttp"} {
		t.Run("2026-07-28/"+server, func(t *testing.T) {
			tg := &target{cs: stateless, seen: ms, wire: mwl, era: statelessVersion, name: prefixed(server)}
			r := callTool(t, stateless, &mcp.CallToolParams{Name: tg.name("echo"), Arguments: map[string]any{"message": "stateless beside legacy"}})
			if got, want := textOf(t, r), "Echo: stateless beside legacy"; got != want {
				t.Errorf("echo = %q, want %q", got, want)
			}
			r = callTool(t, legacy, &mcp.CallToolParams{Name: tg.name("echo"), Arguments: map[string]any{"message": "legacy beside stateless"}})
			if got, want := textOf(t, r), "Echo: legacy beside stateless"; got != want {
				t.Errorf("echo (pinned client) = %q, want %q", got, want)
			}
			from, lbefore := mwl.len(), ls.samplingLen()
			r = callTool(t, stateless, &mcp.CallToolParams{Name: tg.name("trigger-sampling-request"), Arguments: map[string]any{"prompt": "which era?", "maxTokens": 5}})
			if text := textOf(t, r); !strings.Contains(text, `"text": "`+ms.sampled()+`"`) {
				t.Errorf("sampling result does not carry the unpinned client's answer %q:\n%s", ms.sampled(), text)
			}
			if n := ls.samplingLen() - lbefore; n != 0 {
				t.Errorf("the pinned client's sampling handler was asked %d times for the unpinned client's call", n)
			}
			tg.checkRoundTrips(t, from, tg.name("trigger-sampling-request"))
		})
	}
	t.Run("2026-07-28 requests were stateless", func(t *testing.T) {
		checkStatelessWire(t, mwl.snapshot())
	})
}

// checkStatelessWire checks that a 2026-07-28 client stayed stateless:
// server/discover first, no initialize, no session id, and every POST
// carrying 2026-07-28 in the MCP-Protocol-Version header and in _meta.
func checkStatelessWire(t *testing.T, posts []wirePost) {
	t.Helper()
	if len(posts) == 0 {
		t.Fatal("no POSTs recorded")
	}
	if posts[0].method != "server/discover" {
		t.Errorf("first POST is %q, want server/discover", posts[0].method)
	}
	var errs []error
	for i, p := range posts {
		switch {
		case p.method == "initialize" || p.method == "notifications/initialized":
			errs = append(errs, fmt.Errorf("POST %d is %s", i, p.method))
		case p.sessionID != "":
			errs = append(errs, fmt.Errorf("POST %d (%s) carries Mcp-Session-Id %q", i, p.method, p.sessionID))
		case p.headerVersion != statelessVersion:
			errs = append(errs, fmt.Errorf("POST %d (%s) has MCP-Protocol-Version %q", i, p.method, p.headerVersion))
		case strings.HasPrefix(p.method, "notifications/"):
		case p.metaVersion != statelessVersion:
			errs = append(errs, fmt.Errorf("POST %d (%s) has _meta protocolVersion %q", i, p.method, p.metaVersion))
		case p.headerMethod != p.method:
			errs = append(errs, fmt.Errorf("POST %d (%s) has Mcp-Method %q", i, p.method, p.headerMethod))
		case p.status != http.StatusOK:
			errs = append(errs, fmt.Errorf("POST %d (%s) got HTTP %d", i, p.method, p.status))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
}
