package authserver

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// The company IdP leg: OpenID Connect authorization code flow with PKCE
// S256, our own state and nonce, the ID token verified against the IdP's
// JWKS and mapped to the person.

const (
	idpMetadataTTL = time.Hour
	idpJWKSTTL     = time.Hour
	idpJWKSRefetch = time.Minute // at most this often on an unknown kid
	idpMaxBody     = 1 << 20
)

// idTokenAlgs are the ID token signatures accepted: asymmetric only, so
// that nothing public (a JWKS entry) can verify an HMAC.
var idTokenAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

type idp struct {
	issuer       string
	clientID     string
	clientSecret string
	scope        string
	paths        config.ClaimPaths
	hc           *http.Client
	now          func() time.Time

	mu          sync.Mutex
	md          *oauth.AuthServerMetadata
	mdExpires   time.Time
	jwks        []jose.JSONWebKey
	jwksExpires time.Time
	jwksFetched time.Time
}

func newIDP(l *config.Login, hc *http.Client, now func() time.Time) *idp {
	scopes := l.Scopes
	if len(scopes) == 0 {
		scopes = config.DefaultLoginScopes
	}
	// The login is read from the ID token, which only openid asks for.
	if !slices.Contains(scopes, "openid") {
		scopes = append([]string{"openid"}, scopes...)
	}
	return &idp{issuer: l.Issuer, clientID: l.ClientID, clientSecret: l.ClientSecret,
		scope: strings.Join(scopes, " "), paths: l.Claims.OrDefaults(), hc: hc, now: now}
}

// origin is what the login pages' Content-Security-Policy must let forms
// lead to.
func (p *idp) origin() string { return originOf(p.issuer) }

// metadata returns the IdP's discovered metadata, cached for an hour.
func (p *idp) metadata(ctx context.Context) (*oauth.AuthServerMetadata, error) {
	now := p.now()
	p.mu.Lock()
	md, exp := p.md, p.mdExpires
	p.mu.Unlock()
	if md != nil && now.Before(exp) {
		return md, nil
	}
	md, err := p.discover(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.md, p.mdExpires = md, now.Add(idpMetadataTTL)
	p.mu.Unlock()
	return md, nil
}

// discover reads OpenID Connect discovery, or RFC 8414 metadata when the
// IdP serves only that, and insists that it describes the configured
// issuer exactly (a mismatch is how mix-ups begin).
func (p *idp) discover(ctx context.Context) (*oauth.AuthServerMetadata, error) {
	urls := []string{strings.TrimSuffix(p.issuer, "/") + "/.well-known/openid-configuration"}
	if u, err := url.Parse(p.issuer); err == nil {
		urls = append(urls, u.Scheme+"://"+u.Host+"/.well-known/oauth-authorization-server"+strings.TrimSuffix(u.EscapedPath(), "/"))
	}
	var firstErr error
	for _, mu := range urls {
		var md oauth.AuthServerMetadata
		err := p.getJSON(ctx, mu, &md)
		if err == nil {
			switch {
			case md.Issuer != p.issuer:
				err = fmt.Errorf("metadata at %s is for issuer %q", mu, md.Issuer)
			case md.AuthorizationEndpoint == "" || md.TokenEndpoint == "" || md.JWKSURI == "":
				err = fmt.Errorf("metadata at %s lacks authorization_endpoint, token_endpoint or jwks_uri", mu)
			default:
				return &md, nil
			}
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, fmt.Errorf("discover IdP %s: %w", p.issuer, firstErr)
}

func (p *idp) getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultIdPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, idpMaxBody))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}

// authURL is where the person's browser goes to log in.
func (p *idp) authURL(md *oauth.AuthServerMetadata, redirectURI, state, nonce, verifier string) (string, error) {
	u, err := url.Parse(md.AuthorizationEndpoint)
	if err != nil {
		return "", fmt.Errorf("IdP authorization endpoint: %w", err)
	}
	q := u.Query()
	q.Set("response_type", "code")
	q.Set("client_id", p.clientID)
	q.Set("redirect_uri", redirectURI)
	q.Set("scope", p.scope)
	q.Set("state", state)
	q.Set("nonce", nonce)
	q.Set("code_challenge", s256(verifier))
	q.Set("code_challenge_method", "S256")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// s256 is the PKCE S256 challenge of a verifier (RFC 7636 section 4.2).
func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// exchange redeems the IdP's code and returns the ID token.
func (p *idp) exchange(ctx context.Context, md *oauth.AuthServerMetadata, code, redirectURI, verifier string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultIdPTimeout)
	defer cancel()
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {redirectURI},
		"code_verifier": {verifier},
	}
	if p.clientSecret == "" {
		form.Set("client_id", p.clientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, md.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if p.clientSecret != "" {
		// RFC 6749 section 2.3.1: both halves are form-encoded first.
		req.SetBasicAuth(url.QueryEscape(p.clientID), url.QueryEscape(p.clientSecret))
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("IdP token request: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, idpMaxBody))
	if err != nil {
		return "", fmt.Errorf("IdP token response: %w", err)
	}
	var tr struct {
		IDToken string `json:"id_token"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal(body, &tr); err != nil {
		return "", fmt.Errorf("IdP token response (status %d): not JSON", resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK {
		// The error code is the IdP's vocabulary, not a secret.
		return "", fmt.Errorf("IdP token request: status %d, error %q", resp.StatusCode, tr.Error)
	}
	if tr.IDToken == "" {
		return "", errors.New("IdP token response has no id_token (is openid among the scopes?)")
	}
	return tr.IDToken, nil
}

// verifyIDToken checks an ID token (OpenID Connect Core section 3.1.3.7)
// and returns its claims.
func (p *idp) verifyIDToken(ctx context.Context, md *oauth.AuthServerMetadata, raw, nonce string) (map[string]any, error) {
	tok, err := jwt.ParseSigned(raw, idTokenAlgs)
	if err != nil {
		return nil, fmt.Errorf("ID token: %w", err)
	}
	if len(tok.Headers) != 1 {
		return nil, errors.New("ID token: not exactly one signature")
	}
	key, err := p.key(ctx, md, tok.Headers[0].KeyID)
	if err != nil {
		return nil, err
	}
	var std jwt.Claims
	var all map[string]any
	if err := tok.Claims(key.Key, &std, &all); err != nil {
		return nil, fmt.Errorf("ID token: %w", err)
	}
	if std.Expiry == nil || std.IssuedAt == nil {
		return nil, errors.New("ID token: exp and iat are required")
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: p.issuer, AnyAudience: jwt.Audience{p.clientID}, Time: p.now()}, clockSkew); err != nil {
		return nil, fmt.Errorf("ID token: %w", err)
	}
	azp, _ := all["azp"].(string)
	if (len(std.Audience) > 1 || azp != "") && azp != p.clientID {
		return nil, errors.New("ID token: azp is not this client")
	}
	if n, _ := all["nonce"].(string); n == "" || n != nonce {
		return nil, errors.New("ID token: nonce mismatch")
	}
	if std.Subject == "" {
		return nil, errors.New("ID token: no sub")
	}
	return all, nil
}

// key finds the IdP's verification key by kid, refetching the JWKS when
// the kid is unknown (a rotation) but not more than once a minute.
func (p *idp) key(ctx context.Context, md *oauth.AuthServerMetadata, kid string) (jose.JSONWebKey, error) {
	now := p.now()
	p.mu.Lock()
	keys, exp, fetched := p.jwks, p.jwksExpires, p.jwksFetched
	p.mu.Unlock()
	if k, ok := findKey(keys, kid); ok && now.Before(exp) {
		return k, nil
	}
	if !fetched.IsZero() && now.Sub(fetched) < idpJWKSRefetch && now.Before(exp) {
		return jose.JSONWebKey{}, fmt.Errorf("ID token: unknown key %q", kid)
	}
	var set jose.JSONWebKeySet
	if err := p.getJSON(ctx, md.JWKSURI, &set); err != nil {
		return jose.JSONWebKey{}, fmt.Errorf("IdP JWKS: %w", err)
	}
	keys = keys[:0:0]
	for _, k := range set.Keys {
		// Public signing keys only: a JWKS is not the place for secrets,
		// and a symmetric entry must never verify anything.
		if k.Valid() && k.IsPublic() && (k.Use == "" || k.Use == "sig") {
			keys = append(keys, k)
		}
	}
	p.mu.Lock()
	p.jwks, p.jwksExpires, p.jwksFetched = keys, now.Add(idpJWKSTTL), now
	p.mu.Unlock()
	if k, ok := findKey(keys, kid); ok {
		return k, nil
	}
	return jose.JSONWebKey{}, fmt.Errorf("ID token: unknown key %q", kid)
}

// findKey picks the key with the kid; with no kid, the only key.
func findKey(keys []jose.JSONWebKey, kid string) (jose.JSONWebKey, bool) {
	if kid == "" {
		if len(keys) == 1 {
			return keys[0], true
		}
		return jose.JSONWebKey{}, false
	}
	for _, k := range keys {
		if k.KeyID == kid {
			return k, true
		}
	}
	return jose.JSONWebKey{}, false
}

// person maps verified ID token claims to who logged in. The subject of
// mcpgate's tokens is the IdP's sub under a short hash of the IdP issuer,
// so that a change of IdP cannot make one person another.
func (p *idp) person(claims map[string]any) oauth.Identity {
	sub, _ := claims["sub"].(string)
	sum := sha256.Sum256([]byte(p.issuer))
	id := oauth.PersonOf(claims, p.paths)
	id.Issuer = p.issuer
	id.Subject = hex.EncodeToString(sum[:8]) + ":" + sub
	return id
}
