package bench_test

// BenchmarkFleetMode: what fleet mode costs per call. The real binary
// (mcpgate serve) twice, side by side against the same echo upstream:
//
//	single: one process as it ships by default: the SQLite store in
//	        data_dir, the memory state, session ids local to the process,
//	        the in-process rate limiter;
//	fleet:  one replica as a fleet runs it: the PostgreSQL store
//	        (pgtest), the Redis state (redistest, unix socket),
//	        fleet.session_keys (every request of a session opens its sealed
//	        id), the rate limit global (one GCRA script in Redis per
//	        request);
//	fleet-nolimit: the same, the key without a rate limit (nothing in
//	        Redis per call), to tell the limit's share from the rest;
//	fleet-durable: fleet with audit.durable (each answer waits for its
//	        audit record's commit; PostgreSQL's default), to tell that
//	        wait's cost (fleet and fleet-nolimit set durable: false).
//
// All but fleet-nolimit authenticate a key with a rate limit too high to
// refuse anything; every mode writes an audit record per call. The load generator runs in the test
// process; cpu-µs/call is the gateway process's own CPU time per call
// (from /proc). PostgreSQL and Redis share the machine with it:
//
//	go test ./bench -run '^$' -bench FleetMode -benchtime 10000x -count 3
//
// Linux only (/proc); skipped without PostgreSQL or Redis (CI=true fails
// instead), like every test that needs them.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/bench/loadgen"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
)

// TestMain stops the throwaway PostgreSQL server if a benchmark started
// one.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// fleetBenchKey is the benchmark's caller; its limit is the shared state's
// work on every request, never a refusal.
const (
	fleetBenchKey = "mcpg_bench-fleet-0123456789abcdef"
	fleetBenchRPM = 100_000_000
)

func BenchmarkFleetMode(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads the gateway's CPU time from /proc")
	}
	bin := buildServe(b)
	echo := startEcho(b)
	pg := pgtest.Get(b)
	redis := redistest.New(b)
	key := make([]byte, 32)
	rand.Read(key)
	common := func(rpm int) string {
		return fmt.Sprintf(`auth:
  keys:
    - {alias: bench, key: %q, rate_limit_rpm: %d}
servers:
  echo: {transport: http, url: %q}
`, fleetBenchKey, rpm, echo.URL+"/mcp")
	}
	// audit.durable is spelled out: PostgreSQL turns it on by default,
	// and fleet-durable is that default; the others batch.
	fleet := fmt.Sprintf(`data_dir: %s
store: {driver: postgres, dsn: %q}
state: {driver: redis, url: %q, replicas: 1}
fleet: {session_keys: [%q]}
`, b.TempDir(), pg.DSN(pg.NewDatabase(b), pgtest.Superuser, ""), redis.URL(), base64.StdEncoding.EncodeToString(key))
	modes := []struct{ name, config string }{
		{"single", "data_dir: " + b.TempDir() + "\n" + common(fleetBenchRPM)},
		{"fleet", fleet + "audit: {durable: false}\n" + common(fleetBenchRPM)},
		// The same replica with a key without a limit: no Redis on the
		// call path, so fleet minus this is the global limit's cost.
		{"fleet-nolimit", fleet + "audit: {durable: false}\n" + common(0)},
		// audit.durable: each answer waits for its record's commit in
		// PostgreSQL (group commit); minus fleet, that wait's cost.
		{"fleet-durable", fleet + "audit: {durable: true}\n" + common(fleetBenchRPM)},
	}
	gws := make([]*serveProc, len(modes))
	for i, m := range modes {
		gws[i] = startServe(b, bin, m.config)
	}
	for _, c := range []int{1, 8} {
		for i, m := range modes {
			b.Run(fmt.Sprintf("c=%d/%s", c, m.name), func(b *testing.B) {
				runServe(b, gws[i], loadgen.Options{URL: gws[i].url + "/mcp/echo", Concurrency: c,
					Header: http.Header{"X-Mcpgate-Api-Key": {fleetBenchKey}}})
			})
		}
	}
}

// buildServe builds cmd/mcpgate into a temporary directory.
func buildServe(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/mcpgate/mcpgate/cmd/mcpgate").CombinedOutput()
	if err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "mcpgate")
}

// serveProc is a running mcpgate serve.
type serveProc struct {
	url string
	pid int
}

// startServe runs mcpgate serve on config, on a free loopback port, until
// the benchmark ends; it waits for /readyz.
func startServe(b *testing.B, bin, config string) *serveProc {
	b.Helper()
	dir := b.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", addr, "--log-format", "json")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logf.Close()
	})
	p := &serveProc{url: "http://" + addr, pid: cmd.Process.Pid}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(p.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			b.Fatalf("mcpgate serve not ready after 30s:\n%s", log)
		}
	}
}

// runServe makes b.N measured calls and reports calls/s, latency
// percentiles and the gateway process's CPU time per call.
func runServe(b *testing.B, p *serveProc, opts loadgen.Options) {
	b.Helper()
	// Warm up apart, so that the CPU time below is the measured calls'.
	warm := opts
	warm.Duration = 500 * time.Millisecond
	if _, err := loadgen.Run(context.Background(), warm); err != nil {
		b.Fatal(err)
	}
	opts.Calls = int64(b.N)
	b.ResetTimer()
	cpu0 := procCPU(p.pid)
	res, err := loadgen.Run(context.Background(), opts)
	cpu := procCPU(p.pid) - cpu0
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if res.Errors != 0 {
		b.Fatalf("%d errors, e.g. %q", res.Errors, res.ErrorSamples)
	}
	b.ReportMetric(res.CallsPerSec, "calls/s")
	b.ReportMetric(float64(res.P50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(res.P99.Microseconds()), "p99-µs")
	b.ReportMetric(float64(res.Mean.Microseconds()), "mean-µs")
	if res.Calls > 0 && cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(res.Calls), "gw-cpu-µs/call")
	}
}

// procCPU is the user+system CPU time of process pid so far (clock ticks
// of /proc/pid/stat, at the usual 100 Hz).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces: the fields start after its ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
