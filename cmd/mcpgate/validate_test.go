package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// validate --json lists every problem as {path, line, message} for CI
// pipelines, keeps the exit codes, and never echoes a secret.
func TestValidateJSON(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return writeFile(t, dir, name, body) }
	const secret = "hunter2-Zq9-secret"
	good := write("good.yaml", "servers:\n  calc:\n    transport: http\n    url: http://127.0.0.1:4100/mcp\n")
	bad := write("bad.yaml", "servers:\n  calc:\n    transport: http\n    url: ftp://"+secret+"@x\n    hedaers: {}\n  notes:\n    transport: stdio\nlimits: {max_batch: 0}\n")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []problem
	}{
		{"valid", []string{"validate", "--json", "--config", good}, 0, []problem{}},
		{"invalid", []string{"validate", "--json", "--config", bad}, 1, []problem{
			{Path: "servers.calc.hedaers", Line: 5, Message: "unknown field (did you mean headers?)"},
		}},
		{"missing file", []string{"validate", "--json", "--config", filepath.Join(dir, "nope.yaml")}, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.args, &out, &errb); code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tc.code, errb.String())
			}
			var got []problem
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("stdout is not a JSON list: %v\n%s", err, out.String())
			}
			if strings.Contains(out.String(), secret) {
				t.Errorf("output echoes the secret: %s", out.String())
			}
			if tc.want == nil {
				if len(got) != 1 || got[0].Path != "" || !strings.Contains(got[0].Message, "nope.yaml") {
					t.Errorf("problems = %+v, want one naming the file", got)
				}
				return
			}
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("problems (-got +want):\n%s", diff)
			}
		})
	}
	// Decoding problems come first; a file that decodes is then judged
	// on every rule at once.
	semantic := write("semantic.yaml", "servers:\n  calc:\n    transport: http\n    url: ftp://"+secret+"@x\n  notes:\n    transport: stdio\nlimits: {max_batch: 0}\n")
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "--json", "--config", semantic}, &out, &errb); code != 1 {
		t.Fatalf("exit %d", code)
	}
	var got []problem
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range got {
		paths = append(paths, p.Path)
	}
	if diff := cmp.Diff(paths, []string{"limits.max_batch", "servers.calc.url", "servers.notes.command"}); diff != "" {
		t.Errorf("paths (-got +want):\n%s\n%s", diff, out.String())
	}
	if strings.Contains(out.String(), secret) {
		t.Errorf("output echoes the secret: %s", out.String())
	}
}

// config schema prints the schema the editors use; config reference the
// reference in docs/.
func TestConfigCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"config", "schema"}, &out, &errb); code != 0 {
		t.Fatalf("config schema: exit %d: %s", code, errb.String())
	}
	var s struct {
		Schema string `json:"$schema"`
	}
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || s.Schema != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("config schema: %v, $schema %q", err, s.Schema)
	}
	out.Reset()
	if code := run([]string{"config", "reference"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "| `max_inflight_per_session` |") {
		t.Errorf("config reference: exit %d, output %.200q", code, out.String())
	}
	if code := run([]string{"config", "bogus"}, &out, &errb); code != 2 {
		t.Errorf("config bogus: exit %d, want 2", code)
	}
}
