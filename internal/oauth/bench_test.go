package oauth

import (
	"context"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/mcpgate/mcpgate/internal/config"
)

// BenchmarkVerify is the cost a JWT caller adds to a request: parse,
// signature, claims and identity mapping with the issuer's keys cached
// (/signature: a token seen for the first time), and the verified-token
// cache's hit (/cached: every later request with it). ES256 is what
// mcpgate's own authorization server signs with; EdDSA for comparison.
func BenchmarkVerify(b *testing.B) {
	ec, ed, public := fuzzKeys(b)
	v := NewVerifier(VerifierOptions{
		Now: func() time.Time { return testNow },
		Local: []LocalIssuer{{
			Match:  func(s string) bool { return s == fuzzIssuer },
			Keys:   func() jose.JSONWebKeySet { return public },
			Claims: config.ClaimPaths{User: "sub", Teams: "teams", Roles: "roles"},
			Algs:   []string{"ES256", "EdDSA"},
		}},
	})
	claims := map[string]any{"iss": fuzzIssuer, "sub": "u", "aud": testResource, "exp": testNow.Add(time.Hour).Unix(),
		"teams": []string{"platform"}, "roles": []string{"admin"}, "scope": "mcp"}
	for _, k := range []testKey{ec, ed} {
		tok := sign(b, k, claims, nil)
		for _, cold := range []bool{true, false} {
			name := string(k.alg) + "/cached"
			if cold {
				name = string(k.alg) + "/signature" // every call checks the signature
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if cold {
						v.cache.mu.Lock()
						clear(v.cache.m)
						v.cache.mu.Unlock()
					}
					if _, err := v.Verify(context.Background(), tok, testResource); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// A verified token is remembered per resource until its exp, at most a
// minute: a key the issuer withdraws stops working within that minute, an
// expired token is judged again (and refused), and the same token on
// another resource is verified for that resource.
func TestVerifiedCache(t *testing.T) {
	ec, _, public := fuzzKeys(t)
	now := testNow
	keys := public
	v := NewVerifier(VerifierOptions{
		Now: func() time.Time { return now },
		Local: []LocalIssuer{{
			Match:  func(s string) bool { return s == fuzzIssuer },
			Keys:   func() jose.JSONWebKeySet { return keys },
			Claims: config.ClaimPaths{User: "sub"},
			Skew:   -1,
		}},
	})
	tok := sign(t, ec, map[string]any{"iss": fuzzIssuer, "sub": "u", "aud": testResource, "exp": testNow.Add(5 * time.Minute).Unix()}, nil)
	ctx := context.Background()
	if _, err := v.Verify(ctx, tok, testResource); err != nil {
		t.Fatal(err)
	}
	keys = jose.JSONWebKeySet{} // withdrawn
	now = now.Add(30 * time.Second)
	if _, err := v.Verify(ctx, tok, testResource); err != nil {
		t.Errorf("within the minute the cached verification stands: %v", err)
	}
	if _, err := v.Verify(ctx, tok, testResource+"/other"); err == nil {
		t.Error("the token was accepted for another resource")
	}
	now = now.Add(31 * time.Second)
	if _, err := v.Verify(ctx, tok, testResource); err == nil {
		t.Error("a withdrawn key still verifies after the cache minute")
	}
	keys = public
	short := sign(t, ec, map[string]any{"iss": fuzzIssuer, "sub": "u", "aud": testResource, "exp": now.Add(10 * time.Second).Unix()}, nil)
	if _, err := v.Verify(ctx, short, testResource); err != nil {
		t.Fatal(err)
	}
	now = now.Add(11 * time.Second)
	if _, err := v.Verify(ctx, short, testResource); err == nil {
		t.Error("an expired token was served from the cache")
	}
}
