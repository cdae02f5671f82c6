package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/clientconf"
)

// runConnect runs connect in-process at a fixed time (the backup's name),
// with the exit codes of runContext.
func runConnect(at time.Time, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	c := &connectCommand{stdout: &out, stderr: &errb, now: func() time.Time { return at }}
	if err := c.Run(context.Background(), args); err != nil {
		errb.WriteString(err.Error())
		var ue *usageError
		if errors.As(err, &ue) {
			return 2, out.String(), errb.String()
		}
		return 1, out.String(), errb.String()
	}
	return 0, out.String(), errb.String()
}

// connect --write on a client file with other content: a backup holds the
// old bytes, every other key and server is kept, the entry is added, a
// second run changes nothing, and a changed route replaces the entry in
// place.
func TestConnectWrite(t *testing.T) {
	dir := t.TempDir()
	orig := `{
  "theme": "dark",
  "mcpServers": {
    "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "x"}},
    "docs": {"url": "https://docs.example.com/mcp"}
  },
  "experimental": {"flag": true}
}`
	path := writeFile(t, dir, "mcp.json", orig)
	os.Chmod(path, 0o640)
	at := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	code, stdout, stderr := runConnect(at, "cursor", "--write", "--file", path, "--url", "http://127.0.0.1:4000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	backup := path + ".bak-20261201T200000Z"
	if b, err := os.ReadFile(backup); err != nil || string(b) != orig {
		t.Fatalf("backup %s: %v\n%s", backup, err, b)
	}
	if !strings.Contains(stdout, backup) {
		t.Errorf("stdout does not name the backup: %s", stdout)
	}
	after, _ := os.ReadFile(path)
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want the file's own 0640", st.Mode().Perm())
	}
	var got, want map[string]any
	json.Unmarshal(after, &got)
	json.Unmarshal([]byte(orig), &want)
	want["mcpServers"].(map[string]any)["mcpgate"] = map[string]any{
		"url": "http://127.0.0.1:4000/mcp", "headers": map[string]any{"X-Mcpgate-Api-Key": "${env:MCPGATE_API_KEY}"},
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("written file (-got +want)\n%s", diff)
	}
	if i, j := bytes.Index(after, []byte(`"theme"`)), bytes.Index(after, []byte(`"experimental"`)); i < 0 || j < i {
		t.Errorf("key order not kept:\n%s", after)
	}

	// Idempotent: nothing written, no second backup.
	code, stdout, _ = runConnect(at.Add(time.Minute), "cursor", "--write", "--file", path, "--url", "http://127.0.0.1:4000")
	if again, _ := os.ReadFile(path); code != 0 || !bytes.Equal(again, after) || !strings.Contains(stdout, "already up to date") {
		t.Errorf("second run: exit %d, %s\n%s", code, stdout, again)
	}
	if backups, _ := filepath.Glob(path + ".bak-*"); len(backups) != 1 {
		t.Errorf("backups = %v, want one", backups)
	}

	// A new route replaces the entry, in place; the backup is the previous file.
	code, _, stderr = runConnect(at.Add(2*time.Minute), "cursor", "--write", "--file", path, "--route", "github", "--key", "${TEAM_KEY}")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	third, _ := os.ReadFile(path)
	f, err := clientconf.Parse(third, clientconf.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range f.Servers {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"github", "docs", "mcpgate"}) {
		t.Errorf("servers = %v", names)
	}
	if e := f.Servers[2]; e.URL != "http://127.0.0.1:4000/mcp/github" || e.Headers["X-Mcpgate-Api-Key"] != "${env:TEAM_KEY}" {
		t.Errorf("entry = %+v", e)
	}
	if b, _ := os.ReadFile(path + ".bak-20261201T200200Z"); !bytes.Equal(b, after) {
		t.Errorf("second backup is not the previous file")
	}
}

// Without --write the entry is printed in each client's format; a literal
// key is embedded only with a warning; a new file is created.
func TestConnectPrint(t *testing.T) {
	const key = "mcpg_literal-key-123"
	at := time.Now()
	for _, f := range clientconf.Formats {
		t.Run(string(f), func(t *testing.T) {
			code, stdout, stderr := runConnect(at, string(f), "--url", "https://gw.example.com", "--route", "/toolset/support/mcp")
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			file, err := clientconf.Parse([]byte(stdout), f)
			if err != nil || len(file.Servers) != 1 {
				t.Fatalf("%v\n%s", err, stdout)
			}
			if !strings.Contains(stdout, "https://gw.example.com/toolset/support/mcp") || strings.Contains(stdout, key) {
				t.Errorf("entry:\n%s", stdout)
			}
			_, stdout, stderr = runConnect(at, string(f), "--key", key)
			if !strings.Contains(stdout, key) || !strings.Contains(stderr, "holds the key itself") {
				t.Errorf("literal key: stdout %s, stderr %q", stdout, stderr)
			}
		})
	}
	// Claude Desktop speaks stdio only: the entry is the mcp-remote bridge,
	// --allow-http for a plain-http gateway beyond loopback.
	_, stdout, _ := runConnect(at, "claude-desktop", "--url", "http://gw.internal:4000")
	file, _ := clientconf.Parse([]byte(stdout), clientconf.ClaudeDesktop)
	if e := file.Servers[0]; e.Command != "npx" || !slices.Equal(e.Args, []string{"-y", "mcp-remote", "http://gw.internal:4000/mcp", "--header", "X-Mcpgate-Api-Key:${MCPGATE_API_KEY}", "--allow-http"}) {
		t.Errorf("claude desktop entry = %+v", e)
	}
	// --write to a file that does not exist yet creates it, no backup.
	path := filepath.Join(t.TempDir(), "sub", ".vscode", "mcp.json")
	if code, stdout, stderr := runConnect(at, "vscode", "--write", "--file", path); code != 0 || !strings.Contains(stdout, "created") {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	b, _ := os.ReadFile(path)
	var doc struct {
		Servers map[string]struct{ Headers map[string]string }
		Inputs  []struct {
			ID       string
			Password bool
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Servers["mcpgate"].Headers["X-Mcpgate-Api-Key"] != "${input:mcpgate-api-key}" || len(doc.Inputs) != 1 || !doc.Inputs[0].Password {
		t.Errorf("vscode file: %v\n%s", err, b)
	}
}

func TestConnectEndpointURL(t *testing.T) {
	for _, tc := range []struct{ base, route, want string }{
		{"http://127.0.0.1:4000", "", "http://127.0.0.1:4000/mcp"},
		{"http://127.0.0.1:4000/", "notes", "http://127.0.0.1:4000/mcp/notes"},
		{"https://gw.example.com", "notes,calc", "https://gw.example.com/mcp/notes,calc"},
		{"https://gw.example.com", "toolset/support", "https://gw.example.com/toolset/support/mcp"},
		{"https://gw.example.com", "/toolset/support/mcp", "https://gw.example.com/toolset/support/mcp"},
		{"https://gw.example.com/prefix/mcp", "", "https://gw.example.com/prefix/mcp"},
	} {
		if got, err := endpointURL(tc.base, tc.route); err != nil || got != tc.want {
			t.Errorf("endpointURL(%q, %q) = %q, %v; want %q", tc.base, tc.route, got, err, tc.want)
		}
	}
	for _, bad := range []string{"ftp://x", "gw:4000", ""} {
		if _, err := endpointURL(bad, ""); err == nil {
			t.Errorf("endpointURL(%q): no error", bad)
		}
	}
}
