package oauth

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestChallengeString(t *testing.T) {
	for _, tt := range []struct {
		c    Challenge
		want string
	}{
		{Challenge{}, "Bearer"},
		{Challenge{ResourceMetadata: "https://gw.example/.well-known/oauth-protected-resource/mcp", Scope: "mcp:tools read"},
			`Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp", scope="mcp:tools read"`},
		{Challenge{ResourceMetadata: "https://gw.example/m", Scope: "a", Error: "invalid_token", ErrorDescription: "token expired"},
			`Bearer resource_metadata="https://gw.example/m", scope="a", error="invalid_token", error_description="token expired"`},
		{Challenge{Error: "insufficient_scope"}, `Bearer error="insufficient_scope"`},
		{Challenge{Error: "invalid_token", AuthorizationURI: "https://gw.example/oauth/connect/gh"},
			`Bearer error="invalid_token", authorization_uri="https://gw.example/oauth/connect/gh"`},
		{Challenge{ErrorDescription: `say "hi" \ bye`}, `Bearer error_description="say \"hi\" \\ bye"`},
		// Header splitting and smuggling: CR, LF, other controls and
		// non-ASCII go; what stays is quoted.
		{Challenge{ErrorDescription: "bad\r\nSet-Cookie: x=1"}, `Bearer error_description="badSet-Cookie: x=1"`},
		{Challenge{Error: "a\x00b\tc\x7fd", Scope: "süß"}, `Bearer scope="s", error="abcd"`},
		{Challenge{Scope: "\r\n", Error: "invalid_token"}, `Bearer error="invalid_token"`},
		{Challenge{ErrorDescription: `x", error="forged`}, `Bearer error_description="x\", error=\"forged"`},
	} {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("%+v.String() =\n  %s\nwant\n  %s", tt.c, got, tt.want)
		}
	}
}

func TestParseChallenges(t *testing.T) {
	type pc = ParsedChallenge
	type m = map[string]string
	for _, tt := range []struct {
		in   string
		want []ParsedChallenge
	}{
		{"", nil},
		{"Bearer", []pc{{Scheme: "Bearer", Params: m{}}}},
		{`Bearer realm="example", error="invalid_token", error_description="The access token expired"`,
			[]pc{{Scheme: "Bearer", Params: m{"realm": "example", "error": "invalid_token", "error_description": "The access token expired"}}}},
		{`Bearer resource_metadata="https://r.example/.well-known/oauth-protected-resource", scope="a b"`,
			[]pc{{Scheme: "Bearer", Params: m{"resource_metadata": "https://r.example/.well-known/oauth-protected-resource", "scope": "a b"}}}},
		// Several challenges, token and quoted values, a token68, case,
		// whitespace around "=", empty list elements.
		{`Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple"`,
			[]pc{{Scheme: "Newauth", Params: m{"realm": "apps", "type": "1", "title": `Login to "apps"`}},
				{Scheme: "Basic", Params: m{"realm": "simple"}}}},
		{"Negotiate abc+/def==, Bearer ERROR = invalid_token ,, ,DPoP algs=\"ES256 PS256\"",
			[]pc{{Scheme: "Negotiate", Params: m{}, Token68: "abc+/def=="},
				{Scheme: "Bearer", Params: m{"error": "invalid_token"}},
				{Scheme: "DPoP", Params: m{"algs": "ES256 PS256"}}}},
		{"Basic, Bearer", []pc{{Scheme: "Basic", Params: m{}}, {Scheme: "Bearer", Params: m{}}}},
		// Lenient: a bare URL as a value.
		{"Bearer resource_metadata=https://r.example/.well-known/x, scope=a",
			[]pc{{Scheme: "Bearer", Params: m{"resource_metadata": "https://r.example/.well-known/x", "scope": "a"}}}},
		// The first of a repeated parameter wins.
		{`Bearer error="a", Error="b"`, []pc{{Scheme: "Bearer", Params: m{"error": "a"}}}},
		// Malformed parts are skipped up to the next comma.
		{`Bearer error="unterminated`, []pc{{Scheme: "Bearer", Params: m{}}}},
		{`Bearer error="a, Basic realm="x"`, []pc{{Scheme: "Bearer", Params: m{"error": "a, Basic realm="}}}},
		{`Bearer a="x" junk, b=c`, []pc{{Scheme: "Bearer", Params: m{"a": "x", "b": "c"}}}},
		{`=x, "quoted", Bearer`, []pc{{Scheme: "Bearer", Params: m{}}}},
		{"Bearer=x, Basic", []pc{{Scheme: "Basic", Params: m{}}}},
		{"Bearer error=\"a\x01b\", scope=s", []pc{{Scheme: "Bearer", Params: m{"scope": "s"}}}},
	} {
		got := ParseChallenges(tt.in)
		if diff := cmp.Diff(got, tt.want); diff != "" {
			t.Errorf("ParseChallenges(%q) (-got +want):\n%s", tt.in, diff)
		}
	}
}

// printableASCII is the rule Challenge.String applies, written again
// independently: keep 0x20-0x7e.
func printableASCII(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x20 && s[i] <= 0x7e {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func FuzzChallenge(f *testing.F) {
	f.Add("https://gw.example/.well-known/oauth-protected-resource/mcp", "mcp:tools read", "invalid_token", "token expired")
	f.Add("", "", "", "")
	f.Add(`a"b\c`, "\r\n", "\x00", "ü, error=\"x\"")
	f.Add(" ", "=", ",", `\`)
	f.Fuzz(func(t *testing.T, rm, scope, errCode, desc string) {
		s := Challenge{ResourceMetadata: rm, Scope: scope, Error: errCode, ErrorDescription: desc}.String()
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				t.Fatalf("String() has byte %#x at %d: %q", s[i], i, s)
			}
		}
		want := map[string]string{}
		for name, v := range map[string]string{"resource_metadata": rm, "scope": scope, "error": errCode, "error_description": desc} {
			if v = printableASCII(v); v != "" {
				want[name] = v
			}
		}
		got := ParseChallenges(s)
		if len(got) != 1 || got[0].Scheme != "Bearer" || got[0].Token68 != "" {
			t.Fatalf("ParseChallenges(%q) = %+v; want one Bearer challenge", s, got)
		}
		if diff := cmp.Diff(got[0].Params, want); diff != "" {
			t.Fatalf("ParseChallenges(%q) params (-got +want):\n%s", s, diff)
		}
	})
}

func FuzzParseChallenges(f *testing.F) {
	for _, s := range []string{
		`Bearer realm="example", error="invalid_token"`,
		`Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple"`,
		"Negotiate abc==, Bearer",
		`Bearer error="unterminated`,
		",,, =, \"\\",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got := ParseChallenges(h)
		// Every challenge takes a scheme and a separator of the input, and
		// nothing is made of more than the input.
		if len(got) > (len(h)+1)/2 {
			t.Fatalf("%d challenges from %d bytes", len(got), len(h))
		}
		total := 0
		for _, c := range got {
			if c.Scheme == "" || !strings.Contains(h, c.Scheme) {
				t.Fatalf("scheme %q not from the input %q", c.Scheme, h)
			}
			if c.Params == nil {
				t.Fatalf("nil Params for %q", h)
			}
			total += len(c.Scheme) + len(c.Token68)
			for k, v := range c.Params {
				if k != strings.ToLower(k) {
					t.Fatalf("param name %q not lower-cased", k)
				}
				total += len(k) + len(v)
			}
		}
		if total > len(h) {
			t.Fatalf("parsed %d bytes of names and values from %d bytes", total, len(h))
		}
	})
}
