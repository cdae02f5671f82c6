package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func httpSrv(extra string) string {
	return "servers:\n  up:\n    transport: http\n    url: https://up.example.com/mcp\n    " + extra + "\n"
}

func TestParseAuthAndTLS(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ca.pem", "client.pem", "client.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	doc := `
servers:
  up:
    transport: http
    url: https://up.example.com/mcp
    session_mode: per_call
    auth:
      type: OAuth2
      token_url: https://idp.example.com/token
      client_id: gw
      client_secret: ${SECRET}
      scopes: [mcp.read, mcp.write]
      audience: https://up.example.com
      header_name: esb-oauth
    tls:
      verify: true
      ca_file: ca.pem
      cert_file: client.pem
      key_file: ./client.key
  plain:
    transport: sse
    url: http://localhost:1/sse
`
	c, err := Parse([]byte(doc), dir, envOf(map[string]string{"SECRET": "s3"}))
	if err != nil {
		t.Fatal(err)
	}
	up := c.Servers["up"]
	tr := true
	wantAuth := &Auth{Type: AuthOAuth2, TokenURL: "https://idp.example.com/token", ClientID: "gw", ClientSecret: "s3",
		Scopes: []string{"mcp.read", "mcp.write"}, Audience: "https://up.example.com", HeaderName: "esb-oauth"}
	if diff := cmp.Diff(wantAuth, up.Auth); diff != "" {
		t.Errorf("auth (-want +got):\n%s", diff)
	}
	wantTLS := &TLS{Verify: &tr, CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client.key")}
	if diff := cmp.Diff(wantTLS, up.TLS); diff != "" {
		t.Errorf("tls (-want +got):\n%s", diff)
	}
	if up.SessionMode != SessionPerCall {
		t.Errorf("session_mode = %q", up.SessionMode)
	}
	p := c.Servers["plain"]
	if p.Auth != nil || p.TLS != nil || p.SessionMode != SessionShared || !p.TLS.VerifyCerts() {
		t.Errorf("defaults: auth=%v tls=%v mode=%q", p.Auth, p.TLS, p.SessionMode)
	}
}

func TestParseAuthErrors(t *testing.T) {
	const secret = "pa55w0rd-Zq9"
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"unknown auth type", httpSrv("auth: {type: kerberos, value: x}"),
			`servers.up.auth.type: must be one of none, api_key, bearer_token, token, basic, authorization, oauth2, passthrough (got "kerberos")`},
		{"missing auth type", httpSrv("auth: {value: x}"), "servers.up.auth.type: required"},
		{"basic without colon", httpSrv("auth: {type: basic, value: " + secret + "}"),
			`servers.up.auth.value: must be "user:password" (no colon found)`},
		{"basic scheme with raw text and no colon", httpSrv("auth: {type: basic, value: 'Basic " + secret + "'}"),
			`servers.up.auth.value: must be "user:password"`},
		{"bearer without value", httpSrv("auth: {type: bearer_token}"), "servers.up.auth.value: required for auth type bearer_token"},
		{"oauth2 without token_url", httpSrv("auth: {type: oauth2, client_id: a, client_secret: b}"),
			"servers.up.auth.token_url: required for auth type oauth2"},
		{"oauth2 bad token_url", httpSrv("auth: {type: oauth2, token_url: 'ftp://" + secret + "@x', client_id: a, client_secret: b}"),
			"servers.up.auth.token_url: must be an http or https URL"},
		{"oauth2 without client", httpSrv("auth: {type: oauth2, token_url: 'https://x/t'}"), "servers.up.auth.client_id: required for auth type oauth2"},
		{"field of another type", httpSrv("auth: {type: bearer_token, value: x, token_url: 'https://x/t'}"),
			"servers.up.auth.token_url: not allowed for auth type bearer_token"},
		{"unknown auth key", httpSrv("auth: {type: none, vaule: x}"), "servers.up.auth.vaule: unknown field (did you mean value?)"},
		{"reserved slot", httpSrv("auth: {type: bearer_token, value: x, header_name: Mcp-Session-Id}"),
			"servers.up.auth.header_name: header is set by the gateway"},
		{"bad slot", httpSrv("auth: {type: bearer_token, value: x, header_name: 'a b'}"),
			"servers.up.auth.header_name: invalid header name"},
		{"auth on stdio", "servers:\n  s:\n    transport: stdio\n    command: x\n    auth: {type: bearer_token, value: x}\n",
			"servers.s.auth: not allowed for transport stdio"},
		{"missing ca_file", httpSrv("tls: {ca_file: /nonexistent/ca.pem}"),
			"servers.up.tls.ca_file: cannot read /nonexistent/ca.pem: no such file or directory"},
		{"cert without key", httpSrv("tls: {cert_file: /etc/hostname}"), "servers.up.tls: cert_file and key_file must be set together"},
		{"verify not bool", httpSrv("tls: {verify: maybe}"), "servers.up.tls.verify: must be true or false"},
		{"bad session mode", httpSrv("session_mode: sticky"), `servers.up.session_mode: must be one of shared, per_call (got "sticky")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", nil)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error echoes the secret: %v", err)
			}
		})
	}
}

func TestValidBasicCredential(t *testing.T) {
	for v, want := range map[string]bool{
		"user:pass":           true,
		"Basic user:pass":     true,
		"basic\tuser:pass":    true,
		"Basic dXNlcjpwYXNz":  true, // base64("user:pass")
		"Basic ":              true,
		"userpass":            false,
		"Basic dXNlcnBhc3M=":  false, // base64("userpass")
		"Basicdm:x":           true,  // a password with a colon, not a scheme
		":":                   true,
		"Bearer dXNlcjpwYXNz": false,
		"  user:pass  ":       true,
	} {
		if got := ValidBasicCredential(v); got != want {
			t.Errorf("ValidBasicCredential(%q) = %v, want %v", v, got, want)
		}
	}
}
