// Package authserver owns mcpgate's built-in OAuth 2.1 authorization
// server (auth.login): the one MCP clients discover through the gateway's
// protected resource metadata when the company IdP cannot register them.
// It registers clients (RFC 7591, and client ID metadata documents),
// signs the person in at the company IdP (OpenID Connect, authorization
// code + PKCE) or with a pasted mcpgate virtual key, asks for consent once
// per person, client and resource (for the admin API every time), and
// issues short-lived JWT access tokens (ES256, audience = the one RFC 8707
// resource of the grant, never the issuer) with rotating refresh tokens.
//
// The flow of one authorization:
//
//	GET  /oauth/authorize   client_id + redirect_uri checked (else an error page, never a redirect),
//	                        PKCE S256 required, resource canonical (resource.go): one MCP route
//	                        the gateway has (none named: /mcp) or the admin API, never the
//	                        issuer; a pending request is kept in memory, bound to the browser
//	                        by a cookie
//	  -> IdP /authorize     (when auth.login.issuer is set and keys are not offered)
//	  or GET /oauth/authorize renders the login page: paste a key, or go to the IdP
//	GET  /oauth/callback    state, RFC 9207 iss, code exchanged, ID token verified, claims mapped
//	POST /oauth/login       the pasted key (rate-limited per client address)
//	GET  /oauth/consent     unless this person approved this client for this resource before
//	                        (never remembered for the admin API); the page names the resource
//	POST /oauth/consent     approve -> redirect_uri?code&state&iss; deny -> error=access_denied
//	POST /oauth/token       code (single use, 60 s, PKCE) or refresh token (rotated; reuse
//	                        revokes the family) -> access token + refresh token, for the
//	                        grant's one resource (another one named: invalid_target)
//	POST /oauth/revoke      a refresh token's family
//
// It does not decide what a token's bearer may use (policy does, from
// auth.grants; scopes here carry no authority), does not verify the
// tokens it issues on the request path (the gateway's verifier does, with
// [Server.MatchIssuer] and [Server.PublicKeys]), and never logs or stores
// a secret in the clear: refresh tokens, client secrets and authorization
// codes are kept as sha256 digests, signing keys sealed under a key that
// lives in a file beside the database (or in auth.login.seal_key), not in
// it.
//
// # State per replica
//
// Clients, refresh token families, consents and signing keys are in the
// store and shared; a replica picks up keys another one created within a
// minute. Pending authorization requests, authorization codes and
// confirmation codes live in this process's memory, or, with
// Options.Shared (a fleet's Redis), in the shared tables (shared.go), so
// that each step of one browser login may land on any replica; a
// refresh token's rotation is then leased across the fleet. The client
// metadata document cache and the login rate limits stay per replica (a
// fleet of N allows N times the login attempts per address).
package authserver
