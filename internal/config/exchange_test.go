package config

import (
	"strings"
	"testing"
)

// oidcDoc is a config with one auth.oidc issuer and server up with the
// given auth block.
func oidcDoc(auth string) string {
	return "auth:\n  oidc:\n    - issuer: https://idp.example.com\n      audience: mcpgate\nservers:\n  up:\n    transport: http\n    url: https://up.example.com/mcp\n    auth: " + auth + "\n"
}

func TestParseTokenExchange(t *testing.T) {
	cfg, err := Parse([]byte(oidcDoc("{type: oauth2_token_exchange, token_url: 'https://sts.example.com/token', client_id: gw, client_secret: s3, audience: up-api, scopes: [read], resource: 'https://api.example.com/'}")), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Servers["up"].Auth
	if a.Type != AuthTokenExchange || a.TokenURL != "https://sts.example.com/token" || a.ClientID != "gw" || a.ClientSecret != "s3" ||
		a.Audience != "up-api" || a.Resource != "https://api.example.com/" || len(a.Scopes) != 1 {
		t.Fatalf("auth = %+v", a)
	}
	if got := a.SubjectTokenTypeOrDefault(); got != TokenTypeAccessToken {
		t.Errorf("default subject_token_type = %q", got)
	}

	cfg, err = Parse([]byte(oidcDoc("{type: enterprise_managed, idp_token_url: 'https://idp.example.com/token', idp_client_id: gw-at-idp, authorization_server: 'https://as.example.com', client_id: gw, client_secret: s3, scopes: [mcp]}")), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Servers["up"].Auth; a.IdPTokenURL != "https://idp.example.com/token" || a.IdPClientID != "gw-at-idp" || a.IdPClientSecret != "" || a.AuthorizationServer != "https://as.example.com" {
		t.Fatalf("auth = %+v", a)
	}
}

func TestParseTokenExchangeErrors(t *testing.T) {
	const secret = "pa55w0rd-Zq9"
	tests := []struct{ name, doc, want string }{
		{"exchange without auth.oidc", httpSrv("auth: {type: oauth2_token_exchange, client_id: a, client_secret: b}"),
			"servers.up.auth.type: oauth2_token_exchange needs auth.oidc: it exchanges the caller's own token, a JWT of a trusted issuer"},
		{"enterprise_managed without auth.oidc", httpSrv("auth: {type: enterprise_managed, idp_token_url: 'https://i/t', idp_client_id: c, client_id: a, client_secret: b}"),
			"servers.up.auth.type: enterprise_managed needs auth.oidc"},
		{"exchange without client_id", oidcDoc("{type: oauth2_token_exchange, client_secret: " + secret + "}"),
			"servers.up.auth.client_id: required for auth type oauth2_token_exchange"},
		{"exchange without client_secret", oidcDoc("{type: oauth2_token_exchange, client_id: a}"),
			"servers.up.auth.client_secret: required for client_auth client_secret_basic"},
		{"exchange bad token_url", oidcDoc("{type: oauth2_token_exchange, token_url: 'ftp://x/t', client_id: a, client_secret: " + secret + "}"),
			"servers.up.auth.token_url: must be an http or https URL"},
		{"exchange bad resource", oidcDoc("{type: oauth2_token_exchange, client_id: a, client_secret: " + secret + ", resource: 'https://x/#frag'}"),
			"servers.up.auth.resource: must be an absolute URI without fragment (RFC 8707)"},
		{"exchange relative resource", oidcDoc("{type: oauth2_token_exchange, client_id: a, client_secret: " + secret + ", resource: '/api'}"),
			"servers.up.auth.resource: must be an absolute URI without fragment"},
		{"exchange bad subject_token_type", oidcDoc("{type: oauth2_token_exchange, client_id: a, client_secret: " + secret + ", subject_token_type: saml}"),
			`servers.up.auth.subject_token_type: must be one of urn:ietf:params:oauth:token-type:access_token, urn:ietf:params:oauth:token-type:id_token, urn:ietf:params:oauth:token-type:jwt (got "saml")`},
		{"exchange with idp_token_url", oidcDoc("{type: oauth2_token_exchange, client_id: a, client_secret: " + secret + ", idp_token_url: 'https://i/t'}"),
			"servers.up.auth.idp_token_url: not allowed for auth type oauth2_token_exchange"},
		{"enterprise_managed without idp_token_url", oidcDoc("{type: enterprise_managed, idp_client_id: c, client_id: a, client_secret: " + secret + "}"),
			"servers.up.auth.idp_token_url: required for auth type enterprise_managed"},
		{"enterprise_managed without idp_client_id", oidcDoc("{type: enterprise_managed, idp_token_url: 'https://i/t', client_id: a, client_secret: " + secret + "}"),
			"servers.up.auth.idp_client_id: required for auth type enterprise_managed"},
		{"enterprise_managed bad idp_token_url", oidcDoc("{type: enterprise_managed, idp_token_url: 'idp', idp_client_id: c, client_id: a, client_secret: " + secret + "}"),
			"servers.up.auth.idp_token_url: must be an http or https URL"},
		{"enterprise_managed with token_url", oidcDoc("{type: enterprise_managed, idp_token_url: 'https://i/t', idp_client_id: c, client_id: a, client_secret: " + secret + ", token_url: 'https://x/t'}"),
			"servers.up.auth.token_url: not allowed for auth type enterprise_managed"},
		{"enterprise_managed with audience", oidcDoc("{type: enterprise_managed, idp_token_url: 'https://i/t', idp_client_id: c, client_id: a, client_secret: " + secret + ", audience: x}"),
			"servers.up.auth.audience: not allowed for auth type enterprise_managed"},
		{"enterprise_managed without client_secret", oidcDoc("{type: enterprise_managed, idp_token_url: 'https://i/t', idp_client_id: c, client_id: a, idp_client_secret: " + secret + "}"),
			"servers.up.auth.client_secret: required for client_auth client_secret_basic"},
		{"idp field of oauth2", httpSrv("auth: {type: oauth2, client_id: a, client_secret: " + secret + ", idp_client_id: c}"),
			"servers.up.auth.idp_client_id: not allowed for auth type oauth2"},
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

// The gateway's own client credentials go only to a token endpoint the
// config names: token_url, or a pinned authorization server's.
func TestAuthorizationServerRequired(t *testing.T) {
	const secret = "pa55w0rd-Zq9"
	vault := "vault:\n  keys:\n    - {id: k1, key: " + strings.Repeat("A", 43) + "=}\n"
	for _, tt := range []struct{ name, doc, want string }{
		{"oauth2 with neither", httpSrv("auth: {type: oauth2, client_id: a, client_secret: " + secret + "}"),
			"servers.up.auth.token_url: token_url or authorization_server is required: the gateway sends its client credentials only to a token endpoint the config names"},
		{"oauth2 with both", httpSrv("auth: {type: oauth2, client_id: a, client_secret: " + secret + ", token_url: 'https://as/token', authorization_server: 'https://as'}"),
			"servers.up.auth.authorization_server: token_url and authorization_server are both set; give one"},
		{"exchange with neither", oidcDoc("{type: oauth2_token_exchange, client_id: a, client_secret: " + secret + "}"),
			"servers.up.auth.token_url: token_url or authorization_server is required"},
		{"enterprise_managed without it", oidcDoc("{type: enterprise_managed, idp_token_url: 'https://i/t', idp_client_id: c, client_id: a, client_secret: " + secret + "}"),
			"servers.up.auth.authorization_server: required for enterprise_managed"},
		{"oauth2_user secret without it", httpSrv("auth: {type: oauth2_user, client_id: a, client_secret: "+secret+"}") + vault,
			"servers.up.auth.authorization_server: required with client_secret"},
		{"http issuer beyond loopback", httpSrv("auth: {type: oauth2, client_id: a, client_secret: " + secret + ", authorization_server: 'http://as.example.com'}"),
			"servers.up.auth.authorization_server: must be an https URL (http only on a loopback host) without query, fragment or user info"},
		{"issuer with a query", httpSrv("auth: {type: oauth2, client_id: a, client_secret: " + secret + ", authorization_server: 'https://as.example.com/?t=1'}"),
			"servers.up.auth.authorization_server: must be an https URL"},
		{"issuer on another auth type", httpSrv("auth: {type: bearer_token, value: " + secret + ", authorization_server: 'https://as.example.com'}"),
			"servers.up.auth.authorization_server: not allowed for auth type bearer_token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error echoes the secret: %v", err)
			}
		})
	}
	for _, doc := range []string{
		httpSrv("auth: {type: oauth2, client_id: a, client_secret: " + secret + ", authorization_server: 'https://as.example.com/tenant'}"),
		httpSrv("auth: {type: oauth2, client_id: a, client_secret: " + secret + ", authorization_server: 'http://127.0.0.1:9000'}"),
		httpSrv("auth: {type: oauth2, client_id: a, client_secret: " + secret + ", token_url: 'http://sts.internal/token'}"),
		httpSrv("auth: {type: oauth2_user}") + vault,
		httpSrv("auth: {type: oauth2_user, client_id: public-client}") + vault,
	} {
		if _, err := Parse([]byte(doc), "", nil); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}
