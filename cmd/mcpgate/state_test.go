package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
)

// build makes the backend state: names, closes it with the rest, and an
// unreachable Redis is a warning, not a failure to start.
func TestBuildState(t *testing.T) {
	srv := redistest.New(t)
	down := "unix://:s3cr3t@" + filepath.Join(t.TempDir(), "nothing.sock")
	for _, tc := range []struct {
		name   string
		state  config.State
		driver string
		logs   string
	}{
		{"default", config.State{}, "memory", ""},
		{"redis", config.State{Driver: config.StateRedis, URL: srv.URL()}, "redis", `msg="shared state" driver=redis`},
		{"redis down", config.State{Driver: config.StateRedis, URL: down}, "redis", "shared state unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__", State: tc.state}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			stk, err := build(t.Context(), cfg, slog.New(slog.NewTextHandler(&logs, nil)), cfg.Listen)
			if err != nil {
				t.Fatal(err)
			}
			if got := stk.state.Name(); got != tc.driver {
				t.Errorf("driver %s, want %s", got, tc.driver)
			}
			if !strings.Contains(logs.String(), tc.logs) || strings.Contains(logs.String(), "s3cr3t") {
				t.Errorf("logs %q, want %q and no password", logs.String(), tc.logs)
			}
			if err := stk.close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := stk.state.Ping(context.Background()); err == nil {
				t.Error("the state backend still answers after close")
			}
		})
	}
}

// A URL the config accepts but go-redis does not (an unknown query option)
// fails the start, naming the field, never the URL.
func TestBuildStateBadURL(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__",
		State: config.State{Driver: config.StateRedis, URL: "redis://:s3cr3t@localhost:6379/0?no_such_option=1"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := build(ctx, cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err == nil || !strings.Contains(err.Error(), "state.url") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("build: %v, want a state.url error without the URL", err)
	}
}
