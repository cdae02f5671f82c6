package callers

import (
	"strings"
	"testing"
)

func TestNewSecret(t *testing.T) {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	seen := map[string]bool{}
	for range 1000 {
		s, err := NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != SecretLen || !strings.HasPrefix(s, SecretPrefix) {
			t.Fatalf("NewSecret() = %q: want %d characters starting %q", s, SecretLen, SecretPrefix)
		}
		if i := strings.IndexFunc(s[len(SecretPrefix):], func(r rune) bool { return !strings.ContainsRune(alphabet, r) }); i >= 0 {
			t.Fatalf("NewSecret() = %q: character outside base62 at %d", s, len(SecretPrefix)+i)
		}
		if seen[s] {
			t.Fatalf("NewSecret() repeated %q", s)
		}
		seen[s] = true
	}
}

func TestBearerToken(t *testing.T) {
	for _, tt := range []struct {
		in, tok string
		ok      bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER\tabc ", "abc", true},
		{"  Bearer   abc  ", "abc", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearerabc", "", false},
		{"Basic abc", "", false},
		{"abc", "", false},
		{"", "", false},
	} {
		tok, ok := bearerToken(tt.in)
		if tok != tt.tok || ok != tt.ok {
			t.Errorf("bearerToken(%q) = %q, %v; want %q, %v", tt.in, tok, ok, tt.tok, tt.ok)
		}
	}
}

func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer\t x ", "Basic a", "Bearer", " Bearer  mcpg_x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tok, ok := bearerToken(v)
		if !ok {
			if tok != "" {
				t.Fatalf("bearerToken(%q) = %q, false", v, tok)
			}
			return
		}
		if tok == "" || strings.TrimSpace(tok) != tok && strings.Trim(tok, " \t") != tok {
			t.Fatalf("bearerToken(%q) = %q: empty or not trimmed", v, tok)
		}
		if !strings.HasSuffix(strings.TrimRight(v, " \t"), tok) {
			t.Fatalf("bearerToken(%q) = %q: not the tail of the value", v, tok)
		}
		if !strings.EqualFold(strings.TrimLeft(v, " \t")[:6], "bearer") {
			t.Fatalf("bearerToken(%q) accepted another scheme", v)
		}
		// Taking the key from our own header tolerates the same form.
		if k, ok := apiKeyHeader(v); !ok || k != tok {
			t.Fatalf("apiKeyHeader(%q) = %q, %v; want %q", v, k, ok, tok)
		}
	})
}
