package security

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
	"github.com/mcpgate/mcpgate/test/internal/gwproc"
)

// bins are built once by TestMain.
var bins struct {
	gateway string // cmd/mcpgate
}

func TestMain(m *testing.M) {
	dir, cleanup, err := gwproc.BinDir("mcpgate-security-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := gwproc.Build(dir, "../../cmd/mcpgate"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		cleanup()
		os.Exit(1)
	}
	bins.gateway = filepath.Join(dir, "mcpgate")
	// The fleet cases start a throwaway PostgreSQL server: pgtest.Main
	// stops it.
	code := pgtest.Main(m)
	cleanup()
	os.Exit(code)
}

// Keys of the callers most cases use. Each is at least 16 characters, as
// the config requires.
const (
	masterKey = "mcpg_sec-master-0123456789abcdef"
	aliceKey  = "mcpg_sec-alice-0123456789abcdef"
	bobKey    = "mcpg_sec-bob-0123456789abcdef"
)

// gateway is a running mcpgate serve, its log kept for assertions.
type gateway struct {
	*gwproc.Proc
	t       testing.TB
	base    string // http://127.0.0.1:port
	dataDir string
	hc      *http.Client
}

// startGateway runs the gateway with cfg (YAML; "data_dir: <dir>" is
// added) on a free loopback port and waits until it serves. Extra args go
// to `mcpgate serve`; --listen defaults to 127.0.0.1:0.
func startGateway(t testing.TB, cfg string, args ...string) *gateway {
	t.Helper()
	g, err := tryStartGateway(t, cfg, args...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// tryStartGateway is startGateway returning the start failure (with the
// gateway's log) instead of failing the test: for configs that must be
// refused at start.
func tryStartGateway(t testing.TB, cfg string, args ...string) (*gateway, error) {
	t.Helper()
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	path := filepath.Join(dir, "mcpgate.yaml")
	if err := os.WriteFile(path, []byte("data_dir: "+dataDir+"\n"+cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"serve", "--config", path, "--log-format", "json"}, args...)
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--listen") }) {
		argv = append(argv, "--listen", "127.0.0.1:0")
	}
	p, err := gwproc.Start(bins.gateway, argv, 20*time.Second)
	if err != nil {
		return nil, err
	}
	g := &gateway{Proc: p, t: t, base: p.Base, dataDir: dataDir,
		hc: &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	t.Cleanup(func() {
		p.Kill()
		g.hc.CloseIdleConnections()
		if t.Failed() {
			t.Logf("gateway log (last 30 lines):\n%s", p.Tail(30))
		}
	})
	return g, nil
}

// logText is the whole log so far.
func (g *gateway) logText() string { return strings.Join(g.Lines(""), "\n") }

// request sends one HTTP request to the gateway and returns its status,
// headers and body (at most 1 MiB).
func (g *gateway) request(t testing.TB, method, path string, hdr http.Header, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, g.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if host := hdr.Get("Host"); host != "" {
		req.Host = host
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, string(b)
}

// keyHeader is the header set of a caller with key.
func keyHeader(key string) http.Header {
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	return h
}

// rpcMsg is one JSON-RPC message as the client sees it.
type rpcMsg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (m *rpcMsg) isRequest() bool  { return m.Method != "" && len(m.ID) > 0 }
func (m *rpcMsg) isResponse() bool { return m.Method == "" && len(m.ID) > 0 }

// client is a raw MCP client of one route, speaking streamable HTTP with
// the handshake revision 2025-06-18: every byte it sends is the test's.
type client struct {
	t     testing.TB
	g     *gateway
	path  string // e.g. /mcp/alpha
	hdr   http.Header
	sid   string // Mcp-Session-Id after initialize; "" stateless
	proto string
}

func (g *gateway) client(t testing.TB, path, key string) *client {
	return &client{t: t, g: g, path: path, hdr: keyHeader(key), proto: "2025-06-18"}
}

// initialize opens a session declaring caps (a JSON object) and sends
// notifications/initialized.
func (c *client) initialize(caps string) {
	c.t.Helper()
	if caps == "" {
		caps = "{}"
	}
	params := fmt.Sprintf(`{"protocolVersion":%q,"capabilities":%s,"clientInfo":{"name":"security-suite","version":"1"}}`, c.proto, caps)
	call := c.start("init", "initialize", params)
	res := call.result(c.t, 10*time.Second)
	if res.Error != nil {
		c.t.Fatalf("initialize on %s: %+v", c.path, res.Error)
	}
	c.sid = call.sessionID
	if c.sid == "" {
		c.t.Fatalf("initialize on %s: no Mcp-Session-Id", c.path)
	}
	if st, _, body := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); st != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: %d %s", st, body)
	}
}

func (c *client) headers() http.Header {
	h := c.hdr.Clone()
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if c.sid != "" {
		h.Set("Mcp-Session-Id", c.sid)
		h.Set("Mcp-Protocol-Version", c.proto)
	}
	return h
}

// post sends one body and returns the whole answer.
func (c *client) post(body string) (int, http.Header, string) {
	c.t.Helper()
	return c.g.request(c.t, http.MethodPost, c.path, c.headers(), body)
}

// call is one request in flight: the messages of its answer (JSON or an
// SSE stream) arrive on msgs, which is closed when the answer ends.
type call struct {
	status    int
	sessionID string
	msgs      chan *rpcMsg
	cancel    context.CancelFunc
}

// start sends a request (id is a JSON string's content) and reads its
// answer in the background.
func (c *client) start(id, method, params string) *call {
	c.t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q`, id, method)
	if params != "" {
		body += `,"params":` + params
	}
	body += "}"
	ctx, cancel := context.WithCancel(context.Background())
	c.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.g.base+c.path, strings.NewReader(body))
	req.Header = c.headers()
	resp, err := c.g.hc.Do(req)
	if err != nil {
		cancel()
		c.t.Fatalf("%s on %s: %v", method, c.path, err)
	}
	cl := &call{status: resp.StatusCode, sessionID: resp.Header.Get("Mcp-Session-Id"), msgs: make(chan *rpcMsg, 64), cancel: cancel}
	go func() {
		defer close(cl.msgs)
		defer resp.Body.Close()
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			var m rpcMsg
			if json.Unmarshal(b, &m) != nil {
				m = rpcMsg{Error: &rpcError{Code: int64(-resp.StatusCode), Message: string(b)}}
			}
			cl.msgs <- &m
			return
		}
		readSSE(resp.Body, func(data []byte) {
			var m rpcMsg
			if json.Unmarshal(data, &m) == nil {
				cl.msgs <- &m
			}
		})
	}()
	return cl
}

// readSSE calls fn with each event's data.
func readSSE(r io.Reader, fn func([]byte)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 {
				fn(bytes.Clone(data.Bytes()))
				data.Reset()
			}
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// next returns the call's next message: a server-initiated request, a
// notification or the final answer; nil when the answer ended or within
// passed.
func (cl *call) next(t testing.TB, within time.Duration) *rpcMsg {
	t.Helper()
	select {
	case m := <-cl.msgs:
		return m
	case <-time.After(within):
		return nil
	}
}

// request waits for the next server-initiated request on the call's
// stream (notifications are skipped).
func (cl *call) request(t testing.TB, within time.Duration) *rpcMsg {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m := cl.next(t, time.Until(deadline))
		switch {
		case m == nil:
			t.Fatalf("no server-initiated request within %v", within)
		case m.isRequest():
			return m
		case m.isResponse():
			t.Fatalf("the call ended before a server-initiated request: %s %+v", m.Result, m.Error)
		}
	}
}

// result waits for the call's answer (its response), skipping the rest.
func (cl *call) result(t testing.TB, within time.Duration) *rpcMsg {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m := cl.next(t, time.Until(deadline))
		switch {
		case m == nil:
			t.Fatalf("no answer within %v", within)
		case m.isResponse():
			return m
		}
	}
}

// toolText is the text of a tools/call result's first content item.
func toolText(t testing.TB, m *rpcMsg) string {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("tools/call failed: %d %s", m.Error.Code, m.Error.Message)
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(m.Result, &res); err != nil || len(res.Content) == 0 {
		t.Fatalf("tools/call result %s: %v", m.Result, err)
	}
	return res.Content[0].Text
}

// response is the body of a JSON-RPC response with id (raw JSON) and
// result (raw JSON).
func response(id json.RawMessage, result string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result)
}

// eventually polls cond every 20ms until it holds or within passes.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric is the value of one series of the gateway's /metrics (name with
// its labels as exposed, e.g. `mcpgate_security_refusals_total{kind="host"}`),
// 0 when absent.
func (g *gateway) metric(t testing.TB, series string) float64 {
	t.Helper()
	st, _, body := g.request(t, http.MethodGet, "/metrics", nil, "")
	if st != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", st)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}
