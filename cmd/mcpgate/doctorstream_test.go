package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// doctor prints "config ok" at once and each server's row as its check
// ends: a fast server's row and a crashed stdio server's (with the end
// of its stderr, the secret of its env redacted) come while a slow server
// is still being checked; then the slow one's row and a summary. A
// refused server's error shows the operator's URL as configured, without
// its password or query secret.
func TestDoctorStreams(t *testing.T) {
	gw, _ := buildBinary(t)
	const (
		envSecret = "env-Secr3t-Zk8"
		pwSecret  = "pw-Secr3t-Lm4"
		qSecret   = "q-Secr3t-Wd1"
	)
	fast := newSDKUpstream(t, "", false)
	release := make(chan struct{})
	sdk := sdkHandler("")
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := l.Addr().String()
	l.Close()

	cfg := writeFile(t, t.TempDir(), "doctor.yaml", fmt.Sprintf(`servers:
  fast: {transport: http, url: %s}
  slow: {transport: http, url: %s}
  crash:
    transport: stdio
    command: /bin/sh
    args: ["-c", "echo using token $$TOK >&2; echo 'fatal: cannot open the database' >&2; exit 3"]
    env: {TOK: %s}
  refused:
    transport: http
    url: http://ops:%s@%s/mcp?api_key=%s
`, fast.URL, slow.URL, envSecret, pwSecret, closedAddr, qSecret))

	cmd := exec.Command(gw, "doctor", "--config", cfg, "--timeout", "20s")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var all []string
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("doctor ended before %s; so far:\n%s\nstderr: %s", what, strings.Join(all, "\n"), errb.String())
			}
			all = append(all, l)
			return l
		case <-time.After(15 * time.Second):
			t.Fatalf("no %s within 15s; so far:\n%s", what, strings.Join(all, "\n"))
		}
		return ""
	}
	if l := next("the config line"); !strings.HasSuffix(l, "config ok (4 servers)") {
		t.Fatalf("first line %q", l)
	}
	next("a blank line")
	if l := next("the header"); !strings.HasPrefix(l, "SERVER ") {
		t.Fatalf("header %q", l)
	}
	// While slow stalls: fast, crash (and its stderr) and refused.
	rows := map[string]string{}
	var crashStderr []string
	for len(rows) < 3 {
		l := next("the rows of the servers that answer")
		if s, ok := strings.CutPrefix(l, "    stderr| "); ok {
			crashStderr = append(crashStderr, s)
			continue
		}
		name := strings.Fields(l)[0]
		if name == "slow" {
			t.Fatalf("slow's row came while it stalled: %q", l)
		}
		rows[name] = l
	}
	close(release)
	released = true
	for {
		l := next("slow's row")
		if s, ok := strings.CutPrefix(l, "    stderr| "); ok {
			crashStderr = append(crashStderr, s)
			continue
		}
		rows[strings.Fields(l)[0]] = l
		break
	}
	next("the blank line before the summary")
	if l := next("the summary"); !strings.HasPrefix(l, "2 ok, 0 warn, 2 fail in ") {
		t.Errorf("summary %q", l)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("exit %v, want 1", err)
	}

	for name, verdict := range map[string]string{"fast": "ok", "slow": "ok", "crash": "fail", "refused": "fail"} {
		if f := strings.Fields(rows[name]); len(f) < 3 || f[2] != verdict {
			t.Errorf("%s row %q, want %s", name, rows[name], verdict)
		}
	}
	if got, want := strings.Join(crashStderr, "\n"), "using token ***\nfatal: cannot open the database"; got != want {
		t.Errorf("crash's stderr:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(rows["refused"], "http://") || !strings.Contains(rows["refused"], closedAddr+"/mcp") {
		t.Errorf("refused row %q does not show the operator's URL", rows["refused"])
	}
	out := strings.Join(all, "\n") + errb.String()
	for _, secret := range []string{envSecret, pwSecret, qSecret} {
		if strings.Contains(out, secret) {
			t.Errorf("the output shows %q:\n%s", secret, out)
		}
	}
}
