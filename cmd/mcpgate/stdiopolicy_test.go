package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// Hole 13: the stdio front is a caller like any HTTP client. With keys
// required it refuses to start without one (a clear error, exit 1); with
// one it lists and calls what that key may on /mcp, a denied tool hidden
// even from the master key and its call refused like an unknown tool;
// every call is audited under the key, and the key's budget is charged
// (the second call of a one-call budget is refused with the budget's
// error). The note the first call wrote is untouched by the refused ones.
func TestStdioFrontActsAsItsKey(t *testing.T) {
	gw, notes := buildBinary(t)
	dir := t.TempDir()
	const (
		master = "master-key-0123456789abcdef"
		desk   = "desk-key-0123456789abcdefgh"
	)
	cfg := filepath.Join(dir, "gw.yaml")
	yaml := fmt.Sprintf(`data_dir: %s
auth:
  master_key: %s
  keys:
    - alias: desk
      key: %s
      budget: {amount: 1, period: day}
servers:
  notes:
    transport: stdio
    command: %s
    args: [-file, %s]
    tools:
      deny: [delete_note]
      costs: {"*": 1}
`, filepath.Join(dir, "data"), master, desk, notes, filepath.Join(dir, "notes.json"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("no key", func(t *testing.T) {
		cmd := exec.Command(gw, "stdio", "--config", cfg)
		cmd.Env = append(os.Environ(), "MCPGATE_KEY=")
		var stderr bytes.Buffer
		cmd.Stdin, cmd.Stderr = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`+"\n"), &stderr
		out, err := cmd.Output()
		const want = "mcpgate stdio: the stdio front's caller was refused: Unauthorized: this gateway requires an API key (auth is configured); start the stdio front with --key or MCPGATE_KEY"
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), want) || len(out) != 0 {
			t.Errorf("exit %v, stdout %q, stderr %s\nwant exit 1 and %q", err, out, stderr.String(), want)
		}
	})

	connect := func(t *testing.T, args []string, env ...string) *mcp.ClientSession {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		cmd := exec.Command(gw, append([]string{"stdio", "--config", cfg}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		client := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	call := func(cs *mcp.ClientSession, name string, args map[string]any) (string, bool, error) {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return "", false, err
		}
		return res.Content[0].(*mcp.TextContent).Text, res.IsError, nil
	}

	t.Run("a wrong key", func(t *testing.T) {
		cmd := exec.Command(gw, "stdio", "--config", cfg, "--key", "not-a-key-0123456789abcdef")
		var stderr bytes.Buffer
		cmd.Stdin, cmd.Stderr = strings.NewReader(""), &stderr
		const want = "mcpgate stdio: the stdio front's caller was refused: Unauthorized: the stdio front's API key is not valid (unknown, disabled or expired)"
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), want) {
			t.Errorf("exit %v, stderr %s\nwant exit 1 and %q", err, stderr.String(), want)
		}
	})

	t.Run("master key: policy hides the denied tool", func(t *testing.T) {
		cs := connect(t, nil, "MCPGATE_KEY="+master)
		defer cs.Close()
		tools, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range tools.Tools {
			names = append(names, tl.Name)
		}
		if slices.Contains(names, "notes__delete_note") || !slices.Contains(names, "notes__add_note") {
			t.Errorf("tools = %v; want notes__add_note and no notes__delete_note", names)
		}
		if _, _, err := call(cs, "notes__add_note", map[string]any{"title": "keep", "body": "mine"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := call(cs, "notes__delete_note", map[string]any{"title": "keep"}); err == nil || !strings.Contains(err.Error(), "Unknown tool: notes__delete_note") {
			t.Errorf("the denied tool's call: %v; want Unknown tool", err)
		}
	})

	t.Run("budgeted key from --key", func(t *testing.T) {
		cs := connect(t, []string{"--key", desk}, "MCPGATE_KEY="+master)
		defer cs.Close()
		if text, isErr, err := call(cs, "notes__get_note", map[string]any{"title": "keep"}); err != nil || isErr || !strings.Contains(text, "mine") {
			t.Fatalf("first call: %q %v %v", text, isErr, err)
		}
		_, _, err := call(cs, "notes__get_note", map[string]any{"title": "keep"})
		if err == nil || !strings.Contains(err.Error(), "Budget exceeded: key desk has spent 1 of its daily budget of 1; it renews at ") {
			t.Errorf("second call on a one-call budget: %v; want the budget's error", err)
		}
		if _, _, err := call(cs, "notes__delete_note", map[string]any{"title": "keep"}); err == nil || !strings.Contains(err.Error(), "Unknown tool") {
			t.Errorf("the denied tool for the key: %v", err)
		}
	})

	// The audit: one record per call, under its key: ok for the calls
	// that went upstream, refused for the spent budget, denied for the
	// hidden tool (docs/failures.md).
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	calls, _, err := st.ListToolCalls(context.Background(), store.ToolCallFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		got = append(got, c.KeyAlias+" "+c.Server+"/"+c.Tool+" "+c.Outcome+fmt.Sprintf(" cost=%g", c.Cost))
	}
	slices.Sort(got)
	want := []string{
		"desk /notes__delete_note denied cost=0",
		"desk notes/get_note ok cost=1",
		"desk notes/get_note refused cost=0",
		store.ActorMaster + " /notes__delete_note denied cost=0",
		store.ActorMaster + " notes/add_note ok cost=1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The first call's note is untouched by the refused calls.
	b, err := os.ReadFile(filepath.Join(dir, "notes.json"))
	if err != nil || !strings.Contains(string(b), "mine") {
		t.Errorf("the note: %s %v", b, err)
	}
}
