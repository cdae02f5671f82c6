// Package oauth owns mcpgate's OAuth 2.1 / OpenID Connect vocabulary and
// the machinery that is not HTTP routing: the metadata documents (RFC 9728
// protected resource metadata, RFC 8414 authorization server metadata,
// RFC 7591 client metadata and client ID metadata documents), the
// WWW-Authenticate Bearer challenge (RFC 6750, RFC 9728 section 5.1), and
// the verification of JWT bearer tokens against configured issuers
// (discovery, JWKS cache, algorithm allow-list, iss/aud/exp/nbf/iat, the
// mapping of claims to an [Identity]).
//
// It does not decide what a caller may use (policy does, from grants),
// does not route requests (the gateway mounts handlers), and never logs a
// token: messages name the claim or the rule that failed, never a value
// that could be replayed.
package oauth
