// Package redistest runs throwaway redis-server processes for tests: one
// per test binary, shared by its tests, and dedicated ones a test may stop
// and restart. Each listens only on a unix socket in a fresh temporary
// directory, keeps nothing on disk, and dies with the test binary.
//
// When redis-server cannot be started (not installed: see
// scripts/install-test-deps.sh) a test skips with the reason, unless
// CI=true or MCPGATE_REQUIRE_REDIS=1, where it fails.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process on a unix socket.
type Server struct {
	dir    string
	socket string

	mu  sync.Mutex
	cmd *exec.Cmd
	out *bytes.Buffer
}

// Start starts a redis-server in a new temporary directory.
func Start() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found in PATH (bash scripts/install-test-deps.sh installs it): %w", err)
	}
	// os.MkdirTemp, not t.TempDir: a unix socket path must stay under
	// 108 bytes, and a test's name can be long.
	dir, err := os.MkdirTemp("", "mcpgate-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, socket: filepath.Join(dir, "redis.sock")}
	if err := s.start(bin); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// URL is the server's address for go-redis (and the state config).
func (s *Server) URL() string { return "unix://" + s.socket }

func (s *Server) start(bin string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("redistest: already running")
	}
	_ = os.Remove(s.socket)
	// Arguments without a shell: --save "" is an empty argument.
	cmd := exec.Command(bin,
		"--port", "0",
		"--unixsocket", s.socket,
		"--unixsocketperm", "700",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// The server dies with the test binary, even one that panicked past
	// its TestMain.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.socket) == nil {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited before serving (%v): %s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server not serving on %s after 10s: %s", s.socket, out.String())
		}
	}
	s.cmd, s.out = cmd, out
	go func() { // reap it, whoever ends it
		err := <-exited
		s.mu.Lock()
		if s.cmd == cmd {
			s.cmd = nil
		}
		s.mu.Unlock()
		_ = err
	}()
	return nil
}

// ping sends PING on the socket and waits for +PONG.
func ping(socket string) error {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Stop kills the server (as a crash would) and waits until its socket no
// longer answers. The directory stays, for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	for ping(s.socket) == nil {
		time.Sleep(10 * time.Millisecond)
	}
	_ = os.Remove(s.socket)
}

// Restart starts the server again, empty, on the same socket.
func (s *Server) Restart() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	return s.start(bin)
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.dir)
}

var (
	shared    *Server
	sharedErr error
)

// Main starts the test binary's shared server, runs the tests (run is
// m.Run, or a wrapper of it such as statetest.Main), and stops the server
// whatever the outcome; it returns run's exit code.
func Main(run func() int) int {
	shared, sharedErr = Start()
	code := run()
	if shared != nil {
		shared.Close()
	}
	return code
}

// Shared returns the server Main started, or ends the test (skip, or fail
// when Redis is required) with the reason it could not start.
func Shared(t testing.TB) *Server {
	t.Helper()
	if shared == nil {
		err := sharedErr
		if err == nil {
			err = errors.New("redistest.Main did not run (call it from TestMain)")
		}
		unavailable(t, err)
	}
	return shared
}

// New starts a dedicated server for t, closed at its end, or ends the test
// like Shared.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(s.Close)
	return s
}

// Required reports whether Redis tests must run: CI=true or
// MCPGATE_REQUIRE_REDIS=1.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("MCPGATE_REQUIRE_REDIS") == "1"
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("redis-server is required (CI=true or MCPGATE_REQUIRE_REDIS=1) and could not be started: %v", err)
	}
	t.Skipf("redis-server could not be started (set MCPGATE_REQUIRE_REDIS=1 to fail instead): %v", err)
}
