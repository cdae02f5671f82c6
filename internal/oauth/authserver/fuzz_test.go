package authserver

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// FuzzRegister: the registration body parser never panics, refuses with
// one of RFC 7591's codes, and what it accepts is registrable as is (it
// decodes to itself again) and holds nothing a client may not choose.
func FuzzRegister(f *testing.F) {
	for _, seed := range []string{
		`{"redirect_uris":["http://127.0.0.1:3000/cb"]}`,
		`{"redirect_uris":["https://app.example.com/cb"],"client_name":"App","token_endpoint_auth_method":"client_secret_basic","grant_types":["authorization_code","refresh_token"],"response_types":["code"],"scope":"mcp offline_access","application_type":"native"}`,
		`{"redirect_uris":["http://app.example.com/cb"]}`,
		`{"redirect_uris":["https://a/cb#f"],"client_id":"mine","client_secret":"x","jwks":{"keys":[]}}`,
		`{"redirect_uris":[]}`, `{} {}`, `[]`, `null`, `{"redirect_uris":"https://a/cb"}`,
		`{"redirect_uris":["http://[::1]/cb"],"client_name":"\u0007"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		md, oe := decodeRegistration(body)
		if oe != nil {
			if oe.Status != 400 || (oe.Code != "invalid_redirect_uri" && oe.Code != "invalid_client_metadata") {
				t.Fatalf("refusal %d %q", oe.Status, oe.Code)
			}
			return
		}
		if md.ClientID != "" || md.ClientSecret != "" || md.ClientIDIssuedAt != 0 || md.JWKS != nil || md.JWKSURI != "" {
			t.Fatalf("accepted client-chosen server fields: %+v", md)
		}
		if len(md.RedirectURIs) == 0 {
			t.Fatal("accepted without redirect_uris")
		}
		for _, u := range md.RedirectURIs {
			if err := checkRedirectURI(u); err != nil {
				t.Fatalf("accepted redirect URI %q: %v", u, err)
			}
		}
		if !slices.Contains(clientAuthMethods, md.TokenEndpointAuthMethod) {
			t.Fatalf("accepted auth method %q", md.TokenEndpointAuthMethod)
		}
		again, err := json.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		md2, oe := decodeRegistration(again)
		if oe != nil {
			t.Fatalf("re-decoding what was accepted: %v", oe)
		}
		if diff := cmp.Diff(md2, md); diff != "" {
			t.Fatalf("not stable (-again +first):\n%s", diff)
		}
	})
}

// FuzzAuthorize: the authorization request checks never panic, refuse
// with an OAuth error code, and what they accept is a well-formed PKCE
// challenge, scope and resource of this issuer; the state echoed back is
// exactly the one sent, or none.
func FuzzAuthorize(f *testing.F) {
	const issuer = "https://gw.example/p"
	ch := s256("verifier-verifier-verifier-verifier-verifier")
	for _, seed := range []string{
		"response_type=code&code_challenge=" + ch + "&code_challenge_method=S256&state=x&scope=mcp&resource=https%3A%2F%2Fgw.example%2Fp%2Fmcp",
		"response_type=code&code_challenge=" + ch + "&code_challenge_method=plain",
		"response_type=token&state=a&state=b",
		"response_type=code&code_challenge=" + ch + "&code_challenge_method=S256&resource=https%3A%2F%2Fgw.example%2Fp%2F..%2Fx",
		"response_type=code&code_challenge=" + ch + "&code_challenge_method=S256&resource=https%3A%2F%2FGW.example%3A443%2Fp%2Fadmin%2Fv1%2F",
		"response_type=code&code_challenge=" + ch + "&code_challenge_method=S256&resource=https%3A%2F%2Fgw.example%2Fp%2Fmcp%2Fa%2F%252e%252e%2Fadmin%2Fv1",
		"response_type=code&code_challenge=" + ch + "&code_challenge_method=S256&resource=https%3A%2F%2Fgw.example%2Fp",
		"response_type=code&code_challenge=" + ch + "&code_challenge_method=S256",
		"response_type=code&code_challenge=" + ch + "&code_challenge_method=S256&scope=a%20%20b",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, oe := checkAuthorizeParams(q, issuer)
		if p.state != "" && (len(q["state"]) != 1 || p.state != q.Get("state") || len(p.state) > maxStateLen) {
			t.Fatalf("echoes state %q for %v", p.state, q["state"])
		}
		if oe != nil {
			switch oe.Code {
			case "invalid_request", "unsupported_response_type", "invalid_scope", "invalid_target":
			default:
				t.Fatalf("refusal code %q", oe.Code)
			}
			return
		}
		if !validChallenge(p.challenge) || q.Get("code_challenge_method") != "S256" || q.Get("response_type") != "code" {
			t.Fatalf("accepted challenge %q method %q", p.challenge, q.Get("code_challenge_method"))
		}
		if !validScope(p.scope) {
			t.Fatalf("accepted scope %q", p.scope)
		}
		// One resource, canonical, below the issuer and not the issuer
		// (S22.4); none named is /mcp; the admin API only by its name.
		res := p.resource.url
		if c, err := oauth.CanonicalResource(res); err != nil || c != res {
			t.Fatalf("accepted resource %q, which is not canonical (%q, %v)", res, c, err)
		}
		if !strings.HasPrefix(res, issuer+"/") || p.resource.path != strings.TrimPrefix(res, issuer) {
			t.Fatalf("accepted resource %q, not below the issuer (path %q)", res, p.resource.path)
		}
		if q.Get("resource") == "" && res != issuer+DefaultResourcePath {
			t.Fatalf("no resource named, bound to %q", res)
		}
		if p.resource.admin() != (res == issuer+AdminPath) {
			t.Fatalf("accepted resource %q as admin=%v", res, p.resource.admin())
		}
		for _, own := range []string{"/admin/", "/oauth/", "/.well-known/"} {
			if !p.resource.admin() && strings.HasPrefix(p.resource.path+"/", own) {
				t.Fatalf("accepted resource %q below %s", res, own)
			}
		}
		u, err := url.Parse(res)
		if err != nil || u.Scheme != "https" || u.Host != "gw.example" {
			t.Fatalf("accepted resource %q off the issuer's origin", res)
		}
	})
}

// A fetched client ID metadata document is accepted only when it names its
// own URL, has redirect URIs that pass the redirect rules, and no secret.
func FuzzMetadataDocument(f *testing.F) {
	const id = "https://app.example/client.json"
	f.Add([]byte(`{"client_id":"https://app.example/client.json","client_name":"A","redirect_uris":["http://127.0.0.1:3000/cb"],"token_endpoint_auth_method":"none"}`))
	f.Add([]byte(`{"client_id":"https://evil.example/c.json","redirect_uris":["https://evil.example/cb"]}`))
	f.Add([]byte(`{"client_id":"https://app.example/client.json","redirect_uris":["javascript:alert(1)"]}`))
	f.Add([]byte(`{"client_id":"https://app.example/client.json","client_secret":"s","redirect_uris":["https://a/cb"]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseMetadataDocument(id, body)
		if err != nil {
			return
		}
		if c.ID != id || len(c.RedirectURIs) == 0 {
			t.Fatalf("accepted %+v from %q", c, body)
		}
		for _, u := range c.RedirectURIs {
			if checkRedirectURI(u) != nil {
				t.Fatalf("accepted redirect URI %q", u)
			}
		}
	})
}
