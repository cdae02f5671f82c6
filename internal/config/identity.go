package config

import (
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/netaddr"
)

// Company identity (SPEC S5.3): JWT callers from OIDC issuers, the
// built-in authorization server that federates the person's login to an
// IdP, and the grants that say what a JWT caller may use.

// Defaults of the identity sections.
const (
	// DefaultClockSkew is the skew exp, nbf and iat are judged with.
	DefaultClockSkew = 60 * time.Second
)

// DefaultAllowedAlgs are the JWS algorithms accepted when an issuer lists
// none: asymmetric only, so a public key can never verify an HMAC.
var DefaultAllowedAlgs = []string{"RS256", "ES256"}

// DefaultLoginScopes are requested from the IdP when auth.login lists
// none.
var DefaultLoginScopes = []string{"openid", "email", "profile"}

// OIDCIssuer is one issuer whose JWTs are accepted as callers.
type OIDCIssuer struct {
	Issuer string `config:"issuer,required,expand,trim" doc:"The issuer URL, exactly as in its tokens' iss claim: https, or http on a loopback host (tests, local IdPs). Its metadata is discovered at /.well-known/openid-configuration (or oauth-authorization-server)."`
	// Audience "" means the token must name the route's own resource URL
	// (RFC 8707): what mcpgate's own authorization server issues.
	Audience       string     `config:"audience,expand,trim" doc:"The aud value the issuer puts in tokens for this gateway's MCP routes (an API identifier or client id): such a token is good on every MCP route, never on the admin API, which takes only a token whose aud is <public_url>/admin/v1. Empty: the token's aud must be the resource URL of the route it is used on."`
	JWKSURL        string     `config:"jwks_url,expand,trim" doc:"The issuer's JWKS; empty means the jwks_uri of its discovered metadata."`
	Claims         ClaimPaths `config:"claims" doc:"Where the caller's identity is in the token; a path may be nested (realm_access.roles)."`
	RequiredScopes []string   `config:"required_scopes" doc:"Scopes every token must carry (scope or scp claim); a token without them gets 403 insufficient_scope."`
	AllowedAlgs    []string   `config:"allowed_algs,enum=RS256|RS384|RS512|PS256|PS384|PS512|ES256|ES384|ES512|EdDSA" doc:"Signature algorithms accepted (none and HMAC never are); empty means RS256 and ES256."`
	Line           int        `config:",line"`
}

// ClaimPaths name the claims a caller's identity is read from; each is a
// dotted path into the token's claims.
type ClaimPaths struct {
	User  string `config:"user,default=sub" doc:"The user id (a string claim)."`
	Email string `config:"email,default=email" doc:"The email address."`
	Team  string `config:"team" doc:"A single team (a string claim)."`
	Teams string `config:"teams,default=groups" doc:"Teams: a list of strings, or one string."`
	Org   string `config:"org" doc:"The organisation."`
	Roles string `config:"roles,default=roles" doc:"Roles: a list of strings, or one string (Keycloak: realm_access.roles)."`
}

// Login configures mcpgate's own authorization server (the MCP
// authorization spec's role for a gateway in front of an IdP that MCP
// clients cannot register with).
type Login struct {
	Issuer       string   `config:"issuer,expand,trim" doc:"The company IdP (an OIDC issuer) the person logs in at; https, or http on a loopback host. Empty: people log in with a mcpgate virtual key (keys: true)."`
	ClientID     string   `config:"client_id,expand,trim" doc:"mcpgate's client id at the IdP; its redirect URI there is <public_url>/oauth/callback."`
	ClientSecret string   `config:"client_secret,expand,trim,secret" doc:"mcpgate's client secret at the IdP; empty for a public client (PKCE only)."`
	Scopes       []string `config:"scopes" doc:"Scopes requested from the IdP; empty means openid, email, profile."`
	// Keys lets a person paste a virtual key on the login page instead.
	Keys bool `config:"keys" doc:"Accept a mcpgate virtual key as the login, once, on the login page (for teams without an IdP)."`
	// Claims map the IdP's ID token to the person, as for an issuer.
	Claims          ClaimPaths    `config:"claims" doc:"Where the person's identity is in the IdP's ID token."`
	AccessTokenTTL  time.Duration `config:"access_token_ttl,default=15m,positive" doc:"Lifetime of the access tokens (JWTs) mcpgate issues."`
	RefreshTokenTTL time.Duration `config:"refresh_token_ttl,default=720h,positive" doc:"Lifetime of a refresh token family; every use rotates it, and a reused one revokes the family."`
	// AllowPrivateMetadata lets client metadata documents live on private
	// addresses (tests and internal clients only).
	AllowPrivateMetadata bool `config:"allow_private_metadata" doc:"Fetch client ID metadata documents from private and loopback addresses too (test rigs; off, such a client_id is refused)."`
	// SealKey replaces data_dir/oauth-seal.key: every replica of a fleet
	// must open the signing keys the shared store holds.
	SealKey string `config:"seal_key,expand,trim,secret" doc:"The key mcpgate's token-signing keys are sealed under in the store: 32 random bytes in base64, usually ${MCPGATE_OAUTH_SEAL_KEY}. Every replica of a fleet needs the same one (required with store.driver: postgres). Empty: data_dir/oauth-seal.key, created on first start."`
}

// SealKeyBytes decodes SealKey; nil when it is empty. The error never
// quotes the key.
func (l *Login) SealKeyBytes() ([]byte, error) {
	if l == nil || l.SealKey == "" {
		return nil, nil
	}
	return DecodeVaultKey(l.SealKey)
}

// Grant gives JWT callers matching one user, team or role what a virtual
// key would carry. A caller gets the union of the grants it matches.
type Grant struct {
	User         string              `config:"user,expand,trim" doc:"A user id (the claims.user of a JWT caller)."`
	Team         string              `config:"team,expand,trim" doc:"A team (claims.team or claims.teams)."`
	Role         string              `config:"role,expand,trim" doc:"A role (claims.roles)."`
	Servers      []string            `config:"servers,ornone" doc:"The servers granted: absent means all, [] none."`
	Tools        map[string][]string `config:"tools" doc:"Per-server allow list of upstream tool names."`
	DenyTools    map[string][]string `config:"deny_tools" doc:"Per-server upstream tool names hidden."`
	Toolsets     []string            `config:"toolsets" doc:"Toolsets granted."`
	AccessGroups []string            `config:"access_groups" doc:"Access groups granted."`
	Admin        bool                `config:"admin" doc:"The admin API."`
	RateLimitRPM int                 `config:"rate_limit_rpm,min=0" doc:"Requests per minute per caller, each JSON-RPC request of a batch counted; the lowest non-zero limit of the matching grants applies. 0: unlimited."`
	Line         int                 `config:",line"`
}

// Subject returns which of user, team and role the grant names, and the
// value.
func (g *Grant) Subject() (kind, value string) {
	switch {
	case g.User != "":
		return "user", g.User
	case g.Team != "":
		return "team", g.Team
	case g.Role != "":
		return "role", g.Role
	}
	return "", ""
}

// OrDefaults returns l with every zero defaulted field set to its
// default (token lifetimes, claim paths), for a value built in code.
func (l Login) OrDefaults() Login {
	fillZero(typeOf(reflect.TypeFor[Login]()), reflect.ValueOf(&l).Elem())
	return l
}

// OrDefaults returns c with every empty path set to its default (user
// sub, email email, teams groups, roles roles), for a value built in code.
func (c ClaimPaths) OrDefaults() ClaimPaths {
	fillZero(typeOf(reflect.TypeFor[ClaimPaths]()), reflect.ValueOf(&c).Elem())
	return c
}

// AlgsOrDefault returns the issuer's allowed algorithms, or the defaults.
func (i *OIDCIssuer) AlgsOrDefault() []string {
	if len(i.AllowedAlgs) == 0 {
		return DefaultAllowedAlgs
	}
	return i.AllowedAlgs
}

// validIssuerURL accepts https URLs, and http ones on a loopback host,
// without query or fragment.
func validIssuerURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		return loopbackHost(u.Hostname())
	}
	return false
}

func loopbackHost(h string) bool { return netaddr.IsLoopbackHost(h) }

// validPublicURL accepts the gateway's external base URL: http or https,
// a host, an optional path prefix, no query, fragment or user info.
func validPublicURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && u.User == nil
}

func (a *CallerAuth) validateIdentity(errs *errorList, c *Config) {
	seen := map[string]int{}
	for i := range a.OIDC {
		is, p := &a.OIDC[i], indexPath("auth.oidc", i)
		checkFields(errs, p, is, true)
		if is.Issuer != "" {
			if !validIssuerURL(is.Issuer) {
				errs.add(p+".issuer", is.Line, "must be an https URL (http only on a loopback host), without query or fragment")
			} else if j, dup := seen[is.Issuer]; dup {
				errs.add(p+".issuer", is.Line, "same issuer as oidc[%d]", j)
			} else {
				seen[is.Issuer] = i
			}
		}
		if is.JWKSURL != "" && !validIssuerURL(is.JWKSURL) {
			errs.add(p+".jwks_url", is.Line, "must be an https URL (http only on a loopback host)")
		}
		checkClaims(errs, p+".claims", is.Line, &is.Claims)
	}
	if l := a.Login; l != nil {
		p := "auth.login"
		checkFields(errs, p, l, true)
		switch {
		case l.Issuer == "" && !l.Keys:
			errs.add(p+".issuer", 0, "required unless keys: true (people then log in with a virtual key)")
		case l.Issuer != "" && !validIssuerURL(l.Issuer):
			errs.add(p+".issuer", 0, "must be an https URL (http only on a loopback host), without query or fragment")
		}
		if l.Issuer != "" && l.ClientID == "" {
			errs.add(p+".client_id", 0, "required with issuer")
		}
		if l.Issuer == "" && (l.ClientID != "" || l.ClientSecret != "") {
			errs.add(p, 0, "client_id and client_secret need issuer")
		}
		checkClaims(errs, p+".claims", 0, &l.Claims)
		if _, err := l.SealKeyBytes(); err != nil {
			errs.add(p+".seal_key", 0, "%s", err.Error())
		} else if l.SealKey == "" && c.Store.Driver == StorePostgres {
			// Each replica would seal its own signing keys under its own
			// file, and none could open the others' (and a fresh file
			// would discard them).
			errs.add(p+".seal_key", 0, "required with store.driver: postgres, the same on every replica (32 random bytes in base64)")
		}
	}
	for i := range a.Grants {
		g, p := &a.Grants[i], indexPath("auth.grants", i)
		checkFields(errs, p, g, true)
		n := 0
		for _, v := range []string{g.User, g.Team, g.Role} {
			if v != "" {
				n++
			}
		}
		if n != 1 {
			errs.add(p, g.Line, "must name exactly one of user, team or role")
		}
		k := KeyConfig{Servers: g.Servers, Tools: g.Tools, DenyTools: g.DenyTools, Toolsets: g.Toolsets, AccessGroups: g.AccessGroups, Line: g.Line}
		k.validateGrants(errs, p, c)
	}
}

func checkClaims(errs *errorList, p string, line int, cl *ClaimPaths) {
	for _, f := range []struct{ key, v string }{{"user", cl.User}, {"email", cl.Email}, {"team", cl.Team}, {"teams", cl.Teams}, {"org", cl.Org}, {"roles", cl.Roles}} {
		if f.v != "" && (strings.HasPrefix(f.v, ".") || strings.HasSuffix(f.v, ".") || strings.Contains(f.v, "..")) {
			errs.add(p+"."+f.key, line, "must be a claim name or a dotted path like realm_access.roles")
		}
	}
}
