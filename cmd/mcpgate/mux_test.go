package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/admin"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/metrics"
)

// The one router mounts, in one list, every path the binary serves: the
// gateway's (probes, metadata, connect pages, the MCP routes at "/"), the
// admin API and its /me aliases, the console and the authorization server.
func TestMuxPatterns(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", PublicURL: "https://gw.example", ToolNameSeparator: config.DefaultSeparator}
	g := gateway.New(gateway.Options{Config: cfg, Metrics: metrics.New(), MetricsOnMain: true, AdminPath: admin.Prefix})
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	var got []string
	for _, rt := range routes(g, mounts{admin: ok, console: ok, authServer: ok, publicURL: cfg.PublicURL}) {
		got = append(got, rt.Pattern)
	}
	want := []string{
		"/healthz", "/readyz", "/enabled", "/metrics",
		"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/",
		"/oauth/client-metadata.json",
		"/oauth/connect/",
		"/",
		"/admin/v1/", "/me/credentials", "/me/credentials/", "/me/connections", "/me/connections/",
		"/ui", "/ui/",
		"/oauth/", "/oauth/connect", "/oauth/connect/{$}",
		"/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server/",
		"/.well-known/openid-configuration", "/.well-known/openid-configuration/",
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("patterns (-got +want):\n%s", diff)
	}
	// Without metrics on the main listener /metrics is an MCP path like
	// any other, and no https public_url means no client metadata.
	g2 := gateway.New(gateway.Options{Config: &config.Config{Listen: "127.0.0.1:0"}, Metrics: metrics.New()})
	for _, rt := range routes(g2, mounts{admin: ok}) {
		if rt.Pattern == "/metrics" || strings.Contains(rt.Pattern, "client-metadata") {
			t.Errorf("mounted %s", rt.Pattern)
		}
	}
}

// Which handler answers which path: the most specific pattern, the
// gateway's gates before each (the Host guard on loopback), and no
// redirect for a subtree's root without its slash.
func TestMuxDispatch(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", ToolNameSeparator: config.DefaultSeparator}
	g := gateway.New(gateway.Options{Config: cfg, AdminPath: admin.Prefix})
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, name+" "+r.URL.Path+" "+r.Host)
		})
	}
	h := newMux(g, mounts{admin: named("admin"), console: named("console"), authServer: named("as")})
	for _, tc := range []struct {
		path, host string
		status     int
		body       string // prefix
	}{
		{"/healthz", "evil.example", 200, `{"status":"ok"}`},
		{"/admin/v1/keys", "localhost", 200, "admin /admin/v1/keys"},
		{"/admin/v1/keys", "evil.example", 403, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Host header"}}`},
		{"/me/connections/x", "localhost", 200, "admin /admin/v1/me/connections/x"},
		{"/ui/", "localhost", 200, "console /ui/"},
		{"/ui", "localhost", 200, "console /ui"},
		{"/oauth/token", "localhost:9999", 200, "as /oauth/token localhost:9999"},
		{"/oauth/connect", "localhost", 200, "as /oauth/connect"},
		{"/oauth/connect/", "localhost", 200, "as /oauth/connect/"},
		{"/.well-known/openid-configuration", "localhost", 200, "as "},
		{"/oauth", "localhost", 404, "404 page not found"},
		{"/admin/v1", "localhost", 404, "404 page not found"},
		{"/nope", "localhost", 404, "404 page not found"},
		// Unclean paths are no redirect and reach no other mount: the
		// MCP routes answer them 404, as the gateway always did.
		{"//admin/v1/keys", "localhost", 404, "404 page not found"},
		{"/mcp/../admin/v1/keys", "localhost", 404, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Unknown MCP server \"../admin\""`},
		{"/ui/./x", "localhost", 404, "404 page not found"},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://"+tc.host+tc.path, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status || !strings.HasPrefix(w.Body.String(), tc.body) {
			t.Errorf("%s on %s: %d %q, want %d %q", tc.path, tc.host, w.Code, w.Body.String(), tc.status, tc.body)
		}
	}
}

// A browser opening the gateway's root is sent to the console; every MCP
// request on "/" (POSTs, a GET for the event stream, a GET carrying a
// session or protocol version) gets exactly the answer it got without
// the console mounted, and without a console nothing is redirected.
func TestMuxBrowserToConsole(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", ToolNameSeparator: config.DefaultSeparator}
	g := gateway.New(gateway.Options{Config: cfg, AdminPath: admin.Prefix})
	t.Cleanup(func() { g.Close(context.Background()) })
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "console") })
	with := newMux(g, mounts{admin: ok, console: ok})
	without := newMux(g, mounts{admin: ok})
	const browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	do := func(h http.Handler, method, path, accept string, hdr map[string]string, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://localhost"+path, strings.NewReader(body))
		r.RemoteAddr = "127.0.0.1:40000"
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if w := do(with, method, "/", browser, nil, ""); w.Code != http.StatusFound || w.Header().Get("Location") != "ui/" {
			t.Errorf("%s / from a browser: %d %q, want 302 to ui/", method, w.Code, w.Header().Get("Location"))
		}
	}
	if w := do(without, http.MethodGet, "/", browser, nil, ""); w.Code == http.StatusFound {
		t.Errorf("without a console / redirected to %q", w.Header().Get("Location"))
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		name, method, path, accept string
		hdr                        map[string]string
		body                       string
	}{
		{"initialize", http.MethodPost, "/", "application/json, text/event-stream", nil, initialize},
		{"POST accepting html", http.MethodPost, "/", "text/html, application/json, text/event-stream", nil, initialize},
		{"event stream", http.MethodGet, "/", "text/event-stream", nil, ""},
		{"html and event stream", http.MethodGet, "/", "text/html, text/event-stream", nil, ""},
		{"session", http.MethodGet, "/", browser, map[string]string{"Mcp-Session-Id": "abc"}, ""},
		{"protocol version", http.MethodGet, "/", browser, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, ""},
		{"other path", http.MethodGet, "/mcp", browser, nil, ""},
		{"no accept", http.MethodGet, "/", "", nil, ""},
	} {
		got, want := do(with, tc.method, tc.path, tc.accept, tc.hdr, tc.body), do(without, tc.method, tc.path, tc.accept, tc.hdr, tc.body)
		if got.Code == http.StatusFound || got.Code != want.Code || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
			t.Errorf("%s: %d %q with the console, %d %q without", tc.name, got.Code, got.Header().Get("Content-Type"), want.Code, want.Header().Get("Content-Type"))
		}
		if tc.method == http.MethodPost && (got.Body.String() != want.Body.String() || !strings.HasPrefix(got.Body.String(), `{"jsonrpc":"2.0","id":1,`)) {
			t.Errorf("%s: %.200s with the console, %.200s without, want the gateway's JSON-RPC answer", tc.name, got.Body, want.Body)
		}
	}
}
