package chaos

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/test/internal/gwproc"
)

// bins are built once by TestMain.
var bins struct {
	gateway string // bin/mcpgate
	up      string // internal/chaosup
}

func TestMain(m *testing.M) {
	// 2,000 idle streams cost the suite and the gateway (which inherits
	// the limit) a descriptor each: take the hard limit.
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	dir, cleanup, err := gwproc.BinDir("mcpgate-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := gwproc.Build(dir, "../../cmd/mcpgate", "./internal/chaosup"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		cleanup()
		os.Exit(1)
	}
	bins.gateway = filepath.Join(dir, "mcpgate")
	bins.up = filepath.Join(dir, "chaosup")
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// freeAddr returns a loopback address nobody listens on (for an upstream
// that must come back on the same port).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// upstream is a chaosup HTTP process.
type upstream struct {
	t    testing.TB
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// startUpstream starts chaosup over HTTP on addr ("" for any port) in mode
// and waits until it accepts.
func startUpstream(t testing.TB, addr, mode string, extra ...string) *upstream {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	args := append([]string{"-transport", "http", "-listen", addr, "-mode", mode}, extra...)
	cmd := exec.Command(bins.up, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	u := &upstream{t: t, cmd: cmd, done: make(chan struct{})}
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on http://"); ok {
				select {
				case got <- a:
				default:
				}
			}
		}
	}()
	go func() { cmd.Wait(); close(u.done) }()
	select {
	case u.addr = <-got:
	case <-u.done:
		t.Fatalf("upstream %s exited before listening", mode)
	case <-time.After(10 * time.Second):
		u.kill()
		t.Fatalf("upstream %s did not listen within 10s", mode)
	}
	t.Cleanup(u.kill)
	return u
}

func (u *upstream) url() string { return "http://" + u.addr + "/mcp" }

// kill SIGKILLs the upstream and waits for it.
func (u *upstream) kill() {
	_ = u.cmd.Process.Kill()
	<-u.done
}

// gateway is a running bin/mcpgate serve.
type gateway struct {
	*gwproc.Proc
	t       testing.TB
	pid     int
	base    string // http://127.0.0.1:port
	dataDir string
	hc      *http.Client
}

// gatewayConfig is the YAML of a gateway; servers is the indented body of
// the servers: block.
func gatewayConfig(dataDir, servers string) string {
	return "data_dir: " + dataDir + "\n" +
		"sessions: {max_per_owner: 10000}\n" +
		"servers:\n" + servers
}

// httpServer is a servers: entry for a chaosup HTTP upstream.
func httpServer(name, url, timeout string) string {
	return fmt.Sprintf("  %s:\n    transport: http\n    url: %s\n    timeout: %s\n    protocol_version: 2025-06-18\n", name, url, timeout)
}

// stdioServer is a servers: entry for a chaosup stdio upstream; args
// are added to chaosup's (e.g. "-mode", "big").
func stdioServer(name, timeout string, args ...string) string {
	return fmt.Sprintf("  %s:\n    transport: stdio\n    command: %s\n    args: [%s]\n    timeout: %s\n",
		name, bins.up, strings.Join(append([]string{"-transport", "stdio"}, args...), ", "), timeout)
}

// startGateway writes cfg to a temp file and runs the gateway on a free
// loopback port, waiting until it serves and every server in ready is
// ready. dataDir must be the data_dir of cfg.
func startGateway(t testing.TB, cfg, dataDir string, ready ...string) *gateway {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mcpgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := gwproc.Start(bins.gateway, []string{"serve", "--config", path, "--listen", "127.0.0.1:0", "--log-format", "json"}, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{Proc: p, t: t, pid: p.Cmd.Process.Pid, base: p.Base, dataDir: dataDir,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, IdleConnTimeout: 30 * time.Second}}}
	t.Cleanup(func() {
		p.Kill()
		g.hc.CloseIdleConnections()
		if t.Failed() {
			t.Logf("gateway log (last 40 lines):\n%s", g.tail(40))
		}
	})
	g.waitHealth(t, 15*time.Second, "ready", ready...)
	return g
}

func (g *gateway) tail(n int) string { return g.Tail(n) }

// logLines returns the log lines containing s.
func (g *gateway) logLines(s string) []string { return g.Lines(s) }

// health returns each server's state from /readyz.
func (g *gateway) health() (map[string]string, error) {
	resp, err := g.hc.Get(g.base + "/readyz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Servers map[string]struct {
			State string `json:"state"`
		} `json:"servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, s := range body.Servers {
		out[name] = s.State
	}
	return out, nil
}

// waitHealth waits until every server in names is in state.
func (g *gateway) waitHealth(t testing.TB, within time.Duration, state string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last map[string]string
	for {
		h, err := g.health()
		ok := err == nil
		for _, n := range names {
			ok = ok && h[n] == state
		}
		if ok {
			return
		}
		last = h
		if time.Now().After(deadline) {
			t.Fatalf("servers %v not %s within %v: %v (err %v)\n%s", names, state, within, last, err, g.tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metrics scrapes /metrics into name{labels} -> value.
func (g *gateway) metrics() (map[string]float64, error) {
	resp, err := g.hc.Get(g.base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// resources is what the leak checks compare.
type resources struct {
	Goroutines int     // go_goroutines from /metrics
	FDs        int     // process_open_fds from /metrics
	RSS        float64 // MiB, VmRSS from /proc
}

func (r resources) String() string {
	return fmt.Sprintf("goroutines=%d fds=%d rss=%.1fMiB", r.Goroutines, r.FDs, r.RSS)
}

// sample reads the gateway's resources. The scrape itself holds one
// connection: it is counted in the baseline and in every later sample
// alike.
func (g *gateway) sample(t testing.TB) resources {
	t.Helper()
	m, err := g.metrics()
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	gr, ok1 := m["go_goroutines"]
	fds, ok2 := m["process_open_fds"]
	if !ok1 || !ok2 {
		t.Fatalf("/metrics lacks go_goroutines or process_open_fds")
	}
	return resources{Goroutines: int(gr), FDs: int(fds), RSS: rssMiB(g.pid)}
}

// Tolerances of the leak checks: a scrape in flight, a timer goroutine,
// an idle pooled upstream connection that the pool is about to drop.
const (
	goroutineSlack = 8
	fdSlack        = 4
)

// baseline is the gateway's resources at rest: the suite's own idle
// connections closed, and the gateway given a moment to notice.
func (g *gateway) baseline(t testing.TB) resources {
	t.Helper()
	g.hc.CloseIdleConnections()
	time.Sleep(300 * time.Millisecond)
	r := g.sample(t)
	t.Logf("baseline: %v", r)
	return r
}

// checkBaseline waits (up to 10s) for goroutines and descriptors to come
// back within the slack of base, and fails the test if they do not.
func (g *gateway) checkBaseline(t testing.TB, base resources) resources {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.hc.CloseIdleConnections()
		r := g.sample(t)
		if r.Goroutines <= base.Goroutines+goroutineSlack && r.FDs <= base.FDs+fdSlack {
			t.Logf("after: %v (baseline %v)", r, base)
			return r
		}
		if time.Now().After(deadline) {
			t.Errorf("leak: %v 10s after the fault, baseline %v (slack %d goroutines, %d fds)", r, base, goroutineSlack, fdSlack)
			return r
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// rssMiB is VmRSS of pid in MiB (0 if it cannot be read).
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// proc is one entry of /proc.
type proc struct {
	pid, ppid int
	state     string
	exe       string
}

// children lists the processes whose parent is pid (zombies included).
func children(pid int) []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		if ppid != pid {
			continue
		}
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		out = append(out, proc{pid: p, ppid: ppid, state: f[0], exe: exe})
	}
	return out
}

// upstreamChildren returns the gateway's live chaosup children and its
// zombie children of any kind.
func (g *gateway) upstreamChildren() (live []int, zombies []int) {
	for _, p := range children(g.pid) {
		switch {
		case p.state == "Z":
			zombies = append(zombies, p.pid)
		case p.exe == bins.up:
			live = append(live, p.pid)
		}
	}
	return live, zombies
}

// stop sends sig and waits up to within for the gateway to exit,
// returning how long it took.
func (g *gateway) stop(t testing.TB, sig os.Signal, within time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if err := g.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.Exited:
		return time.Since(start), g.ExitErr
	case <-time.After(within):
		t.Fatalf("gateway did not exit within %v of %v", within, sig)
		return 0, nil
	}
}

// ---- a small MCP client (handshake era, plain HTTP JSON-RPC) ----

const clientRevision = "2025-06-18"

// client is one downstream MCP session on a gateway route.
type client struct {
	hc  *http.Client
	url string
	sid string

	mu sync.Mutex
	id int
}

// rpcError is a JSON-RPC error as the gateway answers it.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    struct {
		Fault  string `json:"fault"`
		Status int    `json:"status"`
		Server string `json:"server"`
	} `json:"data"`
}

// outcome is what one request got.
type outcome struct {
	Start  time.Time
	Dur    time.Duration
	Status int             // HTTP status (0: no response)
	Result json.RawMessage // a result, or
	Err    *rpcError       // a JSON-RPC error, or
	Net    error           // no answer at all
}

func (o outcome) ok() bool { return o.Result != nil }

func (o outcome) String() string {
	switch {
	case o.Result != nil:
		return fmt.Sprintf("result after %v", o.Dur)
	case o.Err != nil:
		return fmt.Sprintf("HTTP %d error %d %q fault=%q after %v", o.Status, o.Err.Code, o.Err.Message, o.Err.Data.Fault, o.Dur)
	}
	return fmt.Sprintf("HTTP %d, no reply: %v after %v", o.Status, o.Net, o.Dur)
}

// fault is the error's fault tag ("" for a result or no answer).
func (o outcome) fault() string {
	if o.Err == nil {
		return ""
	}
	return o.Err.Data.Fault
}

// connect opens a session on the gateway route path (e.g. "/mcp").
func (g *gateway) connect(ctx context.Context, path string) (*client, error) {
	c := &client{hc: g.hc, url: g.base + path}
	o := c.request(ctx, "initialize", map[string]any{
		"protocolVersion": clientRevision,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "chaos", "version": "1"},
	}, true)
	if !o.ok() {
		return nil, fmt.Errorf("initialize: %v", o)
	}
	if c.sid == "" {
		return nil, errors.New("initialize: no Mcp-Session-Id")
	}
	if err := c.notify(ctx, "notifications/initialized"); err != nil {
		return nil, err
	}
	return c, nil
}

// mustConnect opens n sessions or fails the test.
func (g *gateway) mustConnect(t testing.TB, path string, n int) []*client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make([]*client, n)
	for i := range out {
		c, err := g.connect(ctx, path)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		out[i] = c
	}
	return out
}

func (c *client) header(req *http.Request) {
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", clientRevision)
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
	}
}

func (c *client) notify(ctx context.Context, method string) error {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	c.header(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("%s: HTTP %d", method, resp.StatusCode)
	}
	return nil
}

// call calls tool with args.
func (c *client) call(ctx context.Context, tool string, args any) outcome {
	if args == nil {
		args = map[string]any{}
	}
	return c.request(ctx, "tools/call", map[string]any{"name": tool, "arguments": args}, false)
}

// request sends one request and reads its reply, as JSON or from an SSE
// stream (skipping the notifications before it).
func (c *client) request(ctx context.Context, method string, params any, init bool) (o outcome) {
	c.mu.Lock()
	c.id++
	id := c.id
	c.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	o.Start = time.Now()
	defer func() { o.Dur = time.Since(o.Start) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		o.Net = err
		return o
	}
	c.header(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		o.Net = err
		return o
	}
	defer resp.Body.Close()
	o.Status = resp.StatusCode
	if init {
		c.sid = resp.Header.Get("Mcp-Session-Id")
	}
	var reply struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	want := strconv.Itoa(id)
	decode := func(b []byte) bool {
		reply.ID, reply.Result, reply.Error = nil, nil, nil
		return json.Unmarshal(b, &reply) == nil && (string(reply.ID) == want || reply.ID == nil || string(reply.ID) == "null") &&
			(reply.Result != nil || reply.Error != nil)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		var data []byte
		found := false
		for !found && sc.Scan() {
			line := sc.Bytes()
			switch {
			case bytes.HasPrefix(line, []byte("data:")):
				data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
			case len(line) == 0 && len(data) > 0:
				found = decode(data)
				data = data[:0]
			}
		}
		if !found {
			o.Net = fmt.Errorf("SSE stream ended without the reply: %v", sc.Err())
			return o
		}
	} else {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			o.Net = err
			return o
		}
		if !decode(b) {
			o.Net = fmt.Errorf("no JSON-RPC reply in HTTP %d body %.200q", resp.StatusCode, b)
			return o
		}
	}
	o.Result, o.Err = reply.Result, reply.Error
	return o
}

// close ends the session (DELETE).
func (c *client) close(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.url, nil)
	if err != nil {
		return err
	}
	c.header(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// stream opens the session's GET stream; it is open once this returns
// nil, and ends when ctx does. ended receives how the stream ended.
func (c *client) stream(ctx context.Context, hc *http.Client, ended chan<- error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	c.header(req)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("GET stream: HTTP %d", resp.StatusCode)
	}
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil {
			err = io.EOF
		}
		ended <- err
	}()
	return nil
}

// ---- load ----

// record is one call made by a load worker.
type record struct {
	worker int
	server string
	outcome
}

// recorder collects the records of concurrent workers.
type recorder struct {
	mu   sync.Mutex
	recs []record
}

func (r *recorder) add(rec record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

func (r *recorder) all() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]record(nil), r.recs...)
}

// work runs one worker per client, each calling tool (on server, for the
// records) back to back until ctx ends or max calls were made, pausing
// pause between calls. It returns when every worker is done.
func work(ctx context.Context, clients []*client, server, tool string, args any, pause time.Duration, max int, rec *recorder) {
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil && (max <= 0 || n < max); n++ {
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				o := c.call(cctx, tool, args)
				cancel()
				if ctx.Err() != nil && o.Net != nil {
					return // the load ended under the call
				}
				rec.add(record{worker: i, server: server, outcome: o})
				if pause > 0 {
					select {
					case <-time.After(pause):
					case <-ctx.Done():
					}
				}
			}
		})
	}
	wg.Wait()
}
