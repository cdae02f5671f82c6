package oauth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/config"
)

func TestVerifyAccepts(t *testing.T) {
	ti := newTestIssuer(t, rsaTestKey(), ecTestKey(), edTestKey())
	base := ti.config()
	base.AllowedAlgs = []string{"RS256", "ES256", "EdDSA"}
	exp := testNow.Add(5 * time.Minute).Truncate(time.Second)
	wantBase := Identity{
		Issuer: ti.URL, Subject: "user-1", User: "user-1", Email: "ada@example.com",
		Teams: []string{"eng", "ops"}, Roles: []string{"admin"}, Scopes: []string{"mcp:tools", "read"},
		ClientID: "client-a", Expiry: exp,
	}
	for _, tt := range []struct {
		name   string
		key    testKey
		cfg    func(*config.OIDCIssuer)
		claims func(map[string]any)
		want   func(*Identity)
	}{
		{name: "RS256", key: rsaTestKey()},
		{name: "ES256", key: ecTestKey()},
		{name: "EdDSA", key: edTestKey()},
		{name: "no kid: the key of the right type is found", key: testKey{"", jose.ES256, ecKey()}},
		{name: "aud as a list", key: ecTestKey(), claims: func(c map[string]any) { c["aud"] = []string{"other", testResource} }},
		{name: "configured audience", key: ecTestKey(),
			cfg:    func(c *config.OIDCIssuer) { c.Audience = "api://mcpgate" },
			claims: func(c map[string]any) { c["aud"] = []string{"api://mcpgate"} }},
		{name: "scp as a list", key: ecTestKey(),
			claims: func(c map[string]any) { delete(c, "scope"); c["scp"] = []string{"a", "b"} },
			want:   func(id *Identity) { id.Scopes = []string{"a", "b"} }},
		{name: "scp as a string", key: ecTestKey(),
			claims: func(c map[string]any) { delete(c, "scope"); c["scp"] = "a b" },
			want:   func(id *Identity) { id.Scopes = []string{"a", "b"} }},
		{name: "required scopes present", key: ecTestKey(),
			cfg: func(c *config.OIDCIssuer) { c.RequiredScopes = []string{"read"} }},
		{name: "nested and namespaced claim paths", key: ecTestKey(),
			cfg: func(c *config.OIDCIssuer) {
				c.Claims = config.ClaimPaths{User: "preferred_username", Email: "email", Team: "https://example.com/team",
					Teams: "groups", Org: "tenant.name", Roles: "realm_access.roles"}
			},
			claims: func(c map[string]any) {
				c["preferred_username"] = "ada"
				c["https://example.com/team"] = "ops"
				c["tenant"] = map[string]any{"name": "acme"}
				c["realm_access"] = map[string]any{"roles": []any{"dev", 7, "dev", "lead"}}
			},
			want: func(id *Identity) {
				id.User, id.Org = "ada", "acme"
				id.Teams = []string{"ops", "eng"} // team, then teams, deduplicated
				id.Roles = []string{"dev", "lead"}
			}},
		{name: "client_id without azp", key: ecTestKey(),
			claims: func(c map[string]any) { delete(c, "azp"); c["client_id"] = "client-b" },
			want:   func(id *Identity) { id.ClientID = "client-b" }},
		{name: "mcpgate_key is ignored from an OIDC issuer", key: ecTestKey(),
			claims: func(c map[string]any) { c["mcpgate_key"] = "team-key" }},
		{name: "expired within the skew", key: ecTestKey(),
			claims: func(c map[string]any) { c["exp"] = testNow.Add(-30 * time.Second).Unix() },
			want:   func(id *Identity) { id.Expiry = testNow.Add(-30 * time.Second) }},
		{name: "nbf and iat within the skew", key: ecTestKey(), claims: func(c map[string]any) {
			c["nbf"] = testNow.Add(30 * time.Second).Unix()
			c["iat"] = testNow.Add(30 * time.Second).Unix()
		}},
		{name: "no nbf, no iat", key: ecTestKey(), claims: func(c map[string]any) { delete(c, "nbf"); delete(c, "iat") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			v, _ := testVerifier(t, newFakeClock(), cfg)
			c := ti.claims()
			if tt.claims != nil {
				tt.claims(c)
			}
			id, err := verify(v, sign(t, tt.key, c, nil))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := wantBase
			want.Teams = append([]string(nil), wantBase.Teams...)
			if tt.want != nil {
				tt.want(&want)
			}
			if diff := cmp.Diff(id, &want); diff != "" {
				t.Errorf("Identity (-got +want):\n%s", diff)
			}
		})
	}
}

// negative is one token Verify must reject.
type negative struct {
	name string
	tok  func(t *testing.T) string
	// want is the expected error: a *TokenError whose description
	// contains want, or a *ScopeError when want is "scope".
	want string
}

func negatives(ti, other *testIssuer) []negative {
	claims := func(f func(map[string]any)) map[string]any {
		c := ti.claims()
		if f != nil {
			f(c)
		}
		return c
	}
	signed := func(k testKey, f func(map[string]any)) func(t *testing.T) string {
		return func(t *testing.T) string { return sign(t, k, claims(f), nil) }
	}
	ec := ecTestKey()
	return []negative{
		{"expired", signed(ec, func(c map[string]any) { c["exp"] = testNow.Add(-2 * time.Minute).Unix() }), "expired"},
		{"expired exactly at the skew", signed(ec, func(c map[string]any) { c["exp"] = testNow.Add(-60 * time.Second).Unix() }), "expired"},
		{"missing exp", signed(ec, func(c map[string]any) { delete(c, "exp") }), "no expiry"},
		{"exp as a string", signed(ec, func(c map[string]any) { c["exp"] = fmt.Sprint(testNow.Add(time.Hour).Unix()) }), "exp claim is invalid"},
		{"not yet valid (nbf)", signed(ec, func(c map[string]any) { c["nbf"] = testNow.Add(2 * time.Minute).Unix() }), "not valid yet"},
		{"nbf so far ahead it would wrap", signed(ec, func(c map[string]any) { c["nbf"] = json.Number("9223372036854775807") }), "nbf claim is invalid"},
		{"iat in the future", signed(ec, func(c map[string]any) { c["iat"] = testNow.Add(2 * time.Minute).Unix() }), "issued in the future"},
		{"wrong audience", signed(ec, func(c map[string]any) { c["aud"] = "https://gw.example/other" }), "audience"},
		{"audience list without the resource", signed(ec, func(c map[string]any) { c["aud"] = []string{"a", "b"} }), "audience"},
		{"no audience", signed(ec, func(c map[string]any) { delete(c, "aud") }), "no audience"},
		{"audience list with a non-string", signed(ec, func(c map[string]any) { c["aud"] = []any{testResource, 1} }), "no audience"},
		{"issuer not configured", signed(ec, func(c map[string]any) { c["iss"] = "https://evil.example" }), "issuer is not accepted"},
		{"issuer with a trailing slash", signed(ec, func(c map[string]any) { c["iss"] = ti.URL + "/" }), "issuer is not accepted"},
		{"no issuer", signed(ec, func(c map[string]any) { delete(c, "iss") }), "no issuer"},
		// Signed with ti's key but claiming the other configured issuer:
		// only the other issuer's keys may verify it.
		{"wrong issuer", signed(ec, func(c map[string]any) { c["iss"] = other.URL }), "unknown key"},
		{"no user claim", signed(ec, func(c map[string]any) { delete(c, "sub") }), "no user"},
		{"missing required scope", signed(ec, func(c map[string]any) { c["scope"] = "read" }), "scope"},
		{"alg none", func(t *testing.T) string {
			return b64json(t, map[string]any{"alg": "none", "typ": "JWT"}) + "." + b64json(t, claims(nil)) + "."
		}, "algorithm is not allowed"},
		{"alg none with the signature of a valid token", func(t *testing.T) string {
			good := strings.Split(sign(t, ec, claims(nil), nil), ".")
			return b64json(t, map[string]any{"alg": "none", "kid": ec.kid}) + "." + good[1] + "." + good[2]
		}, "algorithm is not allowed"},
		{"HS256 with the RSA public key as the secret", func(t *testing.T) string {
			der := must(x509.MarshalPKIXPublicKey(&rsaKey().PublicKey))
			return sign(t, testKey{"rsa-1", jose.HS256, der}, claims(nil), nil)
		}, "algorithm is not allowed"},
		{"alg not in the allow-list (RS512)", signed(testKey{"rsa-1", jose.RS512, rsaKey()}, nil), "algorithm is not allowed"},
		{"EdDSA not in the default allow-list", signed(edTestKey(), nil), "algorithm is not allowed"},
		// The JWKS says ec-1 is an EC key; an RS256 token naming it is not
		// checked with the RSA key either.
		{"kid of a key of another type", signed(testKey{"ec-1", jose.RS256, rsaKey()}, nil), "unknown key"},
		{"unknown kid", signed(testKey{"nope", jose.ES256, ecKey()}, nil), "unknown key"},
		{"signed by a key the issuer never published", signed(testKey{"ec-1", jose.ES256, otherECKey()}, nil), "signature is invalid"},
		{"embedded jwk without kid is not trusted", func(t *testing.T) string {
			k := otherECKey()
			hdr := map[jose.HeaderKey]any{"jwk": jose.JSONWebKey{Key: &k.PublicKey, Algorithm: "ES256"}}
			return sign(t, testKey{"", jose.ES256, k}, claims(nil), hdr)
		}, "signature is invalid"},
		{"embedded jwk and jku are not trusted", func(t *testing.T) string {
			k := otherECKey()
			hdr := map[jose.HeaderKey]any{
				"jwk": jose.JSONWebKey{Key: &k.PublicKey, KeyID: "attacker", Algorithm: "ES256"},
				"jku": other.srv.URL + "/jwks", "x5u": other.srv.URL + "/cert",
			}
			return sign(t, testKey{"attacker", jose.ES256, k}, claims(nil), hdr)
		}, "unknown key"},
		{"crit header", func(t *testing.T) string {
			return sign(t, ec, claims(nil), map[jose.HeaderKey]any{"crit": []string{"exp"}, "exp": 1})
		}, "unsupported header"},
		{"tampered payload", func(t *testing.T) string {
			parts := strings.Split(sign(t, ec, claims(nil), nil), ".")
			parts[1] = b64json(t, claims(func(c map[string]any) { c["sub"] = "admin" }))
			return strings.Join(parts, ".")
		}, "signature is invalid"},
		{"tampered signature", func(t *testing.T) string {
			parts := strings.Split(sign(t, ec, claims(nil), nil), ".")
			sig := must(base64.RawURLEncoding.DecodeString(parts[2]))
			sig[10] ^= 1
			parts[2] = base64.RawURLEncoding.EncodeToString(sig)
			return strings.Join(parts, ".")
		}, "signature is invalid"},
		{"JWE", func(t *testing.T) string {
			enc := must(jose.NewEncrypter(jose.A128GCM, jose.Recipient{Algorithm: jose.RSA_OAEP_256, Key: &rsaKey().PublicKey}, nil))
			obj := must(enc.Encrypt([]byte(`{"iss":"` + ti.URL + `"}`)))
			return must(obj.CompactSerialize())
		}, "JWE"},
		{"payload not an object", func(t *testing.T) string {
			return b64json(t, map[string]any{"alg": "ES256"}) + "." + base64.RawURLEncoding.EncodeToString([]byte(`[1]`)) + ".c2ln"
		}, "not a JSON object"},
		{"claims followed by more JSON", func(t *testing.T) string {
			return b64json(t, map[string]any{"alg": "ES256"}) + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"x"}{}`)) + ".c2ln"
		}, "not a JSON object"},
	}
}

func TestVerifyRejects(t *testing.T) {
	ti := newTestIssuer(t, rsaTestKey(), ecTestKey(), edTestKey())
	other := newTestIssuer(t, rsaTestKey())
	cfg := ti.config()
	cfg.RequiredScopes = []string{"mcp:tools"}
	v, _ := testVerifier(t, newFakeClock(), cfg, other.config())
	for _, tt := range negatives(ti, other) {
		t.Run(tt.name, func(t *testing.T) {
			tok := tt.tok(t)
			id, err := verify(v, tok)
			if id != nil {
				t.Fatalf("Verify accepted the token: %+v", id)
			}
			checkRejection(t, err, tt.want)
		})
	}
}

func checkRejection(t *testing.T, err error, want string) {
	t.Helper()
	var te *TokenError
	var se *ScopeError
	switch {
	case want == "scope":
		if !errors.As(err, &se) {
			t.Fatalf("err = %v; want a *ScopeError", err)
		}
		if diff := cmp.Diff(se.Required, []string{"mcp:tools"}); diff != "" {
			t.Errorf("Required (-got +want):\n%s", diff)
		}
	case !errors.As(err, &te):
		t.Fatalf("err = %v (%T); want a *TokenError (%q)", err, err, want)
	case !strings.Contains(te.Description, want):
		t.Errorf("Description = %q; want it to contain %q", te.Description, want)
	}
}

func b64json(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestVerifyNotJWT(t *testing.T) {
	ti := newTestIssuer(t, ecTestKey())
	v, _ := testVerifier(t, newFakeClock(), ti.config())
	// A JWS in JSON serialization with two signatures: never a bearer
	// JWT, whatever its signatures.
	signer := must(jose.NewMultiSigner([]jose.SigningKey{
		{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: ecKey(), KeyID: "ec-1"}},
		{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: rsaKey(), KeyID: "rsa-1"}},
	}, nil))
	multi := must(signer.Sign(must(json.Marshal(ti.claims())))).FullSerialize()
	for _, tok := range []string{"", "mcpg_abcdef", "a.b.c", "e30.e30.", "W10.e30.e30", "abc.def", multi, strings.Repeat("a", maxTokenSize+1)} {
		_, err := verify(v, tok)
		if tok == strings.Repeat("a", maxTokenSize+1) {
			var te *TokenError
			if !errors.As(err, &te) {
				t.Errorf("Verify(huge) = %v; want a *TokenError", err)
			}
			continue
		}
		if !errors.Is(err, ErrNotJWT) {
			t.Errorf("Verify(%.40q) = %v; want ErrNotJWT", tok, err)
		}
	}
	if ti.jwksHits()+ti.discoveryHits() != 0 {
		t.Errorf("non-JWTs caused %d fetches", ti.jwksHits()+ti.discoveryHits())
	}
}

func TestLooksLikeJWT(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{b64("{\"alg\":\"ES256\"}") + ".e30.c2ln", true},
		{b64("{\"alg\":\"none\"}") + ".e30.", true},
		{b64("{\"alg\":\"ES256\"}") + ".e30", false},
		{b64("{\"alg\":\"ES256\"}") + ".e30.c2ln.x", false},
		{b64("{\"typ\":\"JWT\"}") + ".e30.c2ln", false},
		{b64("{\"alg\":7}") + ".e30.c2ln", false},
		{b64("null") + ".e30.c2ln", false},
		{b64("[\"alg\"]") + ".e30.c2ln", false},
		{"eyJhbGciOiJFUzI1NiJ9=.e30.c2ln", false}, // padding is not base64url
		{"mcpg_0123.abc.def", false},
		{"", false},
	} {
		if got := LooksLikeJWT(tt.in); got != tt.want {
			t.Errorf("LooksLikeJWT(%q) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

// TestVerifyNeverTrustsHMAC allows HS256 and publishes an "oct" key, as a
// careless configuration or a hostile JWKS might: the token still fails.
func TestVerifyNeverTrustsHMAC(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	ti := newTestIssuer(t, ecTestKey())
	ti.set(func(ti *testIssuer) {
		ti.jwks = append(ti.jwks, jose.JSONWebKey{Key: secret, KeyID: "hmac", Algorithm: "HS256", Use: "sig"})
	})
	cfg := ti.config()
	cfg.AllowedAlgs = []string{"HS256", "none", "ES256"}
	v, _ := testVerifier(t, newFakeClock(), cfg)
	_, err := verify(v, sign(t, testKey{"hmac", jose.HS256, secret}, ti.claims(), nil))
	checkRejection(t, err, "algorithm is not allowed")
	if _, err := verify(v, sign(t, ecTestKey(), ti.claims(), nil)); err != nil {
		t.Errorf("ES256 next to the oct key: %v", err)
	}
}

func TestVerifyRejectsUnfitKeys(t *testing.T) {
	small := testKey{"rsa-small", jose.RS256, must(rsa.GenerateKey(rand.Reader, 1024))}
	enc := ecTestKey()
	enc.kid = "ec-enc"
	wrongAlg := ecTestKey()
	wrongAlg.kid = "ec-384"
	ti := newTestIssuer(t, small)
	ti.set(func(ti *testIssuer) {
		e := enc.public()
		e.Use = "enc"
		w := wrongAlg.public()
		w.Algorithm = "ES384"
		ti.jwks = append(ti.jwks, e, w, json.RawMessage(`{"kty":"XYZ","kid":"junk"}`))
	})
	v, _ := testVerifier(t, newFakeClock(), ti.config())
	for _, k := range []testKey{small, enc, wrongAlg} {
		_, err := verify(v, sign(t, k, ti.claims(), nil))
		checkRejection(t, err, "unknown key")
	}
}

func TestVerifyLocalIssuer(t *testing.T) {
	const iss = "https://gw.example"
	k := ecTestKey()
	var mu sync.Mutex
	keys := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{k.public()}}
	v := NewVerifier(VerifierOptions{
		Now: newFakeClock().Now,
		Local: []LocalIssuer{{
			Match:  func(s string) bool { return s == iss },
			Keys:   func() jose.JSONWebKeySet { mu.Lock(); defer mu.Unlock(); return keys },
			Claims: config.ClaimPaths{User: "user", Email: "email", Teams: "teams", Org: "org", Roles: "roles"},
		}},
	})
	claims := func(aud any) map[string]any {
		return map[string]any{
			"iss": iss, "sub": "ada", "user": "ada@corp", "aud": aud, "exp": testNow.Add(time.Minute).Unix(),
			"teams": []string{"eng"}, "org": "acme", "roles": []string{"dev"}, "email": "ada@example.com",
			"client_id": "https://client.example/meta.json", "scope": "mcp", "mcpgate_key": "ada-key",
		}
	}
	want := &Identity{
		Issuer: iss, Subject: "ada", User: "ada@corp", Email: "ada@example.com", Teams: []string{"eng"}, Org: "acme",
		Roles: []string{"dev"}, Scopes: []string{"mcp"}, ClientID: "https://client.example/meta.json", Key: "ada-key",
		Expiry: testNow.Add(time.Minute),
	}
	for _, tt := range []struct {
		name     string
		aud      any
		resource string
		ok       bool
	}{
		{"aud is the resource", testResource, testResource, true},
		{"aud is the resource in another spelling", "HTTPS://GW.example:443/mcp/", "https://gw.example/mcp", true},
		{"aud is the resource, as a list of one", []string{"https://gw.example/admin/v1"}, "https://gw.example/admin/v1", true},
		// S22.4: the issuer is never an audience, on any route or on the
		// admin API (it was, for every route under it).
		{"aud is the issuer, resource below it", iss, "https://gw.example/mcp/github", false},
		{"aud is the issuer, on the admin API", iss, "https://gw.example/admin/v1", false},
		{"aud is the issuer with a slash, on the admin API", iss + "/", "https://gw.example/admin/v1", false},
		{"aud lists the issuer", []string{"x", iss}, "https://gw.example/mcp", false},
		{"aud lists the resource and another", []string{testResource, "https://gw.example/admin/v1"}, testResource, false},
		{"aud is another resource", "https://gw.example/mcp/other", testResource, false},
		{"aud is a route, on the admin API", "https://gw.example/mcp/alpha", "https://gw.example/admin/v1", false},
		{"aud is the admin API, on a route", "https://gw.example/admin/v1", "https://gw.example/mcp/alpha", false},
		{"aud climbs from a route to the admin API", "https://gw.example/mcp/alpha/../../admin/v1", "https://gw.example/admin/v1", false},
		{"aud is a route, on a route below it", "https://gw.example/mcp", "https://gw.example/mcp/alpha", false},
		{"aud is the issuer, resource elsewhere", iss, "https://gw.example.evil/mcp", false},
		{"aud is the issuer, no resource", iss, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id, err := v.Verify(context.Background(), sign(t, k, claims(tt.aud), nil), tt.resource)
			if !tt.ok {
				checkRejection(t, err, "audience")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(id, want); diff != "" {
				t.Errorf("Identity (-got +want):\n%s", diff)
			}
		})
	}

	t.Run("key rotated out", func(t *testing.T) {
		tok := sign(t, k, claims(testResource), nil)
		mu.Lock()
		keys = jose.JSONWebKeySet{}
		mu.Unlock()
		_, err := verify(v, tok)
		checkRejection(t, err, "unknown key")
	})
	t.Run("RS256 is not a local default", func(t *testing.T) {
		_, err := verify(v, sign(t, rsaTestKey(), claims(testResource), nil))
		checkRejection(t, err, "algorithm is not allowed")
	})
}

// An OIDC issuer's token is good where its aud names the route's
// resource; an issuer-wide audience (auth.oidc[].audience, one value for
// the whole gateway) is good on the MCP routes but never on the admin
// API, which takes only a token naming it (VerifyExact). The gateway's
// base URL as an audience names no route, so it opens none.
func TestVerifyAudienceOfOIDCIssuers(t *testing.T) {
	ti := newTestIssuer(t, ecTestKey())
	const admin = "https://gw.example/admin/v1"
	withAudience := ti.config()
	withAudience.Audience = "api://mcpgate"
	for _, tt := range []struct {
		name     string
		cfg      config.OIDCIssuer
		aud      any
		resource string
		exact    bool
		ok       bool
	}{
		{"the route's resource", ti.config(), testResource, testResource, false, true},
		{"the route's resource in another spelling", ti.config(), "https://GW.EXAMPLE:443/mcp/", testResource, false, true},
		{"another route's resource", ti.config(), "https://gw.example/mcp/alpha", testResource, false, false},
		{"the gateway's base URL, on a route", ti.config(), "https://gw.example", testResource, false, false},
		{"the gateway's base URL, on the admin API", ti.config(), "https://gw.example", admin, true, false},
		{"the admin API, on the admin API", ti.config(), admin, admin, true, true},
		{"the admin API among others, on the admin API", ti.config(), []string{"api://mcpgate", admin}, admin, true, true},
		{"the admin API, on a route", ti.config(), admin, testResource, false, false},
		{"a route, on the admin API", ti.config(), testResource, admin, true, false},
		{"the configured audience, on a route", withAudience, "api://mcpgate", testResource, false, true},
		{"the configured audience, on the admin API", withAudience, "api://mcpgate", admin, true, false},
		{"the configured audience and a route, on the admin API", withAudience, []string{"api://mcpgate", testResource}, admin, true, false},
		{"the configured audience and the admin API, on the admin API", withAudience, []string{"api://mcpgate", admin}, admin, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, _ := testVerifier(t, newFakeClock(), tt.cfg)
			c := ti.claims()
			c["aud"] = tt.aud
			tok := sign(t, ecTestKey(), c, nil)
			var err error
			if tt.exact {
				_, err = v.VerifyExact(context.Background(), tok, tt.resource)
			} else {
				_, err = v.Verify(context.Background(), tok, tt.resource)
			}
			if !tt.ok {
				checkRejection(t, err, "audience does not include this resource")
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}

// A token verified for a route is remembered for that route only: the
// cache never answers the admin API (VerifyExact) with what Verify found
// for the same resource string.
func TestVerifiedCacheKeepsExactApart(t *testing.T) {
	ti := newTestIssuer(t, ecTestKey())
	cfg := ti.config()
	cfg.Audience = "api://mcpgate"
	v, _ := testVerifier(t, newFakeClock(), cfg)
	c := ti.claims()
	c["aud"] = "api://mcpgate"
	tok := sign(t, ecTestKey(), c, nil)
	const admin = "https://gw.example/admin/v1"
	if _, err := v.Verify(context.Background(), tok, admin); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	_, err := v.VerifyExact(context.Background(), tok, admin)
	checkRejection(t, err, "audience does not include this resource")
}

// A local issuer's tokens are held to their own times with a small
// leeway, DefaultLocalSkew, not the minute that other issuers' clocks
// get: a 3 s access token of mcpgate's is refused seconds after it
// expired, so the client refreshes, as auth.login.access_token_ttl says.
func TestVerifyLocalIssuerSkew(t *testing.T) {
	const iss = "https://gw.example"
	k := ecTestKey()
	keys := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{k.public()}}
	local := func(skew time.Duration) *Verifier {
		return NewVerifier(VerifierOptions{
			Now: newFakeClock().Now,
			Local: []LocalIssuer{{
				Match: func(s string) bool { return s == iss },
				Keys:  func() jose.JSONWebKeySet { return keys },
				Skew:  skew,
			}},
		})
	}
	tok := func(exp, nbf time.Duration) string {
		return sign(t, k, map[string]any{"iss": iss, "sub": "ada", "aud": testResource,
			"exp": testNow.Add(exp).Unix(), "nbf": testNow.Add(nbf).Unix(), "iat": testNow.Add(nbf).Unix()}, nil)
	}
	for _, tt := range []struct {
		name     string
		skew     time.Duration
		exp, nbf time.Duration
		want     string // "" accepted, else the rejection
	}{
		{"valid", 0, time.Second, 0, ""},
		{"expired within the default leeway", 0, -DefaultLocalSkew + time.Second, -time.Minute, ""},
		{"expired at the default leeway", 0, -DefaultLocalSkew, -time.Minute, "expired"},
		{"expired 30 s ago: within an OIDC issuer's minute, not a local one's", 0, -30 * time.Second, -time.Minute, "expired"},
		{"issued slightly ahead (another replica's clock)", 0, time.Minute, DefaultLocalSkew - time.Second, ""},
		{"issued beyond the leeway ahead", 0, time.Minute, DefaultLocalSkew + time.Second, "not valid yet"},
		{"an explicit leeway", 20 * time.Second, -15 * time.Second, -time.Minute, ""},
		{"no leeway", -1, 0, -time.Minute, "expired"},
		{"no leeway, not yet expired", -1, time.Second, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := verify(local(tt.skew), tok(tt.exp, tt.nbf))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			checkRejection(t, err, tt.want)
		})
	}

	// The remote issuers keep their minute beside a local one.
	ti := newTestIssuer(t, ecTestKey())
	v := NewVerifier(VerifierOptions{Now: newFakeClock().Now, Issuers: []config.OIDCIssuer{ti.config()},
		Local: []LocalIssuer{{Match: func(s string) bool { return s == iss }, Keys: func() jose.JSONWebKeySet { return keys }}}})
	c := ti.claims()
	c["exp"] = testNow.Add(-30 * time.Second).Unix()
	if _, err := verify(v, sign(t, ecTestKey(), c, nil)); err != nil {
		t.Errorf("an OIDC issuer's token 30 s past exp: %v; want accepted (config.DefaultClockSkew)", err)
	}
	if _, err := verify(v, tok(-30*time.Second, -time.Minute)); err == nil {
		t.Error("a local token 30 s past exp was accepted")
	}
}

func TestDiscovery(t *testing.T) {
	for _, tt := range []struct {
		name  string
		serve map[string]int
		hits  []string // paths requested, beyond the JWKS
	}{
		{"openid-configuration", map[string]int{formOIDC: 200},
			[]string{"/realms/test/.well-known/openid-configuration"}},
		{"RFC 8414, path inserted", map[string]int{formInserted: 200},
			[]string{"/realms/test/.well-known/openid-configuration", "/.well-known/oauth-authorization-server/realms/test"}},
		{"RFC 8414, appended", map[string]int{formAppended: 200},
			[]string{"/realms/test/.well-known/openid-configuration", "/.well-known/oauth-authorization-server/realms/test", "/realms/test/.well-known/oauth-authorization-server"}},
		{"OIDC errors, RFC 8414 answers", map[string]int{formOIDC: 500, formInserted: 200},
			[]string{"/realms/test/.well-known/openid-configuration", "/.well-known/oauth-authorization-server/realms/test"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ti := newTestIssuer(t, ecTestKey())
			ti.set(func(ti *testIssuer) { ti.serve = tt.serve })
			v, _ := testVerifier(t, newFakeClock(), ti.config())
			if _, err := verify(v, sign(t, ecTestKey(), ti.claims(), nil)); err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.hits {
				if n := ti.count(p); n != 1 {
					t.Errorf("%s requested %d times; want 1", p, n)
				}
			}
			if n := ti.jwksHits(); n != 1 {
				t.Errorf("JWKS fetched %d times; want 1", n)
			}
		})
	}
}

func TestDiscoveryURLs(t *testing.T) {
	for _, tt := range []struct {
		iss  string
		want []string
	}{
		{"https://idp.example", []string{
			"https://idp.example/.well-known/openid-configuration",
			"https://idp.example/.well-known/oauth-authorization-server"}},
		{"https://idp.example/", []string{
			"https://idp.example/.well-known/openid-configuration",
			"https://idp.example/.well-known/oauth-authorization-server"}},
		{"https://idp.example/tenant/v2.0/", []string{
			"https://idp.example/tenant/v2.0/.well-known/openid-configuration",
			"https://idp.example/.well-known/oauth-authorization-server/tenant/v2.0",
			"https://idp.example/tenant/v2.0/.well-known/oauth-authorization-server"}},
	} {
		if diff := cmp.Diff(discoveryURLs(tt.iss), tt.want); diff != "" {
			t.Errorf("discoveryURLs(%q) (-got +want):\n%s", tt.iss, diff)
		}
	}
}

func TestDiscoveryFailures(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, ti *testIssuer)
	}{
		{"metadata names another issuer", func(t *testing.T, ti *testIssuer) {
			ti.docIss = ti.URL + "/"
			ti.serve = map[string]int{formOIDC: 200, formInserted: 200, formAppended: 200}
		}},
		{"no metadata at all", func(t *testing.T, ti *testIssuer) { ti.serve = nil }},
		{"JWKS errors", func(t *testing.T, ti *testIssuer) { ti.jwksCode = http.StatusBadGateway }},
		{"JWKS not JSON", func(t *testing.T, ti *testIssuer) { ti.jwksBody = []byte("<html>") }},
		{"JWKS without usable keys", func(t *testing.T, ti *testIssuer) { ti.jwksBody = []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`) }},
		{"JWKS larger than 1 MiB", func(t *testing.T, ti *testIssuer) {
			k := must(json.Marshal(ecTestKey().public()))
			ti.jwksBody = []byte(`{"keys":[` + string(k) + `],"pad":"` + strings.Repeat("x", maxDocumentSize) + `"}`)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ti := newTestIssuer(t, ecTestKey())
			ti.set(func(ti *testIssuer) { tt.setup(t, ti) })
			clock := newFakeClock()
			v, log := testVerifier(t, clock, ti.config())
			tok := sign(t, ecTestKey(), ti.claims(), nil)
			_, err := verify(v, tok)
			checkRejection(t, err, "issuer keys unavailable")
			first := ti.total()
			for range 4 {
				_, err := verify(v, tok)
				checkRejection(t, err, "issuer keys unavailable")
			}
			// One attempt, one warning, for all five tokens.
			if n := ti.total(); n != first {
				t.Errorf("4 more tokens within the interval made %d more requests; want 0", n-first)
			}
			if n := countLines(log.String(), "level=WARN"); n != 1 {
				t.Errorf("%d warnings; want 1:\n%s", n, log)
			}
			clock.Advance(refetchInterval)
			verify(v, tok)
			if n := ti.total(); n == first {
				t.Errorf("after the interval, no new attempt")
			}
			if n := countLines(log.String(), "level=WARN"); n != 2 {
				t.Errorf("%d warnings after the second attempt; want 2", n)
			}
		})
	}
}

func TestConfiguredJWKSURLSkipsDiscovery(t *testing.T) {
	ti := newTestIssuer(t, ecTestKey())
	ti.set(func(ti *testIssuer) { ti.serve = nil })
	cfg := ti.config()
	cfg.JWKSURL = ti.srv.URL + "/jwks"
	v, _ := testVerifier(t, newFakeClock(), cfg)
	if _, err := verify(v, sign(t, ecTestKey(), ti.claims(), nil)); err != nil {
		t.Fatal(err)
	}
	if n := ti.discoveryHits(); n != 0 {
		t.Errorf("discovery requested %d times; want 0", n)
	}
}

func TestDefaultClientRefusesRedirectToAnotherHost(t *testing.T) {
	ti := newTestIssuer(t, ecTestKey())
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, ti.srv.URL+"/jwks", http.StatusFound)
	}))
	defer redirect.Close()
	sameHost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/jwks", http.StatusFound)
			return
		}
		ti.handle(w, r)
	}))
	defer sameHost.Close()

	for _, tt := range []struct {
		jwks string
		ok   bool
	}{
		{redirect.URL + "/jwks", false},
		{sameHost.URL + "/moved", true},
	} {
		cfg := ti.config()
		cfg.JWKSURL = tt.jwks
		v := NewVerifier(VerifierOptions{Issuers: []config.OIDCIssuer{cfg}, Now: newFakeClock().Now})
		_, err := verify(v, sign(t, ecTestKey(), ti.claims(), nil))
		if (err == nil) != tt.ok {
			t.Errorf("JWKS at %s: err = %v; want ok = %v", tt.jwks, err, tt.ok)
		}
	}
}

func TestKeyRotation(t *testing.T) {
	k1, k2 := ecTestKey(), rsaTestKey()
	ti := newTestIssuer(t, k1)
	clock := newFakeClock()
	v, _ := testVerifier(t, clock, ti.config())
	if _, err := verify(v, sign(t, k1, ti.claims(), nil)); err != nil {
		t.Fatal(err)
	}
	ti.setKeys(k1, k2)
	if _, err := verify(v, sign(t, k2, ti.claims(), nil)); err != nil {
		t.Fatalf("new kid after rotation: %v", err)
	}
	if n := ti.jwksHits(); n != 2 {
		t.Errorf("JWKS fetched %d times; want 2 (cold, then the new kid)", n)
	}
	// The old key is still cached and still good.
	if _, err := verify(v, sign(t, k1, ti.claims(), nil)); err != nil {
		t.Fatal(err)
	}
	if n := ti.jwksHits(); n != 2 {
		t.Errorf("JWKS fetched %d times; want still 2", n)
	}
	if n := ti.discoveryHits(); n != 1 {
		t.Errorf("discovery requested %d times; want 1", n)
	}
}

func TestUnknownKidRefetchIsRateLimited(t *testing.T) {
	ti := newTestIssuer(t, ecTestKey())
	clock := newFakeClock()
	v, _ := testVerifier(t, clock, ti.config())
	if _, err := verify(v, sign(t, ecTestKey(), ti.claims(), nil)); err != nil {
		t.Fatal(err)
	}
	forged := sign(t, testKey{"never", jose.ES256, otherECKey()}, ti.claims(), nil)
	for range 5 {
		_, err := verify(v, forged)
		checkRejection(t, err, "unknown key")
		clock.Advance(5 * time.Second) // 25 s in all: within the interval
	}
	if n := ti.jwksHits(); n != 2 {
		t.Errorf("JWKS fetched %d times over 5 unknown kids in 30 s; want 2", n)
	}
	clock.Advance(5 * time.Second)
	verify(v, forged)
	if n := ti.jwksHits(); n != 3 {
		t.Errorf("after the interval, JWKS fetched %d times; want 3", n)
	}
	// Known kids never wait for the rate limit.
	if _, err := verify(v, sign(t, ecTestKey(), ti.claims(), nil)); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownKidOnColdCache(t *testing.T) {
	ti := newTestIssuer(t, ecTestKey())
	v, _ := testVerifier(t, newFakeClock(), ti.config())
	forged := sign(t, testKey{"never", jose.ES256, otherECKey()}, ti.claims(), nil)
	for i := range 5 {
		_, err := verify(v, forged)
		checkRejection(t, err, "unknown key")
		// The first token fetches the keys once (not again for its kid,
		// they are brand new); the second may re-fetch, then the rate
		// limit holds.
		if want := min(i+1, 2); ti.jwksHits() != want {
			t.Errorf("after %d tokens, JWKS fetched %d times; want %d", i+1, ti.jwksHits(), want)
		}
	}
}

func TestKeysExpireAfterMaxAge(t *testing.T) {
	k1, k2 := ecTestKey(), rsaTestKey()
	ti := newTestIssuer(t, k1)
	clock := newFakeClock()
	v, _ := testVerifier(t, clock, ti.config())
	if _, err := verify(v, sign(t, k1, ti.claims(), nil)); err != nil {
		t.Fatal(err)
	}
	// The issuer withdraws k1; within the hour it is still trusted.
	ti.setKeys(k2)
	clock.Advance(keysMaxAge - time.Second)
	tok := func() string {
		c := ti.claims()
		c["exp"] = clock.Now().Add(time.Minute).Unix()
		return sign(t, k1, c, nil)
	}
	if _, err := verify(v, tok()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	_, err := verify(v, tok())
	checkRejection(t, err, "unknown key")

	// A re-fetch that fails keeps the keys it had.
	ti.setKeys(k1)
	clock.Advance(refetchInterval)
	verify(v, tok())
	ti.set(func(ti *testIssuer) { ti.jwksCode = 500 })
	clock.Advance(keysMaxAge)
	if _, err := verify(v, tok()); err != nil {
		t.Errorf("with the IdP down, cached keys: %v", err)
	}
}

func TestConcurrentColdCache(t *testing.T) {
	ti := newTestIssuer(t, ecTestKey())
	ti.set(func(ti *testIssuer) { ti.delay = 50 * time.Millisecond })
	v, _ := testVerifier(t, newFakeClock(), ti.config())
	tok := sign(t, ecTestKey(), ti.claims(), nil)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			if _, err := verify(v, tok); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if d, j := ti.discoveryHits(), ti.jwksHits(); d != 1 || j != 1 {
		t.Errorf("50 cold verifications: %d discoveries, %d JWKS fetches; want 1 and 1", d, j)
	}
}

// TestFetchOutlivesItsCaller: the caller whose token started a fetch goes
// away; one waiting for the same keys gets them rather than its error.
func TestFetchOutlivesItsCaller(t *testing.T) {
	ti := newTestIssuer(t, ecTestKey())
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ti.set(func(ti *testIssuer) {
		ti.onJWKS = func() {
			first := false
			once.Do(func() { first = true })
			if first {
				close(started)
				<-release
			}
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	v, _ := testVerifier(t, newFakeClock(), ti.config())
	tok := sign(t, ecTestKey(), ti.claims(), nil)

	ctx, cancel := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() { _, err := v.Verify(ctx, tok, testResource); leader <- err }()
	<-started
	waiter := make(chan error, 1)
	go func() { _, err := v.Verify(context.Background(), tok, testResource); waiter <- err }()
	time.Sleep(20 * time.Millisecond) // let the waiter queue behind the fetch
	cancel()
	if err := <-leader; err == nil {
		t.Error("the cancelled caller's token was accepted")
	}
	close(release)
	if err := <-waiter; err != nil {
		t.Errorf("waiter: %v", err)
	}
}

// TestNeverLogsTokens rejects every negative token with debug logging on
// and looks for any token's signature or payload in the log.
func TestNeverLogsTokens(t *testing.T) {
	ti := newTestIssuer(t, rsaTestKey(), ecTestKey())
	other := newTestIssuer(t, rsaTestKey())
	broken := newTestIssuer(t, ecTestKey())
	broken.set(func(ti *testIssuer) { ti.jwksCode = 500 })
	cfg := ti.config()
	cfg.RequiredScopes = []string{"mcp:tools"}
	v, log := testVerifier(t, newFakeClock(), cfg, other.config(), broken.config())
	var toks []string
	for _, n := range negatives(ti, other) {
		toks = append(toks, n.tok(t))
	}
	toks = append(toks, sign(t, ecTestKey(), broken.claims(), nil))
	for _, tok := range toks {
		if _, err := verify(v, tok); err == nil {
			t.Fatalf("a negative token verified")
		}
	}
	out := log.String()
	if countLines(out, "token rejected") < len(toks)-1 {
		t.Fatalf("rejections were not logged; the test would prove nothing:\n%s", out)
	}
	for _, tok := range toks {
		parts := strings.Split(tok, ".")
		for _, p := range parts[1:] {
			if len(p) >= 16 && strings.Contains(out, p) {
				t.Errorf("log contains a token segment %.20q…:\n%s", p, out)
			}
		}
	}
}
