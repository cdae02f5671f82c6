package authserver

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// bindingCookie ties a pending request to the browser that started it, so
// that a login link (or an IdP callback) opened in another browser cannot
// complete it: the defence against login CSRF and session fixation.
const bindingCookie = "mcpgate_oauth"

// authParams are the redirect-safe parameters of an authorization
// request, checked.
type authParams struct {
	state     string
	scope     string
	resource  target
	challenge string
}

// checkAuthorizeParams checks what is left of an authorization request
// once its client and redirect URI are known to be good, so every failure
// here may be redirected to the client. It does no I/O (FuzzAuthorize).
func checkAuthorizeParams(q url.Values, issuer string) (p authParams, oe *oauthError) {
	// The state goes back with any error, so it is read first; a state
	// sent twice or too long to echo is not.
	if len(q["state"]) == 1 && len(q.Get("state")) <= maxStateLen {
		p.state = q.Get("state")
	}
	for _, vs := range q {
		if len(vs) > 1 {
			return p, errInvalidRequest("a parameter is repeated")
		}
	}
	if len(q.Get("state")) > maxStateLen {
		return p, errInvalidRequest("state is too long")
	}
	if rt := q.Get("response_type"); rt != "code" {
		return p, &oauthError{Status: http.StatusBadRequest, Code: "unsupported_response_type", Description: "response_type must be code"}
	}
	p.challenge = q.Get("code_challenge")
	switch m := q.Get("code_challenge_method"); {
	case p.challenge == "":
		return p, errInvalidRequest("code_challenge is required (PKCE S256)")
	case m != "S256":
		return p, errInvalidRequest("code_challenge_method must be S256")
	case !validChallenge(p.challenge):
		return p, errInvalidRequest("code_challenge is not an S256 challenge")
	}
	p.scope = q.Get("scope")
	if p.scope == "" {
		p.scope = DefaultScope
	} else if !validScope(p.scope) {
		return p, &oauthError{Status: http.StatusBadRequest, Code: "invalid_scope", Description: "scope is malformed"}
	}
	// One resource per token (S22.4); none named is the gateway's /mcp,
	// never the issuer.
	p.resource, oe = parseTarget(q.Get("resource"), issuer)
	return p, oe
}

// validChallenge accepts what S256 produces: 43 base64url characters.
func validChallenge(c string) bool {
	return len(c) == 43 && isUnreserved(c)
}

// validVerifier checks RFC 7636 section 4.1: 43 to 128 unreserved
// characters.
func validVerifier(v string) bool {
	return len(v) >= 43 && len(v) <= 128 && isUnreserved(v)
}

func isUnreserved(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// serveAuthorize is the authorization endpoint (OAuth 2.1 section 4.1.1).
// A bad client_id or redirect_uri gets an error page: redirecting to an
// unverified URI would make this an open redirector.
func (s *Server) serveAuthorize(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if len(q["client_id"]) > 1 || len(q["redirect_uri"]) > 1 {
		return errInvalidRequest("client_id and redirect_uri may be given once")
	}
	c, err := s.lookupClient(r, q.Get("client_id"))
	if err != nil {
		return err
	}
	redirectURI := q.Get("redirect_uri")
	switch {
	case redirectURI == "" && len(c.RedirectURIs) == 1:
		// OAuth 2.1 section 4.1.1: optional when only one is registered.
		redirectURI = c.RedirectURIs[0]
	case redirectURI == "":
		return errInvalidRequest("redirect_uri is required")
	case !slices.Contains(c.RedirectURIs, redirectURI): // exact string match
		return errInvalidRequest("redirect_uri is not registered for this client")
	}
	issuer := s.Issuer(r)
	ap, oe := checkAuthorizeParams(q, issuer)
	if oe == nil {
		if _, ok := s.describe(ap.resource); !ok {
			oe = errTarget("this gateway has no MCP route at " + ap.resource.url)
		}
	}
	if oe != nil {
		return s.redirectError(w, r, issuer, redirectURI, ap.state, oe.Code, oe.Description)
	}
	now := s.now()
	p := &pending{
		id:          randomToken(32),
		binding:     s.bindBrowser(w, r, issuer),
		csrf:        randomToken(32),
		expires:     now.Add(pendingTTL),
		issuer:      issuer,
		client:      c,
		redirectURI: redirectURI,
		state:       ap.state,
		scope:       ap.scope,
		resource:    ap.resource.url,
		challenge:   ap.challenge,
	}
	if !s.pending.add(p, now) {
		return s.redirectError(w, r, issuer, redirectURI, ap.state, "temporarily_unavailable", "too many logins in progress; try again shortly")
	}
	if s.login.Keys {
		s.renderLogin(w, p, "", http.StatusOK)
		return nil
	}
	return s.startIDP(w, r, p.id)
}

// bindBrowser returns the digest of the browser's binding cookie, setting
// a new cookie when it has none.
func (s *Server) bindBrowser(w http.ResponseWriter, r *http.Request, issuer string) string {
	v := ""
	if c, err := r.Cookie(bindingCookie); err == nil && len(c.Value) == 43 && isUnreserved(c.Value) {
		v = c.Value
	} else {
		v = randomToken(32)
	}
	// Refreshed on every request so that it outlives the newest pending
	// request. Lax, because the IdP's redirect back is a cross-site
	// top-level navigation that must carry it.
	http.SetCookie(w, &http.Cookie{
		Name:     bindingCookie,
		Value:    v,
		Path:     issuerPath(issuer) + "/oauth/",
		MaxAge:   int(pendingTTL / time.Second),
		HttpOnly: true,
		Secure:   strings.HasPrefix(issuer, "https://"),
		SameSite: http.SameSiteLaxMode,
	})
	return sha256Hex(v)
}

// sameBrowser reports whether r comes from the browser that started p.
func sameBrowser(r *http.Request, p *pending) bool {
	c, err := r.Cookie(bindingCookie)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(sha256Hex(c.Value)), []byte(p.binding)) == 1
}

// redirectError sends the browser back to the client with an error
// (OAuth 2.1 section 4.1.2.1), state and the RFC 9207 iss. Only for a
// redirect URI already checked against the client's.
func (s *Server) redirectError(w http.ResponseWriter, r *http.Request, issuer, redirectURI, state, code, desc string) error {
	v := url.Values{"error": {code}, "iss": {issuer}}
	if desc != "" {
		v.Set("error_description", desc)
	}
	if state != "" {
		v.Set("state", state)
	}
	return redirectWith(w, r, redirectURI, v)
}

func redirectWith(w http.ResponseWriter, r *http.Request, redirectURI string, params url.Values) error {
	u, err := url.Parse(redirectURI)
	if err != nil {
		return err
	}
	// The registered URI's own query is kept (RFC 6749 section 3.1.2).
	q := u.Query()
	for k, vs := range params {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	status := http.StatusFound
	if r.Method == http.MethodPost {
		status = http.StatusSeeOther
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u.String(), status)
	return nil
}

// startIDP sends the browser to the IdP with our own state, nonce and
// PKCE verifier for this pending request.
func (s *Server) startIDP(w http.ResponseWriter, r *http.Request, id string) error {
	now := s.now()
	p, ok := s.pending.get(id, now)
	if !ok {
		return errExpired
	}
	md, err := s.idp.metadata(r.Context())
	if err != nil {
		s.logger.Error("oauth IdP discovery", attrErr, err)
		s.pending.remove(id)
		return s.failLogin(w, r, p, "temporarily_unavailable", "the identity provider cannot be reached")
	}
	state, nonce, verifier := randomToken(32), randomToken(32), randomToken(32)
	if !s.pending.update(id, now, func(p *pending) { p.idpState, p.nonce, p.verifier = state, nonce, verifier }) {
		return errExpired
	}
	to, err := s.idp.authURL(md, p.issuer+"/oauth/callback", state, nonce, verifier)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

var errExpired = &oauthError{Status: http.StatusBadRequest, Code: "invalid_request",
	Description: "this sign-in has expired or was already used; start again from your application"}

var errOtherBrowser = &oauthError{Status: http.StatusBadRequest, Code: "invalid_request",
	Description: "this sign-in was started in another browser; start again from your application"}

// serveCallback is the IdP's redirect back (OAuth 2.1 section 4.1.2 and
// RFC 9207 section 2.4 from the IdP's client side).
func (s *Server) serveCallback(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	now := s.now()
	p, ok := s.pending.byIDPState(q.Get("state"), now)
	if q.Get("state") == "" || !ok {
		return errExpired
	}
	if !sameBrowser(r, &p) {
		return errOtherBrowser
	}
	// The state is spent whatever happens next: a callback is one-shot.
	s.pending.update(p.id, now, func(p *pending) { p.idpState = "" })

	md, err := s.idp.metadata(r.Context())
	if err != nil {
		s.pending.remove(p.id)
		return err
	}
	iss, hasIss := q["iss"]
	if hasIss && (len(iss) != 1 || iss[0] != s.idp.issuer) || !hasIss && md.AuthorizationResponseIssParameterSupported {
		// A mix-up: this response may come from another IdP. Its code is
		// not used, and the client learns nothing it could act on.
		s.pending.remove(p.id)
		return &oauthError{Status: http.StatusBadRequest, Code: "invalid_request",
			Description: "the identity provider's response does not name the expected issuer", Err: errors.New("callback iss mismatch")}
	}
	if e := q.Get("error"); e != "" {
		s.pending.remove(p.id)
		code := "access_denied"
		if e == "temporarily_unavailable" || e == "server_error" {
			code = e
		}
		return s.failLogin(w, r, p, code, "the login at the identity provider did not succeed")
	}
	idpCode := q.Get("code")
	if idpCode == "" {
		s.pending.remove(p.id)
		return s.failLogin(w, r, p, "server_error", "the identity provider sent no code")
	}
	raw, err := s.idp.exchange(r.Context(), md, idpCode, p.issuer+"/oauth/callback", p.verifier)
	var claims map[string]any
	if err == nil {
		claims, err = s.idp.verifyIDToken(r.Context(), md, raw, p.nonce)
	}
	if err != nil {
		s.pending.remove(p.id)
		s.logger.Error("oauth IdP login failed", attrClient, p.clientID(), attrErr, err)
		return s.failLogin(w, r, p, "server_error", "the login at the identity provider could not be verified")
	}
	person := s.idp.person(claims)
	s.logger.Info("oauth login", "method", "idp", attrUser, person.User, attrClient, p.clientID())
	if p.confirmTo != "" {
		return s.confirmed(w, r, p, person)
	}
	return s.loggedIn(w, r, p.id, person)
}

// loggedIn records who logged in and moves on: straight back to the
// client when the person approved this client for this resource before,
// else to the consent page (always, for the admin API).
func (s *Server) loggedIn(w http.ResponseWriter, r *http.Request, id string, person oauth.Identity) error {
	now := s.now()
	var p pending
	if !s.pending.update(id, now, func(pp *pending) { pp.person = &person; p = *pp }) {
		return errExpired
	}
	ok, err := s.hasConsent(r.Context(), person.Subject, p.client.ID, p.resource, p.issuer)
	if err != nil {
		return err
	}
	if ok {
		return s.finish(w, r, id, true)
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, issuerPath(p.issuer)+"/oauth/consent?request="+url.QueryEscape(id), http.StatusSeeOther)
	return nil
}
