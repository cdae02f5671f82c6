package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/connect"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// The person-credential flows (connect pages, URL elicitation tickets,
// client registrations, the client ID metadata document, per-person
// credentials, passthrough metadata) are internal/connect's; this file
// is where a call meets them: a call of an oauth2_user server that needs
// the person's account (none connected yet, a token the server refused,
// or a 403 insufficient_scope asking for more) is not failed at once
// when the client declared elicitation.url: the gateway sends it
// elicitation/create {mode: "url"} with a connect link, waits for the
// person to finish in their browser, sends
// notifications/elicitation/complete and makes the call again.

// maxConnectRounds bounds the connects one call may ask for: the first
// connect and one step-up (the MCP spec asks clients to limit
// re-authorization; its conformance suite allows three attempts).
const maxConnectRounds = 2

// PersonConfirmer proves, in a browser, who the browser's person is
// (connect.PersonConfirmer).
type PersonConfirmer = connect.PersonConfirmer

// ConfirmParam is the query parameter a PersonConfirmer's code comes
// back in.
const ConfirmParam = connect.ConfirmParam

// SetPersonConfirmer makes c the confirmation of oidc: persons opening
// connect links.
func (g *Gateway) SetPersonConfirmer(c PersonConfirmer) { g.connect.SetConfirmer(c) }

// Connect is the person-credential flows the gateway serves: an
// http.Handler of the paths its Serves reports (the connect pages and the
// client ID metadata document).
func (g *Gateway) Connect() *connect.Flows { return g.connect }

// authenticateOrRefuse is authenticate for the connect pages, which
// answer nothing themselves when it fails: the refusal is written here.
func (g *Gateway) authenticateOrRefuse(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	r2, err := g.authenticate(r)
	if err != nil {
		g.writeError(w, r, err)
		return nil, false
	}
	return r2, true
}

// newConnect builds the flows over what g knows of callers and links.
func (g *Gateway) newConnect(o Options) *connect.Flows {
	co := connect.Options{Config: g.conf, Vault: g.vault, Tickets: o.Tickets, HTTPClient: o.HTTPClient,
		Logger: g.log, Now: g.now, LinkBase: g.linkBase, Authenticate: g.authenticateOrRefuse}
	if g.auth != nil {
		co.Identify = func(r *http.Request) *callers.Caller {
			r = r.WithContext(callers.WithResource(r.Context(), g.resourceOf(r)))
			c, f := g.auth.Authenticate(r)
			if f != nil {
				return nil
			}
			return c
		}
	}
	return connect.New(co)
}

// hasKeyHeader reports whether r carries a gateway key in a header other
// than Authorization.
func hasKeyHeader(r *http.Request) bool { return connect.HasKeyHeader(r) }

// canElicitConnect reports whether sc's client can be sent a URL
// elicitation: it declared elicitation.url, on a stateful handshake-era session
// (asked on the session) or in a 2026-07-28 call (asked with an
// input_required round).
func canElicitConnect(sc *scope) bool {
	if sc == nil || !sc.caps.ElicitationURL {
		return false
	}
	if sc.stateless {
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
	if !g.connect.CanConfirm(person) {
		// Nobody could prove in a browser to be this person: the error
		// says where to connect (with their own credentials).
		return err
	}
	for round := 0; round < maxConnectRounds && err != nil; round++ {
		scopes, need := g.connect.Need(ctx, person, server, err)
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
	t, err := g.connect.NewTicket(person, server, scopes)
	if err != nil {
		return jsonrpc.NewError(jsonrpc.CodeInternalError, "connect your account for %s at %s (%v)", server, g.connectURL(ctx, server), err)
	}
	defer g.connect.DropTicket(t)
	id := t.ID()
	link := t.Link(g.connectURL(ctx, server))
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
	if sc.stateless {
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
	timer := time.NewTimer(time.Until(t.Expires()))
	defer timer.Stop()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	select {
	case <-g.connect.Await(wctx, t):
		if why := t.Failure(); why != "" {
			// The connect page failed (the upstream's metadata names
			// another resource, its authorization server refused, ...):
			// nobody will finish this connect, so the call ends now.
			return notConnected("the connect failed: " + why)
		}
	case <-ctx.Done():
		return ctx.Err()
	case <-sc.doneChan():
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
	if !sc.stateless {
		// A 2026-07-28 client has no session to hear it on; its retry's
		// answer is the news.
		done, _ := json.Marshal(map[string]string{"elicitationId": id})
		_ = sc.out.send(jsonrpc.NewNotification(mcpwire.NotifyElicitationComplete, done))
	}
	return nil
}

// connectGate is S9.1 for the initialize m on rt: on a single-server
// route of an oauth2_user server, a person who has not connected their
// account and whose client cannot be asked during the session (no
// elicitation.url) gets 401 before any session starts, with a challenge
// whose authorization_uri is the gateway's connect link for the server.
// On a route of several servers the others still serve: the call of
// that server says where to connect instead.
func (g *Gateway) connectGate(r *http.Request, rt route, m *jsonrpc.Message) error {
	server := rt.single
	if rt.prefixed || server == "" || !rt.has(server) || g.AuthType(server) != config.AuthOAuth2User || g.vault == nil {
		return nil
	}
	person := callers.PersonID(callers.FromContext(r.Context()))
	if person == "" {
		return nil // no one's account to connect: the calls say so
	}
	var ip mcpwire.InitializeParams
	_ = json.Unmarshal(m.Params, &ip)
	if mcpwire.ParseClientCaps(ip.Capabilities).ElicitationURL && g.connect.CanConfirm(person) {
		return nil
	}
	if callerTokenFrom(r.Context(), server) != "" {
		return nil
	}
	link := g.connectURL(r.Context(), server)
	msg := "connect your account for " + server + " at " + link
	return rpcRefusal(http.StatusUnauthorized, jsonrpc.NewError(callers.CodeUnauthorized, "Unauthorized: %s", msg)).
		withHeader("WWW-Authenticate", oauth.Challenge{Error: "invalid_token", ErrorDescription: msg, AuthorizationURI: link}.String())
}

// callerTokenFrom is the caller's credential for server from ctx's
// request memo ("" for none).
func callerTokenFrom(ctx context.Context, server string) string {
	if t, ok := ctx.Value(callerTokenSetKey{}).(*callerTokenSet); ok {
		return t.get(server)
	}
	return ""
}
