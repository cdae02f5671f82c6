package authserver

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// Confirmations prove, in a browser, who the browser's person is, for a
// page of the gateway's own: a connect link made for one person must not
// be completed by another (the MCP specification's URL-elicitation
// phishing rule). The browser goes through the company IdP's login, as for
// an authorization request, and comes back to the page with a one-time
// code, which Confirmed exchanges for the person who logged in. Nothing
// is issued to a client: no code, no token, no consent.

const (
	confirmTTL  = 2 * time.Minute
	maxConfirms = 10000
	// ConfirmParam is the query parameter the one-time code comes back in.
	ConfirmParam = "confirmation"
)

// Confirmation is who logged in for a confirmation.
type Confirmation struct {
	// Issuer is this server's issuer for the request, the iss of the
	// tokens it issues to the person; Subject their sub there.
	Issuer, Subject string
	// IdPIssuer and IdPSubject are the person at the company IdP: the
	// iss and sub of the IdP's own tokens.
	IdPIssuer, IdPSubject string
}

type confirmStore struct {
	mu sync.Mutex
	m  map[string]confirmEntry // sha256 of the code -> who
}

// confirmRecord is a confirmation code's entry as a fleet's shared table
// holds it.
type confirmRecord struct {
	C       Confirmation `json:"c"`
	Expires time.Time    `json:"expires"`
}

type confirmEntry struct {
	c       Confirmation
	expires time.Time
}

// CanConfirm reports whether Confirm can be used: a company IdP is
// configured (a key login proves nothing a pasted key would not).
func (s *Server) CanConfirm() bool { return s != nil && s.idp != nil }

// Confirm sends the browser through the IdP's login; afterwards it comes
// back to returnTo, a URL of the gateway's own chosen by the caller (never
// taken from the request), with ConfirmParam=<code>.
func (s *Server) Confirm(w http.ResponseWriter, r *http.Request, returnTo string) error {
	if !s.CanConfirm() {
		return errors.New("no identity provider to confirm a person with")
	}
	issuer := s.Issuer(r)
	now := s.now()
	p := &pending{id: randomToken(32), binding: s.bindBrowser(w, r, issuer), csrf: randomToken(32),
		expires: now.Add(pendingTTL), issuer: issuer, confirmTo: returnTo}
	if !s.pending.add(p, now) {
		return &oauthError{Status: http.StatusServiceUnavailable, Code: "temporarily_unavailable", Description: "too many logins in progress; try again shortly"}
	}
	return s.startIDP(w, r, p.id)
}

// Confirmed redeems a confirmation code once.
func (s *Server) Confirmed(code string) (Confirmation, bool) {
	if code == "" {
		return Confirmation{}, false
	}
	h, now := sha256Hex(code), s.now()
	if t := s.pending.shared; t != nil {
		var e confirmRecord
		if !t.get(ticketConfirm+h, &e, true) || now.After(e.Expires) {
			return Confirmation{}, false
		}
		return e.C, true
	}
	s.confirms.mu.Lock()
	defer s.confirms.mu.Unlock()
	e, ok := s.confirms.m[h]
	delete(s.confirms.m, h)
	if !ok || now.After(e.expires) {
		return Confirmation{}, false
	}
	return e.c, true
}

// confirmed ends a confirmation's login: the code for person, and the
// browser back to the page that asked.
func (s *Server) confirmed(w http.ResponseWriter, r *http.Request, p pending, person oauth.Identity) error {
	s.pending.remove(p.id)
	now := s.now()
	code := randomToken(32)
	c := Confirmation{Issuer: p.issuer, Subject: person.Subject, IdPIssuer: s.idp.issuer}
	// The IdP's own sub: person.Subject is "<issuer digest>:<sub>".
	if _, sub, ok := strings.Cut(person.Subject, ":"); ok {
		c.IdPSubject = sub
	}
	if t := s.pending.shared; t != nil {
		if !t.put(ticketConfirm+sha256Hex(code), confirmRecord{C: c, Expires: now.Add(confirmTTL)}, confirmTTL) {
			return &oauthError{Status: http.StatusServiceUnavailable, Code: "temporarily_unavailable", Description: "the login state is unavailable; try again shortly"}
		}
		return redirectWith(w, r, p.confirmTo, url.Values{ConfirmParam: {code}})
	}
	s.confirms.mu.Lock()
	if s.confirms.m == nil {
		s.confirms.m = map[string]confirmEntry{}
	}
	for k, e := range s.confirms.m {
		if now.After(e.expires) {
			delete(s.confirms.m, k)
		}
	}
	full := len(s.confirms.m) >= maxConfirms
	if !full {
		s.confirms.m[sha256Hex(code)] = confirmEntry{c: c, expires: now.Add(confirmTTL)}
	}
	s.confirms.mu.Unlock()
	if full {
		return &oauthError{Status: http.StatusServiceUnavailable, Code: "temporarily_unavailable", Description: "too many logins in progress; try again shortly"}
	}
	return redirectWith(w, r, p.confirmTo, url.Values{ConfirmParam: {code}})
}

// failLogin ends a pending login that went wrong: an authorization
// request goes back to its client with the error, a confirmation shows
// it.
func (s *Server) failLogin(w http.ResponseWriter, r *http.Request, p pending, code, desc string) error {
	if p.confirmTo != "" {
		s.pending.remove(p.id)
		return &oauthError{Status: http.StatusBadRequest, Code: code, Description: desc}
	}
	return s.redirectError(w, r, p.issuer, p.redirectURI, p.state, code, desc)
}

// clientID is the pending request's client, "" for a confirmation.
func (p *pending) clientID() string {
	if p.client == nil {
		return ""
	}
	return p.client.ID
}
