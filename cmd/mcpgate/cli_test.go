package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runBinary runs the built mcpgate with args in dir (the test's working
// directory when ""), env added, and returns its exit code and output.
func runBinary(t *testing.T, gw, dir string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(gw, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MCPGATE_CONFIG=", "MCPGATE_URL=")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// The habits of kubectl and caddy: --version, help on stdout with exit 0
// on every command and subcommand, "did you mean" for a mistyped command
// or subcommand, and ./mcpgate.yaml (or $MCPGATE_CONFIG) when no --config
// is given, saying where it looked when there is none.
func TestCLIHabits(t *testing.T) {
	gw, _ := buildBinary(t)
	empty := t.TempDir()

	t.Run("version", func(t *testing.T) {
		for _, args := range [][]string{{"--version"}, {"version"}} {
			code, out, _ := runBinary(t, gw, empty, nil, args...)
			if code != 0 || !strings.HasPrefix(out, "mcpgate ") {
				t.Errorf("%v: exit %d, stdout %q", args, code, out)
			}
		}
	})

	t.Run("help", func(t *testing.T) {
		var cases [][]string
		for _, c := range commandNames {
			if c != "help" {
				cases = append(cases, []string{c, "--help"}, []string{c, "-h"})
			}
		}
		for _, sub := range []string{"servers preview", "servers list", "keys create", "keys revoke", "config schema",
			"vault rotate", "credentials set", "connections revoke", "sessions terminate", "tools list", "toolsets list"} {
			cases = append(cases, append(strings.Fields(sub), "--help"))
		}
		cases = append(cases, []string{"--help"}, []string{"-h"}, []string{"help"}, []string{"keys", "help"})
		for _, args := range cases {
			code, out, errOut := runBinary(t, gw, empty, nil, args...)
			if code != 0 || !strings.Contains(strings.ToLower(out), "usage") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 0 and the usage on stdout", args, code, out, errOut)
			}
		}
	})

	t.Run("did you mean", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"sevre"}, `unknown command "sevre" (did you mean "serve"?)`},
			{[]string{"doctr"}, `(did you mean "doctor"?)`},
			{[]string{"key", "list"}, `(did you mean "keys"?)`},
			{[]string{"keys", "craete"}, `unknown subcommand "craete" (did you mean "create"?)`},
			{[]string{"tools", "lsit"}, `(did you mean "list"?)`},
			{[]string{"config", "shcema"}, `(did you mean "schema"?)`},
			{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		} {
			code, _, errOut := runBinary(t, gw, empty, nil, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
			}
		}
		if _, _, errOut := runBinary(t, gw, empty, nil, "frobnicate"); strings.Contains(errOut, "did you mean") {
			t.Errorf("frobnicate is like no command, yet: %q", errOut)
		}
	})

	t.Run("default config file", func(t *testing.T) {
		const good = "servers:\n  calc:\n    transport: http\n    url: http://127.0.0.1:4100/mcp\n"
		withFile := t.TempDir()
		writeFile(t, withFile, "mcpgate.yaml", good)
		other := writeFile(t, t.TempDir(), "elsewhere.yaml", strings.ReplaceAll(good, "calc", "other"))

		code, out, errOut := runBinary(t, gw, withFile, nil, "validate")
		if code != 0 || !strings.Contains(out, "calc: http") {
			t.Errorf("validate in a directory with mcpgate.yaml: exit %d, %q %q", code, out, errOut)
		}
		code, out, _ = runBinary(t, gw, withFile, []string{"MCPGATE_CONFIG=" + other}, "validate")
		if code != 0 || !strings.Contains(out, "other: http") {
			t.Errorf("$MCPGATE_CONFIG does not win over ./mcpgate.yaml: exit %d, %q", code, out)
		}
		code, out, _ = runBinary(t, gw, withFile, []string{"MCPGATE_CONFIG=" + other}, "validate", "--config", filepath.Join(withFile, "mcpgate.yaml"))
		if code != 0 || !strings.Contains(out, "calc: http") {
			t.Errorf("--config does not win over $MCPGATE_CONFIG: exit %d, %q", code, out)
		}
		for _, cmd := range []string{"validate", "doctor", "serve"} {
			code, _, errOut = runBinary(t, gw, empty, nil, cmd)
			if code != 2 || !strings.Contains(errOut, "no mcpgate.yaml in "+empty) || !strings.Contains(errOut, "$MCPGATE_CONFIG") {
				t.Errorf("%s without a config: exit %d, stderr %q; want 2, naming where it looked", cmd, code, errOut)
			}
		}
	})
}

// mcpgate health is a container health check against a real gateway:
// exit 0 while it is ready, 1 with one line saying why otherwise (not
// ready, nothing listening, no answer in time).
func TestHealth(t *testing.T) {
	gw, notes := buildBinary(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "gw.yaml", fmt.Sprintf("servers:\n  notes:\n    transport: stdio\n    command: %s\n", notes))
	p := startGateway(t, gw, cfg)

	code, out, errOut := runBinary(t, gw, dir, nil, "health", "--url", p.url)
	if code != 0 || strings.TrimSpace(out) != "ready" {
		t.Errorf("a ready gateway: exit %d, %q %q", code, out, errOut)
	}
	// The URL from the config's listen address, found as ./mcpgate.yaml.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.url, "http://"))
	writeFile(t, dir, "mcpgate.yaml", fmt.Sprintf("listen: 127.0.0.1:%s\nservers:\n  notes:\n    transport: stdio\n    command: %s\n", port, notes))
	if code, out, errOut := runBinary(t, gw, dir, nil, "health"); code != 0 || strings.TrimSpace(out) != "ready" {
		t.Errorf("health with ./mcpgate.yaml's listen address: exit %d, %q %q", code, out, errOut)
	}

	draining := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"ready":false,"servers":{}}`))
	}))
	defer draining.Close()
	stall := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	defer close(stall)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"not ready", []string{"--url", draining.URL}, "not ready (HTTP 503 Service Unavailable)"},
		{"nothing listening", []string{"--url", closed}, "connection refused"},
		{"no answer", []string{"--url", hanging.URL, "--timeout", "300ms"}, "no answer within 300ms"},
	} {
		start := time.Now()
		code, out, errOut := runBinary(t, gw, t.TempDir(), nil, append([]string{"health"}, tc.args...)...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 1 || out != "" || len(lines) != 1 || !strings.Contains(lines[0], tc.want) || !strings.Contains(lines[0], "/readyz") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and one line with %q", tc.name, code, out, errOut, tc.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %s", tc.name, d)
		}
	}
}
