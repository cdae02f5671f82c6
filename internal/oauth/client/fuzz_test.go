package client

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// FuzzBearerChallenge: any WWW-Authenticate values parse without panic
// into printable fields and a single-spaced scope; a challenge rendered
// by oauth.Challenge reads back as written.
func FuzzBearerChallenge(f *testing.F) {
	f.Add(`Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", scope="files:read"`, "https://x/prm", "a b")
	f.Add(`Basic realm="x", Bearer error="insufficient_scope", scope="a  b"`+"\n"+`Bearer scope="c"`, "", "")
	f.Add(`Bearer resource_metadata=https://bare.example/prm,scope=x`, "h\"t\\tp", "  x\ty ")
	f.Fuzz(func(t *testing.T, header, rm, scope string) {
		bc := ParseBearerChallenge(strings.Split(header, "\n"))
		for _, v := range []string{bc.ResourceMetadata, bc.Scope, bc.Error} {
			if printable(v) != v {
				t.Fatalf("unprintable field %q", v)
			}
		}
		if bc.Scope != strings.Join(strings.Fields(bc.Scope), " ") {
			t.Fatalf("scope %q is not normalised", bc.Scope)
		}
		if printable(rm) != rm || printable(scope) != scope {
			return
		}
		h := oauth.Challenge{ResourceMetadata: rm, Scope: scope, Error: "insufficient_scope"}.String()
		got := ParseBearerChallenge([]string{h})
		wantScope := strings.Join(strings.Fields(scope), " ")
		if got.Error != "insufficient_scope" || got.Scope != wantScope || (rm != "" && got.ResourceMetadata != rm) {
			t.Fatalf("%q read back as %+v", h, got)
		}
	})
}

// FuzzTokenResponse: any body parses without panic; what is accepted has
// an access token, type Bearer, no expiry in the past, a printable scope.
func FuzzTokenResponse(f *testing.F) {
	f.Add([]byte(`{"access_token":"a","token_type":"bearer","expires_in":3600,"refresh_token":"r","scope":"x y"}`))
	f.Add([]byte(`{"access_token":"a","token_type":"Bearer","expires_in":"60.5","scope":7}`))
	f.Add([]byte(`{"access_token":"a","token_type":"mac"}`))
	f.Add([]byte(`[]`))
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := ParseTokenResponse(data, now)
		if err != nil {
			return
		}
		if tok.AccessToken == "" || tok.TokenType != "Bearer" || (!tok.Expiry.IsZero() && tok.Expiry.Before(now)) || printable(tok.Scope) != tok.Scope {
			t.Fatalf("accepted %+v", tok)
		}
	})
}

// FuzzResourceFor: a protected resource metadata's resource is taken only
// when canonical (after canonicalisation), on the server's origin and
// covering its path.
func FuzzResourceFor(f *testing.F) {
	f.Add("https://mcp.example.com/mcp", "https://mcp.example.com/mcp")
	f.Add("https://MCP.example.com", "https://mcp.example.com/v1/mcp")
	f.Add("https://mcp.example.com/mc", "https://mcp.example.com/mcp")
	f.Add("https://mcp.example.com:443/mcp?x=1", "https://mcp.example.com/mcp")
	f.Fuzz(func(t *testing.T, prm, server string) {
		sr, err := CanonicalResource(server)
		if err != nil {
			return
		}
		r, err := resourceFor(prm, sr)
		if err != nil {
			return
		}
		if c, err := CanonicalResource(r); err != nil || c != r {
			t.Fatalf("resource %q is not canonical", r)
		}
		ru, _ := url.Parse(r)
		su, _ := url.Parse(sr)
		if !sameOrigin(ru, su) {
			t.Fatalf("resource %q is not on %q's origin", r, sr)
		}
		rp := strings.TrimSuffix(ru.EscapedPath(), "/")
		if rp != "" && su.EscapedPath() != rp && !strings.HasPrefix(su.EscapedPath(), rp+"/") {
			t.Fatalf("resource %q does not cover %q", r, sr)
		}
	})
}
