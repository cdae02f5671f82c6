package authserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/store"
)

// personRecord is oauth.Identity's person part as stored in a refresh
// token family.
type personRecord struct {
	Issuer  string   `json:"idp,omitempty"` // the IdP the person logged in at; "" for a key login
	Subject string   `json:"sub"`
	User    string   `json:"user,omitempty"`
	Email   string   `json:"email,omitempty"`
	Teams   []string `json:"teams,omitempty"`
	Org     string   `json:"org,omitempty"`
	Roles   []string `json:"roles,omitempty"`
	Key     string   `json:"key,omitempty"`
}

func recordOf(id oauth.Identity) personRecord {
	return personRecord{Issuer: id.Issuer, Subject: id.Subject, User: id.User, Email: id.Email,
		Teams: id.Teams, Org: id.Org, Roles: id.Roles, Key: id.Key}
}

// familyRecord is one login's chain of refresh tokens (kind oauth_family,
// named by a random id). Only Current may be used; any other token of the
// family coming back means one was stolen, and the family is revoked.
type familyRecord struct {
	Current  string       `json:"current"` // sha256 hex of the live refresh token
	ClientID string       `json:"client_id"`
	Issuer   string       `json:"iss"`
	Scope    string       `json:"scope"`
	Resource string       `json:"resource"` // the one resource of every token of the family, canonical
	Version  int          `json:"v,omitempty"`
	Person   personRecord `json:"person"`
	Created  time.Time    `json:"created"`
	Expires  time.Time    `json:"expires"`
	Revoked  bool         `json:"revoked,omitempty"`
}

// familyVersion is the Version of families issued since every grant has
// been bound to one resource with consent for that resource. An older
// family for the admin API may have been given without the admin API
// being named to the person, and one bound to the issuer names no
// resource: neither is refreshed (the person signs in again).
const familyVersion = 2

// refreshRecord maps a refresh token's digest (kind oauth_refresh, the
// name) to its family. Rotated-out tokens keep theirs until the family
// expires, so that their reuse is recognised.
type refreshRecord struct {
	Family  string    `json:"family"`
	Expires time.Time `json:"expires"`
}

// accessClaims are the claims of an access token (RFC 9068 plus the
// person's attributes the gateway's grants match on).
type accessClaims struct {
	jwt.Claims
	ClientID string   `json:"client_id"`
	Scope    string   `json:"scope,omitempty"`
	User     string   `json:"user,omitempty"`
	Email    string   `json:"email,omitempty"`
	Teams    []string `json:"teams,omitempty"`
	Org      string   `json:"org,omitempty"`
	Roles    []string `json:"roles,omitempty"`
	Key      string   `json:"mcpgate_key,omitempty"`
}

type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token,omitempty"`
	Scope        string `json:"scope,omitempty"`
}

// authenticateClient identifies the client of a token or revocation
// request by the method it registered (RFC 6749 section 2.3): a public
// client names itself, a confidential one proves its secret in the
// Authorization header (client_secret_basic) or the body
// (client_secret_post). Failures are invalid_client.
func (s *Server) authenticateClient(r *http.Request, form url.Values) (*client, error) {
	id, secret, basic := r.BasicAuth()
	if basic {
		// RFC 6749 section 2.3.1: both are form-encoded before base64.
		var err1, err2 error
		id, err1 = url.QueryUnescape(id)
		secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil {
			return nil, errInvalidClient("malformed client credentials", true)
		}
		if form.Get("client_secret") != "" || (form.Get("client_id") != "" && form.Get("client_id") != id) {
			return nil, errInvalidRequest("use one client authentication method")
		}
	} else {
		id, secret = form.Get("client_id"), form.Get("client_secret")
	}
	if id == "" {
		return nil, errInvalidClient("client authentication is required", basic)
	}
	if len(id) > maxClientIDLen {
		return nil, errInvalidClient("unknown client", basic)
	}
	var c *client
	if isURLClientID(id) {
		// A metadata document client is public (the document was checked
		// at the authorization request; codes and tokens are bound to
		// the id), so it is not fetched again here.
		if checkMetadataURL(id, s.login.AllowPrivateMetadata) != nil {
			return nil, errInvalidClient("unknown client", basic)
		}
		c = &client{ID: id, AuthMethod: authNone, Document: true}
	} else {
		o, err := s.store.GetObject(r.Context(), store.KindOAuthClient, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, errInvalidClient("unknown client", basic)
		}
		if err != nil {
			return nil, err
		}
		var rec clientRecord
		if err := json.Unmarshal(o.Doc, &rec); err != nil {
			return nil, err
		}
		c = rec.client()
	}
	switch c.AuthMethod {
	case authNone:
		if secret != "" || basic {
			return nil, errInvalidClient("this client is public and has no secret", basic)
		}
	case authSecretBasic, authSecretPost:
		if (c.AuthMethod == authSecretBasic) != basic {
			return nil, errInvalidClient("authenticate with "+c.AuthMethod+", as registered", basic)
		}
		if secret == "" || subtle.ConstantTimeCompare([]byte(sha256Hex(secret)), []byte(c.SecretHash)) != 1 {
			return nil, errInvalidClient("client authentication failed", basic)
		}
	default:
		return nil, errInvalidClient("unsupported client authentication method", basic)
	}
	return c, nil
}

// serveToken is the token endpoint (OAuth 2.1 section 3.2).
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Pragma", "no-cache")
	form, err := readForm(w, r)
	if err != nil {
		return err
	}
	c, err := s.authenticateClient(r, form)
	if err != nil {
		return err
	}
	var resp *tokenResponse
	switch gt := form.Get("grant_type"); gt {
	case "authorization_code":
		resp, err = s.redeemCode(r, c, form)
	case "refresh_token":
		resp, err = s.refresh(r, c, form)
	case "":
		return errInvalidRequest("grant_type is required")
	default:
		return &oauthError{Status: http.StatusBadRequest, Code: "unsupported_grant_type", Description: "grant_type must be authorization_code or refresh_token"}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (s *Server) redeemCode(r *http.Request, c *client, form url.Values) (*tokenResponse, error) {
	code, verifier := form.Get("code"), form.Get("code_verifier")
	if code == "" {
		return nil, errInvalidRequest("code is required")
	}
	if verifier == "" {
		return nil, errInvalidRequest("code_verifier is required")
	}
	now := s.now()
	hash := sha256Hex(code)
	iss := s.Issuer(r)
	ac, reused, err := s.codes.redeem(hash, now, func(ac *authCode) error {
		switch {
		case ac.clientID != c.ID:
			return errInvalidGrant("the code was issued to another client")
		case form.Get("redirect_uri") != ac.redirectURI:
			return errInvalidGrant("redirect_uri does not match the authorization request")
		case ac.issuer != iss:
			return errInvalidGrant("the code was issued by another issuer")
		case !validVerifier(verifier) || subtle.ConstantTimeCompare([]byte(s256(verifier)), []byte(ac.challenge)) != 1:
			return errInvalidGrant("code_verifier does not match the code_challenge")
		}
		if oe := sameTarget(form.Get("resource"), ac.resource); oe != nil {
			return oe
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case ac == nil:
		return nil, errInvalidGrant("the code is unknown or expired")
	case reused:
		// OAuth 2.1 section 4.1.3: a code used twice may have been
		// stolen, so what the first use got is revoked.
		if ac.family != "" {
			if err := s.revokeFamily(r.Context(), ac.family); err != nil {
				s.logger.Error("oauth revoke after code reuse", attrErr, err)
			}
		}
		s.logger.Warn("oauth code reused; its tokens are revoked", attrClient, ac.clientID)
		return nil, errInvalidGrant("the code was already used")
	}
	fam := familyRecord{ClientID: c.ID, Issuer: ac.issuer, Scope: ac.scope, Resource: ac.resource, Version: familyVersion,
		Person: recordOf(ac.person), Created: now.UTC(), Expires: now.Add(s.login.RefreshTokenTTL).UTC()}
	familyID := randomToken(16)
	refresh, err := s.storeRefresh(r.Context(), familyID, &fam)
	if err != nil {
		return nil, err
	}
	if reused := s.codes.setFamily(hash, familyID); reused {
		// The code came back while this redemption was under way.
		if err := s.revokeFamily(r.Context(), familyID); err != nil {
			return nil, err
		}
		return nil, errInvalidGrant("the code was already used")
	}
	return s.issue(&fam, refresh, fam.Scope, now)
}

// storeRefresh makes a new refresh token for a family, records it, and
// writes the family with it as current. The token record goes first: if
// the family write fails, the token is one nobody was given.
func (s *Server) storeRefresh(ctx context.Context, familyID string, fam *familyRecord) (string, error) {
	tok := randomToken(32)
	hash := sha256Hex(tok)
	doc, _ := json.Marshal(refreshRecord{Family: familyID, Expires: fam.Expires})
	if _, err := s.store.PutObject(ctx, store.KindOAuthRefresh, hash, doc); err != nil {
		return "", fmt.Errorf("store refresh token: %w", err)
	}
	fam.Current = hash
	if err := s.putFamily(ctx, familyID, fam); err != nil {
		return "", err
	}
	return tok, nil
}

func (s *Server) putFamily(ctx context.Context, id string, fam *familyRecord) error {
	doc, err := json.Marshal(fam)
	if err != nil {
		return err
	}
	if _, err := s.store.PutObject(ctx, store.KindOAuthFamily, id, doc); err != nil {
		return fmt.Errorf("store token family: %w", err)
	}
	return nil
}

func (s *Server) getFamily(ctx context.Context, id string) (*familyRecord, error) {
	o, err := s.store.GetObject(ctx, store.KindOAuthFamily, id)
	if err != nil {
		return nil, err
	}
	var fam familyRecord
	if err := json.Unmarshal(o.Doc, &fam); err != nil {
		return nil, fmt.Errorf("decode token family: %w", err)
	}
	return &fam, nil
}

// lookupRefresh finds the family of a refresh token: nil when the token
// is unknown or its record expired.
func (s *Server) lookupRefresh(ctx context.Context, tok string, now time.Time) (string, *familyRecord, error) {
	o, err := s.store.GetObject(ctx, store.KindOAuthRefresh, sha256Hex(tok))
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	var rec refreshRecord
	if err := json.Unmarshal(o.Doc, &rec); err != nil {
		return "", nil, fmt.Errorf("decode refresh token: %w", err)
	}
	if !now.Before(rec.Expires) {
		return "", nil, nil
	}
	fam, err := s.getFamily(ctx, rec.Family)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	return rec.Family, fam, nil
}

func (s *Server) refresh(r *http.Request, c *client, form url.Values) (*tokenResponse, error) {
	tok := form.Get("refresh_token")
	if tok == "" {
		return nil, errInvalidRequest("refresh_token is required")
	}
	ctx := r.Context()
	s.tokenMu.Lock()
	defer s.tokenMu.Unlock()
	if t := s.pending.shared; t != nil {
		release, err := t.refreshLease(tok)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	now := s.now()
	familyID, fam, err := s.lookupRefresh(ctx, tok, now)
	switch {
	case err != nil:
		return nil, err
	case fam == nil:
		return nil, errInvalidGrant("the refresh token is unknown or expired")
	case fam.ClientID != c.ID:
		return nil, errInvalidGrant("the refresh token was issued to another client")
	case fam.Revoked:
		return nil, errInvalidGrant("the refresh token was revoked")
	case !now.Before(fam.Expires):
		return nil, errInvalidGrant("the refresh token has expired")
	case subtle.ConstantTimeCompare([]byte(fam.Current), []byte(sha256Hex(tok))) != 1:
		// OAuth 2.1 section 4.3.1: a rotated-out token came back, so two
		// parties hold this family. Neither can tell which is the thief;
		// all of it ends, and the person logs in again.
		fam.Revoked = true
		if err := s.putFamily(ctx, familyID, fam); err != nil {
			return nil, err
		}
		s.logger.Warn("oauth refresh token reused; its family is revoked", attrClient, c.ID)
		return nil, errInvalidGrant("the refresh token was already used")
	case fam.Issuer != s.Issuer(r):
		return nil, errInvalidGrant("the refresh token was issued by another issuer")
	}
	if t, oe := parseTarget(fam.Resource, fam.Issuer); oe != nil || t.url != fam.Resource || t.admin() && fam.Version < familyVersion {
		// Issued before every grant had one resource and its own consent
		// (S22): to the issuer as a whole, or to the admin API perhaps
		// without the page naming it. It ends; the person signs in again.
		fam.Revoked = true
		if err := s.putFamily(ctx, familyID, fam); err != nil {
			return nil, err
		}
		s.logger.Info("oauth refresh of a grant without its own resource refused; its family is revoked", attrClient, c.ID)
		return nil, errInvalidGrant("this sign-in is from before tokens were bound to one resource; sign in again")
	}
	// The family's one resource: a refresh may name it, never another.
	if oe := sameTarget(form.Get("resource"), fam.Resource); oe != nil {
		return nil, oe
	}
	if sc := form.Get("scope"); sc != "" {
		// RFC 6749 section 6: a refresh may narrow the scope, never widen it.
		granted := strings.Fields(fam.Scope)
		if !validScope(sc) {
			return nil, &oauthError{Status: http.StatusBadRequest, Code: "invalid_scope", Description: "scope is malformed"}
		}
		for _, s := range strings.Fields(sc) {
			if !slices.Contains(granted, s) {
				return nil, &oauthError{Status: http.StatusBadRequest, Code: "invalid_scope", Description: "scope exceeds the original grant"}
			}
		}
	}
	// A login the configuration no longer offers ends at its next
	// refresh: key logins once keys are off, IdP logins once the IdP
	// changed.
	if fam.Person.Key != "" && !s.login.Keys || fam.Person.Key == "" && fam.Person.Issuer != s.login.Issuer {
		return nil, errInvalidGrant("this login is no longer offered; sign in again")
	}
	if fam.Person.Key != "" {
		if kc, ok := s.keyAuth.(KeyChecker); ok {
			active, err := kc.KeyActive(ctx, fam.Person.Key)
			if err != nil {
				return nil, err
			}
			if !active {
				fam.Revoked = true
				if err := s.putFamily(ctx, familyID, fam); err != nil {
					return nil, err
				}
				return nil, errInvalidGrant("the key this login used is no longer active")
			}
		}
	}
	next, err := s.storeRefresh(ctx, familyID, fam)
	if err != nil {
		return nil, err
	}
	// A narrowed scope is for this access token only; the family keeps
	// the original grant.
	scope := fam.Scope
	if sc := form.Get("scope"); sc != "" {
		scope = sc
	}
	return s.issue(fam, next, scope, now)
}

// issue makes the token response for a family.
func (s *Server) issue(fam *familyRecord, refresh, scope string, now time.Time) (*tokenResponse, error) {
	at, err := s.signAccess(fam, scope, now)
	if err != nil {
		return nil, err
	}
	return &tokenResponse{AccessToken: at, TokenType: "Bearer", ExpiresIn: int64(s.login.AccessTokenTTL / time.Second),
		RefreshToken: refresh, Scope: scope}, nil
}

func (s *Server) signAccess(fam *familyRecord, scope string, now time.Time) (string, error) {
	p := fam.Person
	claims := accessClaims{
		Claims: jwt.Claims{
			Issuer:    fam.Issuer,
			Subject:   p.Subject,
			Audience:  jwt.Audience{fam.Resource},
			Expiry:    jwt.NewNumericDate(now.Add(s.login.AccessTokenTTL)),
			NotBefore: jwt.NewNumericDate(now),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        randomToken(16),
		},
		ClientID: fam.ClientID, Scope: scope,
		User: p.User, Email: p.Email, Teams: p.Teams, Org: p.Org, Roles: p.Roles, Key: p.Key,
	}
	tok, err := s.keys.sign(claims)
	if err != nil {
		return "", fmt.Errorf("sign access token: %w", err)
	}
	return tok, nil
}

// revokeFamily marks a family revoked, under tokenMu (which the caller
// must not hold).
func (s *Server) revokeFamily(ctx context.Context, id string) error {
	s.tokenMu.Lock()
	defer s.tokenMu.Unlock()
	fam, err := s.getFamily(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if fam.Revoked {
		return nil
	}
	fam.Revoked = true
	return s.putFamily(ctx, id, fam)
}

// serveRevoke is RFC 7009 token revocation. A refresh token revokes its
// whole family. Access tokens are self-contained JWTs and expire on their
// own; like unknown tokens, they get 200 and nothing changes (section 2.2).
func (s *Server) serveRevoke(w http.ResponseWriter, r *http.Request) error {
	form, err := readForm(w, r)
	if err != nil {
		return err
	}
	c, err := s.authenticateClient(r, form)
	if err != nil {
		return err
	}
	tok := form.Get("token")
	if tok == "" {
		return errInvalidRequest("token is required")
	}
	familyID, fam, err := s.lookupRefresh(r.Context(), tok, s.now())
	if err != nil {
		return err
	}
	// Another client's token is left alone, and the answer does not say
	// whether it exists.
	if fam != nil && fam.ClientID == c.ID {
		if err := s.revokeFamily(r.Context(), familyID); err != nil {
			return err
		}
		s.logger.Info("oauth refresh token revoked", attrClient, c.ID)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return nil
}

// purge deletes refresh token records and families past their expiry:
// after that a token is refused as unknown, which is as good as revoked.
func (s *Server) purge(ctx context.Context, now time.Time) error {
	// A replica of an older version may still write consents of the old
	// shape during a rolling upgrade: they are swept here too.
	if err := s.dropOldConsents(ctx); err != nil {
		return err
	}
	if err := s.purgeKind(ctx, store.KindOAuthRefresh, now, func(doc []byte) (time.Time, bool) {
		var rec refreshRecord
		return rec.Expires, json.Unmarshal(doc, &rec) == nil
	}); err != nil {
		return err
	}
	return s.purgeKind(ctx, store.KindOAuthFamily, now, func(doc []byte) (time.Time, bool) {
		var fam familyRecord
		return fam.Expires, json.Unmarshal(doc, &fam) == nil
	})
}

// purgeKind deletes the objects of kind whose expiry (read by expires) is
// not after now; an unreadable record is deleted too.
func (s *Server) purgeKind(ctx context.Context, kind string, now time.Time, expires func([]byte) (time.Time, bool)) error {
	objs, err := s.store.ListObjects(ctx, kind)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if exp, ok := expires(o.Doc); ok && now.Before(exp) {
			continue
		}
		if err := s.store.DeleteObject(ctx, kind, o.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}
