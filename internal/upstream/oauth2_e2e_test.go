package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// idp is a real local token endpoint minting tok-1, tok-2, ...
type idp struct {
	srv   *httptest.Server
	mints atomic.Int64
}

func newIdP(t *testing.T) *idp {
	p := &idp{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, secret, ok := r.BasicAuth(); !ok || id != "gw" || secret != "s3cret" || r.FormValue("grant_type") != "client_credentials" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		n := p.mints.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":3600}`, n)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// An upstream that stops accepting the minted token (revoked, rotated)
// answers 401: the gateway mints a fresh token once and retries the same
// request, and the caller sees the result (C3.6).
func TestOAuth2RefreshOn401(t *testing.T) {
	p := newIdP(t)
	f := newStreamableFake(t)
	f.jsonReplies = true
	var mu sync.Mutex
	accepted := map[string]bool{"Bearer tok-1": true}
	var slotSeen []string
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		mu.Lock()
		defer mu.Unlock()
		v := r.Header.Get("Esb-Oauth")
		slotSeen = append(slotSeen, v)
		if !accepted[v] || r.Header.Get("Authorization") != "" {
			w.WriteHeader(http.StatusUnauthorized)
			return true
		}
		return false
	}
	srv := f.server("up")
	srv.Auth = &config.Auth{Type: config.AuthOAuth2, TokenURL: p.srv.URL + "/token", ClientID: "gw", ClientSecret: "s3cret", HeaderName: "esb-oauth"}
	m := managerFor(t, srv)
	if got, err := callEcho(context.Background(), m, "up", "one"); err != nil || got != "one" {
		t.Fatalf("first call: %q %v", got, err)
	}
	mu.Lock()
	accepted = map[string]bool{"Bearer tok-2": true} // tok-1 revoked
	mu.Unlock()
	if got, err := callEcho(context.Background(), m, "up", "two"); err != nil || got != "two" {
		t.Fatalf("call after revocation: %q %v", got, err)
	}
	if n := p.mints.Load(); n != 2 {
		t.Errorf("%d tokens minted, want 2", n)
	}
	if n := countMethod(f.seen(), mcpwire.MethodInitialize); n != 1 {
		t.Errorf("%d initialize requests: a refreshed token must keep the session", n)
	}
	// Every request carried the token in the configured slot.
	mu.Lock()
	for _, v := range slotSeen {
		if v != "Bearer tok-1" && v != "Bearer tok-2" {
			t.Errorf("request with slot value %q", v)
		}
	}
	mu.Unlock()

	// An upstream that refuses every token: one refresh, one retry, then
	// the 401 reaches the caller as an auth fault.
	mu.Lock()
	accepted = map[string]bool{}
	mu.Unlock()
	before := p.mints.Load()
	_, err := callEcho(context.Background(), m, "up", "three")
	var ue *Error
	if !errors.As(err, &ue) || ue.Kind != KindAuth || ue.Status != http.StatusUnauthorized {
		t.Fatalf("err = %v, want an auth error with status 401", err)
	}
	if f := Classify(err); f.Class != FaultAuth || f.Status != http.StatusUnauthorized {
		t.Errorf("fault %+v", f)
	}
	if n := p.mints.Load() - before; n != 1 {
		t.Errorf("%d tokens minted for a refused call, want exactly 1 refresh", n)
	}
}

// A token endpoint that refuses the client fails the connection with an
// auth fault that names the OAuth error and not the secret.
func TestOAuth2BadClient(t *testing.T) {
	p := newIdP(t)
	f := newStreamableFake(t)
	srv := f.server("up")
	srv.Auth = &config.Auth{Type: config.AuthOAuth2, TokenURL: p.srv.URL + "/token", ClientID: "gw", ClientSecret: "wrong-secret-value"}
	_, err := Connect(context.Background(), Options{Server: srv})
	if Classify(err).Class != FaultAuth {
		t.Fatalf("err = %v, want an auth fault", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "invalid_client") || strings.Contains(msg, "wrong-secret-value") {
		t.Errorf("message %q", msg)
	}
	if n := len(f.seen()); n != 0 {
		t.Errorf("the MCP server got %d requests without a token", n)
	}
}
