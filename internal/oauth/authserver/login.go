package authserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/store"
)

// formPending reads a login or consent form and returns its live pending
// request, checking that it comes from the browser that started it and
// carries its CSRF token.
func (s *Server) formPending(w http.ResponseWriter, r *http.Request) (url.Values, pending, error) {
	form, err := readForm(w, r)
	if err != nil {
		return nil, pending{}, err
	}
	p, ok := s.pending.get(form.Get("request"), s.now())
	if !ok || p.confirmTo != "" {
		// A confirmation has no forms: it is the IdP's login alone.
		return nil, pending{}, errExpired
	}
	if !sameBrowser(r, &p) {
		return nil, pending{}, errOtherBrowser
	}
	if subtle.ConstantTimeCompare([]byte(form.Get("csrf")), []byte(p.csrf)) != 1 {
		return nil, pending{}, &oauthError{Status: http.StatusForbidden, Code: "invalid_request", Description: "the form is stale; start again from your application"}
	}
	return form, p, nil
}

// serveLogin takes the login form: a pasted virtual key, or the choice of
// the IdP when both are offered.
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) error {
	form, p, err := s.formPending(w, r)
	if err != nil {
		return err
	}
	if form.Get("login") == "idp" {
		if s.idp == nil {
			return errInvalidRequest("there is no identity provider to log in at")
		}
		return s.startIDP(w, r, p.id)
	}
	if !s.login.Keys {
		return errInvalidRequest("key login is not enabled")
	}
	// Per client address, every attempt counts: a wrong key costs the
	// same as a right one, so guessing is as slow as it can be.
	if !s.loginRL.allow(callers.ClientIP(r), s.now()) {
		s.renderLogin(w, &p, "Too many attempts from your address. Wait a minute and try again.", http.StatusTooManyRequests)
		return nil
	}
	key := strings.TrimSpace(form.Get("key"))
	if key == "" {
		s.renderLogin(w, &p, "Paste your mcpgate key.", http.StatusBadRequest)
		return nil
	}
	alias, user, team, err := s.keyAuth.AuthenticateKey(r.Context(), key)
	if errors.Is(err, ErrKeyRejected) {
		s.logger.Info("oauth key login refused", attrClient, p.client.ID)
		s.renderLogin(w, &p, "That key was not accepted.", http.StatusUnauthorized)
		return nil
	}
	if err != nil {
		s.logger.Error("oauth key login", attrErr, err)
		s.renderLogin(w, &p, "The key could not be checked just now. Try again shortly.", http.StatusServiceUnavailable)
		return nil
	}
	person := oauth.Identity{Subject: "key:" + alias, User: user, Key: alias}
	if team != "" {
		person.Teams = []string{team}
	}
	s.logger.Info("oauth login", "method", "key", "key", alias, attrClient, p.client.ID)
	return s.loggedIn(w, r, p.id, person)
}

// consentRecord remembers that a person approved a client for one
// resource (kind oauth_consent, named by consentName). Consent for the
// admin API is never recorded: it is asked for every time.
type consentRecord struct {
	ClientID string `json:"client_id"`
	Resource string `json:"resource"` // canonical; "" in records from before consent was per resource
	Approved int64  `json:"approved"` // unix seconds
}

// consentName keys a consent by a digest of person, client and resource,
// so the store does not list who uses what in the clear. Records from
// before consent was per resource were named by person and client only:
// no name of this shape can be theirs, and dropOldConsents deletes them.
func consentName(subject, clientID, resource string) string {
	return sha256Hex(subject + "\x00" + clientID + "\x00" + resource)
}

// hasConsent reports whether the person approved the client for resource
// (canonical) before. Never for the admin API.
func (s *Server) hasConsent(ctx context.Context, subject, clientID, resource, issuer string) (bool, error) {
	if t, oe := parseTarget(resource, issuer); oe != nil || t.admin() {
		return false, nil
	}
	o, err := s.store.GetObject(ctx, store.KindOAuthConsent, consentName(subject, clientID, resource))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var rec consentRecord
	if err := json.Unmarshal(o.Doc, &rec); err != nil {
		return false, nil // unreadable: asked again, and the record replaced
	}
	return rec.ClientID == clientID && rec.Resource == resource, nil
}

// dropOldConsents deletes the consent records made before consent was per
// resource (and any unreadable one): they name no resource, so they count
// for none, and the person is asked again.
func (s *Server) dropOldConsents(ctx context.Context) error {
	objs, err := s.store.ListObjects(ctx, store.KindOAuthConsent)
	if err != nil {
		return err
	}
	for _, o := range objs {
		var rec consentRecord
		if json.Unmarshal(o.Doc, &rec) == nil && rec.Resource != "" {
			continue
		}
		if err := s.store.DeleteObject(ctx, store.KindOAuthConsent, o.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// serveConsentPage shows what the person is asked to approve.
func (s *Server) serveConsentPage(w http.ResponseWriter, r *http.Request) error {
	p, ok := s.pending.get(r.URL.Query().Get("request"), s.now())
	if !ok {
		return errExpired
	}
	if !sameBrowser(r, &p) {
		return errOtherBrowser
	}
	if p.person == nil {
		return errExpired
	}
	t, words, oe := s.resolveTarget(p.resource, p.issuer)
	if oe != nil {
		return oe
	}
	ask := consentAsk{resource: words, url: t.url}
	if t.admin() {
		ask.admin, ask.personAdmin = true, s.personIsAdmin(r.Context(), *p.person)
	}
	s.renderConsent(w, &p, ask)
	return nil
}

// serveConsent takes the person's decision.
func (s *Server) serveConsent(w http.ResponseWriter, r *http.Request) error {
	form, p, err := s.formPending(w, r)
	if err != nil {
		return err
	}
	if p.person == nil {
		return errExpired
	}
	switch form.Get("decision") {
	case "approve":
		t, oe := parseTarget(p.resource, p.issuer)
		if oe != nil {
			return oe
		}
		if !t.admin() {
			doc, _ := json.Marshal(consentRecord{ClientID: p.client.ID, Resource: t.url, Approved: s.now().Unix()})
			if _, err := s.store.PutObject(r.Context(), store.KindOAuthConsent, consentName(p.person.Subject, p.client.ID, t.url), doc); err != nil {
				return err
			}
		}
		return s.finish(w, r, p.id, true)
	case "deny":
		return s.finish(w, r, p.id, false)
	}
	return errInvalidRequest("decision must be approve or deny")
}

// finish ends a pending request: a code to the client, or access_denied.
func (s *Server) finish(w http.ResponseWriter, r *http.Request, id string, approve bool) error {
	now := s.now()
	p, ok := s.pending.take(id, now)
	if !ok || p.person == nil {
		return errExpired
	}
	if !approve {
		return s.redirectError(w, r, p.issuer, p.redirectURI, p.state, "access_denied", "the request was denied")
	}
	code := randomToken(32)
	ac := &authCode{clientID: p.client.ID, redirectURI: p.redirectURI, resource: p.resource, scope: p.scope,
		challenge: p.challenge, issuer: p.issuer, person: *p.person, expires: now.Add(codeTTL), keep: now.Add(codeTTL + pendingTTL)}
	if !s.codes.add(sha256Hex(code), ac, now) {
		return s.redirectError(w, r, p.issuer, p.redirectURI, p.state, "temporarily_unavailable", "too many logins in progress; try again shortly")
	}
	v := url.Values{"code": {code}, "iss": {p.issuer}}
	if p.state != "" {
		v.Set("state", p.state)
	}
	return redirectWith(w, r, p.redirectURI, v)
}
