package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/upstream"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// Connecting a person's own upstream account (auth type oauth2_user,
// SPEC S19): GET /oauth/connect/<server>, as the person, sends their
// browser to the server's authorization server; its answer comes back to
// /oauth/connect/callback, where the code is exchanged and the tokens are
// sealed in the vault under the person and the server. Egress then sends
// the person's access token, refreshed before it expires.

const (
	connectPrefix = "/oauth/connect/"
	// ConnectCallbackPath is the redirect URI's path: the gateway's, not
	// the authorization server's /oauth/callback.
	ConnectCallbackPath = connectPrefix + "callback"
	connectCookie       = "mcpgate_connect"
	connectStateTTL     = 10 * time.Minute
	// refreshMargin: an access token expiring within it is refreshed first.
	refreshMargin    = 60 * time.Second
	maxPendingStates = 10000
)

// ConnectPath is where a person connects their account for server.
func ConnectPath(server string) string { return connectPrefix + server }

// isConnectPath reports whether path is the connect flow's.
func isConnectPath(path string) bool {
	return strings.HasPrefix(path, connectPrefix) && len(path) > len(connectPrefix)
}

// connector keeps the connect flow's in-memory state: the client
// registered at each server's authorization server (with the plan it was
// registered under) and the pending authorization requests.
type connector struct {
	// shared, in a fleet, holds the pending connects for every replica
	// (connectshare.go); nil: this process's maps only.
	shared state.Tickets
	log    *slog.Logger

	mu      sync.Mutex
	regs    map[string]*connReg    // server -> registration
	states  map[string]*connState  // state -> pending request
	tickets map[string]*connTicket // elicitation id -> connect asked for in a session
}

type connReg struct {
	plan     *client.Plan
	client   client.Client
	redirect string
	url      string // the server URL it was made for
}

type connState struct {
	person, server string
	verifier       string
	binding        string // the connect cookie's value
	reg            *connReg
	scopes         []string // asked for (nil: the plan's)
	ticket         string   // the URL elicitation it completes ("": none)
	expires        time.Time
	redirect       string // taken from the shared store: reg's redirect URI (reg is nil)
}

// Outcomes of takeRequest.
const (
	requestTaken = iota
	requestUnknown
	requestForeign
)

// takeRequest takes the pending authorization request of state once, if
// it is the browser's (binding); another browser's is left for its owner.
func (c *connector) takeRequest(state, binding string, now time.Time) (*connState, int) {
	if state == "" {
		return nil, requestUnknown
	}
	if c.shared != nil {
		st, redirect, ok := c.takeState(state)
		if !ok {
			return nil, requestUnknown
		}
		if subtle.ConstantTimeCompare([]byte(st.binding), []byte(binding)) != 1 {
			c.putBackState(state, st, redirect, now)
			return nil, requestForeign
		}
		st.redirect = redirect
		return st, requestTaken
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.states[state]
	switch {
	case st == nil:
		return nil, requestUnknown
	case subtle.ConstantTimeCompare([]byte(st.binding), []byte(binding)) != 1:
		return nil, requestForeign
	}
	delete(c.states, state) // single use
	return st, requestTaken
}

func randomToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// registration returns server's registration for srv and redirect (""
// for any, see fits): the one in memory, else the one kept in the vault
// (connectreg.go); nil when none fits.
func (g *Gateway) registration(ctx context.Context, server string, srv *config.Server, redirect string) *connReg {
	c := &g.connect
	c.mu.Lock()
	r := c.regs[server]
	c.mu.Unlock()
	if r != nil && r.fits(srv, redirect) {
		return r
	}
	return g.storedRegistration(ctx, server, srv, redirect)
}

// serveConnect answers the connect flow's two routes.
func (g *Gateway) serveConnect(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get(elicitParam)
	if r.Method != http.MethodGet && r.Method != http.MethodHead && (r.Method != http.MethodPost || id == "") {
		w.Header().Set("Allow", "GET")
		connectPage(w, http.StatusMethodNotAllowed, "Method not allowed", "Use GET.")
		return
	}
	if r.URL.Path == ConnectCallbackPath {
		g.serveConnectCallback(w, r)
		return
	}
	if id != "" {
		g.serveConnectElicited(w, r, strings.TrimPrefix(r.URL.Path, connectPrefix), id)
		return
	}
	g.serveConnectStart(w, r)
}

func (g *Gateway) serveConnectStart(w http.ResponseWriter, r *http.Request) {
	server := strings.TrimPrefix(r.URL.Path, connectPrefix)
	r, err := g.authenticate(r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	person := callers.PersonID(callers.FromContext(r.Context()))
	if person == "" {
		connectPage(w, http.StatusForbidden, "Not a person", "Connect with your own key or login: the master key and anonymous callers have no account of their own.")
		return
	}
	g.beginConnect(w, r, person, server, nil, "")
}

// beginConnect sends person's browser to server's authorization server,
// asking for scopes (nil: the plan's); ticket is the URL elicitation the
// connect completes ("": none).
func (g *Gateway) beginConnect(w http.ResponseWriter, r *http.Request, person, server string, scopes []string, ticket string) {
	srv := g.conf().Servers[server]
	if srv == nil || srv.Auth == nil || srv.Auth.Type != config.AuthOAuth2User {
		connectPage(w, http.StatusNotFound, "No such server", fmt.Sprintf("There is no server %q whose auth type is oauth2_user.", server))
		return
	}
	if g.vault == nil {
		connectPage(w, http.StatusServiceUnavailable, "No vault", "The gateway has no vault to keep your tokens in.")
		return
	}
	redirect := g.linkBase(r) + ConnectCallbackPath
	reg, err := g.connectRegistration(r.Context(), server, srv, redirect)
	if err != nil {
		g.log.Warn("oauth connect: discovery or registration failed", "server", server, "error", err)
		connectPage(w, http.StatusBadGateway, "Cannot connect", fmt.Sprintf("The authorization server of %s could not be used: %s. The gateway's log has the details.", server, oauthFault(err)))
		return
	}
	state, err := randomToken()
	if err != nil {
		connectPage(w, http.StatusInternalServerError, "Cannot connect", "No randomness.")
		return
	}
	binding := ""
	if ck, err := r.Cookie(connectCookie); err == nil && len(ck.Value) == 43 {
		binding = ck.Value // one browser, several connects in flight
	} else if binding, err = randomToken(); err != nil {
		connectPage(w, http.StatusInternalServerError, "Cannot connect", "No randomness.")
		return
	}
	plan := reg.plan
	if len(scopes) > 0 {
		plan = plan.WithScopes(scopes)
	}
	authURL, verifier, err := plan.AuthorizeURL(reg.client, state)
	if err != nil {
		g.log.Warn("oauth connect: no authorization request", "server", server, "error", err)
		connectPage(w, http.StatusBadGateway, "Cannot connect", fmt.Sprintf("No authorization request for %s: %s. The gateway's log has the details.", server, oauthFault(err)))
		return
	}
	now := g.now()
	c := &g.connect
	pend := &connState{person: person, server: server, verifier: verifier, binding: binding, reg: reg,
		scopes: plan.Scopes, ticket: ticket, expires: now.Add(connectStateTTL)}
	if c.shared != nil {
		if !c.shareState(state, pend, now) {
			connectPage(w, http.StatusServiceUnavailable, "Cannot connect", "The gateway's shared state is unavailable; try again in a moment.")
			return
		}
		g.redirectToAuthorize(w, r, binding, redirect, authURL)
		return
	}
	c.mu.Lock()
	if c.states == nil {
		c.states = map[string]*connState{}
	}
	for k, s := range c.states {
		if now.After(s.expires) {
			delete(c.states, k)
		}
	}
	if len(c.states) >= maxPendingStates {
		c.mu.Unlock()
		connectPage(w, http.StatusServiceUnavailable, "Too many connects", "Too many connects are pending; try again in a few minutes.")
		return
	}
	c.states[state] = pend
	c.mu.Unlock()
	g.redirectToAuthorize(w, r, binding, redirect, authURL)
}

// redirectToAuthorize sends the browser, bound by its connect cookie, to
// the authorization server.
func (g *Gateway) redirectToAuthorize(w http.ResponseWriter, r *http.Request, binding, redirect, authURL string) {
	http.SetCookie(w, &http.Cookie{Name: connectCookie, Value: binding, Path: connectPrefix, MaxAge: int(connectStateTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: strings.HasPrefix(redirect, "https://")})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, authURL, http.StatusFound)
}

// connectRegistration is server's registration for redirect: the one in
// memory or the vault, else a discovery (from the 401 of an
// unauthenticated probe) and a registration, remembered and kept.
func (g *Gateway) connectRegistration(ctx context.Context, server string, srv *config.Server, redirect string) (*connReg, error) {
	if reg := g.registration(ctx, server, srv, redirect); reg != nil {
		return reg, nil
	}
	cfg := g.connectConfig(srv, redirect)
	probe := g.probeUnauthenticated(ctx, srv)
	if probe != nil {
		defer probe.Body.Close()
	}
	plan, err := client.Discover(ctx, cfg, probe)
	if err != nil {
		return nil, err
	}
	cl, err := plan.Register(ctx)
	if err != nil {
		return nil, err
	}
	reg := &connReg{plan: plan, client: cl, redirect: redirect, url: srv.URL}
	g.connect.remember(server, reg)
	g.keepRegistration(ctx, server, reg)
	return reg, nil
}

// probeUnauthenticated sends an initialize without credentials to srv's
// MCP endpoint: its 401 names the protected resource metadata. nil when
// the answer is no 401 (discovery then uses the well-known URIs). A
// runtime server's probe has its address guard (upstream.GuardedHTTPClient).
func (g *Gateway) probeUnauthenticated(ctx context.Context, srv *config.Server) *http.Response {
	ctx, cancel := context.WithTimeout(ctx, client.FetchTimeout)
	defer cancel()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcpgate","version":"connect"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(body))
	if err != nil {
		return nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	hc, err := upstream.GuardedHTTPClient(srv, g.httpClient)
	if err != nil {
		return nil
	}
	nc := *hc
	nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := nc.Do(req)
	if err != nil {
		return nil
	}
	if resp.StatusCode != http.StatusUnauthorized {
		resp.Body.Close()
		return nil
	}
	// Discover reads only the headers; the body is bounded and dropped.
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return resp
}

func (g *Gateway) serveConnectCallback(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	q := r.URL.Query()
	state := q.Get("state")
	binding := ""
	if ck, err := r.Cookie(connectCookie); err == nil {
		binding = ck.Value
	}
	now := g.now()
	st, ok := g.connect.takeRequest(state, binding, now)
	switch ok {
	case requestUnknown:
		connectPage(w, http.StatusBadRequest, "Unknown request", "This authorization answer is unknown, already used or expired. Start again from the connect link.")
		return
	case requestForeign:
		connectPage(w, http.StatusForbidden, "Not your request", "This authorization answer belongs to a connect started in another browser. Start again from the connect link.")
		return
	}
	if st.reg == nil {
		// Started on another replica: its registration is the one kept
		// in the vault for that redirect URI.
		if srv := g.conf().Servers[st.server]; srv != nil {
			st.reg = g.registration(r.Context(), st.server, srv, st.redirect)
		}
		if st.reg == nil {
			connectPage(w, http.StatusBadRequest, "Not connected", fmt.Sprintf("The client registration for %s is gone (the server's configuration changed). Start again from the connect link.", st.server))
			return
		}
	}
	if now.After(st.expires) {
		connectPage(w, http.StatusBadRequest, "Expired", "This connect took longer than 10 minutes. Start again from the connect link.")
		return
	}
	if e := q.Get("error"); e != "" {
		connectPage(w, http.StatusBadRequest, "Not connected", fmt.Sprintf("The authorization server of %s answered %s.", st.server, printableParam(e)))
		return
	}
	tok, err := st.reg.plan.Exchange(r.Context(), st.reg.client, q.Get("code"), st.verifier, q.Get("iss"))
	if err != nil {
		g.log.Warn("oauth connect: code exchange failed", "server", st.server, "error", err)
		connectPage(w, http.StatusBadGateway, "Not connected", fmt.Sprintf("The code could not be exchanged at the authorization server of %s: %s. The gateway's log has the details.", st.server, oauthFault(err)))
		return
	}
	e := vault.Entry{Kind: vault.KindOAuth, Issuer: st.reg.plan.AuthServer.Issuer, Person: st.person, Server: st.server,
		AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, Expiry: tok.Expiry, Scopes: entryScopes(tok.Scope, st.scopes)}
	if err := g.vault.Put(r.Context(), e); err != nil {
		g.log.Warn("oauth connect: vault write failed", "server", st.server, "error", err)
		connectPage(w, http.StatusInternalServerError, "Not connected", "Your tokens could not be stored.")
		return
	}
	g.log.Info("oauth connect: account connected", "server", st.server, "issuer", e.Issuer)
	g.connect.completeTicket(st.ticket)
	connectPage(w, http.StatusOK, "Connected", fmt.Sprintf("Your account for %s is connected. You can close this page.", st.server))
}

func printableParam(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// oauthFault says what went wrong with an upstream's authorization server
// in words for the person's page: the kind of failure, never the
// addresses (of the upstream, its metadata, its authorization server or
// a redirect) that the error itself names for the log.
func oauthFault(err error) string {
	var te *client.TokenError
	switch {
	case errors.As(err, &te):
		return fmt.Sprintf("it refused the request (%s)", te.Error())
	case errors.Is(err, client.ErrIssuerMismatch):
		return "its metadata names another issuer"
	case errors.Is(err, client.ErrNoPKCE):
		return client.ErrNoPKCE.Error()
	case errors.Is(err, client.ErrNoRegistration):
		return "the gateway has no way to register a client there"
	case errors.Is(err, client.ErrResourceMismatch):
		return "the server's metadata names another resource"
	case errors.Is(err, client.ErrCrossOrigin):
		return "a redirect to another origin was refused"
	case errors.Is(err, client.ErrBlockedAddress):
		return "an address it names is not allowed"
	case errors.Is(err, client.ErrInsecureURL):
		return "an address it names is not https"
	case errors.Is(err, client.ErrTooLarge):
		return "a document it serves is too large"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.Is(err, client.ErrNoAuthServer):
		// Last: it wraps the causes above, per authorization server.
		return "no usable authorization server"
	}
	return "discovery or registration failed"
}

func connectPage(w http.ResponseWriter, status int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<!doctype html><html><head><meta charset="utf-8"><title>mcpgate: %s</title></head><body style="font-family:sans-serif;max-width:40em;margin:3em auto"><h1>%s</h1><p>%s</p></body></html>`,
		html.EscapeString(title), html.EscapeString(title), html.EscapeString(msg))
}

// oauthCredential is person's connected access token for server as an
// Authorization value, refreshed first when it expires within
// refreshMargin; "" when there is none (or it expired and cannot be
// refreshed). A refresh refused with invalid_grant deletes the entry: the
// person has to connect again.
func (g *Gateway) oauthCredential(ctx context.Context, person, server string) string {
	e, err := g.vault.Get(ctx, person, server)
	switch {
	case errors.Is(err, vault.ErrNotFound):
		return ""
	case err != nil:
		g.log.Warn("vault read failed; the call goes without a credential and fails", "server", server, "error", err)
		return ""
	case e.Kind != vault.KindOAuth:
		return ""
	}
	now := g.now()
	expired := !e.Expiry.IsZero() && !now.Before(e.Expiry)
	if !e.Expiry.IsZero() && now.Add(refreshMargin).After(e.Expiry) {
		if ne, ok := g.refreshConnected(ctx, person, server); ok {
			e = ne
			expired = false
		} else if expired {
			return ""
		}
	}
	if expired || e.AccessToken == "" {
		return ""
	}
	if err := g.vault.Touch(context.WithoutCancel(ctx), person, server); err != nil && !errors.Is(err, vault.ErrNotFound) {
		g.log.Debug("vault last-use write failed", "server", server, "error", err)
	}
	return "Bearer " + e.AccessToken
}

// refreshConnected refreshes person's tokens for server, one refresh at a
// time per entry (Vault.Refresh).
func (g *Gateway) refreshConnected(ctx context.Context, person, server string) (vault.Entry, bool) {
	srv := g.conf().Servers[server]
	if srv == nil || srv.Auth == nil {
		return vault.Entry{}, false
	}
	reg := g.registration(ctx, server, srv, "")
	if reg == nil {
		g.log.Warn("oauth2_user: cannot refresh, no client registration for the server's url (none kept, or the config changed); the person must connect again", "server", server)
		return vault.Entry{}, false
	}
	ne, err := g.vault.Refresh(ctx, person, server, func(ctx context.Context, cur vault.Entry) (vault.Entry, error) {
		if cur.Kind != vault.KindOAuth {
			return vault.Entry{}, errors.New("not an oauth entry")
		}
		if cur.Expiry.IsZero() || cur.Expiry.After(g.now().Add(refreshMargin)) {
			return cur, nil // refreshed by another caller meanwhile
		}
		if cur.RefreshToken == "" {
			return vault.Entry{}, errors.New("no refresh token")
		}
		tok, err := reg.plan.Refresh(ctx, reg.client, cur.RefreshToken)
		if err != nil {
			return vault.Entry{}, err
		}
		g.log.Debug("oauth2_user: tokens refreshed", "server", server, "token", tok) // Token.LogValue: no token
		cur.AccessToken, cur.Expiry = tok.AccessToken, tok.Expiry
		if tok.RefreshToken != "" {
			cur.RefreshToken = tok.RefreshToken
		}
		if tok.Scope != "" {
			cur.Scopes = strings.Fields(tok.Scope)
		}
		return cur, nil
	})
	if err != nil {
		var te *client.TokenError
		if errors.As(err, &te) && te.Code == "invalid_grant" {
			g.log.Info("oauth2_user: refresh token refused; the connection is removed", "server", server)
			if err := g.vault.Delete(context.WithoutCancel(ctx), person, server); err != nil && !errors.Is(err, vault.ErrNotFound) {
				g.log.Warn("vault delete failed", "server", server, "error", err)
			}
		} else {
			g.log.Warn("oauth2_user: refresh failed", "server", server, "error", err)
		}
		return vault.Entry{}, false
	}
	return ne, true
}
