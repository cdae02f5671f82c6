package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return writeFile(t, dir, name, body) }
	good := write("good.yaml", "servers:\n  calc:\n    transport: http\n    url: http://127.0.0.1:4100/mcp\n")
	bad := write("bad.yaml", "servers:\n  calc:\n    transport: http\n    url: ftp://x\n  Bad!:\n    transport: stdio\n")
	typo := write("typo.yaml", "servers:\n  calc:\n    transport: http\n    url: http://x/mcp\n    hedaers: {}\n")
	for _, tc := range []struct {
		args     []string
		wantCode int
		wantOut  []string
	}{
		{[]string{"validate", "--config", good}, 0, []string{"ok (1 servers; calc: http)"}},
		{[]string{"validate", "--config", bad}, 1, []string{"servers.calc.url", "servers.Bad!", "invalid config"}},
		{[]string{"validate", "--config", typo}, 1, []string{"servers.calc.hedaers: unknown field"}},
		{[]string{"validate"}, 2, []string{"--config is required"}},
		{[]string{"validate", "--config", filepath.Join(dir, "missing.yaml")}, 1, []string{"missing.yaml"}},
		{[]string{"version"}, 0, []string{"mcpgate "}},
		{[]string{"frobnicate"}, 2, []string{`unknown command "frobnicate"`}},
		{[]string{"serve", "--log-format", "xml", "--config", good}, 2, []string{"--log-format"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", code, tc.wantCode, out.String(), errb.String())
			}
			all := out.String() + errb.String()
			for _, w := range tc.wantOut {
				if !strings.Contains(all, w) {
					t.Errorf("output %q lacks %q", all, w)
				}
			}
		})
	}
}

// built holds the binaries buildBinary made: they are built once per test
// run (linking mcpgate takes seconds, and a dozen tests start it) into a
// directory TestMain removes, or into $MCPGATE_TEST_BIN_DIR when set
// (shared: scripts/test.sh built them there already, so go build links
// nothing; see test/internal/gwproc.BinDirEnv), which it leaves.
var built struct {
	once   sync.Once
	dir    string
	shared bool
	err    error
}

// buildBinary builds cmd/mcpgate and the notes example, once, and returns
// their paths. Tests only run them; none may write beside them.
func buildBinary(t *testing.T) (gw, notes string) {
	t.Helper()
	built.once.Do(func() {
		if built.dir = os.Getenv("MCPGATE_TEST_BIN_DIR"); built.dir != "" {
			built.shared = true
		} else if built.dir, built.err = os.MkdirTemp("", "mcpgate-cmd-test-"); built.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", built.dir+"/", ".", "../../examples/notes")
		cmd.Stderr = os.Stderr
		built.err = cmd.Run()
	})
	if built.err != nil {
		t.Fatalf("build: %v", built.err)
	}
	return filepath.Join(built.dir, "mcpgate"), filepath.Join(built.dir, "notes")
}

// TestServeSignalDrain starts the real binary with a stdio upstream, makes
// a call, sends SIGTERM and expects exit 0 with the child process gone.
func TestServeSignalDrain(t *testing.T) {
	gw, notes := buildBinary(t)
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("servers:\n  notes:\n    transport: stdio\n    command: %s\n", notes)), 0o600)
	cmd := exec.Command(gw, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	addrRE := regexp.MustCompile(`"addr":"(http://[^"]+)"`)
	pidRE := regexp.MustCompile(`"msg":"started stdio upstream".*"pid":(\d+)`)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var url, childPid string
	deadline := time.After(20 * time.Second)
	for url == "" || childPid == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("gateway exited early")
			}
			if m := addrRE.FindStringSubmatch(l); m != nil {
				url = m[1]
			}
			if m := pidRE.FindStringSubmatch(l); m != nil {
				childPid = m[1]
			}
		case <-deadline:
			t.Fatalf("no address/child pid logged (url=%q pid=%q)", url, childPid)
		}
	}
	go func() {
		for range lines {
		}
	}()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__add_note","arguments":{"title":"a","body":"b"}}}`
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(b, &m) != nil || len(m.Result) == 0 {
		t.Fatalf("call through gateway: %s", b)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Errorf("gateway exit after SIGTERM: %v, want exit 0", err)
		}
	case <-ctx.Done():
		t.Fatal("gateway did not exit after SIGTERM")
	}
	// The stdio child is gone (not running, not a zombie of ours).
	if _, err := os.Stat("/proc/" + childPid); err == nil {
		st, _ := os.ReadFile("/proc/" + childPid + "/stat")
		t.Errorf("stdio child %s still exists after shutdown: %s", childPid, st)
	}
}

// TestStdioFront launches `mcpgate stdio` the way a desktop client would
// (the official go-sdk client over a command transport) in front of a stdio
// upstream, and uses it, in both eras: pinned to 2025-06-18, and unpinned,
// which speaks the stateless 2026-07-28.
func TestStdioFront(t *testing.T) {
	gw, notes := buildBinary(t)
	for _, want := range []string{"2025-06-18", "2026-07-28"} {
		t.Run(want, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "gw.yaml")
			os.WriteFile(cfg, []byte(fmt.Sprintf("servers:\n  notes:\n    transport: stdio\n    command: %s\n    args: [-file, %s]\n", notes, filepath.Join(t.TempDir(), "notes.json"))), 0o600)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var opts *mcp.ClientSessionOptions
			if want != "2026-07-28" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: want}
			}
			client := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil)
			cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(gw, "stdio", "--config", cfg)}, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != want {
				t.Errorf("negotiated %s, want %s", got, want)
			}
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range tools.Tools {
				names = append(names, tl.Name)
			}
			if !slices.Contains(names, "notes__add_note") || !slices.Contains(names, "notes__list_notes") {
				t.Fatalf("tools = %v", names)
			}
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__add_note", Arguments: map[string]any{"title": "stdio", "body": "front " + want}}); err != nil {
				t.Fatal(err)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__get_note", Arguments: map[string]any{"title": "stdio"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(got, "front "+want) {
				t.Errorf("get_note = %q, want the body", got)
			}
		})
	}
}
