package callers

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"strings"
)

// HeaderAPIKey is the gateway's own header for the gateway key. Go
// canonicalises header names, so x-mcpgate-api-key is the same header.
const HeaderAPIKey = "X-Mcpgate-Api-Key"

// SecretPrefix starts every key NewSecret makes, so that a gateway key is
// recognisable in Authorization (and by secret scanners).
const SecretPrefix = "mcpg_"

// secretBytes is the entropy of a generated key.
const secretBytes = 32

// SecretLen is the length of a NewSecret key: the prefix and 43 base62
// digits (62^43 > 2^256 > 62^42).
const SecretLen = len(SecretPrefix) + 43

// maxKeyLen bounds a presented key. A longer value is never a gateway key:
// an Authorization bearer that long (a JWT, say) is taken as an upstream
// token without a store lookup, and a longer X-Mcpgate-Api-Key fails like
// an unknown key.
const maxKeyLen = 512

// NewSecret returns a new gateway key: SecretPrefix followed by 32 bytes
// from crypto/rand written in base62 (the alphabet 0-9, a-z, A-Z, most
// significant digit first), left-padded with '0' to 43 digits, so every key
// is SecretLen characters long. Base62 rather than base64url so that a key
// is one word to double-click and needs no escaping anywhere. Store only
// store.HashKey(secret) and store.KeyPrefix(secret).
func NewSecret() (string, error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new secret: %w", err)
	}
	digits := new(big.Int).SetBytes(b[:]).Text(62)
	return SecretPrefix + strings.Repeat("0", SecretLen-len(SecretPrefix)-len(digits)) + digits, nil
}

// bearerToken returns the credentials of an Authorization header value
// using the Bearer scheme (matched case-insensitively, RFC 9110 11.1), with
// surrounding whitespace removed. ok is false for other schemes and for an
// empty token.
func bearerToken(v string) (tok string, ok bool) {
	v = strings.TrimLeft(v, " \t")
	const scheme = "bearer"
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) || (v[len(scheme)] != ' ' && v[len(scheme)] != '\t') {
		return "", false
	}
	tok = strings.Trim(v[len(scheme):], " \t")
	return tok, tok != ""
}

// apiKeyHeader returns the gateway key from X-Mcpgate-Api-Key. Some clients
// can only send a header value in the Authorization style, so a leading
// "Bearer " is tolerated. ok is false when the header is absent or blank.
func apiKeyHeader(v string) (key string, ok bool) {
	if tok, ok := bearerToken(v); ok {
		return tok, true
	}
	key = strings.Trim(v, " \t")
	return key, key != ""
}
