// Package connect owns the person-credential flows of the gateway: the
// connect pages that bind a person's own upstream account (auth type
// oauth2_user, SPEC S19), the URL elicitation tickets that ask for a
// connect during a call, the client registrations at upstream
// authorization servers, the gateway's client ID metadata document, the
// per-person credential lookups egress sends, and the protected resource
// metadata a passthrough route mirrors (S9.2).
//
// It holds the state of those flows (pending connects, tickets,
// registrations, mirrored metadata), each behind the lock of the small
// type that owns it. It does not route MCP requests, hold sessions or
// know the gateway: what it needs of the gateway that serves it (the
// caller's identity, link base URLs, the live config) comes in Options,
// and the gateway imports it, never the other way round.
package connect

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
	"github.com/mcpgate/mcpgate/internal/state"
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
	// PagePrefix is the subtree the connect pages live under (the
	// binary's mux mounts them there; the prefix itself is no page).
	PagePrefix = connectPrefix
	// CallbackPath is the redirect URI's path: the gateway's, not the
	// authorization server's /oauth/callback.
	CallbackPath    = connectPrefix + "callback"
	connectCookie   = "mcpgate_connect"
	connectStateTTL = 10 * time.Minute
	// refreshMargin: an access token expiring within it is refreshed first.
	refreshMargin    = 60 * time.Second
	maxPendingStates = 10000
)

// Path is where a person connects their account for server.
func Path(server string) string { return connectPrefix + server }

// IsPagePath reports whether path is one of the connect pages (a
// server's connect page or the callback).
func IsPagePath(path string) bool {
	return strings.HasPrefix(path, connectPrefix) && len(path) > len(connectPrefix)
}

// Options is what the flows need of the gateway that serves them. Config
// is required; the zero value of every other field is its documented
// default.
type Options struct {
	// Config is the gateway's live configuration (it changes on reload).
	Config func() *config.Config
	// Vault keeps people's tokens and the client registrations; nil: no
	// connect is possible and no person has a credential.
	Vault *vault.Vault
	// Tickets, in a fleet, holds the pending connects for every replica
	// (shared.go); nil: this process's maps only.
	Tickets state.Tickets
	// HTTPClient fetches upstream metadata and probes upstreams (nil:
	// the default client).
	HTTPClient *http.Client
	// Logger: nil discards.
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// LinkBase is the base URL of links handed back to r's sender alone
	// (connect and confirm pages, the callback).
	LinkBase func(r *http.Request) string
	// Authenticate authenticates r as the MCP routes do; on failure it
	// has answered and reports false.
	Authenticate func(w http.ResponseWriter, r *http.Request) (*http.Request, bool)
	// Identify authenticates r without answering: its caller, nil when
	// it fails. nil: the gateway authenticates nobody (no key person can
	// prove who they are).
	Identify func(r *http.Request) *callers.Caller
}

// Flows owns the person-credential flows' state and pages. Its methods
// are safe for concurrent use; SetConfirmer is called before serving.
type Flows struct {
	conf         func() *config.Config
	vault        *vault.Vault
	httpClient   *http.Client
	log          *slog.Logger
	now          func() time.Time
	linkBase     func(*http.Request) string
	authenticate func(http.ResponseWriter, *http.Request) (*http.Request, bool)
	identify     func(*http.Request) *callers.Caller
	confirmer    PersonConfirmer // proves a browser's oidc: person; nil: none

	regs    registrations // client registrations per server (registration.go)
	pending pending       // authorization requests and elicitation tickets
	prms    prmCache      // passthrough upstreams' metadata (passthrough.go)

	// ctx ends with Close; wg counts the goroutines that follow it (a
	// fleet's waits for a connect completed on another replica).
	ctx    context.Context
	cancel context.CancelFunc
	// mu guards the fields below.
	mu     sync.Mutex
	wg     sync.WaitGroup
	closed bool
}

// New builds the flows; Close stops their goroutines.
func New(o Options) *Flows {
	f := &Flows{conf: o.Config, vault: o.Vault, httpClient: o.HTTPClient, log: o.Logger, now: o.Now,
		linkBase: o.LinkBase, authenticate: o.Authenticate, identify: o.Identify}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.now == nil {
		f.now = time.Now
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.pending.shared, f.pending.log, f.pending.ctx = o.Tickets, f.log, f.ctx
	return f
}

// Close ends the flows' goroutines and waits for them. Calls waiting for
// a connect then hear of it only from this process.
func (f *Flows) Close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

// goTracked runs fn in a goroutine Close waits for; false (fn not run)
// once Close began.
func (f *Flows) goTracked(fn func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		fn()
	}()
	return true
}

// Serves reports whether path is one the flows answer (ServeHTTP): the
// connect pages and the client ID metadata document.
func (f *Flows) Serves(path string) bool {
	return f.isClientMetadataPath(path) || IsPagePath(path)
}

// ServeHTTP answers the paths Serves reports.
func (f *Flows) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.isClientMetadataPath(r.URL.Path) {
		f.serveClientMetadata(w, r)
		return
	}
	f.serveConnect(w, r)
}

func randomToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// serveConnect answers the connect flow's two routes.
func (f *Flows) serveConnect(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get(elicitParam)
	if r.Method != http.MethodGet && r.Method != http.MethodHead && (r.Method != http.MethodPost || id == "") {
		w.Header().Set("Allow", "GET")
		connectPage(w, http.StatusMethodNotAllowed, "Method not allowed", "Use GET.")
		return
	}
	if r.URL.Path == CallbackPath {
		f.serveConnectCallback(w, r)
		return
	}
	if id != "" {
		f.serveConnectElicited(w, r, strings.TrimPrefix(r.URL.Path, connectPrefix), id)
		return
	}
	f.serveConnectStart(w, r)
}

func (f *Flows) serveConnectStart(w http.ResponseWriter, r *http.Request) {
	server := strings.TrimPrefix(r.URL.Path, connectPrefix)
	r, ok := f.authenticate(w, r)
	if !ok {
		return
	}
	person := callers.PersonID(callers.FromContext(r.Context()))
	if person == "" {
		connectPage(w, http.StatusForbidden, "Not a person", "Connect with your own key or login: the master key and anonymous callers have no account of their own.")
		return
	}
	scopes, ok := scopeParam(r.URL.Query().Get(scopeParamName))
	if !ok {
		connectPage(w, http.StatusBadRequest, "Bad scope", "The scope of this link is not a list of OAuth scopes.")
		return
	}
	f.beginConnect(w, r, person, server, scopes, "")
}

// scopeParamName is the connect link's query parameter naming the scopes
// to ask for (StepUpLink); without it the server's plan's are asked for.
const scopeParamName = "scope"

// Bounds of a connect link's scope parameter.
const (
	maxScopeParam  = 1024
	maxScopeTokens = 32
)

// StepUpLink is the connect link connectURL asking for scopes: what an
// error names after a 403 insufficient_scope, so that connecting again
// by hand asks for the wider scopes and not the old ones.
func StepUpLink(connectURL string, scopes []string) string {
	if len(scopes) == 0 {
		return connectURL
	}
	return connectURL + "?" + url.Values{scopeParamName: {strings.Join(scopes, " ")}}.Encode()
}

// scopeParam reads a connect link's scope parameter: space-separated
// RFC 6749 scope tokens, bounded. nil, true when there is none. The
// person's own authorization server shows them what they approve; the
// parameter only spares them a connect that asks for too little.
func scopeParam(v string) ([]string, bool) {
	if v == "" {
		return nil, true
	}
	if len(v) > maxScopeParam {
		return nil, false
	}
	scopes := strings.Fields(v)
	if len(scopes) > maxScopeTokens {
		return nil, false
	}
	for _, sc := range scopes {
		for i := 0; i < len(sc); i++ {
			// scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
			if c := sc[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
				return nil, false
			}
		}
	}
	return scopes, true
}

// beginConnect sends person's browser to server's authorization server,
// asking for scopes (nil: the plan's); ticket is the URL elicitation the
// connect completes ("": none).
func (f *Flows) beginConnect(w http.ResponseWriter, r *http.Request, person, server string, scopes []string, ticket string) {
	srv := f.conf().Servers[server]
	if srv == nil || srv.Auth == nil || srv.Auth.Type != config.AuthOAuth2User {
		f.failPage(w, ticket, http.StatusNotFound, "No such server", fmt.Sprintf("There is no server %q whose auth type is oauth2_user.", server))
		return
	}
	if f.vault == nil {
		f.failPage(w, ticket, http.StatusServiceUnavailable, "No vault", "The gateway has no vault to keep your tokens in.")
		return
	}
	redirect := f.linkBase(r) + CallbackPath
	reg, err := f.connectRegistration(r.Context(), server, srv, redirect)
	if err != nil {
		f.log.Warn("oauth connect: discovery or registration failed", "server", server, "error", err)
		f.failPage(w, ticket, http.StatusBadGateway, "Cannot connect", fmt.Sprintf("The authorization server of %s could not be used: %s. The gateway's log has the details.", server, oauthFault(err)))
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
		f.log.Warn("oauth connect: no authorization request", "server", server, "error", err)
		f.failPage(w, ticket, http.StatusBadGateway, "Cannot connect", fmt.Sprintf("No authorization request for %s: %s. The gateway's log has the details.", server, oauthFault(err)))
		return
	}
	now := f.now()
	pend := &connState{person: person, server: server, verifier: verifier, binding: binding, reg: reg,
		scopes: plan.Scopes, ticket: ticket, expires: now.Add(connectStateTTL)}
	switch err := f.pending.putRequest(state, pend, now); {
	case errors.Is(err, errShared):
		connectPage(w, http.StatusServiceUnavailable, "Cannot connect", "The gateway's shared state is unavailable; try again in a moment.")
		return
	case err != nil:
		connectPage(w, http.StatusServiceUnavailable, "Too many connects", "Too many connects are pending; try again in a few minutes.")
		return
	}
	f.redirectToAuthorize(w, r, binding, redirect, authURL)
}

// redirectToAuthorize sends the browser, bound by its connect cookie, to
// the authorization server.
func (f *Flows) redirectToAuthorize(w http.ResponseWriter, r *http.Request, binding, redirect, authURL string) {
	http.SetCookie(w, &http.Cookie{Name: connectCookie, Value: binding, Path: connectPrefix, MaxAge: int(connectStateTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: strings.HasPrefix(redirect, "https://")})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, authURL, http.StatusFound)
}

func (f *Flows) serveConnectCallback(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	q := r.URL.Query()
	state := q.Get("state")
	binding := ""
	if ck, err := r.Cookie(connectCookie); err == nil {
		binding = ck.Value
	}
	now := f.now()
	st, ok := f.pending.takeRequest(state, binding, now)
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
		if srv := f.conf().Servers[st.server]; srv != nil {
			st.reg = f.registration(r.Context(), st.server, srv, st.redirect)
		}
		if st.reg == nil {
			f.failPage(w, st.ticket, http.StatusBadRequest, "Not connected", fmt.Sprintf("The client registration for %s is gone (the server's configuration changed). Start again from the connect link.", st.server))
			return
		}
	}
	if now.After(st.expires) {
		connectPage(w, http.StatusBadRequest, "Expired", "This connect took longer than 10 minutes. Start again from the connect link.")
		return
	}
	if e := q.Get("error"); e != "" {
		f.failPage(w, st.ticket, http.StatusBadRequest, "Not connected", fmt.Sprintf("The authorization server of %s answered %s.", st.server, printableParam(e)))
		return
	}
	tok, err := st.reg.plan.Exchange(r.Context(), st.reg.client, q.Get("code"), st.verifier, q.Get("iss"))
	if err != nil {
		f.log.Warn("oauth connect: code exchange failed", "server", st.server, "error", err)
		f.failPage(w, st.ticket, http.StatusBadGateway, "Not connected", fmt.Sprintf("The code could not be exchanged at the authorization server of %s: %s. The gateway's log has the details.", st.server, oauthFault(err)))
		return
	}
	e := vault.Entry{Kind: vault.KindOAuth, Issuer: st.reg.plan.AuthServer.Issuer, Person: st.person, Server: st.server,
		AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, Expiry: tok.Expiry, Scopes: entryScopes(tok.Scope, st.scopes)}
	if err := f.vault.Put(r.Context(), e); err != nil {
		f.log.Warn("oauth connect: vault write failed", "server", st.server, "error", err)
		f.failPage(w, st.ticket, http.StatusInternalServerError, "Not connected", "Your tokens could not be stored.")
		return
	}
	f.log.Info("oauth connect: account connected", "server", st.server, "issuer", e.Issuer)
	f.pending.completeTicket(st.ticket)
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

// failPage answers the person's browser with the page of a connect that
// failed, and ends the call waiting on it through a URL elicitation
// (ticket; "": none) with the same words at once: no one is going to
// finish this connect, and the call would otherwise wait for its
// client's timeout. Refusals the person can mend in the browser (a stale
// form, a wrong key, a busy shared store) are plain connectPages.
func (f *Flows) failPage(w http.ResponseWriter, ticket string, status int, title, msg string) {
	f.pending.failTicket(ticket, msg)
	connectPage(w, status, title, msg)
}

func connectPage(w http.ResponseWriter, status int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<!doctype html><html><head><meta charset="utf-8"><title>mcpgate: %s</title></head><body style="font-family:sans-serif;max-width:40em;margin:3em auto"><h1>%s</h1><p>%s</p></body></html>`,
		html.EscapeString(title), html.EscapeString(title), html.EscapeString(msg))
}
