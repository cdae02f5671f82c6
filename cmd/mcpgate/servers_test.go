package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
)

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The four config mistakes of the upstream-client issue fail validate with
// a message naming the server and the field, and never the secret.
func TestValidateAuthAndTLSErrors(t *testing.T) {
	dir := t.TempDir()
	const secret = "hunter2-Zq9"
	for _, tc := range []struct {
		name, block, want string
	}{
		{"unknown auth type", "auth: {type: kerberos, value: " + secret + "}", "servers.up.auth.type: must be one of none, api_key"},
		{"basic without colon", "auth: {type: basic, value: " + secret + "}", "servers.up.auth.value: must be \"user:password\""},
		{"missing ca_file", "tls: {ca_file: ./nope/ca.pem}", "servers.up.tls.ca_file: cannot read " + filepath.Join(dir, "nope/ca.pem")},
		{"oauth2 without client_secret", "auth: {type: oauth2, client_id: gw}", "servers.up.auth.client_secret: required for client_auth client_secret_basic"},
		{"private_key_jwt with a key that is not PEM", "auth: {type: oauth2, client_id: gw, client_auth: private_key_jwt, private_key: " + secret + "}", "servers.up.auth.private_key: not PEM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, "c.yaml", "servers:\n  up:\n    transport: http\n    url: https://up.example.com/mcp\n    "+tc.block+"\n")
			var out, errb bytes.Buffer
			if code := run([]string{"validate", "--config", p}, &out, &errb); code != 1 {
				t.Fatalf("exit %d, want 1 (stderr %q)", code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.want)
			}
			if strings.Contains(out.String()+errb.String(), secret) {
				t.Errorf("output echoes the secret: %q", errb.String())
			}
		})
	}
}

func TestServersPreview(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("UP_TOKEN", "Bearer tok-0123456789abcdefWXYZ")
	p := writeFile(t, dir, "c.yaml", `
servers:
  up:
    transport: http
    url: https://up.example.com/mcp
    headers: {X-Trace: abc, X-Custom-Cred: s3cret, X-Jwt-Assertion: eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJndyJ9.c2ln}
    auth: {type: bearer_token, value: "${UP_TOKEN}", header_name: esb-oauth}
  notes:
    transport: stdio
    command: ./notes
    args: [--api-key, "${NOTES_ARG}", "--token=${NOTES_ARG}", --verbose]
    env: {NOTES_TOKEN: n-secret}
`)
	t.Setenv("NOTES_ARG", "arg-s3cret-value-123")
	var out, errb bytes.Buffer
	if code := run([]string{"servers", "preview", "--config", p, "up"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := out.String()
	// Every static header is masked, whatever its name (issue 22 §9).
	for _, want := range []string{"POST https://up.example.com/mcp\n", "Esb-Oauth: Bearer ****WXYZ\n", "X-Trace: ****\n", "X-Custom-Cred: ****\n",
		"X-Jwt-Assertion: ****c2ln\n", "Accept: application/json, text/event-stream\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("preview lacks %q:\n%s", want, got)
		}
	}
	for _, leak := range []string{"0123456789", "Authorization", "s3cret", "abc", "eyJhbGci"} {
		if strings.Contains(got, leak) {
			t.Errorf("preview leaks or misplaces %q:\n%s", leak, got)
		}
	}
	out.Reset()
	// Arguments as the file writes them: a value from the environment
	// is never printed (issue 22 §9's class: --api-key ${KEY}).
	if code := run([]string{"servers", "preview", "notes", "--config", p}, &out, &errb); code != 0 || strings.Contains(out.String(), "n-secret") ||
		strings.Contains(out.String(), "arg-s3cret") || !strings.Contains(out.String(), "env NOTES_TOKEN=****") ||
		!strings.Contains(out.String(), `/notes "--api-key" "${NOTES_ARG}" "--token=${NOTES_ARG}" "--verbose"`) {
		t.Errorf("stdio preview (exit %d):\n%s", code, out.String())
	}
	if code := run([]string{"servers", "preview", "--config", p, "nope"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `no server "nope"`) {
		t.Errorf("unknown server: exit %d, %q", code, errb.String())
	}
}

// An aws_sigv4 server's preview shows the SigV4 Authorization header
// with its scope and signed headers, the signature masked, and no
// credential from the environment.
func TestServersPreviewSigV4(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAPREVIEWTESTKEY")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "preview-secret-0123456789")
	t.Setenv("AWS_CONFIG_FILE", writeFile(t, dir, "aws-config", ""))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", writeFile(t, dir, "aws-credentials", ""))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	p := writeFile(t, dir, "c.yaml", `
servers:
  aws:
    transport: http
    url: https://abc123.execute-api.eu-west-1.amazonaws.com/prod/mcp
    headers: {X-Trace: abc}
    auth: {type: aws_sigv4, region: eu-west-1, service: execute-api}
`)
	var out, errb bytes.Buffer
	if code := run([]string{"servers", "preview", "--config", p, "aws"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"POST https://abc123.execute-api.eu-west-1.amazonaws.com/prod/mcp\n",
		"Authorization: AWS4-HMAC-SHA256 Credential=<access key id>/",
		"/eu-west-1/execute-api/aws4_request, SignedHeaders=accept;content-type;host;x-amz-content-sha256;x-amz-date;x-trace, Signature=****\n",
		"X-Amz-Content-Sha256: <sha256 of the body>\n",
		"X-Amz-Date: ",
		"X-Trace: ****\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("preview lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "AKIAPREVIEW") || strings.Contains(got, "preview-secret") {
		t.Errorf("preview leaks a credential:\n%s", got)
	}
}

// The preview of a private_key_jwt server names the method and the
// token endpoint or authorization server; the key never appears.
func TestServersPreviewPrivateKeyJWT(t *testing.T) {
	dir := t.TempDir()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	t.Setenv("UP_KEY", keyPEM)
	writeFile(t, dir, "up.pem", keyPEM)
	p := writeFile(t, dir, "c.yaml", `
servers:
  inline:
    transport: http
    url: https://up.example.com/mcp
    auth: {type: oauth2, client_id: gw, client_auth: private_key_jwt, private_key: "${UP_KEY}", authorization_server: "https://login.example.com/t"}
  file:
    transport: http
    url: https://up.example.com/mcp
    auth: {type: oauth2, token_url: "https://idp.example.com/token", client_id: gw, client_auth: private_key_jwt, private_key_file: up.pem}
`)
	for name, want := range map[string]string{
		"inline": "Authorization: Bearer <minted from the token endpoint of https://login.example.com/t with private_key_jwt>\n",
		"file":   "Authorization: Bearer <minted from https://idp.example.com/token with private_key_jwt>\n",
	} {
		var out, errb bytes.Buffer
		if code := run([]string{"servers", "preview", "--config", p, name}, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errb.String())
		}
		got := out.String()
		if !strings.Contains(got, want) {
			t.Errorf("%s: preview lacks %q:\n%s", name, want, got)
		}
		for _, line := range strings.Split(keyPEM, "\n") {
			if len(line) > 8 && strings.Contains(got, line) {
				t.Errorf("%s: preview shows the key:\n%s", name, got)
			}
		}
	}
}

// servers status reads GET /admin/v1/servers of a running gateway.
func TestServersStatus(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Servers: map[string]*config.Server{
		"down": {Name: "down", Transport: config.TransportHTTP, URL: "http://127.0.0.1:1/mcp", Timeout: time.Second},
	}}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.close(context.Background())
	g := stk.gw
	hs := httptest.NewServer(stk.handler)
	defer hs.Close()
	// Make the gateway try the upstream so that there is a last error.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g.Upstreams().Session(ctx, "down")

	var out, errb bytes.Buffer
	if code := run([]string{"servers", "status", "--url", hs.URL}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("output:\n%s", out.String())
	}
	f := strings.Fields(lines[1])
	if f[0] != "down" || f[1] != "down" || !strings.Contains(lines[1], "connection refused") {
		t.Errorf("row %q", lines[1])
	}
	out.Reset()
	var rep gateway.ServersReport
	if code := run([]string{"servers", "status", "--url", hs.URL, "--json"}, &out, &errb); code != 0 ||
		json.Unmarshal(out.Bytes(), &rep) != nil || len(rep.Servers) != 1 || rep.Servers[0].State != "down" {
		t.Errorf("json (exit %d): %s", code, out.String())
	}
	hs.Close()
	if code := run([]string{"servers", "status", "--url", hs.URL}, &out, &errb); code != 1 {
		t.Errorf("no gateway: exit %d", code)
	}
}
