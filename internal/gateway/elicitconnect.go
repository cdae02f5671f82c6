package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
	"github.com/mcpgate/mcpgate/internal/upstream"
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

// SetPersonConfirmer makes c the confirmation of oidc: persons opening
// connect links.
func (g *Gateway) SetPersonConfirmer(c PersonConfirmer) { g.confirmer = c }

// canConfirm reports whether a browser can prove it is person: a key
// person pastes their key, an oidc: person signs in at the IdP.
func (g *Gateway) canConfirm(person string) bool {
	switch {
	case strings.HasPrefix(person, "key:"):
		return g.auth != nil
	case strings.HasPrefix(person, "oidc:"):
		return g.confirmer != nil && g.confirmer.CanConfirm()
	}
	return false
}

// connTicket is a pending connect asked for by a URL elicitation.
type connTicket struct {
	person, server string
	scopes         []string // the scopes to ask for (nil: the plan's)
	expires        time.Time
	done           chan struct{} // closed once the callback stored tokens
}

// newTicket registers a ticket and returns its id.
func (c *connector) newTicket(t *connTicket, now time.Time) (string, error) {
	id, err := randomToken()
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tickets == nil {
		c.tickets = map[string]*connTicket{}
	}
	for k, o := range c.tickets {
		if now.After(o.expires) {
			delete(c.tickets, k)
		}
	}
	if len(c.tickets) >= maxPendingStates {
		return "", errors.New("too many connects pending")
	}
	c.tickets[id] = t
	if c.shared != nil {
		// A fleet: the link may be opened on any replica.
		c.shareTicket(id, t, now)
	}
	return id, nil
}

func (c *connector) ticket(id string, now time.Time) *connTicket {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tickets[id]
	if t == nil && c.shared != nil {
		c.mu.Unlock()
		t = c.sharedTicketOf(id, now) // made on another replica
		c.mu.Lock()
	}
	if t == nil || now.After(t.expires) {
		return nil
	}
	return t
}

func (c *connector) dropTicket(id string) {
	c.mu.Lock()
	delete(c.tickets, id)
	c.mu.Unlock()
	if c.shared != nil {
		c.forgetShared(id)
	}
}

// connectNeed reports whether err, from a call of server for person, is
// one a (re)connect of the person's account can cure, and the scopes to
// ask for then (nil: the plan's own).
func (g *Gateway) connectNeed(ctx context.Context, person, server string, err error) (scopes []string, need bool) {
	if err == nil || person == "" || g.vault == nil || g.AuthType(server) != config.AuthOAuth2User {
		return nil, false
	}
	if errors.Is(err, upstream.ErrNoCredential) {
		return nil, true
	}
	var ue *upstream.Error
	if !errors.As(err, &ue) || ue.Kind != upstream.KindAuth {
		return nil, false
	}
	switch ue.Status {
	case http.StatusUnauthorized:
		// The token was sent and refused (revoked at the server): a new
		// connect, with what was granted before.
		return g.grantedScopes(ctx, person, server), true
	case http.StatusForbidden:
		resp := &http.Response{StatusCode: ue.Status, Header: http.Header{"Www-Authenticate": {ue.Challenge}}}
		return client.StepUp(g.grantedScopes(ctx, person, server), resp)
	}
	return nil, false
}

func (g *Gateway) grantedScopes(ctx context.Context, person, server string) []string {
	e, err := g.vault.Get(ctx, person, server)
	if err != nil {
		return nil
	}
	return e.Scopes
}

// canElicitConnect reports whether sc's client can be sent a URL
// elicitation: it declared elicitation.url, on a stateful old-era session
// (asked on the session) or in a 2026-07-28 call (asked with an
// input_required round).
func canElicitConnect(sc *scope) bool {
	if sc == nil || !sc.caps.ElicitationURL {
		return false
	}
	if sc.modern {
		return sc.exchange != nil
	}
	return sc.sess != nil
}

// callConnecting is g.up.Call for a call of sc, made again after a
// connect (connecting).
func (g *Gateway) callConnecting(ctx context.Context, sc *scope, server, method string, params json.RawMessage) (json.RawMessage, error) {
	var res json.RawMessage
	err := g.connecting(ctx, sc, server, func() (err error) {
		res, err = g.up.Call(ctx, server, method, params)
		return err
	})
	return res, err
}

// connecting runs op, an operation of sc on server; when it fails for
// want of the person's account and the client can be asked (see above),
// it elicits a connect and runs op again, at most maxConnectRounds times.
// A connect that does not happen is the error (a JSON-RPC one naming the
// connect link).
func (g *Gateway) connecting(ctx context.Context, sc *scope, server string, op func() error) error {
	// Every call and single-server listing of server comes here: a
	// replica that may have missed its removal re-reads it first
	// (unheard.go).
	if _, e := g.verifyServer(ctx, server); e != nil {
		return &clientError{rpc: e}
	}
	err := op()
	if err == nil || !canElicitConnect(sc) {
		return err
	}
	person := callers.PersonID(callers.FromContext(ctx))
	if !g.canConfirm(person) {
		// Nobody could prove in a browser to be this person: the error
		// says where to connect (with their own credentials).
		return err
	}
	for round := 0; round < maxConnectRounds && err != nil; round++ {
		scopes, need := g.connectNeed(ctx, person, server, err)
		if !need {
			return err
		}
		if e := g.elicitConnect(ctx, sc, person, server, scopes); e != nil {
			return e
		}
		forgetCallerToken(ctx, server)
		err = op()
	}
	return err
}

// elicitConnect asks sc's client to open a connect link for server and
// waits until the person's tokens are stored (nil), or the client
// declines, the person takes too long or the request ends (a JSON-RPC
// error saying where to connect).
func (g *Gateway) elicitConnect(ctx context.Context, sc *scope, person, server string, scopes []string) error {
	now := g.now()
	t := &connTicket{person: person, server: server, scopes: scopes, expires: now.Add(connectStateTTL), done: make(chan struct{})}
	id, err := g.connect.newTicket(t, now)
	if err != nil {
		return jsonrpc.NewError(jsonrpc.CodeInternalError, "connect your account for %s at %s (%v)", server, g.connectURL(ctx, server), err)
	}
	defer g.connect.dropTicket(id)
	link := g.connectURL(ctx, server) + "?" + elicitParam + "=" + id
	msg := fmt.Sprintf("%s needs your own account. Open the link, confirm it is you, and sign in to %s; the call continues once you are connected.", server, server)
	if len(scopes) > 0 {
		msg = fmt.Sprintf("%s needs more access (%s). Open the link, confirm it is you, and approve it; the call continues once you are connected.", server, strings.Join(scopes, " "))
	}
	p, _ := json.Marshal(map[string]string{"mode": "url", "message": msg, "url": link, "elicitationId": id})
	req := jsonrpc.NewRequest(jsonrpc.Int64ID(0), mcpwire.MethodElicitationCreate, p)
	var (
		ans    json.RawMessage
		rpcErr *jsonrpc.Error
	)
	if sc.modern {
		// The call answers input_required with the elicitation; the
		// client's retry brings the answer, and waits for the rest.
		ans, rpcErr = sc.exchange.ask(ctx, req)
	} else {
		ans, rpcErr = g.askDownstream(ctx, sc, req)
	}
	notConnected := func(why string) error {
		e := g.faultError(server, &upstream.Error{Server: server, Kind: upstream.KindAuth, Err: upstream.ErrNoCredential})
		e.Message = fmt.Sprintf("connect your account for %s at %s (%s)", server, g.connectURL(ctx, server), why)
		return &clientError{e}
	}
	if rpcErr != nil {
		return notConnected("the client did not open the connect link: " + rpcErr.Message)
	}
	if action, _ := jsonrpc.GetString(ans, "action"); action != "accept" {
		return notConnected("the connect link was declined")
	}
	timer := time.NewTimer(time.Until(t.expires))
	defer timer.Stop()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	select {
	case <-g.connect.awaitTicket(wctx, id, t):
	case <-ctx.Done():
		return ctx.Err()
	case <-sc.done:
		return notConnected("the request ended before the account was connected")
	case <-timer.C:
		return notConnected("not connected within 10 minutes")
	}
	// The tokens may have been stored by another replica (the callback
	// landed there). Its write is announced (vault.OnChange), but the
	// announcement may arrive after the done marker this call polled:
	// the cached copy refused with 401 or 403 must not serve the retry.
	if g.vault != nil {
		g.vault.Forget(g.vault.EntryID(person, server))
	}
	if !sc.modern {
		// A 2026-07-28 client has no session to hear it on; its retry's
		// answer is the news.
		done, _ := json.Marshal(map[string]string{"elicitationId": id})
		_ = sc.out.send(jsonrpc.NewNotification(mcpwire.NotifyElicitationComplete, done))
	}
	return nil
}

// serveConnectElicited is GET/POST /oauth/connect/<server>?elicitation=ID:
// the browser proves it is the elicitation's person (their key in a
// header, else pasted into the confirmation form), then goes on to the
// authorization server as in serveConnectStart.
func (g *Gateway) serveConnectElicited(w http.ResponseWriter, r *http.Request, server, id string) {
	w.Header().Set("Cache-Control", "no-store")
	t := g.connect.ticket(id, g.now())
	if t == nil || t.server != server {
		connectPage(w, http.StatusBadRequest, "Unknown link", "This connect link is unknown, already used or expired. Call the tool again to get a new one.")
		return
	}
	if strings.HasPrefix(t.person, "oidc:") && r.Header.Get("Authorization") == "" && !hasKeyHeader(r) {
		g.confirmElicited(w, r, server, id, t)
		return
	}
	var presented string
	switch r.Method {
	case http.MethodPost:
		if !g.checkCSRF(r) {
			connectPage(w, http.StatusForbidden, "Expired form", "This form is stale. Open the connect link again.")
			return
		}
		presented = strings.TrimSpace(r.PostFormValue(confirmField))
	default:
		if r.Header.Get("Authorization") == "" && !hasKeyHeader(r) {
			g.confirmPage(w, r, server, "")
			return
		}
	}
	person, ok := g.personOf(r, presented)
	if !ok {
		g.confirmPage(w, r, server, "That key was not accepted.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(person), []byte(t.person)) != 1 {
		// Someone else's link (the phishing case): nothing is connected.
		g.log.Warn("oauth connect: a connect link was opened by another person; refused", "server", server)
		connectPage(w, http.StatusForbidden, "Not your link", "This connect link was made for somebody else. Ask for your own by calling the tool from your own client.")
		return
	}
	g.beginConnect(w, r, person, server, t.scopes, id)
}

// confirmElicited is the connect link of an oidc: person opened in a
// browser: a login at the company IdP first, then, back here with its
// code, the connect if the login is the link's person.
func (g *Gateway) confirmElicited(w http.ResponseWriter, r *http.Request, server, id string, t *connTicket) {
	if !g.canConfirm(t.person) {
		connectPage(w, http.StatusForbidden, "Cannot confirm", "This gateway has no sign-in at your company's identity provider (auth.login) to confirm it is you. Connect with your own credentials at "+ConnectPath(server)+".")
		return
	}
	if code := r.URL.Query().Get(ConfirmParam); code != "" {
		ids, ok := g.confirmer.ConfirmedPersons(code)
		if !ok {
			connectPage(w, http.StatusBadRequest, "Expired sign-in", "This sign-in is unknown, already used or expired. Open the connect link again.")
			return
		}
		match := 0
		for _, p := range ids {
			match |= subtle.ConstantTimeCompare([]byte(p), []byte(t.person))
		}
		if match != 1 {
			g.log.Warn("oauth connect: a connect link was opened by another person; refused", "server", server)
			connectPage(w, http.StatusForbidden, "Not your link", "This connect link was made for somebody else. Ask for your own by calling the tool from your own client.")
			return
		}
		g.beginConnect(w, r, t.person, server, t.scopes, id)
		return
	}
	back := g.linkBase(r) + ConnectPath(server) + "?" + url.Values{elicitParam: {id}}.Encode()
	if err := g.confirmer.Confirm(w, r, back); err != nil {
		g.log.Warn("oauth connect: could not start the sign-in to confirm a person", "server", server, "error", err)
		connectPage(w, http.StatusBadGateway, "Cannot confirm", "The sign-in at your company's identity provider could not be started.")
	}
}

// hasKeyHeader reports whether r carries a gateway key in a header other
// than Authorization.
func hasKeyHeader(r *http.Request) bool {
	for _, h := range []string{"X-Mcpgate-Api-Key", "X-Api-Key", "X-Litellm-Api-Key"} {
		if r.Header.Get(h) != "" {
			return true
		}
	}
	return false
}

// personOf authenticates r (its headers) or, when presented is set, that
// key as if it were r's bearer, and returns the caller's person id.
func (g *Gateway) personOf(r *http.Request, presented string) (string, bool) {
	if g.auth == nil {
		return "", false
	}
	req := r.Clone(r.Context())
	if presented != "" {
		req.Header = http.Header{"Authorization": {"Bearer " + presented}}
	}
	req = req.WithContext(callers.WithResource(req.Context(), g.resourceOf(req)))
	c, f := g.auth.Authenticate(req)
	if f != nil || c == nil {
		return "", false
	}
	p := callers.PersonID(c)
	return p, p != ""
}

// confirmPage asks the browser for the person's key, with a CSRF token
// bound to a cookie.
func (g *Gateway) confirmPage(w http.ResponseWriter, r *http.Request, server, problem string) {
	tok, err := randomToken()
	if err != nil {
		connectPage(w, http.StatusInternalServerError, "Cannot connect", "No randomness.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: connectPrefix, MaxAge: int(connectStateTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: strings.HasPrefix(g.linkBase(r), "https://")})
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
func (g *Gateway) checkCSRF(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || len(ck.Value) != 43 {
		return false
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 8<<10)
	return subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue(csrfField))) == 1
}

// completeTicket tells the call waiting on elicitation id that the
// person's tokens are stored.
func (c *connector) completeTicket(id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	t := c.tickets[id]
	delete(c.tickets, id)
	c.mu.Unlock()
	if t != nil {
		close(t.done)
	} else if c.shared != nil {
		// The call waits on another replica: it polls for this.
		c.markDone(id, time.Now())
	}
}

// entryScopes is what the person's connection was granted: the token
// response's scope, else what was asked for.
func entryScopes(granted string, asked []string) []string {
	if s := strings.Fields(granted); len(s) > 0 {
		return s
	}
	return asked
}

// connectGate is S9.1 for the initialize m on rt: on a single-server
// route of an oauth2_user server, a person who has not connected their
// account and whose client cannot be asked during the session (no
// elicitation.url) gets 401 before any session starts, with a challenge
// whose authorization_uri is the gateway's connect link for the server.
// false: it answered. On a route of several servers the others still
// serve: the call of that server says where to connect instead.
func (g *Gateway) connectGate(w http.ResponseWriter, r *http.Request, rt route, m *jsonrpc.Message) bool {
	server := rt.single
	if rt.prefixed || server == "" || !rt.has(server) || g.AuthType(server) != config.AuthOAuth2User || g.vault == nil {
		return true
	}
	person := callers.PersonID(callers.FromContext(r.Context()))
	if person == "" {
		return true // no one's account to connect: the calls say so
	}
	var ip mcpwire.InitializeParams
	_ = json.Unmarshal(m.Params, &ip)
	if mcpwire.ParseClientCaps(ip.Capabilities).ElicitationURL && g.canConfirm(person) {
		return true
	}
	if callerTokenFrom(r.Context(), server) != "" {
		return true
	}
	link := g.connectURL(r.Context(), server)
	msg := "connect your account for " + server + " at " + link
	w.Header().Set("WWW-Authenticate", oauth.Challenge{Error: "invalid_token", ErrorDescription: msg, AuthorizationURI: link}.String())
	writeRPCError(w, http.StatusUnauthorized, jsonrpc.NewError(callers.CodeUnauthorized, "Unauthorized: %s", msg))
	return false
}

// callerTokenFrom is the caller's credential for server from ctx's
// request memo ("" for none).
func callerTokenFrom(ctx context.Context, server string) string {
	if t, ok := ctx.Value(callerTokenSetKey{}).(*callerTokenSet); ok {
		return t.get(server)
	}
	return ""
}
