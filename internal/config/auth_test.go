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

func TestParseAWSSigV4(t *testing.T) {
	doc := httpSrv("headers: {X-Trace: t, Authorization-Hint: h}\n    auth: {type: ' AWS_SigV4 ', region: '${REGION} ', service: ' execute-api'}")
	c, err := Parse([]byte(doc), "", envOf(map[string]string{"REGION": "eu-west-1"}))
	if err != nil {
		t.Fatal(err)
	}
	want := &Auth{Type: AuthAWSSigV4, Region: "eu-west-1", Service: "execute-api"}
	if diff := cmp.Diff(want, c.Servers["up"].Auth); diff != "" {
		t.Errorf("auth (-want +got):\n%s", diff)
	}
	for _, name := range []string{"us-gov-west-1", "cn-north-1", "bedrock-agentcore", "lambda", "s3"} {
		if !validAWSName(name) {
			t.Errorf("validAWSName(%q) = false", name)
		}
	}
	for _, name := range []string{"", "-eu", "eu-", "EU-west-1", "eu_west_1", "eu.west", "é", strings.Repeat("a", 65)} {
		if validAWSName(name) {
			t.Errorf("validAWSName(%q) = true", name)
		}
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
			`servers.up.auth.type: must be one of none, api_key, bearer_token, token, basic, authorization, oauth2, passthrough, aws_sigv4 (got "kerberos")`},
		{"aws_sigv4 without region", httpSrv("auth: {type: aws_sigv4, service: execute-api}"),
			"servers.up.auth.region: required for auth type aws_sigv4"},
		{"aws_sigv4 without service", httpSrv("auth: {type: aws_sigv4, region: eu-west-1}"),
			"servers.up.auth.service: required for auth type aws_sigv4"},
		{"aws_sigv4 blank region", httpSrv("auth: {type: aws_sigv4, region: '  ', service: execute-api}"),
			"servers.up.auth.region: required for auth type aws_sigv4"},
		{"aws_sigv4 bad region", httpSrv("auth: {type: aws_sigv4, region: EU_West_1, service: execute-api}"),
			"servers.up.auth.region: must be an AWS region name: lowercase letters, digits and dashes"},
		{"aws_sigv4 region with a dash at the end", httpSrv("auth: {type: aws_sigv4, region: eu-west-, service: execute-api}"),
			"servers.up.auth.region: must be an AWS region name"},
		{"aws_sigv4 bad service", httpSrv("auth: {type: aws_sigv4, region: eu-west-1, service: 'execute api'}"),
			"servers.up.auth.service: must be an AWS service signing name: lowercase letters, digits and dashes"},
		{"aws_sigv4 with header_name", httpSrv("auth: {type: aws_sigv4, region: eu-west-1, service: execute-api, header_name: X-Auth}"),
			"servers.up.auth.header_name: not allowed for auth type aws_sigv4"},
		{"aws_sigv4 with value", httpSrv("auth: {type: aws_sigv4, region: eu-west-1, service: execute-api, value: " + secret + "}"),
			"servers.up.auth.value: not allowed for auth type aws_sigv4"},
		{"region of another type", httpSrv("auth: {type: bearer_token, value: x, region: eu-west-1}"),
			"servers.up.auth.region: not allowed for auth type bearer_token"},
		{"aws_sigv4 on stdio", "servers:\n  s:\n    transport: stdio\n    command: x\n    auth: {type: aws_sigv4, region: eu-west-1, service: lambda}\n",
			"servers.s.auth: not allowed for transport stdio"},
		{"aws_sigv4 with a static Authorization", httpSrv("headers: {authorization: x}\n    auth: {type: aws_sigv4, region: eu-west-1, service: execute-api}"),
			"servers.up.headers.authorization: header is set by the aws_sigv4 signer and must not be configured"},
		{"aws_sigv4 with a static X-Amz-Security-Token", httpSrv("headers: {X-Amz-Security-Token: x}\n    auth: {type: aws_sigv4, region: eu-west-1, service: execute-api}"),
			"servers.up.headers.X-Amz-Security-Token: header is set by the aws_sigv4 signer"},
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
