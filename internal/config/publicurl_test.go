package config

import (
	"strings"
	"testing"
)

// SPEC S22.4: with OAuth callers (auth.oidc or auth.login) public_url is
// required when the listener is not loopback, and in a fleet; the error
// names the field. On loopback, and without OAuth callers, it is not.
func TestPublicURLRequiredBeyondLoopback(t *testing.T) {
	const (
		oidc  = "auth: {oidc: [{issuer: 'https://idp.example'}]}\n"
		login = "auth: {login: {keys: true}}\n"
		keys  = "auth: {master_key: mk_0123456789abcdef0123456789}\n"
		fleet = "fleet: {session_keys: ['MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY']}\n"
		want  = "public_url: required with auth.oidc or auth.login when listen ("
	)
	for _, tc := range []struct {
		name, doc string
		want      string // "" for valid
	}{
		{"oidc on every interface", "listen: '0.0.0.0:4000'\n" + oidc, want + "0.0.0.0:4000) is not a loopback address"},
		{"oidc on all, no host", "listen: ':4000'\n" + oidc, want + ":4000)"},
		{"login on a LAN address", "listen: '10.1.2.3:4000'\n" + login, want + "10.1.2.3:4000)"},
		{"oidc on a name", "listen: 'gw.example:4000'\n" + oidc, want + "gw.example:4000)"},
		{"oidc on a name that only resolves to loopback", "listen: 'ip6-localhost:4000'\n" + oidc, want + "ip6-localhost:4000)"},
		{"oidc in a fleet on loopback", "listen: '127.0.0.1:4000'\n" + oidc + fleet, "public_url: required with auth.oidc or auth.login in a fleet"},

		{"oidc beyond loopback with public_url", "listen: '0.0.0.0:4000'\npublic_url: https://mcp.example.com\n" + oidc, ""},
		{"login in a fleet with public_url", "listen: '0.0.0.0:4000'\npublic_url: https://mcp.example.com\n" + login + fleet, ""},
		{"oidc on the default listen", oidc, ""},
		{"oidc on LOCALHOST", "listen: 'LOCALHOST:4000'\n" + oidc, ""},
		{"oidc on 127.0.0.2", "listen: '127.0.0.2:4000'\n" + oidc, ""},
		{"oidc on [::1]", "listen: '[::1]:4000'\n" + oidc, ""},
		{"keys beyond loopback", "listen: '0.0.0.0:4000'\n" + keys, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "/cfg", envOf(nil))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("want %q, got a valid config", tc.want)
			case tc.want != "":
				fes := fieldErrors(t, err)
				if len(fes) != 1 || !strings.HasPrefix(fes[0].Error(), tc.want) {
					t.Fatalf("got %v, want one error starting %q", err, tc.want)
				}
			}
		})
	}
}
