//go:build interop

// The idp package against the real idp.mjs: machine tokens are JWTs signed
// by a key of the JWKS, with aud = the resource; a rotation signs with a
// new, newly published key; JWKS fetches are counted; the IdP is gone after
// its test.
//
// Run it (scripts/interop-ts.sh does):
//
//	MCPGATE_NODE=/path/to/node22 go test -tags interop -count=1 ./test/interop/idp/
//
// MCPGATE_NODE may be left unset once scripts/install-test-deps.sh has
// installed test/interop/node_modules.
package idp_test

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/test/interop/idp"
)

const resource = "http://127.0.0.1:1/mcp"

type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	D   string `json:"d"`
}

type jwks struct {
	Keys []jwk `json:"keys"`
}

func (s jwks) kids() []string {
	var out []string
	for _, k := range s.Keys {
		out = append(out, k.Kid)
	}
	return out
}

func fetchJWKS(t *testing.T, p *idp.IdP) jwks {
	t.Helper()
	m, err := p.Metadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(m.JWKSURI)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", m.JWKSURI, res.Status)
	}
	var s jwks
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	for _, k := range s.Keys {
		if k.D != "" {
			t.Fatalf("JWKS publishes a private key (kid %s)", k.Kid)
		}
	}
	return s
}

type jwt struct {
	header struct {
		Alg string `json:"alg"`
		Typ string `json:"typ"`
		Kid string `json:"kid"`
	}
	claims struct {
		Iss         string         `json:"iss"`
		Sub         string         `json:"sub"`
		Aud         any            `json:"aud"`
		Scope       string         `json:"scope"`
		ClientID    string         `json:"client_id"`
		Exp         int64          `json:"exp"`
		RealmAccess map[string]any `json:"realm_access"`
	}
}

// verify decodes a compact JWS and checks its RS256 signature with the key
// of keys that its header names.
func verify(t *testing.T, token string, keys jwks) jwt {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWS (%d parts): %.40s...", len(parts), token)
	}
	var j jwt
	for i, dst := range []any{&j.header, &j.claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			t.Fatalf("part %d: %v: %s", i, err, raw)
		}
	}
	if j.header.Alg != "RS256" {
		t.Fatalf("alg %q, want RS256", j.header.Alg)
	}
	i := slices.IndexFunc(keys.Keys, func(k jwk) bool { return k.Kid == j.header.Kid })
	if i < 0 {
		t.Fatalf("kid %q is not in the JWKS %v", j.header.Kid, keys.kids())
	}
	k := keys.Keys[i]
	n, err1 := base64.RawURLEncoding.DecodeString(k.N)
	e, err2 := base64.RawURLEncoding.DecodeString(k.E)
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil || k.Kty != "RSA" {
		t.Fatalf("key %s (kty %s): %v", k.Kid, k.Kty, err)
	}
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig); err != nil {
		t.Fatalf("signature (kid %s): %v", k.Kid, err)
	}
	return j
}

func TestMachineTokensRotationJWKSFetches(t *testing.T) {
	p := idp.Start(t, idp.DefaultConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !strings.HasPrefix(p.Issuer, "http://127.0.0.1:") || p.PID <= 0 {
		t.Fatalf("issuer %q pid %d", p.Issuer, p.PID)
	}

	fetches0 := p.JWKSFetches()
	keys1 := fetchJWKS(t, p)
	if got := p.JWKSFetches(); got != fetches0+1 {
		t.Errorf("JWKSFetches = %d after one fetch, want %d", got, fetches0+1)
	}

	tok1, err := p.ClientCredentialsToken(ctx, idp.MachineClientID, idp.MachineClientSecret, resource, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	a := verify(t, tok1, keys1)
	if a.header.Typ != "at+jwt" {
		t.Errorf("typ %q, want at+jwt (RFC 9068)", a.header.Typ)
	}
	if a.claims.Aud != resource {
		t.Errorf("aud %v, want %s", a.claims.Aud, resource)
	}
	if a.claims.Iss != p.Issuer || a.claims.Sub != idp.MachineClientID || a.claims.ClientID != idp.MachineClientID {
		t.Errorf("iss %q sub %q client_id %q", a.claims.Iss, a.claims.Sub, a.claims.ClientID)
	}
	if a.claims.Scope != "mcp" {
		t.Errorf("scope %q, want mcp", a.claims.Scope)
	}
	if exp := time.Unix(a.claims.Exp, 0); time.Until(exp) < time.Minute || time.Until(exp) > 11*time.Minute {
		t.Errorf("exp %v: not about 10 minutes from now", exp)
	}
	if roles, _ := a.claims.RealmAccess["roles"].([]any); !slices.Equal(roles, []any{"service"}) {
		t.Errorf("realm_access %v, want the client's roles [service]", a.claims.RealmAccess)
	}

	newKid := p.Rotate()
	if newKid == "" || newKid == a.header.Kid {
		t.Fatalf("Rotate() = %q (old kid %q)", newKid, a.header.Kid)
	}
	if slices.Contains(keys1.kids(), newKid) {
		t.Errorf("new kid %s was published before the rotation", newKid)
	}
	tok2, err := p.ClientCredentialsToken(ctx, idp.MachineClientID, idp.MachineClientSecret, resource, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	keys2 := fetchJWKS(t, p)
	b := verify(t, tok2, keys2)
	if b.header.Kid == a.header.Kid || b.header.Kid != newKid {
		t.Errorf("after Rotate: kid %q, want the new %q (old %q)", b.header.Kid, newKid, a.header.Kid)
	}
	if !slices.Contains(keys2.kids(), a.header.Kid) {
		t.Errorf("the old key %s is no longer published: %v", a.header.Kid, keys2.kids())
	}
	// A token signed by the old key still verifies against the new JWKS.
	verify(t, tok1, keys2)

	if got := p.JWKSFetches(); got != fetches0+2 {
		t.Errorf("JWKSFetches = %d after two fetches, want %d", got, fetches0+2)
	}
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Rotations != 1 || s.Kid != newKid || len(s.Kids) != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestTokenRequestErrors(t *testing.T) {
	p := idp.Start(t, idp.DefaultConfig())
	ctx := context.Background()
	if _, err := p.ClientCredentialsToken(ctx, idp.MachineClientID, "wrong", resource, "mcp"); err == nil || !strings.Contains(err.Error(), "invalid_client") {
		t.Errorf("wrong secret: err = %v, want invalid_client", err)
	}
	if _, err := p.ClientCredentialsToken(ctx, idp.MachineClientID, idp.MachineClientSecret, "not a url", ""); err == nil || !strings.Contains(err.Error(), "invalid_target") {
		t.Errorf("bad resource: err = %v, want invalid_target", err)
	}
	// The person-facing client is not allowed client_credentials
	// (oidc-provider answers invalid_request, not RFC 6749's
	// unauthorized_client).
	if _, err := p.ClientCredentialsToken(ctx, idp.RPClientID, idp.RPClientSecret, resource, ""); err == nil || !strings.Contains(err.Error(), "grant type is not allowed for this client") {
		t.Errorf("RP client: err = %v, want the grant type refused", err)
	}
}

// A Config of one's own: a client with claims and a per-resource scope, on
// a port chosen in advance; and the IdP is gone once its test is.
func TestCustomConfigAndCleanup(t *testing.T) {
	const other = "http://127.0.0.1:2/other"
	var pid int
	t.Run("run", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cfg := idp.Config{
			Port: port,
			Clients: []idp.Client{{
				ID: "robot", Secret: "s3cret&=", GrantTypes: []string{"client_credentials"},
				RedirectURIs: []string{}, ResponseTypes: []string{},
				Claims: map[string]any{"groups": []string{"robots"}},
			}},
			Accounts:  []idp.Account{{Sub: "x"}},
			Resources: map[string]string{other: "read write"},
		}
		p := idp.Start(t, cfg)
		pid = p.PID
		if want := fmt.Sprintf("http://127.0.0.1:%d", port); p.Issuer != want {
			t.Errorf("issuer %s, want %s", p.Issuer, want)
		}
		tok, err := p.ClientCredentialsToken(context.Background(), "robot", "s3cret&=", other, "write mcp")
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(tok, ".")
		raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
		var c struct {
			Aud    string   `json:"aud"`
			Scope  string   `json:"scope"`
			Groups []string `json:"groups"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		if c.Aud != other || c.Scope != "write" || !slices.Equal(c.Groups, []string{"robots"}) {
			t.Errorf("claims %s: want aud %s, scope write (mcp is not the resource's), groups [robots]", raw, other)
		}
	})
	if pid == 0 {
		t.Fatal("no pid")
	}
	// Cleanup waited for the exit, so the pid is gone (or, reused, not ours:
	// vanishingly unlikely in this instant).
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("idp pid %d still there after its test: kill(0) = %v", pid, err)
	}
}
