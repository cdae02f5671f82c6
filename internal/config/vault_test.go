package config

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

func TestParseVault(t *testing.T) {
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{0xfb}, 32) // 0xfb... uses + and / in std base64
	env := map[string]string{
		"MCPGATE_VAULT_KEY_1": base64.StdEncoding.EncodeToString(k1),
		"MCPGATE_VAULT_KEY_2": base64.RawURLEncoding.EncodeToString(k2),
	}
	doc := `vault:
  keys:
    - {id: k2, key: "${MCPGATE_VAULT_KEY_2}"}
    - {id: k1, key: "${MCPGATE_VAULT_KEY_1}"}
`
	c, err := Parse([]byte(doc), "", envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Vault == nil || len(c.Vault.Keys) != 2 || c.Vault.Keys[0].ID != "k2" || c.Vault.Keys[1].ID != "k1" || c.Vault.Keys[0].Line != 3 {
		t.Fatalf("vault %+v", c.Vault)
	}
	for i, want := range [][]byte{k2, k1} {
		got, err := c.Vault.Keys[i].Bytes()
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("keys[%d]: %x, %v", i, got, err)
		}
	}
	if c, err := Parse([]byte("servers: {}\n"), "", nil); err != nil || c.Vault != nil {
		t.Errorf("no vault block: %+v, %v", c.Vault, err)
	}
}

func TestDecodeVaultKey(t *testing.T) {
	raw := make([]byte, 32)
	for i := range raw {
		raw[i] = byte(0xf0 + i)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		s := enc.EncodeToString(raw)
		if got, err := DecodeVaultKey(" " + s + "\n"); err != nil || !bytes.Equal(got, raw) {
			t.Errorf("%s: %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "short", base64.StdEncoding.EncodeToString(raw[:16]), base64.StdEncoding.EncodeToString(append(raw, 1)), strings.Repeat("!", 44)} {
		if _, err := DecodeVaultKey(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestParseVaultErrors(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	short := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	tests := []struct{ name, doc, want string }{
		{"no keys", "vault: {keys: []}\n", "vault.keys: must name at least one key"},
		{"keys absent", "vault: {}\n", "vault.keys: must name at least one key"},
		{"id missing", "vault: {keys: [{key: " + good + "}]}\n", "vault.keys[0].id: required"},
		{"key missing", "vault: {keys: [{id: k1}]}\n", "vault.keys[0].key: required"},
		{"key empty after expansion", "vault: {keys: [{id: k1, key: '${NOPE}'}]}\n", "vault.keys[0].key"},
		{"bad id", "vault: {keys: [{id: 'k 1', key: " + good + "}]}\n", "vault.keys[0].id: must be 1 to 32 of [A-Za-z0-9_-]"},
		{"long id", "vault: {keys: [{id: " + strings.Repeat("a", 33) + ", key: " + good + "}]}\n", "vault.keys[0].id: must be 1 to 32"},
		{"duplicate id", "vault: {keys: [{id: k1, key: " + good + "}, {id: k1, key: " + good + "}]}\n", "vault.keys[1].id: same id as keys[0]"},
		{"short key", "vault: {keys: [{id: k1, key: " + short + "}]}\n", "vault.keys[0].key: must be 32 bytes, base64-encoded (got 16 bytes"},
		{"not base64", "vault: {keys: [{id: k1, key: 'not-base64!!'}]}\n", "vault.keys[0].key: must be 32 bytes, base64-encoded (not valid base64"},
		{"unknown field", "vault: {keys: [{id: k1, key: " + good + ", kid: x}]}\n", "vault.keys[0].kid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", envOf(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// A key value never appears in a message, whatever is wrong with it.
func TestVaultKeyNeverEchoed(t *testing.T) {
	for _, secret := range []string{"hunter2-hunter2-hunter2", base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))} {
		for _, doc := range []string{
			"vault: {keys: [{id: k1, key: '" + secret + "'}]}\n",
			"vault: {keys: [{id: k1, key: ['" + secret + "']}]}\n",
			"vault: {keys: [{id: k1, key: {a: '" + secret + "'}}]}\n",
		} {
			_, err := Parse([]byte(doc), "", envOf(nil))
			if err == nil {
				t.Fatalf("%s accepted", doc)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the key is echoed: %v", err)
			}
		}
	}
}

func TestParseUserAPIKey(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	vault := "vault:\n  keys:\n    - {id: k1, key: " + key + "}\n"
	c, err := Parse([]byte(httpSrv("auth: {type: user_api_key, header_name: X-API-Key}")+vault), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Servers["up"].Auth; a.Type != AuthUserAPIKey || a.HeaderName != "X-API-Key" {
		t.Errorf("auth %+v", a)
	}
	if _, err := Parse([]byte(httpSrv("auth: {type: user_api_key}")+vault), "", nil); err != nil {
		t.Errorf("without header_name: %v", err)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"without a vault", httpSrv("auth: {type: user_api_key}"),
			"servers.up.auth.type: user_api_key needs the vault section (vault.keys)"},
		{"with a value", httpSrv("auth: {type: user_api_key, value: shared-secret}") + vault,
			"servers.up.auth.value: not allowed for auth type user_api_key"},
	} {
		_, err := Parse([]byte(tc.doc), "", nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "shared-secret") {
			t.Errorf("%s: error echoes the value: %v", tc.name, err)
		}
	}
}

func TestParseOAuth2User(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	vault := "vault:\n  keys:\n    - {id: k1, key: " + key + "}\n"
	c, err := Parse([]byte(httpSrv("auth: {type: oauth2_user}")+vault), "", nil)
	if err != nil {
		t.Fatalf("without a client: %v", err)
	}
	if a := c.Servers["up"].Auth; a.Type != AuthOAuth2User || a.ClientID != "" {
		t.Errorf("auth %+v", a)
	}
	c, err = Parse([]byte(httpSrv("auth: {type: oauth2_user, client_id: gw, client_secret: s3cret, authorization_server: 'https://as.example.com', scopes: [read, write]}")+vault), "", nil)
	if err != nil {
		t.Fatalf("pre-registered: %v", err)
	}
	if a := c.Servers["up"].Auth; a.ClientID != "gw" || a.ClientSecret != "s3cret" || len(a.Scopes) != 2 {
		t.Errorf("auth %+v", a)
	}
	// client_id stays required for oauth2.
	if _, err := Parse([]byte(httpSrv("auth: {type: oauth2, client_secret: x}")), "", nil); err == nil || !strings.Contains(err.Error(), "servers.up.auth.client_id: required for auth type oauth2") {
		t.Errorf("oauth2 without client_id: %v", err)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"without a vault", httpSrv("auth: {type: oauth2_user}"),
			"servers.up.auth.type: oauth2_user needs the vault section (vault.keys)"},
		{"secret without id", httpSrv("auth: {type: oauth2_user, client_secret: shared-secret}") + vault,
			"servers.up.auth.client_secret: only with client_id"},
		{"with a token_url", httpSrv("auth: {type: oauth2_user, token_url: 'https://as.example/token'}") + vault,
			"servers.up.auth.token_url: not allowed for auth type oauth2_user"},
		{"with a value", httpSrv("auth: {type: oauth2_user, value: shared-secret}") + vault,
			"servers.up.auth.value: not allowed for auth type oauth2_user"},
	} {
		_, err := Parse([]byte(tc.doc), "", nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "shared-secret") {
			t.Errorf("%s: error echoes the value: %v", tc.name, err)
		}
	}
}
