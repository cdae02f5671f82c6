package upstream

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// A stdio server that never answers initialize is logged as awaited
// every WaitLogInterval, and reported (logged and in Health) once its
// timeout has passed, with one "upstream <name>:" prefix.
func TestStillWaitingForMuteServer(t *testing.T) {
	log, buf := newLogger()
	srv := stdioServer(t, "mute", nil)
	srv.Timeout = 700 * time.Millisecond
	m := NewManager(ManagerOptions{
		Servers:         map[string]*config.Server{srv.Name: srv},
		Logger:          log,
		WaitLogInterval: 150 * time.Millisecond,
	})
	defer m.Close()
	m.Start(context.Background())

	deadline := time.Now().Add(5 * time.Second)
	for m.Health()[srv.Name].State != HealthDown {
		if time.Now().After(deadline) {
			t.Fatalf("health still %+v after 5s; log:\n%s", m.Health()[srv.Name], buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h := m.Health()[srv.Name]
	if want := "upstream " + srv.Name + ": initialize timed out after 0.7s"; h.LastError != want {
		t.Errorf("LastError = %q, want %q", h.LastError, want)
	}
	logged := buf.String()
	if n := strings.Count(logged, `msg="still waiting for upstream `+srv.Name+`"`); n < 2 {
		t.Errorf("%d still-waiting lines before the timeout, want at least 2; log:\n%s", n, logged)
	}
	if !strings.Contains(logged, "timeout=700ms") {
		t.Errorf("the still-waiting lines do not name the timeout; log:\n%s", logged)
	}
	failed := strings.Index(logged, `msg="upstream connect failed"`)
	if failed < 0 {
		t.Fatalf("no connect failure logged; log:\n%s", logged)
	}
	// Once the attempt ended, the waiting lines stop (until a retry).
	if i := strings.LastIndex(logged[:failed], "still waiting"); i < 0 {
		t.Errorf("no still-waiting line before the failure")
	}
}

// No failure of a connect repeats a prefix: "upstream s: initialize:
// upstream s: initialize: context deadline exceeded" was what a handshake
// cut short by its caller's deadline read (and server/discover of a
// pinned 2026-07-28 server likewise).
func TestErrorsNameServerOnce(t *testing.T) {
	refused := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return "http://" + addr + "/mcp"
	}()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer broken.Close()

	connectErr := func(srv *config.Server, d time.Duration, cancelEarly bool) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			if cancelEarly {
				time.AfterFunc(100*time.Millisecond, cancel)
			}
			s, err := Connect(ctx, Options{Server: srv})
			if err == nil {
				s.Close()
			}
			return err
		}
	}
	mute := func(timeout time.Duration) *config.Server {
		s := stdioServer(t, "mute", nil)
		s.Name = "hang"
		s.Timeout = timeout
		return s
	}
	pinned := func(url string) *config.Server {
		return &config.Server{Name: "pinned", Transport: config.TransportHTTP, URL: url, ProtocolVersion: mcpwire.Rev20260728, Timeout: 2 * time.Second}
	}
	for _, tc := range []struct {
		name, server string
		do           func() error
	}{
		{"handshake past the caller's deadline", "hang", connectErr(mute(10*time.Second), 300*time.Millisecond, false)},
		{"handshake cancelled by the caller", "hang", connectErr(mute(10*time.Second), 10*time.Second, true)},
		{"initialize read timeout", "hang", connectErr(mute(300*time.Millisecond), 10*time.Second, false)},
		{"discover answered 500", "pinned", connectErr(pinned(broken.URL), 5*time.Second, false)},
		{"discover refused", "pinned", connectErr(pinned(refused), 5*time.Second, false)},
		{"manager: waiting for connection", "hang", func() error {
			m := managerFor(t, mute(10*time.Second))
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := m.Session(ctx, "hang")
			return err
		}},
		{"manager: initialize read timeout", "hang", func() error {
			m := managerFor(t, mute(300*time.Millisecond))
			_, err := m.Call(context.Background(), "hang", mcpwire.MethodToolsList, nil)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range []string{err.Error(), Reason(err)} {
				if p := repeatedPrefix(s); p != "" {
					t.Errorf("%q repeats %q", s, p)
				}
			}
			if n := strings.Count(err.Error(), "upstream "+tc.server); n != 1 {
				t.Errorf("%q names the server %d times, want 1", err, n)
			}
		})
	}
}

// repeatedPrefix is the first segment of s (split at ": ") that occurs
// twice, or "".
func repeatedPrefix(s string) string {
	seen := map[string]bool{}
	for _, seg := range strings.Split(s, ": ") {
		if seen[seg] {
			return seg
		}
		seen[seg] = true
	}
	return ""
}

// The last lines a stdio server writes to stderr before it exits are
// logged before its failed connect returns: they say why it died
// (closing the pipe as the process ended lost them).
func TestCrashStderrLogged(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh: every machine this suite runs on has one")
	}
	for i := range 20 {
		log, buf := newLogger()
		// A shell, quick to start and to exit: the race is with its exit.
		srv := &config.Server{Name: "crash", Transport: config.TransportStdio, Command: sh, Timeout: 5 * time.Second,
			Args: []string{"-c", "echo starting >&2; echo 'fatal: cannot open the database' >&2; exit 3"}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := Connect(ctx, Options{Server: srv, Logger: log})
		cancel()
		if err == nil {
			s.Close()
			t.Fatal("a crashing server connected")
		}
		if logged := buf.String(); !strings.Contains(logged, "fatal: cannot open the database") {
			t.Fatalf("attempt %d: the last stderr line is not logged once Connect returned (%v); log:\n%s", i, err, logged)
		}
	}
}
