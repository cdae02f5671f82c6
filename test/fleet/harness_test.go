package fleet

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
	"github.com/mcpgate/mcpgate/test/internal/gwproc"
)

// TestMain stops the throwaway PostgreSQL server and removes the built
// binaries.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if binCleanup != nil {
		binCleanup()
	}
	os.Exit(code)
}

// The binaries, built once per test binary (into the shared
// gwproc.BinDirEnv when set).
var (
	buildOnce  sync.Once
	binDir     string
	binCleanup func()
	buildErr   error
)

// binaries builds mcpgate and the notes example once; it returns their
// paths.
func binaries(t testing.TB) (gw, notes string) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, binCleanup, buildErr = gwproc.BinDir("mcpgate-fleet-bin-"); buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/",
			"github.com/mcpgate/mcpgate/cmd/mcpgate", "github.com/mcpgate/mcpgate/examples/notes")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "mcpgate"), filepath.Join(binDir, "notes")
}

// Keys of the fleet's callers (declarative keys, so every replica knows
// them from the config and the store).
const (
	masterKey = "mcpg_fleet-master-0123456789abcdef"
	aliceKey  = "mcpg_fleet-alice-0123456789abcdef"
	// limitedKey has a rate limit of limitedRPM requests a minute.
	limitedKey = "mcpg_fleet-limited-0123456789abcdef"
	limitedRPM = 12
	// budgetedKey may spend 1 a day, and every notes call costs 1.
	budgetedKey = "mcpg_fleet-budgeted-0123456789abcdef"
	// streamKey reaches server-everything only.
	streamKey = "mcpg_fleet-streamer-0123456789abcdef"
	// loadClients is the concurrency of the load scenarios; each client
	// has a key of its own (loadKey), so its audit records can be told
	// apart from the others'.
	loadClients = 16
)

func loadKey(i int) string   { return fmt.Sprintf("mcpg_fleet-load-%02d-0123456789abcdef", i) }
func loadAlias(i int) string { return fmt.Sprintf("load-%02d", i) }

// seedNotes are the notes every replica's notes child starts with. The
// children do not share writes (each keeps its own copy in memory), so the
// scenarios only read.
var seedNotes = []map[string]any{
	{"title": "alpha", "body": "buy milk and bread", "created": "2026-01-02T03:04:05Z", "updated": "2026-01-02T03:04:05Z"},
	{"title": "beta", "body": "call the plumber", "created": "2026-01-03T03:04:05Z", "updated": "2026-01-03T03:04:05Z"},
	{"title": "gamma", "body": "milk the goat", "created": "2026-01-04T03:04:05Z", "updated": "2026-01-04T03:04:05Z"},
}

// Fleet is the database, Redis, the replicas and the balancer.
type Fleet struct {
	t        testing.TB
	gw       string // the mcpgate binary
	dir      string
	cfgPath  string
	DSN      string
	PG       *pgtest.Server // the test binary's PostgreSQL server
	DB       string         // the fleet's database on it
	Redis    *redistest.Server
	Replicas []*Replica
	LB       *Balancer

	mu   sync.Mutex
	keys []string // fleet.session_keys of the config written last
}

// newFleet starts a fleet of n replicas sealing session ids under keys
// (newest first), and its balancer. Everything stops when t ends.
func newFleet(t testing.TB, n int, keys ...string) *Fleet {
	t.Helper()
	gw, notes := binaries(t)
	pg := pgtest.Get(t)
	redis := redistest.New(t)
	dir := t.TempDir()
	seed, _ := json.Marshal(seedNotes)
	if err := os.WriteFile(filepath.Join(dir, "notes.json"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	db := pg.NewDatabase(t)
	f := &Fleet{t: t, gw: gw, dir: dir, cfgPath: filepath.Join(dir, "gw.yaml"),
		DSN: pg.DSN(db, pgtest.Superuser, ""), PG: pg, DB: db, Redis: redis}
	f.writeConfig(n, notes, keys)
	for i := range n {
		name := string(rune('a' + i))
		addr := freeAddr(t)
		f.Replicas = append(f.Replicas, &Replica{Name: name, Addr: addr, URL: "http://" + addr, f: f,
			dataDir: filepath.Join(dir, "replica-"+name), logPath: filepath.Join(dir, "replica-"+name+".log")})
	}
	// Killed when the fleet's test ends, whichever subtest started them
	// last.
	t.Cleanup(func() {
		for _, r := range f.Replicas {
			r.Kill()
		}
	})
	// The first replica migrates the database alone; the others then
	// start together.
	if err := f.Replicas[0].startFirst(); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(f.Replicas))
	var wg sync.WaitGroup
	for i, r := range f.Replicas[1:] {
		wg.Go(func() { errs[i+1] = r.startFirst() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// A replica lists its peers from the registry when it starts and then
	// once a heartbeat (relay.HeartbeatInterval, 1 s): until then the
	// first to start know only those registered before them, and the
	// scenarios (who holds a session, limit/N in an outage) are about a
	// fleet whose replicas know each other.
	time.Sleep(1200 * time.Millisecond)
	f.LB = newBalancer(t, f.Replicas)
	return f
}

// writeConfig writes the one config every replica reads. What differs
// between replicas (port, fleet.advertise, data_dir) comes from their
// command line and environment.
func (f *Fleet) writeConfig(replicas int, notes string, sessionKeys []string) {
	f.t.Helper()
	var keys strings.Builder
	fmt.Fprintf(&keys, "    - {alias: alice, key: %q, user: alice, servers: [notes]}\n", aliceKey)
	fmt.Fprintf(&keys, "    - {alias: limited, key: %q, rate_limit_rpm: %d}\n", limitedKey, limitedRPM)
	// server-everything, for streaming, when Node is installed (the
	// scenario that needs it skips or fails otherwise); without it no key
	// may name it, or the config does not load.
	node, nodeDir, nodeErr := nodePaths()
	if nodeErr == nil {
		fmt.Fprintf(&keys, "    - {alias: streamer, key: %q, servers: [everything]}\n", streamKey)
	}
	fmt.Fprintf(&keys, "    - {alias: budgeted, key: %q, servers: [notes], budget: {amount: 1, period: day}}\n", budgetedKey)
	for i := range loadClients {
		fmt.Fprintf(&keys, "    - {alias: %s, key: %q, servers: [notes]}\n", loadAlias(i), loadKey(i))
	}
	quoted := make([]string, len(sessionKeys))
	for i, k := range sessionKeys {
		quoted[i] = fmt.Sprintf("%q", k)
	}
	cfg := fmt.Sprintf(`# The fleet proof's shared config (test/fleet).
data_dir: ${MCPGATE_DATA_DIR}
store: {driver: postgres, dsn: "${MCPGATE_PG_DSN}"}
audit: {durable: true}
shutdown_delay: 400ms   # the test balancer probes /readyz every 100 ms
state: {driver: redis, url: "${MCPGATE_REDIS_URL}", replicas: %d}
fleet:
  session_keys: [%s]
  advertise: ${MCPGATE_ADVERTISE}
auth:
  master_key: %q
  keys:
%sservers:
  notes: {transport: stdio, command: %q, args: [-file, %q], tools: {costs: {"*": 1}}}
`, replicas, strings.Join(quoted, ", "), masterKey, keys.String(), notes, filepath.Join(f.dir, "notes.json"))
	if nodeErr == nil {
		cfg += fmt.Sprintf("  everything: {transport: stdio, command: %q, args: [%q, stdio]}\n", node, everythingJS(nodeDir))
	}
	if err := os.WriteFile(f.cfgPath, []byte(cfg), 0o600); err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.keys = sessionKeys
	f.mu.Unlock()
}

// RotateKeys rewrites the config with session keys (newest first); each
// replica reads it at its next start.
func (f *Fleet) RotateKeys(keys ...string) {
	_, notes := binaries(f.t)
	f.writeConfig(len(f.Replicas), notes, keys)
}

// newSessionKey is a fresh fleet.session_keys entry.
func newSessionKey() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// freeAddr is a loopback address with a port free now; a replica keeps
// its address across restarts (fleet.advertise names it).
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Replica is one mcpgate serve of the fleet.
type Replica struct {
	Name    string // a, b, c
	Addr    string // host:port, the same across restarts
	URL     string // http://Addr
	f       *Fleet
	dataDir string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	starts int
}

// Starts is how many times the replica was started.
func (r *Replica) Starts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts
}

// Start starts the replica and waits until its /readyz answers 200. It
// runs until Kill or Stop, or the end of the fleet's test.
func (r *Replica) Start(t testing.TB) {
	t.Helper()
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
}

// errAddrInUse: the replica's port was taken between freeAddr and its
// start (another package's test, in a parallel go test ./...).
var errAddrInUse = errors.New("address already in use")

// startFirst is Start for a replica's first start: a port taken meanwhile
// is replaced by another (nothing names the replica's address yet). It
// may run in a goroutine of its own: it returns its error.
func (r *Replica) startFirst() error {
	for range 3 {
		err := r.start()
		if !errors.Is(err, errAddrInUse) {
			return err
		}
		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			return lerr
		}
		r.Addr = l.Addr().String()
		r.URL = "http://" + r.Addr
		l.Close()
	}
	return fmt.Errorf("replica %s: no free port in 3 tries", r.Name)
}

func (r *Replica) start() error {
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	logged, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(r.f.gw, "serve", "--config", r.f.cfgPath, "--listen", r.Addr, "--log-format", "json")
	cmd.Env = append(os.Environ(),
		"MCPGATE_DATA_DIR="+r.dataDir,
		"MCPGATE_ADVERTISE="+r.URL,
		"MCPGATE_PG_DSN="+r.f.DSN,
		"MCPGATE_REDIS_URL="+r.f.Redis.URL(),
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.starts++
	r.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-done:
			log := r.Log()
			if int(logged) <= len(log) && strings.Contains(log[logged:], "address already in use") {
				return fmt.Errorf("replica %s on %s: %w", r.Name, r.Addr, errAddrInUse)
			}
			return fmt.Errorf("replica %s exited while starting:\n%s", r.Name, log)
		default:
		}
		if code, _ := r.Ready(); code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not ready after 30s:\n%s", r.Name, r.Log())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Kill SIGKILLs the replica, as a crashed node would be, and waits for it
// to be gone.
func (r *Replica) Kill() { r.signal(syscall.SIGKILL, 0) }

// Stop sends SIGTERM and waits (up to 20s) for the replica to drain and
// exit.
func (r *Replica) Stop(t testing.TB) {
	t.Helper()
	if !r.signal(syscall.SIGTERM, 20*time.Second) {
		t.Fatalf("replica %s did not exit within 20s of SIGTERM", r.Name)
	}
}

// signal sends sig and waits for the exit, up to wait (0: forever).
func (r *Replica) signal(sig syscall.Signal, wait time.Duration) bool {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return true
	}
	_ = cmd.Process.Signal(sig)
	if wait == 0 {
		<-done
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

// Restart stops the replica with SIGTERM (a rolling restart) and starts
// it again on the same address, reading the config afresh.
func (r *Replica) Restart(t testing.TB) {
	t.Helper()
	r.Stop(t)
	r.Start(t)
}

// Log is what the replica wrote so far, over all its starts.
func (r *Replica) Log() string {
	b, _ := os.ReadFile(r.logPath)
	return string(b)
}
