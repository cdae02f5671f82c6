package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

func TestClosest(t *testing.T) {
	names := []string{"serve", "servers", "stdio", "keys", "doctor", "connections", "credentials"}
	for in, want := range map[string]string{
		"sevre": "serve", "servrs": "servers", "key": "keys", "doctr": "doctor", "KEYS": "keys",
		"conections": "connections", "credentail": "credentials",
		"frobnicate": "", "x": "", "zz": "", "": "",
	} {
		if got := closest(in, names); got != want {
			t.Errorf("closest(%q) = %q, want %q", in, got, want)
		}
	}
}

// Against a real gateway with the notes server: a mistyped server or
// tool in keys create's --servers, --tools and --deny-tools, or in the
// --server filter of audit and connections list, is refused before
// anything is sent, with the right name suggested; a filter naming a
// server that is like none (perhaps since removed) is the gateway's to
// answer.
func TestUnknownNamesSuggested(t *testing.T) {
	clearAdminEnv(t)
	_, notes := buildBinary(t)
	const master = "master-key-0123456789"
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Auth: &config.CallerAuth{MasterKey: master},
		Servers: map[string]*config.Server{
			"notes": {Name: "notes", Transport: config.TransportStdio, Command: notes, Timeout: 10 * time.Second},
		}}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.close(context.Background())
	hs := httptest.NewServer(stk.handler)
	defer hs.Close()
	t.Setenv("MCPGATE_URL", hs.URL)
	t.Setenv("MCPGATE_MASTER_KEY", master)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "create", "--alias", "a", "--servers", "nots"}, `--servers: no server "nots" (did you mean "notes"?)`},
		{[]string{"keys", "create", "--alias", "a", "--tools", "notes=add_nte"}, `--tools: no tool of notes "add_nte" (did you mean "add_note"?)`},
		{[]string{"keys", "create", "--alias", "a", "--tools", "notes=add_note,lst_notes"}, `(did you mean "list_notes"?)`},
		{[]string{"keys", "create", "--alias", "a", "--deny-tools", "note=add_note"}, `--deny-tools: no server "note" (did you mean "notes"?)`},
		{[]string{"keys", "create", "--alias", "a", "--tools", "notes=frobnicate"}, `--tools: no tool of notes "frobnicate"`},
		{[]string{"audit", "--server", "Notes"}, `--server: no server "Notes" (did you mean "notes"?)`},
		{[]string{"audit", "--server", "notes", "--tool", "add_nots"}, `--tool: no tool of notes "add_nots" (did you mean "add_note"?)`},
		{[]string{"connections", "list", "--server", "noets"}, `(did you mean "notes"?)`},
	} {
		code, _, stderr := cli(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	// What is right, or like nothing known, goes through.
	if code, stdout, stderr := cli(t, "keys", "create", "--alias", "ok", "--servers", "notes", "--tools", "notes=add_note,list_notes"); code != 0 || !strings.HasPrefix(stdout, "mcpg") {
		t.Errorf("a right key: exit %d, %q %q", code, stdout, stderr)
	}
	if code, _, stderr := cli(t, "audit", "--server", "retired-long-ago"); code != 0 {
		t.Errorf("a filter on a server like none: exit %d, %q", code, stderr)
	}
}
