package oauth

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/mcpgate/mcpgate/internal/config"
)

// The fixed keys of the fuzzed verifier: fixed so that inputs the engine
// records keep meaning the same thing on every run.
const fuzzECKey = `{"use":"sig","kty":"EC","kid":"fuzz-ec","crv":"P-256","alg":"ES256",
	"x":"AjOY83_L_POBaNfzMN3yGXWElk7F7IiQOx1ouP01dTU","y":"GuS1QBilgKycF1tSLvbxsEVhtEQZYWWOUNlhTqUN-8w",
	"d":"19dj4OqIdsI0Ny-Yxd_iGMhyqb_iDQuo7ZExeLXO3zk"}`

const fuzzIssuer = "https://gw.example"

func fuzzKeys(t testing.TB) (ec, ed testKey, public jose.JSONWebKeySet) {
	var k jose.JSONWebKey
	if err := k.UnmarshalJSON([]byte(fuzzECKey)); err != nil {
		t.Fatal(err)
	}
	ec = testKey{"fuzz-ec", jose.ES256, k.Key}
	ed = testKey{"fuzz-ed", jose.EdDSA, ed25519.NewKeyFromSeed([]byte("mcpgate fuzz key seed, 32 bytes!"))}
	public.Keys = []jose.JSONWebKey{ec.public(), ed.public()}
	return ec, ed, public
}

// FuzzVerify feeds arbitrary strings to a verifier of one local issuer
// (no network): it must never panic, fail only with the documented
// errors, and accept only what go-jose itself verifies with the issuer's
// public keys.
func FuzzVerify(f *testing.F) {
	ec, ed, public := fuzzKeys(f)
	v := NewVerifier(VerifierOptions{
		Now: func() time.Time { return testNow },
		Local: []LocalIssuer{{
			Match:  func(s string) bool { return s == fuzzIssuer },
			Keys:   func() jose.JSONWebKeySet { return public },
			Claims: config.ClaimPaths{User: "sub", Teams: "teams", Roles: "a.b.roles"},
			Algs:   []string{"ES256", "EdDSA"},
		}},
	})
	claims := map[string]any{
		"iss": fuzzIssuer, "sub": "u", "aud": testResource, "exp": testNow.Add(time.Hour).Unix(),
		"teams": []string{"x"}, "a": map[string]any{"b": map[string]any{"roles": "r"}}, "scope": "s",
	}
	for _, k := range []testKey{ec, ed} {
		tok := sign(f, k, claims, nil)
		// The accepting path must be in the corpus, or the oracle below
		// never runs.
		if _, err := v.Verify(context.Background(), tok, testResource); err != nil {
			f.Fatalf("seed signed with %s: %v", k.kid, err)
		}
		f.Add(tok)
	}
	expired := map[string]any{"iss": fuzzIssuer, "sub": "u", "aud": testResource, "exp": testNow.Add(-time.Hour).Unix()}
	f.Add(sign(f, ec, expired, nil))
	f.Add(sign(f, testKey{"", jose.EdDSA, ed.priv}, claims, nil))
	f.Add(b64(`{"alg":"none"}`) + "." + b64(`{"iss":"`+fuzzIssuer+`","sub":"u","aud":"`+testResource+`","exp":9999999999}`) + ".")
	f.Add(b64(`{"alg":"ES256","kid":"fuzz-ec"}`) + "." + b64(`{"iss":"`+fuzzIssuer+`"}`) + ".AAAA")
	f.Add("a.b.c.d.e")
	f.Add("not a token")

	ctx := context.Background()
	f.Fuzz(func(t *testing.T, tok string) {
		id, err := v.Verify(ctx, tok, testResource)
		if err != nil {
			var te *TokenError
			var se *ScopeError
			switch {
			case errors.Is(err, ErrNotJWT), errors.As(err, &se):
			case errors.As(err, &te):
				if len(tok) >= 8 && strings.Contains(te.Description, tok) {
					t.Fatalf("Description %q contains the token", te.Description)
				}
			default:
				t.Fatalf("Verify: %v (%T): not a documented error", err, err)
			}
			if id != nil {
				t.Fatalf("Verify returned an identity with error %v", err)
			}
			return
		}
		// Accepted: go-jose must agree the signature is the issuer's.
		jws, perr := jose.ParseSignedCompact(tok, []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA})
		if perr != nil {
			t.Fatalf("Verify accepted %q, which go-jose cannot parse: %v", tok, perr)
		}
		var payload []byte
		for _, k := range public.Keys {
			if p, err := jws.Verify(k.Key); err == nil {
				payload = p
				break
			}
		}
		if payload == nil {
			t.Fatalf("Verify accepted %q without a valid signature", tok)
		}
		var c map[string]any
		if err := json.Unmarshal(payload, &c); err != nil || c["iss"] != fuzzIssuer || id.Issuer != fuzzIssuer || id.User == "" {
			t.Fatalf("Verify accepted %q as %+v; signed claims %s", tok, id, payload)
		}
	})
}
