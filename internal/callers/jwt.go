package callers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/cancelctx"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/store"
)

// JWT callers (SPEC S5.3). A bearer token that is a JWT (and not a gateway
// key) is verified against the configured issuers for the resource of the
// route it is used on; the caller is then who the token says, with what
// the grants give its user, teams and roles. Such a token is the gateway's
// credential: it is dropped before egress like a key in Authorization, so
// it never reaches an upstream (only a passthrough server receives the
// caller's own upstream token, from X-Mcp-<server>-Authorization).

// TokenVerifier verifies a JWT bearer for a resource; *oauth.Verifier is
// one. Its errors are *oauth.TokenError (401) and *oauth.ScopeError (403).
type TokenVerifier interface {
	Verify(ctx context.Context, token, resource string) (*oauth.Identity, error)
}

// ExactVerifier is an optional capability of a TokenVerifier: it
// verifies a token for a resource that takes only tokens naming that very
// resource (the admin API), where an issuer's configured gateway-wide
// audience does not count. *oauth.Verifier is one. A TokenVerifier
// without it cannot admit JWTs to such a resource: they are refused.
type ExactVerifier interface {
	VerifyExact(ctx context.Context, token, resource string) (*oauth.Identity, error)
}

var (
	_ TokenVerifier = (*oauth.Verifier)(nil)
	_ ExactVerifier = (*oauth.Verifier)(nil)
)

type resourceKey struct{}

// resourceValue is what WithResource, WithResourceFunc and
// WithAdminResource store.
type resourceValue struct {
	url   string
	lazy  func() string // WithResourceFunc: url, worked out when asked
	exact bool
}

// WithResource returns ctx carrying the resource URL (RFC 8707) of the
// MCP route a request is for: the audience a JWT bearer must have been
// issued for. The gateway sets it before Authenticate.
func WithResource(ctx context.Context, resource string) context.Context {
	return context.WithValue(ctx, resourceKey{}, resourceValue{url: resource})
}

// WithResourceFunc is WithResource with the URL worked out only when a
// bearer token is verified: a key or an anonymous caller never needs it,
// and it is a few string operations on every request otherwise.
func WithResourceFunc(ctx context.Context, resource func() string) context.Context {
	return context.WithValue(ctx, resourceKey{}, resourceValue{lazy: resource})
}

// SetResourceFuncInPlace is WithResourceFunc in place (SetInPlace's
// rules), reporting whether it could.
func SetResourceFuncInPlace(ctx context.Context, resource func() string) bool {
	return cancelctx.SetInPlace(ctx, resourceKey{}, resourceValue{lazy: resource})
}

// WithAdminResource is WithResource for the admin API: a JWT bearer must
// name exactly this resource in its aud (ExactVerifier).
func WithAdminResource(ctx context.Context, resource string) context.Context {
	return context.WithValue(ctx, resourceKey{}, resourceValue{url: resource, exact: true})
}

// verifyToken verifies a JWT bearer for the resource in ctx, exactly when
// the resource asks for it.
func (a *Authenticator) verifyToken(ctx context.Context, token string) (*oauth.Identity, error) {
	res, _ := ctx.Value(resourceKey{}).(resourceValue)
	if res.lazy != nil {
		res.url = res.lazy()
	}
	if !res.exact {
		return a.tokens.Verify(ctx, token, res.url)
	}
	ev, ok := a.tokens.(ExactVerifier)
	if !ok {
		return nil, &oauth.TokenError{Description: "tokens are not accepted here"}
	}
	return ev.VerifyExact(ctx, token, res.url)
}

// OAuthError says why a bearer token was refused, for the gateway's
// WWW-Authenticate challenge (RFC 6750 section 3).
type OAuthError struct {
	Code        string   // invalid_request, invalid_token or insufficient_scope
	Description string   // safe to show: never a token or claim value
	Scopes      []string // the scopes needed, for insufficient_scope
}

// keyByAlias is the part of store.Keys the virtual-key login of mcpgate's
// own authorization server needs: its tokens name the key by alias.
type keyByAlias interface {
	GetKeyByAlias(ctx context.Context, alias string) (store.Key, error)
}

func (a *Authenticator) authenticateJWT(r *http.Request, token string, now time.Time) (*Caller, *Failure) {
	ctx := r.Context()
	id, err := a.verifyToken(ctx, token)
	if err != nil {
		var se *oauth.ScopeError
		if errors.As(err, &se) {
			return nil, insufficientScope(se.Required)
		}
		desc := "the token is not valid"
		var te *oauth.TokenError
		if errors.As(err, &te) && te.Description != "" {
			desc = te.Description
		}
		a.logger.Debug("rejected bearer token", attrReason, desc)
		return nil, invalidToken(desc)
	}
	var c Caller
	if id.Key != "" {
		k, f := a.loginKey(ctx, id.Key, now)
		if f != nil {
			return nil, f
		}
		c = k
	} else {
		c = FromGrants(a.grants.All(), Subject{User: id.User, Teams: id.Teams, Roles: id.Roles})
		c.User = id.User
		if len(id.Teams) > 0 {
			c.Team = id.Teams[0]
		}
	}
	c.Issuer, c.Subject, c.Email, c.Org = id.Issuer, id.Subject, id.Email, id.Org
	c.Teams, c.Roles, c.Scopes, c.ClientID = id.Teams, id.Roles, id.Scopes, id.ClientID
	c.TokenExpiry = id.Expiry
	c.KeyFromAuthorization = true // the gateway's credential: never forwarded
	c.Owner = OwnerOf(&c, r)
	if c.RateLimitRPM > 0 {
		if ok, wait := a.allow(r.Context(), limitKeyOwner, c.Owner, c.RateLimitRPM, now); !ok {
			return nil, rateLimited(retryAfterSeconds(wait))
		}
	}
	return &c, nil
}

// loginKey is the caller of a token that mcpgate's authorization server
// issued for a person who logged in with a virtual key: that key's access,
// as long as the key is still valid.
func (a *Authenticator) loginKey(ctx context.Context, alias string, now time.Time) (Caller, *Failure) {
	info, err := a.cache.lookupAlias(ctx, alias, now)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			a.logger.Error("authenticate", attrErr, err)
		}
		return Caller{}, unavailable()
	case info == nil:
		return Caller{}, invalidToken("the key this token was issued for is revoked")
	}
	if info.disabled || (!info.caller.ExpiresAt.IsZero() && !now.Before(info.caller.ExpiresAt)) {
		return Caller{}, invalidToken("the key this token was issued for is revoked or expired")
	}
	c := info.caller
	c.keyHash = "" // the owner is the token's person, not the key
	return c, nil
}

// GrantsOf returns the grants of a config's auth block.
func GrantsOf(cfg *config.Config) []config.Grant {
	if cfg == nil || cfg.Auth == nil {
		return nil
	}
	return cfg.Auth.Grants
}

func invalidToken(desc string) *Failure {
	f := newFailure(http.StatusUnauthorized, oauthBody(CodeUnauthorized, "Unauthorized: "+desc))
	f.OAuth = &OAuthError{Code: "invalid_token", Description: desc}
	f.Reason = "invalid token: " + desc
	return f
}

func insufficientScope(scopes []string) *Failure {
	f := newFailure(http.StatusForbidden, oauthBody(CodeForbidden, "Forbidden: the token lacks the scope "+strings.Join(scopes, " ")))
	f.OAuth = &OAuthError{Code: "insufficient_scope", Description: "the token lacks a required scope", Scopes: scopes}
	f.Reason = "insufficient scope"
	return f
}

// InvalidRequest refuses a request that sent a token where none may be:
// in the query string (RFC 6750 section 2.3 is not offered).
func InvalidRequest(desc string) *Failure {
	f := newFailure(http.StatusBadRequest, oauthBody(CodeInvalidClient, "Bad Request: "+desc))
	f.OAuth = &OAuthError{Code: "invalid_request", Description: desc}
	return f
}

func oauthBody(code int, msg string) []byte {
	m, _ := json.Marshal(msg)
	return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":` + strconv.Itoa(code) + `,"message":` + string(m) + `}}`)
}
