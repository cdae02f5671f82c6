package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/netaddr"
)

// serveInProcess runs mcpgate serve with args until the test ends; it
// returns the bound address, or the error serve returned before binding.
func serveInProcess(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	var stderr strings.Builder
	c := &serveCommand{stderr: &stderr, ready: func(addr string) { ready <- addr }}
	go func() { errc <- c.Run(ctx, args) }()
	select {
	case addr := <-ready:
		t.Cleanup(func() {
			cancel()
			select {
			case <-errc:
			case <-time.After(15 * time.Second):
				t.Error("serve did not stop")
			}
		})
		return addr, nil
	case err := <-errc:
		cancel()
		return "", err
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("serve neither bound nor failed")
		return "", nil
	}
}

// hostsLoopbackName is a name besides localhost that /etc/hosts maps to a
// loopback address, or "" (read from the file: no DNS traffic).
func hostsLoopbackName() string {
	f, err := os.Open("/etc/hosts")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.SplitN(sc.Text(), "#", 2)[0])
		if len(fields) < 2 || !strings.HasPrefix(fields[0], "127.") {
			continue
		}
		for _, name := range fields[1:] {
			if !netaddr.IsLoopbackHost(name) {
				return name
			}
		}
	}
	return ""
}

// Hole 7 through serve: whatever the listen address's spelling, a
// listener that bound loopback refuses a rebinding page's Host and serves
// its own names.
func TestServeHostGuardOnBoundAddress(t *testing.T) {
	const master = "mk_edge_serve_master_key_0123456789"
	dir := t.TempDir()
	p := writeFile(t, dir, "gw.yaml", fmt.Sprintf("data_dir: %s\nauth: {master_key: %s}\nservers: {}\n", dir, master))
	listens := []string{"LOCALHOST:0", "127.0.0.2:0"}
	if name := hostsLoopbackName(); name != "" {
		listens = append(listens, name+":0")
	}
	for _, listen := range listens {
		t.Run(listen, func(t *testing.T) {
			addr, err := serveInProcess(t, "--config", p, "--listen", listen)
			if err != nil {
				t.Fatalf("serve on %s: %v", listen, err)
			}
			post := func(host string) (int, string) {
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Authorization", "Bearer "+master)
				req.Host = host
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			if code, body := post("attacker.example"); code != http.StatusForbidden || !strings.Contains(body, `"message":"Invalid Host header"`) {
				t.Errorf("listen %s (bound %s), Host attacker.example: %d %s, want 403 Invalid Host header", listen, addr, code, body)
			}
			port := addr[strings.LastIndexByte(addr, ':'):]
			for _, host := range []string{addr, "localhost" + port} {
				if code, body := post(host); code != http.StatusOK || !strings.Contains(body, `"result":{}`) {
					t.Errorf("Host %s: %d %s, want served", host, code, body)
				}
			}
		})
	}
}

// Hole 5 through serve: OAuth callers on a listener beyond loopback
// without public_url refuse to start, naming the field, also when the
// --listen flag moved the listener after validation.
func TestServeRefusesOAuthBeyondLoopbackWithoutPublicURL(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "gw.yaml", fmt.Sprintf("data_dir: %s\nauth: {oidc: [{issuer: 'https://idp.example'}]}\nservers: {}\n", dir))
	_, err := serveInProcess(t, "--config", p, "--listen", "0.0.0.0:0")
	if err == nil || !strings.Contains(err.Error(), "public_url: required with auth.oidc or auth.login when listen (0.0.0.0:0) is not a loopback address") {
		t.Fatalf("serve on 0.0.0.0 with auth.oidc and no public_url: %v, want the public_url error", err)
	}
	// With public_url it serves; on loopback it serves without.
	withURL := writeFile(t, dir, "gw2.yaml", fmt.Sprintf("data_dir: %s\npublic_url: https://mcp.example.com\nauth: {oidc: [{issuer: 'https://idp.example'}]}\nservers: {}\n", dir))
	if _, err := serveInProcess(t, "--config", withURL, "--listen", "127.0.0.1:0"); err != nil {
		t.Errorf("with public_url: %v", err)
	}
	if _, err := serveInProcess(t, "--config", p, "--listen", "127.0.0.1:0"); err != nil {
		t.Errorf("on loopback: %v", err)
	}
}
