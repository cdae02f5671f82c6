package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/clientconf"
	"github.com/mcpgate/mcpgate/internal/config"
)

var updateImport = flag.Bool("update-import", false, "rewrite testdata/import/*/want.json from the current output")

// secretMark is in every secret value of testdata/import (and in no other
// value): no output of import may contain it.
const secretMark = "s3cr3t"

// importCase is one example file of testdata/import, written from the
// client's public documentation.
type importCase struct {
	dir, file string // file relative to testdata/import/<dir>
	format    clientconf.Format
}

var importCases = []importCase{
	{"claude-desktop", "claude_desktop_config.json", clientconf.ClaudeDesktop},
	{"claude-code", "project/.mcp.json", clientconf.ClaudeCode},
	{"claude-code-user", "../claude-code/home/.claude.json", clientconf.ClaudeCode},
	{"cursor", ".cursor/mcp.json", clientconf.Cursor},
	{"vscode", ".vscode/mcp.json", clientconf.VSCode},
	{"windsurf", "mcp_config.json", clientconf.Windsurf},
}

// importGolden is what a want.json holds: the servers as the gateway
// parses them (references shown as <NAME>, paths under testdata as
// <testdata>), the variables to set and the renames.
type importGolden struct {
	Servers   map[string]goldenServer `json:"servers"`
	Variables []clientconf.Var        `json:"variables"`
	Renamed   []clientconf.Rename     `json:"renamed"`
}

type goldenServer struct {
	Transport string            `json:"transport"`
	Command   string            `json:"command,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	URL       string            `json:"url,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Auth      *goldenAuth       `json:"auth,omitempty"`
}

type goldenAuth struct {
	Type  string `json:"type"`
	Value string `json:"value,omitempty"`
}

// runCmd runs the CLI in-process.
func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestImportClients imports each client's example file: the written
// config parses as the golden servers, the variables and renames are the
// golden ones, the printed client entry is that client's format, and no
// output (text, --json, --dry-run, the YAML) holds a secret value.
func TestImportClients(t *testing.T) {
	testdata, err := filepath.Abs("testdata/import")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range importCases {
		t.Run(tc.dir, func(t *testing.T) {
			src := filepath.Join(testdata, tc.dir, tc.file)
			out := filepath.Join(t.TempDir(), "mcpgate.yaml")
			code, jsonOut, stderr := runCmd("import", src, "--out", out, "--json")
			if code != 0 {
				t.Fatalf("import --json: exit %d: %s", code, stderr)
			}
			var rep importReport
			if err := json.Unmarshal([]byte(jsonOut), &rep); err != nil {
				t.Fatalf("--json: %v\n%s", err, jsonOut)
			}
			if rep.Format != string(tc.format) || !rep.Written {
				t.Errorf("format %q written %v; want %q, true", rep.Format, rep.Written, tc.format)
			}
			written, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			// The text and dry-run outputs, into a second file.
			out2 := filepath.Join(t.TempDir(), "mcpgate.yaml")
			_, text, textErr := runCmd("import", "--from", string(tc.format), src, "--out", out2)
			_, dry, dryErr := runCmd("import", src, "--dry-run", "--out", filepath.Join(t.TempDir(), "never.yaml"))
			for name, s := range map[string]string{"json": jsonOut, "stderr": stderr, "yaml": string(written), "text": text + textErr, "dry-run": dry + dryErr} {
				if strings.Contains(s, secretMark) {
					t.Errorf("%s output holds a secret value:\n%s", name, s)
				}
			}
			if !strings.Contains(dry, "dry run, nothing written") || !strings.Contains(dry, "servers:") || !strings.Contains(dry, `"mcpgate"`) {
				t.Errorf("dry run shows neither the servers nor the client entry:\n%s", dry)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(out2), "never.yaml")); err == nil {
				t.Error("--dry-run wrote a file")
			}
			for _, v := range rep.Variables {
				if !strings.Contains(text, v.Name) {
					t.Errorf("text output does not list variable %s", v.Name)
				}
			}

			got := importGolden{Servers: goldenServers(t, written, testdata), Variables: rep.Variables, Renamed: rep.Renamed}
			for i := range got.Variables {
				got.Variables[i].Source = strings.ReplaceAll(got.Variables[i].Source, testdata, "<testdata>")
			}
			wantPath := filepath.Join(testdata, tc.dir, "want.json")
			if tc.dir == "claude-code-user" {
				wantPath = filepath.Join(testdata, "claude-code", "home", "want.json")
			} else if tc.dir == "claude-code" {
				wantPath = filepath.Join(testdata, "claude-code", "project", "want.json")
			}
			if *updateImport {
				var b bytes.Buffer
				enc := json.NewEncoder(&b)
				enc.SetEscapeHTML(false)
				enc.SetIndent("", "  ")
				if err := enc.Encode(got); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(wantPath, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var want importGolden
			b, err := os.ReadFile(wantPath)
			if err != nil {
				t.Fatalf("%v (run with -update-import to create it)", err)
			}
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("import of %s (-got +want)\n%s", tc.file, diff)
			}

			// The client entry: this client's file, one entry named mcpgate
			// at the default gateway URL with the key header.
			f, err := clientconf.Parse(rep.Client, tc.format)
			if err != nil {
				t.Fatalf("client entry: %v\n%s", err, rep.Client)
			}
			if len(f.Servers) != 1 || f.Servers[0].Name != "mcpgate" {
				t.Fatalf("client entry servers = %+v", f.Servers)
			}
			e := f.Servers[0]
			if tc.format == clientconf.ClaudeDesktop {
				if e.Command != "npx" || !slices.Contains(e.Args, "http://127.0.0.1:4000/mcp") || !slices.Contains(e.Args, "X-Mcpgate-Api-Key:${MCPGATE_API_KEY}") {
					t.Errorf("claude desktop entry = %+v", e)
				}
			} else if e.URL != "http://127.0.0.1:4000/mcp" || !strings.Contains(e.Headers["X-Mcpgate-Api-Key"], "MCPGATE_API_KEY") && !strings.Contains(e.Headers["X-Mcpgate-Api-Key"], "${input:") {
				t.Errorf("entry = %+v", e)
			}
		})
	}
}

// goldenServers parses a written config the way the gateway does, with
// every variable shown as <NAME>.
func goldenServers(t *testing.T, data []byte, testdata string) map[string]goldenServer {
	t.Helper()
	dir := t.TempDir()
	cfg, err := config.Parse(data, dir, func(name string) (string, bool) { return "<" + name + ">", true })
	if err != nil {
		t.Fatalf("the written config does not parse: %v\n%s", err, data)
	}
	rel := func(s string) string { return strings.ReplaceAll(s, testdata, "<testdata>") }
	out := map[string]goldenServer{}
	for name, s := range cfg.Servers {
		g := goldenServer{Transport: s.Transport, Command: rel(s.Command), URL: s.URL, Headers: s.Headers, Env: map[string]string{}}
		for _, a := range s.Args {
			g.Args = append(g.Args, rel(a))
		}
		for k, v := range s.Env {
			g.Env[k] = rel(v)
		}
		if len(g.Env) == 0 {
			g.Env = nil
		}
		if s.Cwd != dir {
			g.Cwd = rel(s.Cwd)
		}
		if s.Auth != nil {
			g.Auth = &goldenAuth{Type: s.Auth.Type, Value: s.Auth.Value}
		}
		out[name] = g
	}
	return out
}

// An existing --out keeps its other content; a name it has already is
// refused (nothing written) unless --force replaces that server.
func TestImportMerge(t *testing.T) {
	dir := t.TempDir()
	src, _ := filepath.Abs("testdata/import/windsurf/mcp_config.json")
	orig := "# my gateway\nlisten: 127.0.0.1:4100\nservers:\n  github: # mine\n    transport: http\n    url: http://127.0.0.1:9/mcp\n  calc:\n    transport: http\n    url: http://127.0.0.1:4100/mcp\n"
	out := writeFile(t, dir, "gw.yaml", orig)
	code, stdout, stderr := runCmd("import", src, "--out", out)
	if code != 1 || !strings.Contains(stderr, "github") || !strings.Contains(stderr, "--force") {
		t.Errorf("collision: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if b, _ := os.ReadFile(out); string(b) != orig {
		t.Errorf("a refused import changed the file:\n%s", b)
	}
	code, stdout, stderr = runCmd("import", src, "--out", out, "--force")
	if code != 0 {
		t.Fatalf("--force: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "replaced: github") {
		t.Errorf("--force does not report the replaced server: %s", stdout)
	}
	b, _ := os.ReadFile(out)
	cfg, err := config.Parse(b, dir, func(n string) (string, bool) { return "x", true })
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ServerNames(); !slices.Equal(got, []string{"calc", "figma", "github", "remote-sse"}) {
		t.Errorf("servers = %v", got)
	}
	if cfg.Listen != "127.0.0.1:4100" || cfg.Servers["github"].Transport != "stdio" || !strings.Contains(string(b), "# my gateway") {
		t.Errorf("merged file lost content:\n%s", b)
	}
}

// Bad input fails clearly and writes nothing: an unknown shape, a result
// config validation refuses (named by field), usage mistakes.
func TestImportErrors(t *testing.T) {
	dir := t.TempDir()
	unknown := writeFile(t, dir, "tools.json", `{"tools": []}`)
	badURL := writeFile(t, dir, "cursor.json", `{"mcpServers": {"ftp": {"url": "ftp://files.example.com/mcp"}}}`)
	badType := writeFile(t, dir, "code.json", `{"mcpServers": {"x": {"type": "websocket", "url": "wss://x"}}}`)
	out := filepath.Join(dir, "out.yaml")
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"import", unknown, "--out", out}, 1, "not an MCP client configuration"},
		{[]string{"import", badURL, "--from", "cursor", "--out", out}, 1, "servers.ftp.url"},
		{[]string{"import", badType, "--out", out}, 1, `unknown type "websocket"`},
		{[]string{"import", "--out", out}, 2, "want one FILE argument"},
		{[]string{"import", unknown, "--from", "emacs"}, 2, `unknown client "emacs"`},
		{[]string{"import", unknown, "--gateway-url", "ftp://x"}, 2, "--gateway-url"},
		{[]string{"connect", "notepad"}, 2, `unknown client "notepad"`},
		{[]string{"connect", "cursor", "--url", "http://gw/mcp", "--route", "notes"}, 2, "--url already has a path"},
	} {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(tc.args...)
			if code != tc.wantCode || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tc.wantCode, stdout, stderr, tc.want)
			}
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed import wrote the config")
	}
}
