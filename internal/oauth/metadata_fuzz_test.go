package oauth

import (
	"encoding/json"
	"testing"
)

// The decoders of what an issuer serves: a discovery document yields a
// jwks_uri only when it names the issuer exactly and the URI is fetchable;
// a JWK set yields only keys that can verify a signature (never a
// symmetric or encryption key); neither panics on any input.
func FuzzDiscoveryDocument(f *testing.F) {
	const iss = "https://idp.example/realms/a"
	f.Add([]byte(`{"issuer":"https://idp.example/realms/a","jwks_uri":"https://idp.example/jwks"}`))
	f.Add([]byte(`{"issuer":"https://idp.example/realms/a","jwks_uri":"http://10.0.0.1/jwks"}`))
	f.Add([]byte(`{"issuer":["x"],"jwks_uri":1}`))
	f.Add([]byte(`{"issuer":"https://evil.example","jwks_uri":"https://evil.example/jwks"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		uri, err := jwksURIOf(body, iss)
		if err != nil {
			return
		}
		// Accepted: the document has a member named exactly "issuer"
		// (after unescaping, as any JSON reader sees it, never a case
		// variant) whose value is the issuer.
		var doc map[string]json.RawMessage
		var named string
		if json.Unmarshal(body, &doc) == nil {
			_ = json.Unmarshal(doc["issuer"], &named)
		}
		if !fetchableURL(uri) || named != iss {
			t.Fatalf("accepted jwks_uri %q from %q", uri, body)
		}
	})
}

func FuzzJWKS(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0","kid":"a"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB","use":"enc"}]}`))
	f.Add([]byte(`{"keys":"x"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := decodeJWKS(body)
		if err != nil {
			return
		}
		for _, k := range keys {
			if !k.Valid() || !k.IsPublic() || k.Use == "enc" {
				t.Fatalf("kept an unusable key %+v from %q", k, body)
			}
		}
	})
}

// A discovery document is read by its members' exact names: one that
// names the issuer only under a case variant ("issuEr", "Issuer") names
// no issuer; an escaped spelling of the exact name is the name.
func TestDiscoveryDocumentExactNames(t *testing.T) {
	const iss = "https://idp.example/realms/a"
	for body, ok := range map[string]bool{
		`{"issuer":"https://idp.example/realms/a","jwks_uri":"https://idp.example/jwks"}`:              true,
		`{"issu\u0065r":"https://idp.example/realms/a","jwks_uri":"https://idp.example/jwks"}`:         true,
		`{"issuEr":"https://idp.example/realms/a","jwks_uri":"https://idp.example/jwks"}`:              false,
		`{"Issuer":"https://idp.example/realms/a","jwks_uri":"https://idp.example/jwks"}`:              false,
		`{"issuer":"https://idp.example/realms/a","JWKS_URI":"https://idp.example/jwks"}`:              false,
		`{"issuer":"https://idp.example/realms/a","jwks_uri":"https://idp.example/jwks","issuer":"x"}`: false,
		`[1]`: false,
	} {
		if _, err := jwksURIOf([]byte(body), iss); (err == nil) != ok {
			t.Errorf("%s: err %v, want accepted %v", body, err, ok)
		}
	}
}
