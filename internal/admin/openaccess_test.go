package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// An open API (no auth configured, loopback listener) lets anonymous
// callers administer only from this host's loopback: a request whose peer
// is any other address gets the bare 403, and a closed API never opens.
func TestOpenAccessIsLoopbackOnly(t *testing.T) {
	st, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := &config.Config{Listen: "127.0.0.1:0", ToolNameSeparator: "__"}
	g := gateway.New(gateway.Options{Config: cfg, Terminations: st})
	t.Cleanup(func() { g.Close(context.Background()) })
	anonymous := func(*http.Request) (*callers.Caller, *callers.Failure) { return &callers.Caller{Anonymous: true}, nil }
	for _, tc := range []struct {
		open    bool
		remote  string
		want    int
		forward string // a Forwarded or X-Forwarded-For header
	}{
		{true, "127.0.0.1:5555", 200, ""},
		{true, "[::1]:5555", 200, ""},
		{true, "[::ffff:127.0.0.1]:5555", 200, ""},
		{true, "192.0.2.7:5555", 403, ""},
		{true, "[2001:db8::1]:5555", 403, ""},
		{true, "", 403, ""},
		{false, "127.0.0.1:5555", 403, ""},
		// A reverse proxy on this host relays for someone else: the
		// loopback peer says nothing of the client.
		{true, "127.0.0.1:5555", 403, "X-Forwarded-For: 203.0.113.9"},
		{true, "127.0.0.1:5555", 403, "Forwarded: for=203.0.113.9"},
		{true, "127.0.0.1:5555", 403, "X-Real-Ip: 203.0.113.9"},
	} {
		api := New(Options{Gateway: g, Store: st, Config: cfg, Authenticate: anonymous, OpenAccess: tc.open})
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+Prefix+"/servers", nil)
		r.RemoteAddr = tc.remote
		if k, v, ok := strings.Cut(tc.forward, ": "); ok {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("open %v, peer %q %s: %d %s, want %d", tc.open, tc.remote, tc.forward, w.Code, w.Body, tc.want)
		}
	}
}
