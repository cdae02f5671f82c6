package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBlockedLogOutputServes runs the real binary with its stderr on a
// pipe nobody reads once it serves (a stalled log collector): requests
// are still answered at once, the access lines past what is held are
// dropped and counted in mcpgate_log_lines_dropped_total, and once the
// pipe is read again the log says where lines were dropped.
func TestBlockedLogOutputServes(t *testing.T) {
	gw, notes := buildBinary(t)
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "gw.yaml", fmt.Sprintf("data_dir: ./state\nservers:\n  notes: {transport: stdio, command: %s}\n", notes))
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(gw, "serve", "--config", cfgPath, "--listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Dir = dir
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		go io.Copy(io.Discard, pr) // let it exit
		cmd.Wait()
	})

	// Read the log until the gateway serves, then stop reading it.
	br := bufio.NewReaderSize(pr, 64<<10)
	addrRE := regexp.MustCompile(`"addr":"(http://[^"/]+)/mcp"`)
	var base string
	deadline := time.Now().Add(20 * time.Second)
	for base == "" {
		if time.Now().After(deadline) {
			t.Fatal("the gateway did not log its address")
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("log: %v", err)
		}
		if m := addrRE.FindStringSubmatch(line); m != nil {
			base = m[1]
		}
	}

	// Each request writes an access line of about 200 bytes: 8,000 of
	// them fill the pipe (64 KiB) and what the gateway holds (1 MiB).
	client := &http.Client{Timeout: 5 * time.Second}
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	start := time.Now()
	var slowest time.Duration
	for i := range 8000 {
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp/notes?n="+strconv.Itoa(i), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d while the log was blocked: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 == 5 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		slowest = max(slowest, time.Since(t0))
		if time.Since(start) > 60*time.Second {
			t.Fatalf("%d requests in a minute: the blocked log slows serving", i)
		}
	}
	if slowest > 2*time.Second {
		t.Errorf("the slowest request took %v while the log was blocked", slowest)
	}

	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^mcpgate_log_lines_dropped_total ([0-9.e+]+)$`).FindSubmatch(metrics)
	if m == nil {
		t.Fatalf("no mcpgate_log_lines_dropped_total in /metrics")
	}
	dropped, _ := strconv.ParseFloat(string(m[1]), 64)
	if dropped < 1000 {
		t.Errorf("mcpgate_log_lines_dropped_total = %v after 8,000 lines into a blocked pipe, want the lines past 1 MiB", dropped)
	}

	// The pipe moves again: the held lines come out, then the notice.
	found := make(chan string, 1)
	go func() {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				close(found)
				return
			}
			if strings.Contains(line, "lines dropped while the log's output was blocked") {
				found <- line
				return
			}
		}
	}()
	select {
	case line, ok := <-found:
		if !ok {
			t.Fatal("the log ended without the dropped lines' notice")
		}
		if !strings.Contains(line, `"level":"WARN"`) || !strings.Contains(line, `"lines":`) {
			t.Errorf("the notice is not a JSON warning with the count: %s", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no notice of the dropped lines once the log was read again")
	}
}
