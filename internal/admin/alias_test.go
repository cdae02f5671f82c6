package admin

import (
	"regexp"
	"strings"
	"testing"
)

// aliasPattern is what validAlias implements, and what the error says.
var aliasPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`)

func TestValidAlias(t *testing.T) {
	for alias, want := range map[string]bool{
		"ci":                           true,
		"a":                            true,
		"alice@example.com":            true,
		"build-bot_2.prod":             true,
		strings.Repeat("k", 128):       true,
		strings.Repeat("k", 129):       false,
		"":                             false,
		"-lead":                        false,
		".hidden":                      false,
		"@x":                           false,
		"with space":                   false,
		"new\nline":                    false,
		"trailing\n":                   false,
		"slash/x":                      false,
		"ünï":                          false,
		"a\x00":                        false,
		"k" + strings.Repeat("_", 127): true,
	} {
		if got := validAlias(alias); got != want {
			t.Errorf("validAlias(%q) = %v, want %v", alias, got, want)
		}
		if aliasPattern.MatchString(alias) != want {
			t.Errorf("the pattern disagrees on %q", alias)
		}
	}
}

// validAlias accepts exactly what the documented pattern matches.
func FuzzValidAlias(f *testing.F) {
	for _, s := range []string{"ci", "", "-a", "a-", "a\n", strings.Repeat("z", 128), strings.Repeat("z", 129), "é", "A.b@c_d-e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, alias string) {
		if got, want := validAlias(alias), aliasPattern.MatchString(alias); got != want {
			t.Fatalf("validAlias(%q) = %v, the pattern %v", alias, got, want)
		}
	})
}
