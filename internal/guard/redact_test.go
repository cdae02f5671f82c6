package guard

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/config"
)

func TestRedact(t *testing.T) {
	all, err := NewRedactor(append(BuiltinPatterns, `regex:ticket-\d+`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ in, want string }{
		{"mail alice.b+x@mail.example.co.uk now", "mail [REDACTED:email] now"},
		{"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc_DEF-123 end", "jwt [REDACTED:jwt] end"},
		{"card 4111-1111-1111-1111.", "card [REDACTED:card]."},
		{"card 4111111111111111", "card [REDACTED:card]"},
		{"amex 3782 822463 10005", "amex [REDACTED:card]"},
		{"digits 1234567890123456789012345", "digits 1234567890123456789012345"}, // longer than a card
		{"not a card 4111 1111 1111 1112", "not a card 4111 1111 1111 1112"},
		{"order 1234567890123", "order 1234567890123"}, // 13 digits, Luhn-invalid
		{"openai sk-proj-AbCdEfGhIjKlMnOpQrStUvWx", "openai [REDACTED:api_key]"},
		{"anthropic sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx", "anthropic [REDACTED:api_key]"},
		{"gh ghp_" + strings.Repeat("a", 36), "gh [REDACTED:api_key]"},
		{"gh github_pat_" + strings.Repeat("B", 30), "gh [REDACTED:api_key]"},
		{"aws AKIAIOSFODNN7EXAMPLE", "aws [REDACTED:api_key]"},
		{"slack xoxb-123456789012-abc", "slack [REDACTED:api_key]"},
		{"stripe sk_live_" + strings.Repeat("4", 24), "stripe [REDACTED:api_key]"},
		{"google AIza" + strings.Repeat("x", 35), "google [REDACTED:api_key]"},
		{"Authorization: Bearer abc.def-ghi_jkl", "Authorization: [REDACTED:bearer]"},
		{"-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----", "[REDACTED:private_key]"},
		{"see ticket-42", "see [REDACTED:custom]"},
		{"nothing here: sk-short, AKIA1, a@b", "nothing here: sk-short, AKIA1, a@b"},
		// A card glued to an address is a card once the address is
		// gone: the second pass takes it. Two keys glued together both go.
		{"a@b.co4111111111111111", "[REDACTED:email][REDACTED:card]"},
		{"AIza" + strings.Repeat("x", 35) + "AIza" + strings.Repeat("y", 35), "[REDACTED:api_key]"},
	} {
		got, _ := all.Redact(tt.in)
		if got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// Counted once each, the second pass's too.
	if _, n := all.Redact("a@b.co4111111111111111 and c@d.ee"); n != 3 {
		t.Errorf("%d replacements counted, want 3", n)
	}
	marker, _ := NewRedactor([]string{"email", `regex:REDACTED`})
	if got, n := marker.Redact("a@b.co"); got != "[[REDACTED:custom]:email]" || n != 2 {
		t.Errorf("a pattern matching the marker: %q, %d; want it applied once", got, n)
	}
	if _, err := NewRedactor([]string{"phone"}); err == nil {
		t.Error("unknown pattern accepted")
	}
	if _, err := NewRedactor([]string{"regex:("}); err == nil {
		t.Error("bad expression accepted")
	}
}

// The built-in names config validates are the ones this package knows.
func TestBuiltinsMatchConfig(t *testing.T) {
	if strings.Join(BuiltinPatterns, ",") != strings.Join(config.RedactPatterns, ",") {
		t.Errorf("guard %v, config %v", BuiltinPatterns, config.RedactPatterns)
	}
}

func TestLuhn(t *testing.T) {
	for s, want := range map[string]bool{
		"4111111111111111": true, "4111 1111 1111 1111": true, "5500-0000-0000-0004": true,
		"4111111111111112": false, "411111111111": false, "12345678901234567890": false,
	} {
		if got := luhnValid(s); got != want {
			t.Errorf("luhnValid(%q) = %v", s, got)
		}
	}
}

func TestGlob(t *testing.T) {
	for _, tt := range []struct {
		p, s string
		want bool
	}{{"*", "x", true}, {"dan*", "danger", true}, {"dan*", "xdanger", false}, {"*_file", "read_file", true}, {"a*b*c", "axxbyyc", true}, {"a*b*c", "acb", false}, {"exact", "exact", true}, {"exact", "exactly", false}} {
		if got := glob(tt.p, tt.s); got != tt.want {
			t.Errorf("glob(%q, %q) = %v", tt.p, tt.s, got)
		}
	}
}

// FuzzRedact: redaction never panics, keeps valid UTF-8 valid, counts
// what it replaces, and each pattern on its own leaves no match of itself
// behind (for cards: no Luhn-valid one).
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"a@b.co", "4111 1111 1111 1111", "sk-ant-" + strings.Repeat("x", 30), "Bearer abcdefghij", "eyJa.eyJb.c", "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----", ""} {
		f.Add(s)
	}
	all, err := NewRedactor(BuiltinPatterns)
	if err != nil {
		f.Fatal(err)
	}
	one := map[string]*Redactor{}
	for _, k := range BuiltinPatterns {
		one[k], _ = NewRedactor([]string{k})
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, n := all.Redact(s)
		if n == 0 && out != s {
			t.Fatalf("no replacement counted but %q became %q", s, out)
		}
		if utf8.ValidString(s) && !utf8.ValidString(out) {
			t.Fatalf("%q became invalid UTF-8 %q", s, out)
		}
		// Nor do all of them together: a match one rule's marker
		// exposes to another is taken by the next pass.
		for k, re := range builtin() {
			for _, m := range re.FindAllString(out, -1) {
				if k == PatternCard && !luhnValid(m) {
					continue
				}
				t.Fatalf("all: %s %q left in %q (from %q)", k, m, out, s)
			}
		}
		for k, r := range one {
			o, _ := r.Redact(s)
			for _, m := range builtin()[k].FindAllString(o, -1) {
				if k == PatternCard && !luhnValid(m) {
					continue
				}
				t.Fatalf("%s: %q left in %q (from %q)", k, m, o, s)
			}
		}
	})
}

// FuzzPostResult: the result walk never panics and turns valid JSON into
// valid JSON.
func FuzzPostResult(f *testing.F) {
	f.Add([]byte(`{"content":[{"type":"text","text":"a@b.co"},{"type":"resource","resource":{"text":"x@y.io"}}],"structuredContent":{"a":["c@d.ee",1.5e300]}}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"content":"x"}`))
	r, _ := NewRedactor([]string{PatternEmail})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, _ := rewriteStrings(PhasePost, b, r.Redact)
		if json.Valid(b) && !json.Valid(out) {
			t.Fatalf("%s became %s", b, out)
		}
		matchStrings(PhasePost, b, r.rules[0].re.MatchString)
	})
}
