package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const identityExample = `
public_url: https://mcp.example.com
auth:
  oidc:
    - issuer: https://idp.example.com/realms/acme
      audience: mcpgate
      claims: {user: preferred_username, teams: groups, roles: realm_access.roles, org: tenant}
      required_scopes: [mcp]
      allowed_algs: [RS256, PS256]
    - issuer: http://127.0.0.1:9000
  login:
    issuer: https://idp.example.com/realms/acme
    client_id: mcpgate
    client_secret: ${IDP_SECRET}
    keys: true
  grants:
    - team: platform
      servers: [calc]
      admin: true
    - role: reader
      tools: {calc: [add]}
servers:
  calc: {transport: http, url: 'http://127.0.0.1:4100/mcp'}
`

func TestParseIdentity(t *testing.T) {
	c, err := Parse([]byte(identityExample), "/cfg", envOf(map[string]string{"IDP_SECRET": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.PublicURL != "https://mcp.example.com" {
		t.Errorf("public_url %q", c.PublicURL)
	}
	want := []OIDCIssuer{
		{Issuer: "https://idp.example.com/realms/acme", Audience: "mcpgate", RequiredScopes: []string{"mcp"}, AllowedAlgs: []string{"RS256", "PS256"},
			Claims: ClaimPaths{User: "preferred_username", Email: "email", Teams: "groups", Roles: "realm_access.roles", Org: "tenant"}, Line: 5},
		{Issuer: "http://127.0.0.1:9000", Claims: ClaimPaths{User: "sub", Email: "email", Teams: "groups", Roles: "roles"}, Line: 10},
	}
	if diff := cmp.Diff(c.Auth.OIDC, want); diff != "" {
		t.Errorf("oidc (-got +want):\n%s", diff)
	}
	if got := c.Auth.OIDC[1].AlgsOrDefault(); !cmp.Equal(got, DefaultAllowedAlgs) {
		t.Errorf("default algs %v", got)
	}
	l := c.Auth.Login
	if l == nil || l.ClientSecret != "s3cret" || !l.Keys || l.AccessTokenTTL != 15*time.Minute || l.RefreshTokenTTL != 720*time.Hour || l.Claims.User != "sub" {
		t.Errorf("login %+v", l)
	}
	if len(c.Auth.Grants) != 2 || c.Auth.Grants[0].Team != "platform" || !c.Auth.Grants[0].Admin || c.Auth.Grants[1].Tools["calc"][0] != "add" {
		t.Errorf("grants %+v", c.Auth.Grants)
	}
	if k, v := c.Auth.Grants[1].Subject(); k != "role" || v != "reader" {
		t.Errorf("subject %s %s", k, v)
	}
	if c.AnonymousOnly() {
		t.Error("a config with issuers is not anonymous-only")
	}
}

func TestParseIdentityErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"issuer http", "auth: {oidc: [{issuer: 'http://idp.example.com'}]}\n", "auth.oidc[0].issuer: must be an https URL (http only on a loopback host)"},
		{"issuer missing", "auth: {oidc: [{audience: x}]}\n", "auth.oidc[0].issuer: required"},
		{"issuer twice", "auth: {oidc: [{issuer: 'https://a'}, {issuer: 'https://a'}]}\n", "auth.oidc[1].issuer: same issuer as oidc[0]"},
		{"alg none", "auth: {oidc: [{issuer: 'https://a', allowed_algs: [none]}]}\n", `auth.oidc[0].allowed_algs[0]: must be one of RS256`},
		{"alg hmac", "auth: {oidc: [{issuer: 'https://a', allowed_algs: [HS256]}]}\n", `auth.oidc[0].allowed_algs[0]: must be one of`},
		{"jwks http", "auth: {oidc: [{issuer: 'https://a', jwks_url: 'http://10.0.0.1/jwks'}]}\n", "auth.oidc[0].jwks_url: must be an https URL"},
		{"bad claim path", "auth: {oidc: [{issuer: 'https://a', claims: {roles: 'realm_access..roles'}}]}\n", "auth.oidc[0].claims.roles: must be a claim name or a dotted path"},
		{"login without issuer or keys", "auth: {login: {client_id: x}}\n", "auth.login.issuer: required unless keys: true"},
		{"login without client", "auth: {login: {issuer: 'https://a'}}\n", "auth.login.client_id: required with issuer"},
		{"login on postgres without seal key", "store: {driver: postgres, dsn: 'postgres://h/db'}\nauth: {login: {keys: true}}\n", "auth.login.seal_key: required with store.driver: postgres"},
		{"login seal key too short", "auth: {login: {keys: true, seal_key: c2hvcnQ=}}\n", "auth.login.seal_key: "},
		{"grant without subject", "auth: {grants: [{servers: []}]}\n", "auth.grants[0]: must name exactly one of user, team or role"},
		{"grant with two subjects", "auth: {grants: [{user: a, team: b}]}\n", "auth.grants[0]: must name exactly one of user, team or role"},
		{"grant unknown server", "auth: {grants: [{team: a, servers: [nope]}]}\n", `auth.grants[0].servers[0]: unknown server "nope"`},
		{"public_url with query", "public_url: 'https://x/?a=b'\n", "public_url: must be an http or https URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// A fleet's login: postgres with a seal key is accepted, and the key is
// decoded, never echoed.
func TestLoginSealKey(t *testing.T) {
	key := "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleTI"
	cfg, err := Parse([]byte("store: {driver: postgres, dsn: 'postgres://h/db'}\nauth: {login: {keys: true, seal_key: '${SEAL}'}}\n"), "", func(k string) (string, bool) { return key, k == "SEAL" })
	if err != nil {
		t.Fatal(err)
	}
	b, err := cfg.Auth.Login.SealKeyBytes()
	if err != nil || len(b) != 32 {
		t.Fatalf("seal key: %d bytes, %v", len(b), err)
	}
	_, err = Parse([]byte("auth: {login: {keys: true, seal_key: 'bm90LWEta2V5'}}\n"), "", nil)
	if err == nil || strings.Contains(err.Error(), "bm90LWEta2V5") {
		t.Errorf("a bad seal key: %v (must fail without quoting it)", err)
	}
}
