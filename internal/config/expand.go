package config

import (
	"errors"
	"fmt"
	"strings"
)

// ${VAR} expansion runs on decoded string values of the fields tagged
// expand (the reference, docs/config.md, marks them), never on the YAML
// text, so a variable's value is data and cannot add keys or change
// structure. Names (server, toolset and access group names, env and header
// names, tool names), most enumerations and non-strings are taken
// literally.
//
// In an expanded field "$$" is a literal "$" and every other "$" must start
// ${NAME} with NAME matching [A-Za-z_][A-Za-z0-9_]*. A lone "$" is an error
// rather than a literal so that "$HOME" fails loudly instead of reaching a
// server unexpanded. Expanding an unset variable is an error; one set to ""
// expands to "".

var errDollar = errors.New(`"$" must start ${NAME} or be doubled as "$$"`)

// expandString expands s. Its errors never quote s, which may hold secrets.
func expandString(s string, lookupEnv func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		s = s[i+1:]
		switch {
		case strings.HasPrefix(s, "$"):
			b.WriteByte('$')
			s = s[1:]
		case strings.HasPrefix(s, "{"):
			end := strings.IndexByte(s, '}')
			if end < 0 {
				return "", errors.New(`unterminated "${"`)
			}
			name := s[1:end]
			if !validVarName(name) {
				return "", errors.New("invalid variable name in ${...} (want [A-Za-z_][A-Za-z0-9_]*)")
			}
			v, ok := lookupEnv(name)
			if !ok {
				return "", fmt.Errorf("environment variable %s is not set", name)
			}
			b.WriteString(v)
			s = s[end+1:]
		default:
			return "", errDollar
		}
	}
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'A' <= r && r <= 'Z', 'a' <= r && r <= 'z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
