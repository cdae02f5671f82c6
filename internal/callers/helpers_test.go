package callers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// TestMain fails the run if a background worker outlived its
// Authenticator: every test closes what it builds.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leak := leakedWorker(); leak != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutine:\n%s\n", leak)
			code = 1
		}
	}
	os.Exit(code)
}

func leakedWorker() string {
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leak := ""
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "internal/callers.(*toucher).run") {
				leak = g
			}
		}
		if leak == "" || time.Now().After(deadline) {
			return leak
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openStore opens a real SQLite store in a temporary directory.
func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

// addKey stores k under a new secret (or secret, when given) and returns
// the secret.
func addKey(t testing.TB, s store.Keys, k store.Key, secret ...string) string {
	t.Helper()
	sec := ""
	if len(secret) > 0 {
		sec = secret[0]
	} else {
		var err error
		if sec, err = NewSecret(); err != nil {
			t.Fatal(err)
		}
	}
	k.KeyHash = store.HashKey(sec)
	k.KeyPrefix = store.KeyPrefix(sec)
	if k.Source == "" {
		k.Source = store.SourceAPI
	}
	if _, err := s.CreateKey(context.Background(), k); err != nil {
		t.Fatalf("create key %q: %v", k.Alias, err)
	}
	return sec
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type touchCall struct {
	alias string
	at    time.Time
}

// spyKeys wraps a KeyStore, counting lookups and recording touches; the
// optional function fields replace the wrapped methods.
type spyKeys struct {
	next      KeyStore
	getByHash func(ctx context.Context, hash string) (store.Key, error)
	touchKey  func(ctx context.Context, alias string, at time.Time) error

	gets atomic.Int64

	mu      sync.Mutex
	touches []touchCall
}

func (s *spyKeys) GetKeyByHash(ctx context.Context, hash string) (store.Key, error) {
	s.gets.Add(1)
	if s.getByHash != nil {
		return s.getByHash(ctx, hash)
	}
	return s.next.GetKeyByHash(ctx, hash)
}

func (s *spyKeys) TouchKey(ctx context.Context, alias string, at time.Time) error {
	s.mu.Lock()
	s.touches = append(s.touches, touchCall{alias, at})
	s.mu.Unlock()
	if s.touchKey != nil {
		return s.touchKey(ctx, alias, at)
	}
	return s.next.TouchKey(ctx, alias, at)
}

func (s *spyKeys) touched() []touchCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]touchCall(nil), s.touches...)
}

// newAuth builds an Authenticator closed at the end of the test.
func newAuth(t testing.TB, opts Options) *Authenticator {
	t.Helper()
	a := New(opts)
	t.Cleanup(func() { a.Close() })
	return a
}

// request builds a request from remote with headers given as name, value
// pairs.
func request(remote string, kv ...string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

const remote = "192.0.2.10:51234"

// mustAuth authenticates r and fails the test on a Failure.
func mustAuth(t testing.TB, a *Authenticator, r *http.Request) *Caller {
	t.Helper()
	c, f := a.Authenticate(r)
	if f != nil {
		t.Fatalf("Authenticate: %d %s", f.Status, f.Body)
	}
	if c == nil {
		t.Fatal("Authenticate: nil caller and nil failure")
	}
	return c
}

// mustFail authenticates r and returns the failure as written to a
// response recorder.
func mustFail(t testing.TB, a *Authenticator, r *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	c, f := a.Authenticate(r)
	if c != nil || f == nil {
		t.Fatalf("Authenticate = %+v, %v; want a failure", c, f)
	}
	w := httptest.NewRecorder()
	f.Write(w)
	return w
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
