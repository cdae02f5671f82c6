package config

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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
			`servers.up.auth.type: must be one of none, api_key, bearer_token, token, basic, authorization, oauth2, passthrough, aws_sigv4, user_api_key, oauth2_user, oauth2_token_exchange, enterprise_managed (got "kerberos")`},
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
		{"oauth2 without client_secret", httpSrv("auth: {type: oauth2, client_id: a}"),
			"servers.up.auth.client_secret: required for client_auth client_secret_basic"},
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
		{"cert without key", httpSrv("tls: {cert_file: /etc/hostname}"), "servers.up.tls: a client certificate (cert or cert_file) and its key (key or key_file) must be set together"},
		{"ca twice", httpSrv("tls: {ca: x, ca_file: /etc/hostname}"), "servers.up.tls: ca and ca_file are both set; give one"},
		{"ca value not PEM", httpSrv("tls: {ca: 'not a certificate'}"), "servers.up.tls.ca: no PEM certificate found"},
		{"key value not PEM", httpSrv("tls: {cert_file: /etc/hostname, key: '" + secret + "'}"), "servers.up.tls.key: no PEM private key found"},
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

// pemOf encodes a DER key as a PEM block of type typ.
func pemOf(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

func TestParseClientAuth(t *testing.T) {
	dir := t.TempDir()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaSmall, _ := rsa.GenerateKey(rand.Reader, 1024)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	pkcs8 := func(k any) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	sec1, _ := x509.MarshalECPrivateKey(ec)
	keys := map[string]string{
		"ec-pkcs8.pem":  pemOf("PRIVATE KEY", pkcs8(ec)),
		"ec-sec1.pem":   pemOf("EC PRIVATE KEY", sec1),
		"rsa-pkcs1.pem": pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)),
		"rsa-pkcs8.pem": pemOf("PRIVATE KEY", pkcs8(rsaKey)),
		"p384.pem":      pemOf("PRIVATE KEY", pkcs8(ec384)),
		"rsa1024.pem":   pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaSmall)),
		"ed25519.pem":   pemOf("PRIVATE KEY", pkcs8(ed)),
		"cert-only.pem": pemOf("CERTIFICATE", []byte("not a certificate")),
		// A key block whose body is corrupt: a secret-looking payload that
		// must never be echoed.
		"garbage.pem": pemOf("PRIVATE KEY", []byte("pa55w0rd-Zq9 not DER")),
		"not-pem.pem": "pa55w0rd-Zq9\n",
	}
	for name, data := range keys {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"KEY": keys["ec-pkcs8.pem"], "RSAKEY": keys["rsa-pkcs1.pem"], "BAD": keys["garbage.pem"]}
	jwt := func(extra string) string {
		return httpSrv("auth: {type: oauth2, client_id: gw, authorization_server: 'https://as.example.com', client_auth: private_key_jwt, " + extra + "}")
	}

	t.Run("accepted", func(t *testing.T) {
		for _, tt := range []struct {
			name, doc string
			want      Auth
			alg       string
		}{
			{"inline key from a variable", jwt("private_key: '${KEY}'"),
				Auth{ClientAuth: PrivateKeyJWT, PrivateKey: strings.TrimSpace(keys["ec-pkcs8.pem"])}, AlgES256},
			{"relative key file, SEC1", jwt("private_key_file: ec-sec1.pem"),
				Auth{ClientAuth: PrivateKeyJWT, PrivateKeyFile: filepath.Join(dir, "ec-sec1.pem")}, AlgES256},
			{"PKCS#1 RSA, explicit alg", jwt("private_key_file: ./rsa-pkcs1.pem, signing_alg: RS256"),
				Auth{ClientAuth: PrivateKeyJWT, PrivateKeyFile: filepath.Join(dir, "rsa-pkcs1.pem"), SigningAlg: AlgRS256}, AlgRS256},
			{"PKCS#8 RSA", jwt("private_key_file: rsa-pkcs8.pem"),
				Auth{ClientAuth: PrivateKeyJWT, PrivateKeyFile: filepath.Join(dir, "rsa-pkcs8.pem")}, AlgRS256},
			{"client_secret_post", httpSrv("auth: {type: oauth2, client_id: gw, authorization_server: 'https://as.example.com', client_secret: s, client_auth: Client_Secret_Post}"),
				Auth{ClientAuth: ClientSecretPost, ClientSecret: "s"}, ""},
			{"default method", httpSrv("auth: {type: oauth2, client_id: gw, authorization_server: 'https://as.example.com', client_secret: s}"),
				Auth{ClientSecret: "s"}, ""},
		} {
			t.Run(tt.name, func(t *testing.T) {
				c, err := Parse([]byte(tt.doc), dir, envOf(env))
				if err != nil {
					t.Fatal(err)
				}
				got := c.Servers["up"].Auth
				want := tt.want
				want.Type, want.ClientID, want.AuthorizationServer = AuthOAuth2, "gw", "https://as.example.com"
				if diff := cmp.Diff(&want, got); diff != "" {
					t.Errorf("auth (-want +got):\n%s", diff)
				}
				if tt.alg == "" {
					return
				}
				key, alg, err := got.ClientKey()
				if err != nil || key == nil || alg != tt.alg {
					t.Errorf("ClientKey = %T, %q, %v; want alg %s", key, alg, err, tt.alg)
				}
			})
		}
	})

	const secret = "pa55w0rd-Zq9"
	for _, tt := range []struct {
		name, doc, want string
	}{
		{"both key forms", jwt("private_key: '${KEY}', private_key_file: ec-sec1.pem"),
			"servers.up.auth: private_key and private_key_file are both set; give one"},
		{"no key", jwt("audience: x"),
			"servers.up.auth.private_key: required for client_auth private_key_jwt (or private_key_file)"},
		{"unparsable inline PEM", jwt("private_key: '${BAD}'"),
			"servers.up.auth.private_key: the PRIVATE KEY PEM block does not parse"},
		{"unparsable key file", jwt("private_key_file: garbage.pem"),
			"servers.up.auth.private_key_file: the PRIVATE KEY PEM block does not parse"},
		{"not PEM", jwt("private_key_file: not-pem.pem"),
			"servers.up.auth.private_key_file: not PEM"},
		{"inline not PEM", jwt("private_key: " + secret),
			"servers.up.auth.private_key: not PEM"},
		{"no key block", jwt("private_key_file: cert-only.pem"),
			"servers.up.auth.private_key_file: no private key among the PEM blocks"},
		{"missing file", jwt("private_key_file: missing.pem"),
			"servers.up.auth.private_key_file: cannot read " + filepath.Join(dir, "missing.pem") + ": no such file or directory"},
		{"P-384 key", jwt("private_key_file: p384.pem"),
			"servers.up.auth.private_key_file: EC key on P-384; want P-256 (ES256)"},
		{"short RSA key", jwt("private_key_file: rsa1024.pem"),
			"servers.up.auth.private_key_file: RSA key of 1024 bits; want at least 2048"},
		{"Ed25519 key", jwt("private_key_file: ed25519.pem"),
			"servers.up.auth.private_key_file: an Ed25519 key; want RSA or EC P-256"},
		{"alg does not fit the key", jwt("private_key: '${KEY}', signing_alg: RS256"),
			"servers.up.auth.signing_alg: RS256 does not fit the key (an EC key)"},
		{"unknown alg", jwt("private_key: '${RSAKEY}', signing_alg: PS256"),
			`servers.up.auth.signing_alg: must be one of ES256, RS256 (got "PS256")`},
		{"secret with private_key_jwt", jwt("private_key: '${KEY}', client_secret: " + secret),
			"servers.up.auth.client_secret: not allowed for client_auth private_key_jwt"},
		{"post without secret", httpSrv("auth: {type: oauth2, client_id: gw, client_auth: client_secret_post}"),
			"servers.up.auth.client_secret: required for client_auth client_secret_post"},
		{"key with a secret method", httpSrv("auth: {type: oauth2, client_id: gw, client_secret: s, private_key: '${KEY}'}"),
			"servers.up.auth.private_key: not allowed for client_auth client_secret_basic (only for private_key_jwt)"},
		{"key file with a secret method", httpSrv("auth: {type: oauth2, client_id: gw, client_secret: s, client_auth: client_secret_post, private_key_file: ec-sec1.pem}"),
			"servers.up.auth.private_key_file: not allowed for client_auth client_secret_post"},
		{"unknown method", httpSrv("auth: {type: oauth2, client_id: gw, client_secret: s, client_auth: tls_client_auth}"),
			`servers.up.auth.client_auth: must be one of client_secret_basic, client_secret_post, private_key_jwt (got "tls_client_auth")`},
		{"key on another type", httpSrv("auth: {type: bearer_token, value: x, private_key: '${KEY}'}"),
			"servers.up.auth.private_key: not allowed for auth type bearer_token"},
		{"bad token_url", jwt("private_key: '${KEY}', token_url: 'ftp://x/t'"),
			"servers.up.auth.token_url: must be an http or https URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), dir, envOf(env))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
			msg := err.Error()
			for name, data := range keys {
				// No line of a key's base64 body, nor the payload, appears.
				for _, line := range strings.Split(data, "\n") {
					if len(line) > 20 && !strings.HasPrefix(line, "-----") && strings.Contains(msg, line) {
						t.Errorf("error echoes key %s: %v", name, err)
					}
				}
			}
			if strings.Contains(msg, secret) {
				t.Errorf("error echoes the secret: %v", err)
			}
		})
	}
}

// user_api_key takes header (the spelling) as well as header_name;
// two different names are refused.
func TestUserAPIKeyHeaderSpelling(t *testing.T) {
	const vault = "vault:\n  keys: [{id: k1, key: \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"}]\n"
	doc := vault + "servers:\n  t:\n    transport: http\n    url: http://127.0.0.1:9/mcp\n    auth: {type: user_api_key, header: X-API-Key}\n"
	c, err := Parse([]byte(doc), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Servers["t"].Auth; a.HeaderName != "X-API-Key" || a.Header != "" {
		t.Errorf("header: %+v", a)
	}
	doc = vault + "servers:\n  t:\n    transport: http\n    url: http://127.0.0.1:9/mcp\n    auth: {type: user_api_key, header: X-API-Key, header_name: X-Other}\n"
	if _, err := Parse([]byte(doc), "", nil); err == nil || !strings.Contains(err.Error(), "servers.t.auth.header") {
		t.Errorf("two different headers: %v", err)
	}
	doc = vault + "servers:\n  t:\n    transport: http\n    url: http://127.0.0.1:9/mcp\n    auth: {type: bearer_token, value: x, header: X-API-Key}\n"
	if _, err := Parse([]byte(doc), "", nil); err == nil {
		t.Error("header accepted for bearer_token")
	}
}

// TestParseRuntimeRefusesHostFiles (issue 22 §8): a document from the
// network may name no file on the gateway's host. Every path and command
// field is refused by name, with the same message whether the file exists
// or not (nothing looks at it); the value forms are accepted.
func TestParseRuntimeRefusesHostFiles(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "exists.pem")
	if err := os.WriteFile(existing, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	jwt := "auth: {type: oauth2, token_url: 'https://t.example/token', client_id: a, client_auth: private_key_jwt, private_key_file: %s}"
	for _, tc := range []struct{ name, field, doc, want string }{
		{"tls.ca_file", "ca_file", "tls: {ca_file: %s}", "servers.up.tls.ca_file: names a file on the gateway's host, which only the config file may do; give the content itself in servers.up.tls.ca"},
		{"tls.cert_file", "cert_file", "tls: {cert_file: %s}", "servers.up.tls.cert_file: names a file on the gateway's host, which only the config file may do; give the content itself in servers.up.tls.cert"},
		{"tls.key_file", "key_file", "tls: {key_file: %s}", "servers.up.tls.key_file: names a file on the gateway's host, which only the config file may do; give the content itself in servers.up.tls.key"},
		{"auth.private_key_file", "private_key_file", jwt, "servers.up.auth.private_key_file: names a file on the gateway's host, which only the config file may do; give the content itself in servers.up.auth.private_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []string
			for _, path := range []string{"/etc/passwd", existing, missing} {
				_, err := ParseRuntime([]byte(httpSrv(fmt.Sprintf(tc.doc, path))))
				fes := FieldErrors(err)
				if len(fes) != 1 {
					t.Fatalf("%s: %v, want one error", path, err)
				}
				fes[0].Line = 0
				msgs = append(msgs, fes[0].Error())
			}
			for i, m := range msgs {
				if m != tc.want {
					t.Errorf("path %d: %q, want %q", i, m, tc.want)
				}
			}
			// The same config file may name it.
			if _, err := Parse([]byte(httpSrv(fmt.Sprintf(tc.doc, missing))), "", nil); err == nil || !strings.Contains(err.Error(), "cannot read "+missing) {
				t.Errorf("config file: %v", err)
			}
		})
	}
	for _, doc := range []string{
		"servers:\n  s: {transport: stdio, command: /bin/sh}\n",
		"servers:\n  s: {transport: stdio, command: x, cwd: /etc}\n",
	} {
		_, err := ParseRuntime([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), "names a file on the gateway's host, which only the config file may do") {
			t.Errorf("%q: %v", doc, err)
		}
	}
	c, err := ParseRuntime([]byte(httpSrv("tls: {verify: false}\n    headers: {X-A: b}")))
	if err != nil || c.Servers["up"].TLS.VerifyCerts() {
		t.Errorf("a document without files: %v", err)
	}
}

// TestSecretValues: every value the config marks secret, found through
// the tags (a new secret field needs no list), and nothing else.
func TestSecretValues(t *testing.T) {
	s := &Server{Transport: TransportHTTP, URL: "https://u:p@up.example/mcp", Headers: map[string]string{"X-A": "hdr-secret"},
		Auth: &Auth{Type: AuthOAuth2, ClientID: "client-id", ClientSecret: "client-secret", PrivateKey: "pem-key", TokenURL: "https://t.example"},
		TLS:  &TLS{CA: "ca-pem", Key: "tls-key"}}
	got := s.SecretValues()
	slices.Sort(got)
	want := []string{"client-secret", "hdr-secret", "https://u:p@up.example/mcp", "pem-key", "tls-key"}
	if !slices.Equal(got, want) {
		t.Errorf("SecretValues = %q, want %q", got, want)
	}
}
