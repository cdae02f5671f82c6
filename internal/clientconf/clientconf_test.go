package clientconf

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/config"
)

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		want             Format
		wantErr          bool
	}{
		{"desktop by name", "x/claude_desktop_config.json", `{"mcpServers":{"a":{"command":"x"}}}`, ClaudeDesktop, false},
		{"windsurf by name", "mcp_config.json", `{"mcpServers":{}}`, Windsurf, false},
		{"windsurf by serverUrl", "any.json", `{"mcpServers":{"a":{"serverUrl":"https://x"}}}`, Windsurf, false},
		{"claude code project", "p/.mcp.json", `{"mcpServers":{}}`, ClaudeCode, false},
		{"claude code user file", "/home/u/.claude.json", `{"numStartups":1}`, ClaudeCode, false},
		{"claude code by projects", "state.json", `{"projects":{"/p":{"mcpServers":{}}}}`, ClaudeCode, false},
		{"claude code by type", "any.json", `{"mcpServers":{"a":{"type":"http","url":"https://x"}}}`, ClaudeCode, false},
		{"cursor by dir", "p/.cursor/mcp.json", `{"mcpServers":{}}`, Cursor, false},
		{"cursor by url", "any.json", `{"mcpServers":{"a":{"url":"https://x"}}}`, Cursor, false},
		{"vscode by shape, with comments", "mcp.json", "{\n// hi\n\"servers\": {},}\n", VSCode, false},
		{"vscode settings.json", "settings.json", `{"editor.fontSize": 14, "mcp": {"servers": {"a": {"type": "stdio", "command": "x"}}}}`, VSCode, false},
		{"stdio only", "any.json", `{"mcpServers":{"a":{"command":"x"}}}`, ClaudeDesktop, false},
		{"unknown shape", "any.json", `{"tools":[]}`, "", true},
		{"not an object", "any.json", `[1,2]`, "", true},
		{"not json", "any.json", `servers: {}`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Detect(tc.path, []byte(tc.body))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("Detect = %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
			if tc.wantErr && tc.name == "unknown shape" && !errors.Is(err, ErrUnknownShape) {
				t.Errorf("err = %v, want ErrUnknownShape", err)
			}
		})
	}
}

func TestStripJSONC(t *testing.T) {
	in := "{\n  // a comment with \"quotes\"\n  \"a\": \"http://x/*not a comment*/\", /* block\n */ \"b\": [1, 2,],\n}\n"
	got, err := StripJSONC([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Errorf("length %d, want %d (offsets kept)", len(got), len(in))
	}
	var v map[string]any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("%v in %q", err, got)
	}
	if diff := cmp.Diff(v, map[string]any{"a": "http://x/*not a comment*/", "b": []any{1.0, 2.0}}); diff != "" {
		t.Errorf("(-got +want)\n%s", diff)
	}
	for _, bad := range []string{`{"a": "open`, `{/* never closed`} {
		if _, err := StripJSONC([]byte(bad)); err == nil {
			t.Errorf("StripJSONC(%q): no error", bad)
		}
	}
}

func TestNormaliseName(t *testing.T) {
	for in, want := range map[string]string{
		"github":        "github",
		"My Server":     "my-server",
		"Perplexity":    "perplexity",
		"a__b":          "a-b",
		"a___b":         "a-_b",
		"_x":            "x",
		"--x--":         "x",
		"!!!":           "server",
		"weather.local": "weather-local",
		"über":          "ber",
		"notes_":        "notes",
		"a_":            "a",
	} {
		got := NormaliseName(in, "__")
		if got != want {
			t.Errorf("NormaliseName(%q) = %q, want %q", in, got, want)
		}
		if !validName(got, "__") {
			t.Errorf("NormaliseName(%q) = %q, not a valid name", in, got)
		}
	}
	if got := NormaliseName("a-b_c", "-"); strings.Contains(got, "-") {
		t.Errorf("with separator -: %q", got)
	}
	if got := NormaliseName("a_b_", "_."); !validName(got, "_.") {
		t.Errorf("with separator _.: %q, not a valid name", got)
	}
}

// validName is mcpgate's server name rule, checked through config.
func validName(name, sep string) bool {
	c := &config.Config{ToolNameSeparator: sep, Servers: map[string]*config.Server{name: {Transport: config.TransportHTTP, URL: "http://x"}}}
	return c.Validate() == nil
}

func TestSecretDetection(t *testing.T) {
	for _, n := range []string{"Authorization", "X-API-Key", "GITHUB_TOKEN", "client_secret", "DB_PASSWORD", "api-key", "GITHUB_PAT"} {
		if !SecretName(n) {
			t.Errorf("SecretName(%q) = false", n)
		}
	}
	for _, n := range []string{"LOG_LEVEL", "REGION", "X-Team", "PATH"} {
		if SecretName(n) {
			t.Errorf("SecretName(%q) = true", n)
		}
	}
	for _, v := range []string{"Bearer abc", "bearer abc", "Basic dXNlcjpwYXNz", "postgres://u:p@h/db", "ghp_0123456789abcdef", "sk-proj-0123456789"} {
		if !SecretValue(v) {
			t.Errorf("SecretValue(%q) = false", v)
		}
	}
	for _, v := range []string{"debug", "https://example.com/mcp", "sk-", "Bearer"} {
		if SecretValue(v) {
			t.Errorf("SecretValue(%q) = true", v)
		}
	}
}

func TestMergeEntryKeepsOtherKeys(t *testing.T) {
	existing := []byte(`{"globalShortcut": "Ctrl+Space", "mcpServers": {"b": {"command": "b"}, "mcpgate": {"command": "old"}, "a": {"command": "a"}}, "zeta": [1]}`)
	tgt := Target{URL: "http://gw:4000/mcp"}
	out, lost, err := MergeEntry(existing, ClaudeCode, tgt)
	if err != nil || lost {
		t.Fatalf("MergeEntry: %v (lost comments %v)", err, lost)
	}
	top, _ := orderedObject(out)
	var keys []string
	for _, m := range top {
		keys = append(keys, m.key)
	}
	if diff := cmp.Diff(keys, []string{"globalShortcut", "mcpServers", "zeta"}); diff != "" {
		t.Errorf("top keys (-got +want)\n%s", diff)
	}
	servers, _ := orderedObject(top[1].value)
	keys = nil
	for _, m := range servers {
		keys = append(keys, m.key)
	}
	if diff := cmp.Diff(keys, []string{"b", "mcpgate", "a"}); diff != "" {
		t.Errorf("servers (-got +want): the entry is replaced in place\n%s", diff)
	}
	var entry struct{ Headers map[string]string }
	json.Unmarshal(servers[1].value, &entry)
	if entry.Headers["X-Mcpgate-Api-Key"] != "${MCPGATE_API_KEY}" {
		t.Errorf("entry = %s", servers[1].value)
	}
	again, _, err := MergeEntry(out, ClaudeCode, tgt)
	if err != nil || string(again) != string(out) {
		t.Errorf("a second merge changed the file:\n%s\n%s", out, again)
	}
	// VS Code: the key input is added once, comments reported lost.
	vs := []byte("{\n// mine\n\"inputs\": [{\"type\":\"promptString\",\"id\":\"other\"}],\n\"servers\": {}\n}")
	out, lost, err = MergeEntry(vs, VSCode, Target{})
	if err != nil || !lost {
		t.Fatalf("vscode: %v, lost %v", err, lost)
	}
	out2, _, _ := MergeEntry(out, VSCode, Target{})
	var doc struct {
		Inputs []struct{ ID string }
	}
	json.Unmarshal(out2, &doc)
	if len(doc.Inputs) != 2 || doc.Inputs[0].ID != "other" || doc.Inputs[1].ID != VSCodeInputID {
		t.Errorf("inputs = %+v", doc.Inputs)
	}
	// A VS Code settings.json gets the entry in its mcp object.
	out, _, err = MergeEntry([]byte(`{"editor.fontSize": 14, "mcp": {"servers": {"x": {"type": "stdio", "command": "x"}}}}`), VSCode, Target{KeyVar: "K"})
	var settings struct {
		FontSize int `json:"editor.fontSize"`
		MCP      struct {
			Servers map[string]json.RawMessage
		}
	}
	if err != nil || json.Unmarshal(out, &settings) != nil || settings.FontSize != 14 || len(settings.MCP.Servers) != 2 || settings.MCP.Servers["mcpgate"] == nil {
		t.Errorf("settings.json: %v\n%s", err, out)
	}
	if _, _, err := MergeEntry([]byte(`{"mcpServers": []}`), Cursor, tgt); err == nil {
		t.Error("mcpServers not an object: no error")
	}
}

func TestMergeServers(t *testing.T) {
	existing := []byte("# my gateway\nlisten: 127.0.0.1:4000 # loopback\nservers:\n  notes: # keep me\n    transport: stdio\n    command: ./notes\nauth:\n  master_key: ${MK}\n")
	r := &Result{Names: []string{"calc"}, Servers: map[string]*config.Server{"calc": {Transport: "http", URL: "http://x/mcp", Headers: map[string]string{"X-Team": "a"}}}}
	out, replaced, err := MergeServers(existing, r, false)
	if err != nil || len(replaced) != 0 {
		t.Fatal(err, replaced)
	}
	for _, want := range []string{"# my gateway", "# loopback", "# keep me", "notes:", "calc:", "master_key: ${MK}", "X-Team: a"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("merged config lacks %q:\n%s", want, out)
		}
	}
	r.Names, r.Servers["notes"] = []string{"notes"}, &config.Server{Transport: "http", URL: "http://y/mcp"}
	var taken *NameTakenError
	if _, _, err := MergeServers(out, r, false); !errors.As(err, &taken) || taken.Names[0] != "notes" {
		t.Fatalf("collision: %v", err)
	}
	out, replaced, err = MergeServers(out, r, true)
	if err != nil || len(replaced) != 1 || !strings.Contains(string(out), "http://y/mcp") || strings.Contains(string(out), "./notes") {
		t.Errorf("force: %v %v\n%s", err, replaced, out)
	}
	if _, _, err := MergeServers([]byte("- a\n- b\n"), r, false); err == nil {
		t.Error("a list document: no error")
	}
	if out, _, err := MergeServers([]byte("servers:\n"), r, false); err != nil || !strings.Contains(string(out), "notes:") {
		t.Errorf("null servers: %v\n%s", err, out)
	}
}

// FuzzImportClientConfig: no client file makes Detect, Parse, Convert or
// the YAML merge panic, and whatever Convert produces has no literal
// secret left in an env or header value named like a secret.
func FuzzImportClientConfig(f *testing.F) {
	f.Add("mcp.json", []byte(`{"mcpServers":{"a":{"command":"x","args":["--token","t0ken"],"env":{"API_KEY":"v"}}}}`))
	f.Add(".vscode/mcp.json", []byte("{\"inputs\":[{\"id\":\"k\"}],\"servers\":{\"A b\":{\"type\":\"http\",\"url\":\"https://u:p@x/mcp?key=1\",\"headers\":{\"Authorization\":\"Bearer ${input:k}\"}}},}"))
	f.Add(".claude.json", []byte(`{"projects":{"/p":{"mcpServers":{"db":{"url":"${X:-http://d}/sse","type":"sse"}}}}}`))
	f.Add("mcp_config.json", []byte(`{"mcpServers":{"w":{"serverUrl":"https://x","headers":{"X-Api-Key":"$$"}}}}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		format, err := Detect(name, data)
		if err != nil {
			return
		}
		file, err := Parse(data, format)
		if err != nil {
			return
		}
		res, err := Convert(file, Options{})
		if err != nil {
			return
		}
		for _, n := range res.Names {
			s := res.Servers[n]
			for k, v := range s.Env {
				if SecretName(k) && v != "" && !HasReference(v) {
					t.Fatalf("env %s of %s kept a literal value", k, n)
				}
			}
			for k, v := range s.Headers {
				if SecretName(k) && v != "" && !HasReference(v) {
					t.Fatalf("header %s of %s kept a literal value", k, n)
				}
			}
		}
		if _, _, err := MergeServers(nil, res, false); err != nil {
			t.Fatalf("MergeServers on a new document: %v", err)
		}
		_ = Document(format, Target{})
	})
}

// A VS Code settings.json parses like mcp.json; Cline's transportType is
// read as the type.
func TestParseVariants(t *testing.T) {
	f, err := Parse([]byte(`{"mcp": {"inputs": [{"id": "k", "type": "promptString"}], "servers": {"a": {"type": "stdio", "command": "x"}}}}`), VSCode)
	if err != nil || len(f.Servers) != 1 || len(f.Inputs) != 1 {
		t.Fatalf("settings.json: %v %+v", err, f)
	}
	f, err = Parse([]byte(`{"mcpServers": {"c": {"url": "https://x/mcp", "transportType": "sse", "alwaysAllow": []}}}`), ClaudeDesktop)
	if err != nil {
		t.Fatal(err)
	}
	if f.Servers[0].Type != "sse" || !slices.Equal(f.Servers[0].Ignored, []string{"alwaysAllow"}) {
		t.Errorf("server = %+v", f.Servers[0])
	}
	if _, err := Parse([]byte(`{"mcpServers": {"c": {"env": {"N": {"nested": 1}}}}}`), Cursor); err == nil || strings.Contains(err.Error(), "nested") {
		t.Errorf("a non-string env value: %v (the error must not quote the value)", err)
	}
}

// Credentials in a url (password, secret query parameters) and in
// arguments (--api-key=X, --token X, a DSN with a password) move to
// variables; other values stay, a literal "$" escaped.
func TestConvertURLAndArgs(t *testing.T) {
	f, err := Parse([]byte(`{"mcpServers": {
		"remote": {"url": "https://bob:pw-1@api.example.com/mcp?api_key=k-1&region=eu"},
		"local": {"command": "tool", "args": ["--api-key=k-2", "--token", "t-1", "--verbose", "postgres://u:p-1@db/x", "cost$1"]}
	}}`), Cursor)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Convert(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Servers["remote"].URL, "https://bob:${MCPGATE_REMOTE_URL_PASSWORD}@api.example.com/mcp?api_key=${MCPGATE_REMOTE_URL_API_KEY}&region=eu"; got != want {
		t.Errorf("url = %s, want %s", got, want)
	}
	wantArgs := []string{"--api-key=${MCPGATE_LOCAL_API_KEY}", "--token", "${MCPGATE_LOCAL_TOKEN}", "--verbose", "${MCPGATE_LOCAL_ARG5}", "cost$$1"}
	if diff := cmp.Diff(r.Servers["local"].Args, wantArgs); diff != "" {
		t.Errorf("args (-got +want)\n%s", diff)
	}
	var names []string
	for _, v := range r.Vars {
		names = append(names, v.Name)
		if !v.Moved {
			t.Errorf("%s: not marked moved", v.Name)
		}
	}
	if diff := cmp.Diff(names, []string{"MCPGATE_REMOTE_URL_PASSWORD", "MCPGATE_REMOTE_URL_API_KEY", "MCPGATE_LOCAL_API_KEY", "MCPGATE_LOCAL_TOKEN", "MCPGATE_LOCAL_ARG5"}); diff != "" {
		t.Errorf("vars (-got +want)\n%s", diff)
	}
	// The result is a valid config, and resolves back to the values.
	vals := map[string]string{"MCPGATE_REMOTE_URL_PASSWORD": "pw-1", "MCPGATE_REMOTE_URL_API_KEY": "k-1", "MCPGATE_LOCAL_API_KEY": "k-2", "MCPGATE_LOCAL_TOKEN": "t-1", "MCPGATE_LOCAL_ARG5": "postgres://u:p-1@db/x"}
	cfg, err := config.Parse(ServersYAML(r), t.TempDir(), func(n string) (string, bool) { v, ok := vals[n]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Servers["remote"].URL; got != "https://bob:pw-1@api.example.com/mcp?api_key=k-1&region=eu" {
		t.Errorf("resolved url = %s", got)
	}
	if diff := cmp.Diff(cfg.Servers["local"].Args, []string{"--api-key=k-2", "--token", "t-1", "--verbose", "postgres://u:p-1@db/x", "cost$1"}); diff != "" {
		t.Errorf("resolved args (-got +want)\n%s", diff)
	}
}

// TestProvenance: an imported server says which client file it came from
// and, when a package runner starts it, which package it runs; a
// package named by a variable, or any other command, names none, and no
// secret of the arguments reaches it.
func TestProvenance(t *testing.T) {
	f, err := Parse([]byte(`{"mcpServers": {
		"everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything@2026.8.31"]},
		"fetch": {"command": "/usr/local/bin/uvx", "args": ["--from", "git+https://x", "mcp-server-fetch==1.2"]},
		"box": {"command": "docker", "args": ["run", "-i", "--rm", "-e", "TOKEN=s-1", "ghcr.io/acme/mcp:1.4"]},
		"dlx": {"command": "pnpm", "args": ["dlx", "mcp-thing@2"]},
		"local": {"command": "node", "args": ["server.js", "--token", "t-9"]},
		"varpkg": {"command": "npx", "args": ["${env:PKG}"]}
	}}`), ClaudeDesktop)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Convert(f, Options{Path: "/home/me/claude_desktop_config.json"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"everything": "npm @modelcontextprotocol/server-everything@2026.8.31",
		"fetch":      "pypi mcp-server-fetch==1.2",
		"box":        "image ghcr.io/acme/mcp:1.4",
		"dlx":        "npm mcp-thing@2",
		"local":      "",
		"varpkg":     "",
	}
	for name, v := range want {
		p := r.Servers[name].Provenance
		if p == nil || p.Source != "claude-desktop /home/me/claude_desktop_config.json" || p.Version != v {
			t.Errorf("%s: provenance %+v, want version %q", name, p, v)
		}
	}
	y := string(ServersYAML(r))
	if !strings.Contains(y, "version: npm @modelcontextprotocol/server-everything@2026.8.31") || strings.Contains(y, "t-9") {
		t.Errorf("yaml:\n%s", y)
	}
}

// TestDockerEnvSecrets: a container's environment written into docker run's
// arguments (-e NAME=value, --env NAME=value, --env=NAME=value) moves to
// a variable when NAME is named like a secret; a name passed through from
// the host (-e NAME), a non-secret name and a reference stay as they are.
func TestDockerEnvSecrets(t *testing.T) {
	f, err := Parse([]byte(`{"mcpServers": {
		"box": {"command": "docker", "args": ["run", "-i", "--rm", "-e", "GITHUB_TOKEN=ghp-secret-1", "--env", "API_KEY=k-2",
			"--env=DB_PASSWORD=p-3", "-e", "LOG_LEVEL=debug", "-e", "PASSTHRU_TOKEN", "-e", "REF_TOKEN=${env:T}", "ghcr.io/acme/mcp:1.4"]}
	}}`), ClaudeDesktop)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Convert(f, Options{Path: "/home/me/claude_desktop_config.json"})
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(r.Servers["box"].Args, " ")
	for _, secret := range []string{"ghp-secret-1", "k-2", "p-3"} {
		if strings.Contains(args, secret) || strings.Contains(string(ServersYAML(r)), secret) {
			t.Errorf("%s left in the arguments: %s", secret, args)
		}
	}
	for _, want := range []string{"-e GITHUB_TOKEN=${MCPGATE_BOX_GITHUB_TOKEN}", "--env API_KEY=${MCPGATE_BOX_API_KEY}",
		"--env=DB_PASSWORD=${MCPGATE_BOX_DB_PASSWORD}", "-e LOG_LEVEL=debug", "-e PASSTHRU_TOKEN"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "ghcr.io/acme/mcp:1.4") == false {
		t.Errorf("the image was changed: %s", args)
	}
}
