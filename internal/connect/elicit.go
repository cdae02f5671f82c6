package connect

import (
	"crypto/subtle"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
)

// Connecting during a session (the 2025-11-25 URL mode elicitation). A
// call of an oauth2_user server that needs the person's account (none
// connected yet, a token the server refused, or a 403 insufficient_scope
// asking for more) is not failed at once when the client declared
// elicitation.url: the gateway sends it elicitation/create {mode: "url"}
// with a connect link, waits for the person to finish in their browser,
// sends notifications/elicitation/complete and makes the call again.
//
// The link carries an elicitation id, not a credential, and the page it
// opens does not trust it alone (the specification's phishing rule:
// "the user who started the elicitation request is the same user who
// completes the authorization flow"): the browser proves it is the person
// the elicitation was made for, with that person's own key (pasted into
// the page, or sent as a header by a scripted browser), before it is sent
// on to the authorization server. A link forwarded to somebody else is
// useless to them: their key names another person and is refused, and
// nothing is bound to the link's person without the link's person's key.

const (
	// elicitParam is the connect URL's query parameter naming the
	// elicitation it completes.
	elicitParam = "elicitation"
	// maxConnectRounds bounds the connects one call may ask for: the
	// first connect and one step-up (the MCP spec asks clients to limit
	// re-authorization; its conformance suite allows three attempts).
	maxConnectRounds = 2
	// confirmField is the form field of the confirmation page's key.
	confirmField = "key"
	// csrfField and csrfCookie carry the confirmation form's token.
	csrfField  = "csrf"
	csrfCookie = "mcpgate_connect_csrf"
)

// PersonConfirmer proves, in a browser, who the browser's person is: the
// authorization server's login at the company IdP (auth.login), for the
// people who have no key to paste (oidc: persons).
type PersonConfirmer interface {
	// CanConfirm reports whether there is an IdP to confirm with.
	CanConfirm() bool
	// Confirm sends the browser through the login and back to returnTo
	// with ConfirmParam=<code>.
	Confirm(w http.ResponseWriter, r *http.Request, returnTo string) error
	// ConfirmedPersons redeems code once: the person ids (callers.PersonID)
	// of who logged in, under each issuer their tokens may carry.
	ConfirmedPersons(code string) ([]string, bool)
}

// ConfirmParam is the query parameter a PersonConfirmer's code comes
// back in.
const ConfirmParam = "confirmation"

// SetConfirmer makes c the confirmation of oidc: persons opening connect
// links. Call it before serving.
func (f *Flows) SetConfirmer(c PersonConfirmer) { f.confirmer = c }

// CanConfirm reports whether a browser can prove it is person: a key
// person pastes their key, an oidc: person signs in at the IdP.
func (f *Flows) CanConfirm(person string) bool {
	switch {
	case strings.HasPrefix(person, "key:"):
		return f.identify != nil
	case strings.HasPrefix(person, "oidc:"):
		return f.confirmer != nil && f.confirmer.CanConfirm()
	}
	return false
}

// Ticket is a connect asked for by a URL elicitation, as the call that
// asked for it holds it.
type Ticket struct {
	id string
	t  *ticket
}

// ID is the elicitation id the link carries.
func (t *Ticket) ID() string { return t.id }

// Failure says why the connect failed once Await is closed ("": it
// completed).
func (t *Ticket) Failure() string {
	if p := t.t.failure.Load(); p != nil {
		return *p
	}
	return ""
}

// Expires is when the connect stops being awaited.
func (t *Ticket) Expires() time.Time { return t.t.expires }

// Link is the connect link of the ticket, under connectURL (the server's
// connect page).
func (t *Ticket) Link(connectURL string) string { return connectURL + "?" + elicitParam + "=" + t.id }

// NewTicket registers a connect of server's account for person, asking
// for scopes (nil: the plan's), to be completed through its Link within
// 10 minutes; DropTicket forgets it.
func (f *Flows) NewTicket(person, server string, scopes []string) (*Ticket, error) {
	now := f.now()
	t := &ticket{person: person, server: server, scopes: scopes, expires: now.Add(connectStateTTL), done: make(chan struct{})}
	id, err := f.pending.newTicket(t, now)
	if err != nil {
		return nil, err
	}
	return &Ticket{id: id, t: t}, nil
}

// DropTicket forgets t: its call no longer waits.
func (f *Flows) DropTicket(t *Ticket) { f.pending.dropTicket(t.id) }

// serveConnectElicited is GET/POST /oauth/connect/<server>?elicitation=ID:
// the browser proves it is the elicitation's person (their key in a
// header, else pasted into the confirmation form), then goes on to the
// authorization server as in serveConnectStart.
func (f *Flows) serveConnectElicited(w http.ResponseWriter, r *http.Request, server, id string) {
	w.Header().Set("Cache-Control", "no-store")
	t := f.pending.lookup(id, f.now())
	if t == nil || t.server != server {
		connectPage(w, http.StatusBadRequest, "Unknown link", "This connect link is unknown, already used or expired. Call the tool again to get a new one.")
		return
	}
	if strings.HasPrefix(t.person, "oidc:") && r.Header.Get("Authorization") == "" && !HasKeyHeader(r) {
		f.confirmElicited(w, r, server, id, t)
		return
	}
	var presented string
	switch r.Method {
	case http.MethodPost:
		if !f.checkCSRF(r) {
			connectPage(w, http.StatusForbidden, "Expired form", "This form is stale. Open the connect link again.")
			return
		}
		presented = strings.TrimSpace(r.PostFormValue(confirmField))
	default:
		if r.Header.Get("Authorization") == "" && !HasKeyHeader(r) {
			f.confirmPage(w, r, server, "")
			return
		}
	}
	person, ok := f.personOf(r, presented)
	if !ok {
		f.confirmPage(w, r, server, "That key was not accepted.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(person), []byte(t.person)) != 1 {
		// Someone else's link (the phishing case): nothing is connected.
		f.log.Warn("oauth connect: a connect link was opened by another person; refused", "server", server)
		connectPage(w, http.StatusForbidden, "Not your link", "This connect link was made for somebody else. Ask for your own by calling the tool from your own client.")
		return
	}
	f.beginConnect(w, r, person, server, t.scopes, id)
}

// confirmElicited is the connect link of an oidc: person opened in a
// browser: a login at the company IdP first, then, back here with its
// code, the connect if the login is the link's person.
func (f *Flows) confirmElicited(w http.ResponseWriter, r *http.Request, server, id string, t *ticket) {
	if !f.CanConfirm(t.person) {
		connectPage(w, http.StatusForbidden, "Cannot confirm", "This gateway has no sign-in at your company's identity provider (auth.login) to confirm it is you. Connect with your own credentials at "+Path(server)+".")
		return
	}
	if code := r.URL.Query().Get(ConfirmParam); code != "" {
		ids, ok := f.confirmer.ConfirmedPersons(code)
		if !ok {
			connectPage(w, http.StatusBadRequest, "Expired sign-in", "This sign-in is unknown, already used or expired. Open the connect link again.")
			return
		}
		match := 0
		for _, p := range ids {
			match |= subtle.ConstantTimeCompare([]byte(p), []byte(t.person))
		}
		if match != 1 {
			f.log.Warn("oauth connect: a connect link was opened by another person; refused", "server", server)
			connectPage(w, http.StatusForbidden, "Not your link", "This connect link was made for somebody else. Ask for your own by calling the tool from your own client.")
			return
		}
		f.beginConnect(w, r, t.person, server, t.scopes, id)
		return
	}
	back := f.linkBase(r) + Path(server) + "?" + url.Values{elicitParam: {id}}.Encode()
	if err := f.confirmer.Confirm(w, r, back); err != nil {
		f.log.Warn("oauth connect: could not start the sign-in to confirm a person", "server", server, "error", err)
		connectPage(w, http.StatusBadGateway, "Cannot confirm", "The sign-in at your company's identity provider could not be started.")
	}
}

// HasKeyHeader reports whether r carries a gateway key in a header other
// than Authorization.
func HasKeyHeader(r *http.Request) bool {
	for _, h := range []string{"X-Mcpgate-Api-Key", "X-Api-Key", "X-Litellm-Api-Key"} {
		if r.Header.Get(h) != "" {
			return true
		}
	}
	return false
}

// personOf authenticates r (its headers) or, when presented is set, that
// key as if it were r's bearer, and returns the caller's person id.
func (f *Flows) personOf(r *http.Request, presented string) (string, bool) {
	if f.identify == nil {
		return "", false
	}
	req := r.Clone(r.Context())
	if presented != "" {
		req.Header = http.Header{"Authorization": {"Bearer " + presented}}
	}
	c := f.identify(req)
	if c == nil {
		return "", false
	}
	p := callers.PersonID(c)
	return p, p != ""
}

// confirmPage asks the browser for the person's key, with a CSRF token
// bound to a cookie.
func (f *Flows) confirmPage(w http.ResponseWriter, r *http.Request, server, problem string) {
	tok, err := randomToken()
	if err != nil {
		connectPage(w, http.StatusInternalServerError, "Cannot connect", "No randomness.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: connectPrefix, MaxAge: int(connectStateTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: strings.HasPrefix(f.linkBase(r), "https://")})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
	w.Header().Set("X-Frame-Options", "DENY")
	status := http.StatusOK
	if problem != "" {
		status = http.StatusUnauthorized
	}
	w.WriteHeader(status)
	action := (&url.URL{Path: r.URL.Path, RawQuery: r.URL.RawQuery}).String()
	fmt.Fprintf(w, `<!doctype html><html><head><meta charset="utf-8"><title>mcpgate: connect %[1]s</title></head><body style="font-family:sans-serif;max-width:40em;margin:3em auto">
<h1>Connect your account for %[1]s</h1><p>%[2]s</p><p>To make sure this link is yours, paste the mcpgate key your client uses.</p>
<form method="post" action="%[3]s"><input type="hidden" name="%[4]s" value="%[5]s"><input type="password" name="%[6]s" autocomplete="off" required style="width:100%%"><p><button type="submit">Continue</button></p></form></body></html>`,
		html.EscapeString(server), html.EscapeString(problem), html.EscapeString(action), csrfField, tok, confirmField)
}

// checkCSRF reports whether r's form token is its CSRF cookie's.
func (f *Flows) checkCSRF(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || len(ck.Value) != 43 {
		return false
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 8<<10)
	return subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue(csrfField))) == 1
}

// entryScopes is what the person's connection was granted: the token
// response's scope, else what was asked for.
func entryScopes(granted string, asked []string) []string {
	if s := strings.Fields(granted); len(s) > 0 {
		return s
	}
	return asked
}
