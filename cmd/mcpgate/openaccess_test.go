package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
