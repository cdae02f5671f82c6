package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// 1,000 calls through the Manager reuse one upstream session: the upstream
// sees one initialize, not one per call (C11.2).
func TestPoolOneInitializeForManyCalls(t *testing.T) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	m := managerFor(t, f.server("up"))
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < 1000; i += 16 {
				if got, err := callEcho(context.Background(), m, "up", strconv.Itoa(i)); err != nil || got != strconv.Itoa(i) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d calls failed", n)
	}
	seen := f.seen()
	if n := countMethod(seen, mcpwire.MethodInitialize); n != 1 {
		t.Errorf("%d initialize requests for 1000 calls, want 1", n)
	}
	if n := countMethod(seen, mcpwire.MethodToolsCall); n != 1000 {
		t.Errorf("%d tools/call requests, want 1000", n)
	}
}

// A passthrough server pools sessions per caller credential: two callers
// get two sessions, each with its own token, and repeated calls reuse them.
func TestPoolPerCallerCredential(t *testing.T) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	var mu sync.Mutex
	bySession := map[string]map[string]bool{} // session id -> Authorization values seen
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		mu.Lock()
		defer mu.Unlock()
		sid := r.Header.Get(mcpwire.HeaderSessionID)
		if sid == "" {
			sid = w.Header().Get(mcpwire.HeaderSessionID)
		}
		if bySession[sid] == nil {
			bySession[sid] = map[string]bool{}
		}
		bySession[sid][r.Header.Get("Authorization")] = true
		return false
	}
	srv := f.server("pt")
	srv.Auth = &config.Auth{Type: config.AuthPassthrough}
	m := managerFor(t, srv)
	for _, who := range []string{"alice", "bob", "alice", "bob", "alice"} {
		ctx := WithCallerTokens(context.Background(), func(string) string { return "Bearer " + who + "-token" })
		if _, err := callEcho(ctx, m, "pt", who); err != nil {
			t.Fatal(err)
		}
	}
	if n := countMethod(f.seen(), mcpwire.MethodInitialize); n != 2 {
		t.Errorf("%d initialize requests for two callers, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for sid, auths := range bySession {
		if len(auths) != 1 {
			t.Errorf("session %s carried %d different credentials: %v", sid, len(auths), auths)
		}
	}
	if h := m.Health()["pt"]; h.Sessions != 2 || h.State != HealthReady {
		t.Errorf("health %+v, want 2 ready sessions", h)
	}
	if m.Fingerprint(WithCallerTokens(context.Background(), func(string) string { return "a" }), "pt") ==
		m.Fingerprint(WithCallerTokens(context.Background(), func(string) string { return "b" }), "pt") {
		t.Error("different callers share a fingerprint")
	}
}

// A user_api_key server refuses a caller without a stored credential
// before dialling (ErrNoCredential), and pools the others per credential.
func TestUserAPIKeyNeedsOwnCredential(t *testing.T) {
	for _, mode := range []string{config.SessionShared, config.SessionPerCall} {
		f := newStreamableFake(t)
		f.jsonReplies = true
		srv := f.server("byok")
		srv.SessionMode = mode
		srv.Auth = &config.Auth{Type: config.AuthUserAPIKey, HeaderName: "X-API-Key"}
		m := managerFor(t, srv)
		none := WithCallerTokens(context.Background(), func(string) string { return "" })
		for _, ctx := range []context.Context{context.Background(), none} {
			_, err := callEcho(ctx, m, "byok", "x")
			if !errors.Is(err, ErrNoCredential) || KindOf(err) != KindAuth {
				t.Fatalf("%s: without a credential: %v", mode, err)
			}
		}
		if n := len(f.seen()); n != 0 {
			t.Fatalf("%s: the upstream saw %d requests from a caller without a credential", mode, n)
		}
		ctx := WithCallerTokens(context.Background(), func(string) string { return "alice-key" })
		if got, err := callEcho(ctx, m, "byok", "hi"); err != nil || got != "hi" {
			t.Fatalf("%s: with a credential: %q, %v", mode, got, err)
		}
	}
}

// per_call servers get one session per operation, ended with DELETE before
// the call returns (C9.1).
func TestPerCallSessionsEndBeforeReturn(t *testing.T) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	srv := f.server("pc")
	srv.SessionMode = config.SessionPerCall
	m := managerFor(t, srv)
	for i := 1; i <= 3; i++ {
		if _, err := callEcho(context.Background(), m, "pc", "x"); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		deleted := len(f.deleted)
		f.mu.Unlock()
		if deleted != i {
			t.Fatalf("after call %d: %d DELETEs, want %d", i, deleted, i)
		}
	}
	if n := countMethod(f.seen(), mcpwire.MethodInitialize); n != 3 {
		t.Errorf("%d initialize requests, want 3", n)
	}
	if h := m.Health()["pc"]; h.State != HealthReady || h.Mode != config.SessionPerCall || h.Sessions != 0 {
		t.Errorf("health %+v", h)
	}
	if _, err := m.Session(context.Background(), "pc"); err == nil {
		t.Error("Session on a per_call server succeeded")
	}
}

// N concurrent cancelled calls on per_call sessions, over real TCP: each
// returns promptly, the upstream is told (notifications/cancelled), each
// session gets its DELETE, and the client works normally afterwards (C9).
func TestPerCallCancellationSendsDeletes(t *testing.T) {
	f := newStreamableFake(t)
	srv := f.server("pc")
	srv.SessionMode = config.SessionPerCall
	m := managerFor(t, srv)
	const n = 8
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = m.Call(ctx, "pc", mcpwire.MethodToolsCall, []byte(`{"name":"slow"}`))
		})
	}
	// Wait until all n calls reached the upstream.
	eventually(func() bool { return countMethod(f.seen(), mcpwire.MethodToolsCall) >= n })
	start := time.Now()
	cancel()
	wg.Wait()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cancelled calls took %v to return", d)
	}
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call %d: %v, want context.Canceled", i, err)
		}
	}
	f.mu.Lock()
	deleted := len(f.deleted)
	f.mu.Unlock()
	if deleted != n {
		t.Errorf("%d DELETEs, want %d", deleted, n)
	}
	if got := countMethod(f.seen(), mcpwire.NotifyCancelled); got != n {
		t.Errorf("%d notifications/cancelled, want %d", got, n)
	}
	if got, err := callEcho(context.Background(), m, "pc", "after"); err != nil || got != "after" {
		t.Errorf("call after cancellation: %q, %v", got, err)
	}
}

// A hung DELETE cannot hold the caller: cleanup of a cancelled per_call
// session (the cancellation and the DELETE) shares one budget.
func TestPerCallHungDeleteIsBounded(t *testing.T) {
	old := defaultCloseBudget
	defaultCloseBudget = 300 * time.Millisecond
	t.Cleanup(func() { defaultCloseBudget = old })
	f := newStreamableFake(t)
	f.onDelete = func(w http.ResponseWriter, r *http.Request) bool {
		<-r.Context().Done() // never answers
		return true
	}
	srv := f.server("pc")
	srv.SessionMode = config.SessionPerCall
	m := managerFor(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for countMethod(f.seen(), mcpwire.MethodToolsCall) < 1 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	start := time.Now()
	_, err := m.Call(ctx, "pc", mcpwire.MethodToolsCall, []byte(`{"name":"slow"}`))
	d := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	if d > 2*time.Second {
		t.Errorf("a hung DELETE held the caller for %v (budget 300ms)", d)
	}
}

// A 404 on the session means it expired before the request reached a
// tool: the Manager retries the request once on a new session, and the
// caller sees the result (C6.4, C11.2).
func TestExpiredSessionRetriedTransparently(t *testing.T) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	var expired atomic.Bool
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		if m.Method == mcpwire.MethodToolsCall && r.Header.Get(mcpwire.HeaderSessionID) == "session-1" && expired.Load() {
			w.WriteHeader(http.StatusNotFound)
			return true
		}
		return false
	}
	m := managerFor(t, f.server("up"))
	if got, err := callEcho(context.Background(), m, "up", "one"); err != nil || got != "one" {
		t.Fatalf("first call: %q %v", got, err)
	}
	expired.Store(true)
	if got, err := callEcho(context.Background(), m, "up", "two"); err != nil || got != "two" {
		t.Fatalf("call on an expired session: %q %v", got, err)
	}
	var calls []string
	for _, r := range f.seen() {
		calls = append(calls, r.Method+"@"+r.SessionID)
	}
	want := "server/discover@ initialize@ notifications/initialized@session-1 tools/call@session-1 tools/call@session-1 initialize@ notifications/initialized@session-2 tools/call@session-2"
	if got := strings.Join(calls, " "); got != want {
		t.Errorf("requests:\n got %s\nwant %s", got, want)
	}
}

// A stdio server killed from outside is restarted and the next call
// succeeds (C11.1).
func TestStdioKilledIsRestarted(t *testing.T) {
	srv := stdioServer(t, "raw", nil)
	m := managerFor(t, srv)
	ctx := context.Background()
	pidText := func() string {
		res, err := m.Call(ctx, srv.Name, mcpwire.MethodToolsCall, []byte(`{"name":"pid"}`))
		if err != nil {
			t.Fatal(err)
		}
		txt, err := resultText(res)
		if err != nil {
			t.Fatal(err)
		}
		return txt
	}
	first := pidText()
	pid, _ := strconv.Atoi(first)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(func() bool { return m.Health()[srv.Name].State != HealthReady })
	if h := m.Health()[srv.Name]; h.State != HealthDegraded || h.LastError == "" {
		t.Errorf("health after kill: %+v", h)
	}
	second := pidText()
	if second == first {
		t.Errorf("the same process %s answered after being killed", first)
	}
	if h := m.Health()[srv.Name]; h.State != HealthReady {
		t.Errorf("health after restart: %+v", h)
	}
}

// Closing the Manager stops the whole process group of a stdio server:
// its own helper processes included (no orphan), and the server itself
// is reaped (no zombie).
func TestStdioProcessGroupStoppedOnClose(t *testing.T) {
	srv := stdioServer(t, "raw", nil)
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{srv.Name: srv}})
	ctx := context.Background()
	text := func(tool string) int {
		res, err := m.Call(ctx, srv.Name, mcpwire.MethodToolsCall, []byte(`{"name":"`+tool+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		txt, err := resultText(res)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(txt)
		if err != nil {
			t.Fatalf("%s: %s", tool, txt)
		}
		return n
	}
	server, helper := text("pid"), text("spawn")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// The server was our child: it must be gone entirely (ESRCH, not a
	// zombie waiting for us).
	if err := syscall.Kill(server, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server process %d still exists after Close (kill 0: %v)", server, err)
	}
	// The helper was the server's child: it must not run on. Once
	// orphaned, its reaping is init's job, so a zombie under another
	// parent is acceptable; a running process is not.
	eventually(func() bool { return !processRunning(helper) })
	if processRunning(helper) {
		t.Errorf("helper process %d of the server survived Close (orphan)", helper)
		syscall.Kill(helper, syscall.SIGKILL)
	}
}

// processRunning reports whether pid exists and is not a zombie.
func processRunning(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// A request's credential fingerprint is worked out once per server config
// and token (its catalog key and its pooled session both ask), and a
// token that changes within the request (a reconnect) or a config
// reloaded under it gets a fingerprint of its own, never the memo's.
func TestCallerFingerprintMemo(t *testing.T) {
	f := newStreamableFake(t)
	f.jsonReplies = true
	srv := f.server("byok")
	srv.Auth = &config.Auth{Type: config.AuthUserAPIKey, HeaderName: "X-API-Key"}
	m := managerFor(t, srv)
	tok := "alice-key"
	asked := 0
	ctx := WithCallerTokens(context.Background(), func(string) string { asked++; return tok })
	alice := m.CredentialKey(ctx, "byok")
	if alice == "" || alice != Fingerprint(srv, "alice-key") {
		t.Fatalf("credential key %q, want the fingerprint of alice's key", alice)
	}
	if _, err := callEcho(ctx, m, "byok", "hi"); err != nil {
		t.Fatal(err)
	}
	if got := m.Fingerprint(ctx, "byok"); got != alice {
		t.Fatalf("fingerprint %q after the call, want %q", got, alice)
	}
	ct := ctx.Value(callerTokensKey{}).(*callerTokens)
	if len(ct.fps) != 1 {
		t.Fatalf("%d fingerprints memoised for one server and token, want 1", len(ct.fps))
	}
	if asked == 0 {
		t.Fatal("the caller's token was never asked for")
	}
	// A reconnect within the request: another credential, another
	// fingerprint, another pooled session.
	tok = "alice-new-key"
	if got := m.CredentialKey(ctx, "byok"); got != Fingerprint(srv, "alice-new-key") || got == alice {
		t.Fatalf("after the token changed: %q, want the new key's fingerprint", got)
	}
	// A reload: the same name, another config, worked out afresh.
	reloaded := *srv
	reloaded.Auth = &config.Auth{Type: config.AuthUserAPIKey, HeaderName: "X-Other-Key"}
	sv := &server{name: "byok", srv: &reloaded, byCaller: true}
	if got, _ := callerFingerprint(ctx, sv); got != Fingerprint(&reloaded, "alice-new-key") || got == Fingerprint(srv, "alice-new-key") {
		t.Fatalf("after a reload: %q, want the reloaded config's fingerprint", got)
	}
	// The memo stays bounded whatever a long-lived context goes through.
	for i := range 3 * maxFingerprintMemo {
		tok = fmt.Sprint("key-", i)
		callerFingerprint(ctx, sv)
	}
	if n := len(ct.fps); n > maxFingerprintMemo {
		t.Fatalf("memo holds %d fingerprints, the bound is %d", n, maxFingerprintMemo)
	}
}
