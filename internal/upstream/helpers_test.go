package upstream

// Helpers shared by several of this package's test files.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// waitFor polls cond until it holds and fails the test after 10s: the
// wait for an event the test is not told of directly (a request reaching
// a fake, a process dying), instead of a pause that guesses how long the
// event takes, too short on a loaded machine and too long elsewhere.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !eventually(cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// eventually polls cond until it holds or 10s pass and returns its last
// answer, for a test that reports the failure itself.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return cond()
		}
	}
	return true
}

// inFlight is how many calls of s wait for their reply: a test that needs
// a call in flight waits for it to be registered (waitFor), which is what
// attributes an upstream's messages and what a dying session fails.
func inFlight(t testing.TB, s Session) int {
	t.Helper()
	c, ok := s.(*conn)
	if !ok {
		t.Fatalf("session %T is not a *conn", s)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

func countMethod(seen []seenRequest, method string) int {
	n := 0
	for _, r := range seen {
		if r.Method == method {
			n++
		}
	}
	return n
}

func managerFor(t *testing.T, servers ...*config.Server) *Manager {
	t.Helper()
	all := map[string]*config.Server{}
	for _, s := range servers {
		all[s.Name] = s
	}
	m := NewManager(ManagerOptions{Servers: all})
	t.Cleanup(func() { m.Close() })
	return m
}

func callEcho(ctx context.Context, m *Manager, server, text string) (string, error) {
	res, err := m.Call(ctx, server, mcpwire.MethodToolsCall, []byte(`{"name":"echo","arguments":{"text":`+string(jsonrpc.String(text))+`}}`))
	if err != nil {
		return "", err
	}
	return resultText(res)
}

// resultText is the text of the first content block of a tool result.
func resultText(res []byte) (string, error) {
	var out struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(res, &out); err != nil || len(out.Content) == 0 {
		return "", fmt.Errorf("not a tool result with text: %.200s", res)
	}
	return out.Content[0].Text, nil
}

// caller is what flood calls: a Session, or the Manager (managerCaller).
type caller interface {
	Call(context.Context, string, json.RawMessage) (json.RawMessage, error)
}

// fakeClock is the injectable clock of tokenSource.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// tokenReq is what the fake token endpoint saw.
type tokenReq struct {
	Method, Path, RawQuery     string
	ContentType, Accept, Authz string
	Body                       string
	Form                       url.Values
}

// tokenEndpoint is a real HTTP token endpoint that records requests.
type tokenEndpoint struct {
	*httptest.Server
	hits atomic.Int64
	mu   sync.Mutex
	reqs []tokenReq
}

// newTokenEndpoint serves respond(w, n) for the n-th request (1-based);
// nil issues "tok-n" valid for an hour.
func newTokenEndpoint(t *testing.T, respond func(w http.ResponseWriter, n int64)) *tokenEndpoint {
	t.Helper()
	if respond == nil {
		respond = func(w http.ResponseWriter, n int64) { issueToken(w, fmt.Sprintf("tok-%d", n), 3600) }
	}
	ep := &tokenEndpoint{}
	ep.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		ep.mu.Lock()
		ep.reqs = append(ep.reqs, tokenReq{
			Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
			ContentType: r.Header.Get("Content-Type"), Accept: r.Header.Get("Accept"),
			Authz: r.Header.Get("Authorization"), Body: string(body), Form: form,
		})
		ep.mu.Unlock()
		respond(w, ep.hits.Add(1))
	}))
	t.Cleanup(ep.Close)
	return ep
}

func (ep *tokenEndpoint) requests() []tokenReq {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return append([]tokenReq(nil), ep.reqs...)
}

// issueToken answers a successful token request; expiresIn nil omits it.
func issueToken(w http.ResponseWriter, tok string, expiresIn any) {
	m := map[string]any{"access_token": tok, "token_type": "Bearer"}
	if expiresIn != nil {
		m["expires_in"] = expiresIn
	}
	writeJSON(w, http.StatusOK, m)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func testOAuthConfig(tokenURL string) *config.Auth {
	return &config.Auth{
		Type:         config.AuthOAuth2,
		TokenURL:     tokenURL,
		ClientID:     "client-1",
		ClientSecret: testClientSecret,
	}
}

func mustToken(t *testing.T, s *tokenSource) string {
	t.Helper()
	tok, err := s.Token(context.Background())
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	return tok
}

// checkTokenError checks err is an *Error of kind and status whose message
// contains every want and none of the secrets.
func checkTokenError(t *testing.T, err error, kind Kind, status int, want, not []string) {
	t.Helper()
	var ue *Error
	if !errors.As(err, &ue) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if ue.Server != "srv" || ue.Kind != kind || ue.Status != status {
		t.Errorf("error = {server %q, kind %s, status %d}, want {srv, %s, %d}: %v",
			ue.Server, ue.Kind, ue.Status, kind, status, err)
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q does not contain %q", msg, w)
		}
	}
	for _, n := range append([]string{testClientSecret, "tok-"}, not...) {
		if strings.Contains(msg, n) {
			t.Errorf("message %q contains %q", msg, n)
		}
	}
}
