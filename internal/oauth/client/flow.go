package client

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/tracing"
)

// ErrNoPKCE: the authorization server's metadata does not list S256 in
// code_challenge_methods_supported (or omits the field, which the MCP
// spec reads as no PKCE): clients MUST refuse to proceed.
var ErrNoPKCE = errors.New("the authorization server does not support PKCE S256")

func (p *Plan) checkPKCE() error {
	if !slices.Contains(p.AuthServer.CodeChallengeMethodsSupported, "S256") {
		return fmt.Errorf("oauth: %s: %w", redactURL(p.AuthServer.Issuer), ErrNoPKCE)
	}
	return nil
}

// AuthorizeURL is the authorization request to send the person's browser
// to (OAuth 2.1 4.1.1): response_type code, client_id, redirect_uri, a
// PKCE S256 challenge of a fresh verifier, the state (the caller's,
// required, checked by the caller on the callback), the resource
// (RFC 8707) and the scopes. The verifier is returned for Exchange; keep
// it with the state, server-side.
func (p *Plan) AuthorizeURL(c Client, state string) (authURL, verifier string, err error) {
	if err := p.checkPKCE(); err != nil {
		return "", "", err
	}
	if state == "" {
		return "", "", errors.New("oauth authorize: a state is required")
	}
	if c.ID == "" || p.cfg.RedirectURI == "" {
		return "", "", errors.New("oauth authorize: a client_id and a redirect URI are required")
	}
	u, err := p.f.checkURL(p.AuthServer.AuthorizationEndpoint)
	if err != nil {
		return "", "", fmt.Errorf("oauth authorize: authorization_endpoint: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("oauth authorize: %w", err)
	}
	verifier = base64.RawURLEncoding.EncodeToString(b[:])
	q := u.Query() // RFC 6749 3.1: the endpoint's own query is kept
	q.Set("response_type", "code")
	q.Set("client_id", c.ID)
	q.Set("redirect_uri", p.cfg.RedirectURI)
	q.Set("code_challenge", s256(verifier))
	q.Set("code_challenge_method", "S256")
	q.Set("state", state)
	q.Set("resource", p.Resource)
	if len(p.Scopes) > 0 {
		q.Set("scope", strings.Join(p.Scopes, " "))
	} else {
		q.Del("scope")
	}
	u.RawQuery = q.Encode()
	return u.String(), verifier, nil
}

func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Token is a token response. String and LogValue leave the tokens out.
type Token struct {
	AccessToken  string
	TokenType    string
	RefreshToken string
	// Expiry is zero when the server gave no expires_in.
	Expiry time.Time
	// Scope is what was granted: the response's scope, else (RFC 6749
	// 5.1) what was requested.
	Scope string
}

func (t Token) String() string {
	return fmt.Sprintf("%s token (scope %q, expiry %s, refresh %t)", t.TokenType, t.Scope, t.Expiry.Format(time.RFC3339), t.RefreshToken != "")
}

// GoString keeps %#v from printing the tokens.
func (t Token) GoString() string { return t.String() }

// LogValue keeps slog from printing the tokens.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("token_type", t.TokenType), slog.String("scope", t.Scope),
		slog.Time("expiry", t.Expiry), slog.Bool("refresh", t.RefreshToken != ""))
}

// TokenError is an OAuth error response (RFC 6749 5.2, RFC 7591 3.2.2):
// its code and description, sanitised and clipped, never a credential.
type TokenError struct {
	Status      int
	Code        string
	Description string
}

func (e *TokenError) Error() string {
	s := fmt.Sprintf("HTTP %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Description != "" {
		s += ": " + e.Description
	}
	return s
}

func oauthError(status int, data []byte) error {
	var body struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	_ = json.Unmarshal(data, &body)
	return &TokenError{Status: status, Code: sanitize(body.Error, 64), Description: sanitize(body.Description, 200)}
}

// Exchange redeems an authorization code (OAuth 2.1 4.1.3) with its PKCE
// verifier and the resource. iss is the callback's iss parameter
// (RFC 9207): required, and equal to the issuer, when the authorization
// server advertises authorization_response_iss_parameter_supported;
// compared whenever present. The caller has checked the state.
func (p *Plan) Exchange(ctx context.Context, c Client, code, verifier, iss string) (*Token, error) {
	if err := p.checkIss(iss); err != nil {
		return nil, err
	}
	if code == "" || verifier == "" {
		return nil, errors.New("oauth exchange: a code and a verifier are required")
	}
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {p.cfg.RedirectURI},
		"code_verifier": {verifier},
		"resource":      {p.Resource},
	}
	return p.token(ctx, c, form)
}

func (p *Plan) checkIss(iss string) error {
	if iss == "" && !p.AuthServer.AuthorizationResponseIssParameterSupported {
		return nil
	}
	if iss != p.AuthServer.Issuer {
		if iss == "" {
			return fmt.Errorf("oauth exchange: %w: the authorization response has no iss, which %s promises", ErrIssuerMismatch, redactURL(p.AuthServer.Issuer))
		}
		return fmt.Errorf("oauth exchange: %w: the authorization response's iss %q is not %q (a mix-up?)", ErrIssuerMismatch, sanitize(iss, 200), redactURL(p.AuthServer.Issuer))
	}
	return nil
}

// Refresh redeems a refresh token (OAuth 2.1 4.3) for the resource. The
// returned token's RefreshToken is the new one when the server rotated
// it, else refreshToken: store it either way.
func (p *Plan) Refresh(ctx context.Context, c Client, refreshToken string) (*Token, error) {
	if refreshToken == "" {
		return nil, errors.New("oauth refresh: no refresh token")
	}
	form := url.Values{
		"grant_type":    {"refresh_token"},
		"refresh_token": {refreshToken},
		"resource":      {p.Resource},
	}
	t, err := p.token(ctx, c, form)
	if err != nil {
		return nil, err
	}
	if t.RefreshToken == "" {
		t.RefreshToken = refreshToken
	}
	return t, nil
}

// token posts form to the token endpoint with the client's
// authentication, never following a redirect.
func (p *Plan) token(ctx context.Context, c Client, form url.Values) (*Token, error) {
	ep := p.AuthServer.TokenEndpoint
	var edit func(*http.Request)
	switch c.AuthMethod {
	case AuthNone, "":
		form.Set("client_id", c.ID)
	case AuthClientSecretPost:
		form.Set("client_id", c.ID)
		form.Set("client_secret", c.Secret)
	case AuthClientSecretBasic:
		// RFC 6749 2.3.1: each part form-encoded, then Basic.
		id, secret := url.QueryEscape(c.ID), url.QueryEscape(c.Secret)
		edit = func(r *http.Request) { r.SetBasicAuth(id, secret) }
	default:
		return nil, fmt.Errorf("oauth token: unsupported token endpoint auth method %q", sanitize(c.AuthMethod, 64))
	}
	sctx, sp := tracing.StartInternal(ctx, "oauth2.token", "")
	status, data, err := p.f.post(sctx, ep, "application/x-www-form-urlencoded", form.Encode(), edit)
	if err == nil && status != http.StatusOK {
		tracing.End(sp, errors.New("token endpoint refused"), "http_"+strconv.Itoa(status))
	} else {
		tracing.End(sp, err, "unreachable")
	}
	if err != nil {
		return nil, fmt.Errorf("oauth token: %w", err)
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("oauth token: %s: %w", redactURL(ep), oauthError(status, data))
	}
	t, err := ParseTokenResponse(data, time.Now())
	if err != nil {
		return nil, fmt.Errorf("oauth token: %s: %w", redactURL(ep), err)
	}
	if t.Scope == "" {
		t.Scope = strings.Join(p.Scopes, " ")
	}
	return t, nil
}

// ParseTokenResponse reads a successful token response (RFC 6749 5.1):
// an access_token, token_type Bearer (any case), expires_in when given.
// Its errors never hold the body.
func ParseTokenResponse(data []byte, now time.Time) (*Token, error) {
	var body struct {
		AccessToken  string          `json:"access_token"`
		TokenType    string          `json:"token_type"`
		RefreshToken string          `json:"refresh_token"`
		ExpiresIn    json.Number     `json:"expires_in"`
		Scope        json.RawMessage `json:"scope"`
	}
	if err := decodeObject(data, &body); err != nil {
		return nil, errors.New("the token response is not a JSON object")
	}
	if body.AccessToken == "" {
		return nil, errors.New("the token response has no access_token")
	}
	if !strings.EqualFold(body.TokenType, "Bearer") {
		return nil, fmt.Errorf("the token response's token_type is %q, not Bearer", sanitize(body.TokenType, 32))
	}
	t := &Token{AccessToken: body.AccessToken, TokenType: "Bearer", RefreshToken: body.RefreshToken}
	if body.ExpiresIn != "" {
		// Some servers send a string, some a float.
		secs, err := body.ExpiresIn.Float64()
		if err != nil || secs < 0 || secs > 10*365*24*3600 {
			return nil, errors.New("the token response's expires_in is not a number of seconds")
		}
		t.Expiry = now.Add(time.Duration(secs) * time.Second)
	}
	var scope string
	if len(body.Scope) > 0 && json.Unmarshal(body.Scope, &scope) == nil {
		t.Scope = strings.Join(strings.Fields(printable(scope)), " ")
	}
	return t, nil
}

// StepUp reads an upstream's answer to a request made with a token that
// was granted the scopes granted: on a 403 with a Bearer
// error="insufficient_scope" challenge, next is the union of granted and
// the challenge's scope (the MCP spec's step-up; servers may list only
// the new scopes). ok is false when the answer is not such a challenge,
// or asks for nothing beyond granted: re-authorizing cannot help then.
// The caller bounds the attempts per resource and operation, and starts
// the flow again with p.WithScopes(next).
func StepUp(granted []string, resp *http.Response) (next []string, ok bool) {
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		return nil, false
	}
	bc := ParseBearerChallenge(resp.Header.Values("WWW-Authenticate"))
	if bc.Error != "insufficient_scope" || bc.Scope == "" {
		return nil, false
	}
	next = unionScopes(granted, strings.Fields(bc.Scope))
	if len(next) == len(unionScopes(granted, nil)) {
		return nil, false
	}
	return next, true
}

// WithScopes is a copy of p that requests scopes instead.
func (p *Plan) WithScopes(scopes []string) *Plan {
	q := *p
	q.Scopes = unionScopes(scopes, nil)
	return &q
}
