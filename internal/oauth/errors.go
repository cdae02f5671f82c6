package oauth

import (
	"errors"
	"strings"
)

// ErrNotJWT is returned by [Verifier.Verify] for a bearer token that is
// not shaped like a JWT at all (an opaque token, a virtual key): the
// caller may try another way to authenticate it.
var ErrNotJWT = errors.New("oauth: bearer token is not a JWT")

// TokenError says a JWT was rejected: HTTP 401 with RFC 6750
// error="invalid_token".
type TokenError struct {
	// Description is safe to show the client (error_description): it
	// names the rule that failed, never the token or a claim value.
	Description string
	// Err is the underlying cause, for logs (a fetch error, a go-jose
	// parse error); it never contains the token either. May be nil.
	Err error
}

func (e *TokenError) Error() string {
	if e.Err != nil {
		return "invalid token: " + e.Description + ": " + e.Err.Error()
	}
	return "invalid token: " + e.Description
}

func (e *TokenError) Unwrap() error { return e.Err }

// ScopeError says a valid token lacks scopes its issuer's configuration
// requires: HTTP 403 with RFC 6750 error="insufficient_scope".
type ScopeError struct {
	// Required are all the scopes required (the challenge's scope
	// parameter), not only the missing ones.
	Required []string
}

func (e *ScopeError) Error() string {
	return "insufficient scope: requires " + strings.Join(e.Required, " ")
}

func tokenError(desc string, err error) *TokenError {
	return &TokenError{Description: desc, Err: err}
}
