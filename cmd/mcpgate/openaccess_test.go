package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
)

// The admin API (and so the console) opens without a key only where the
// gateway serves anonymously on a loopback listener (the quickstart):
// auth.anonymous on a wider listener serves MCP to anyone, but the admin
// API to no one without a key, even a request from loopback.
func TestAnonymousAdminOnlyOnLoopback(t *testing.T) {
	for _, tc := range []struct {
		listen    string
		anonymous bool
		want      int
	}{
		{"127.0.0.1:0", false, http.StatusOK},
		{"127.0.0.1:0", true, http.StatusOK},
		{"0.0.0.0:0", true, http.StatusForbidden},
		{"[::]:0", true, http.StatusForbidden},
	} {
		cfg := &config.Config{Listen: tc.listen, DataDir: t.TempDir(), ToolNameSeparator: config.DefaultSeparator}
		if tc.anonymous {
			cfg.Auth = &config.CallerAuth{Anonymous: true}
		}
		stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/admin/v1/servers", nil)
		r.RemoteAddr = "127.0.0.1:40000"
		w := httptest.NewRecorder()
		stk.handler.ServeHTTP(w, r)
		stk.close(context.Background())
		if w.Code != tc.want {
			t.Errorf("listen %s, anonymous %v: %d %s, want %d", tc.listen, tc.anonymous, w.Code, w.Body, tc.want)
		}
	}
}

// The open console's admin API against a hostile web page in the same
// person's browser: a cross-origin write (a "simple" request the browser
// sends without a preflight) and a rebound DNS name (Host is the page's)
// are refused by the Origin and Host guards, and no key is created.
func TestOpenAdminRefusesHostilePages(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: config.DefaultSeparator}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.close(context.Background())
	do := func(host, origin string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://"+host+"/admin/v1/keys", strings.NewReader(`{"alias":"from-a-page","admin":true}`))
		r.Header.Set("Content-Type", "text/plain")
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		r.RemoteAddr = "127.0.0.1:40000"
		w := httptest.NewRecorder()
		stk.handler.ServeHTTP(w, r)
		return w
	}
	for _, tc := range []struct{ host, origin string }{
		{"127.0.0.1", "http://evil.example"},
		{"127.0.0.1", "null"},
		{"evil.example", ""},
		{"evil.example", "http://evil.example"},
	} {
		if w := do(tc.host, tc.origin); w.Code != http.StatusForbidden && w.Code != http.StatusMisdirectedRequest && w.Code != http.StatusBadRequest {
			t.Errorf("Host %s, Origin %q: %d %s, want a refusal", tc.host, tc.origin, w.Code, w.Body)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/admin/v1/keys", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	w := httptest.NewRecorder()
	stk.handler.ServeHTTP(w, r)
	if w.Code != http.StatusOK || strings.Contains(w.Body.String(), "from-a-page") {
		t.Errorf("keys after the pages: %d %s, want none created", w.Code, w.Body)
	}
}
