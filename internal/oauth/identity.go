package oauth

import "time"

// Identity is who a validated token says its bearer is. Verify returns a
// fresh one per call.
type Identity struct {
	Issuer  string // the iss claim, exactly
	Subject string // the sub claim

	User  string   // from the issuer's claims.user path (default sub)
	Email string   // claims.email
	Teams []string // claims.team and claims.teams, in that order, deduplicated
	Org   string   // claims.org
	Roles []string // claims.roles

	// Scopes are the token's scopes: the scope claim (space-separated)
	// or scp (a list or a space-separated string).
	Scopes []string
	// ClientID is the OAuth client the token was issued to (azp, else
	// client_id), "" when the token does not say.
	ClientID string
	// Key is the alias of the mcpgate virtual key a person logged in with
	// at the built-in authorization server (its "mcpgate_key" claim);
	// only tokens of a local issuer carry it.
	Key string

	Expiry time.Time
}
