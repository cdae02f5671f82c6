package oauth

import (
	"context"
	"errors"
	"strings"
)

// Temporary stand-ins until the verifier lands (branch oauthcore).

var ErrNotJWT = errors.New("oauth: not a JWT")

type TokenError struct{ Description string }

func (e *TokenError) Error() string { return "invalid token: " + e.Description }

type ScopeError struct{ Required []string }

func (e *ScopeError) Error() string { return "insufficient scope: " + strings.Join(e.Required, " ") }

type Challenge struct{ ResourceMetadata, Scope, Error, ErrorDescription string }

func (c Challenge) String() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+`="`+strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v)+`"`)
		}
	}
	add("resource_metadata", c.ResourceMetadata)
	add("scope", c.Scope)
	add("error", c.Error)
	add("error_description", c.ErrorDescription)
	return "Bearer " + strings.Join(parts, ", ")
}

func LooksLikeJWT(s string) bool { return strings.Count(s, ".") == 2 }

var _ = context.Background
