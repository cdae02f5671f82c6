//go:build interop

// Package identity_test runs mcpgate's identity features against software
// we did not write: a real OpenID Provider (oidc-provider, test/interop/idp)
// as the company IdP, and the go-sdk client, against the real mcpgate
// binary in front of the notes example server.
package identity_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/test/internal/gwproc"
	"github.com/mcpgate/mcpgate/test/interop/idp"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds mcpgate and the notes example once per test binary
// (into the shared gwproc.BinDirEnv when set).
func binaries(t *testing.T) (gateway, notes string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, _, buildErr = gwproc.BinDir("mcpgate-identity-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "./cmd/mcpgate", "./examples/notes")
		cmd.Dir = filepath.Join("..", "..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "mcpgate"), filepath.Join(binDir, "notes")
}

type gatewayProc struct {
	base string
	mu   sync.Mutex
	log  []string
}

func (g *gatewayProc) logs() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.log, "\n")
}

// startGateway runs mcpgate with the config text (servers are added: notes
// over stdio) and waits until it serves.
func startGateway(t *testing.T, cfg string) *gatewayProc {
	t.Helper()
	return startGatewayOn(t, "127.0.0.1:0", cfg)
}

// startGatewayOn is startGateway on a given listen address, with extra
// environment variables (KEY=value) for the process.
func startGatewayOn(t *testing.T, listen, cfg string, env ...string) *gatewayProc {
	t.Helper()
	gw, notes := binaries(t)
	dir := t.TempDir()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg += "servers:\n  notes:\n    transport: stdio\n    command: " + q(notes) + "\n    args: [\"-file\", " + q(filepath.Join(dir, "notes.json")) + "]\n"
	path := filepath.Join(dir, "mcpgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gw, "serve", "--config", path, "--listen", listen, "--log-format", "json", "--log-level", "debug")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log = append(p.log, line)
			p.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "mcpgate serving" {
				addr <- rec.Addr
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("mcpgate log:\n%s", p.logs())
		}
	})
	select {
	case a := <-addr:
		p.base = strings.TrimSuffix(a, "/mcp")
	case <-time.After(20 * time.Second):
		t.Fatalf("mcpgate did not start:\n%s", p.logs())
	}
	return p
}

// bearerTransport sends every request with Authorization: Bearer token.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func connect(ctx context.Context, t *testing.T, endpoint, token string) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "identity-test", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
}

func post(t *testing.T, url, token string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func kidOf(t *testing.T, jwt string) string {
	t.Helper()
	h, err := base64.RawURLEncoding.DecodeString(strings.SplitN(jwt, ".", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	var hdr struct{ Kid string }
	json.Unmarshal(h, &hdr)
	return hdr.Kid
}

// A machine token from the real IdP, issued for the gateway's /mcp
// resource (RFC 8707), is a caller with what its role's grant gives; a
// token for another resource, a tampered one and none are refused with
// the challenge that leads a client to the metadata; after the IdP rotates
// its key a new token works after one JWKS re-fetch.
func TestIdPTokensAsCallers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := idp.Start(t, idp.DefaultConfig())
	gw := startGateway(t, "auth:\n  oidc:\n    - issuer: "+p.Issuer+"\n      claims: {user: sub, roles: realm_access.roles}\n      required_scopes: [mcp]\n"+
		"  grants:\n    - role: service\n      servers: [notes]\n      deny_tools: {notes: [delete_note]}\n")
	resource := gw.base + "/mcp"
	tok, err := p.ClientCredentialsToken(ctx, idp.MachineClientID, idp.MachineClientSecret, resource, "mcp")
	if err != nil {
		t.Fatal(err)
	}

	cs, err := connect(ctx, t, resource, tok)
	if err != nil {
		t.Fatalf("connect with the IdP's token: %v", err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "notes__add_note") || strings.Contains(strings.Join(names, ","), "delete_note") {
		t.Errorf("tools as role service: %v", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__add_note", Arguments: map[string]any{"title": "t", "body": "b"}})
	if err != nil || res.IsError {
		t.Errorf("call: %v %+v", err, res)
	}
	cs.Close()

	// Refusals, each with the challenge.
	prm := gw.base + "/.well-known/oauth-protected-resource/mcp"
	other, err := p.ClientCredentialsToken(ctx, idp.MachineClientID, idp.MachineClientSecret, gw.base+"/mcp/notes", "mcp")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	sig := []byte(parts[2])
	sig[5] ^= 1
	tampered := parts[0] + "." + parts[1] + "." + string(sig)
	for _, tc := range []struct {
		name, token, errParam string
	}{
		{"no token", "", ""},
		{"token for /mcp/notes used on /mcp", other, `error="invalid_token"`},
		{"tampered signature", tampered, `error="invalid_token"`},
	} {
		status, hdr := post(t, resource, tc.token)
		ch := hdr.Get("WWW-Authenticate")
		if status != http.StatusUnauthorized || !strings.Contains(ch, `resource_metadata="`+prm+`"`) || !strings.Contains(ch, tc.errParam) {
			t.Errorf("%s: %d %q", tc.name, status, ch)
		}
	}
	// The metadata a client reads next names the IdP.
	resp, err := http.Get(prm)
	if err != nil {
		t.Fatal(err)
	}
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	json.NewDecoder(resp.Body).Decode(&md)
	resp.Body.Close()
	if md.Resource != resource || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != p.Issuer {
		t.Errorf("metadata: %+v", md)
	}

	// Key rotation at the IdP: a token under the new key is accepted.
	before := p.JWKSFetches()
	kid := p.Rotate()
	fresh, err := p.ClientCredentialsToken(ctx, idp.MachineClientID, idp.MachineClientSecret, resource, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	if kidOf(t, fresh) != kid {
		t.Fatalf("the new token's kid %q is not the rotated key %q", kidOf(t, fresh), kid)
	}
	if status, hdr := post(t, resource, fresh); status != http.StatusOK {
		t.Errorf("token under the rotated key: %d %q", status, hdr.Get("WWW-Authenticate"))
	}
	if n := p.JWKSFetches() - before; n != 1 {
		t.Errorf("JWKS fetched %d times after the rotation, want 1", n)
	}
	// The gateway never logged a token.
	if logs := gw.logs(); strings.Contains(logs, parts[2]) || strings.Contains(logs, strings.Split(fresh, ".")[2]) {
		t.Error("the gateway log contains a token's signature")
	}
}
