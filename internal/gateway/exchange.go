package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// Servers whose egress credential is exchanged for the caller's own token
// (auth types oauth2_token_exchange and enterprise_managed; SPEC S9.4).
//
// The subject token is the caller's own bearer token, and only when
// auth.oidc validated it: a JWT of one of its issuers (for
// enterprise_managed, the company IdP's ID token or a JWT it issued). It
// is taken from Authorization when the caller is authenticated, before
// the gateway strips its credential from the request, and travels in the
// request's context to egress (callerTokens, upstream.WithCallerTokens),
// which exchanges it and keys the person's upstream sessions by it. It is
// never forwarded itself, and never logged. A caller authenticated by a
// virtual key, the master key, mcpgate's own authorization server or
// nothing has none: on a single-server route such a request gets 401
// with the route's RFC 9728 challenge before any session starts (the
// route's metadata names the auth.oidc issuers to get a token from), on
// other routes each call of the server a JSON-RPC error.
//
// Tokens that mcpgate's own authorization server (auth.login) issues are
// not subject tokens: they are mcpgate's, no token service trusts them.

type subjectTokenKey struct{}

// subjectToken is the subject token of caller c of r: its bearer token
// when an auth.oidc issuer signed it, else "". Called before the gateway
// strips Authorization.
func (g *Gateway) subjectToken(r *http.Request, c *callers.Caller) string {
	if c == nil || c.Issuer == "" || !c.KeyFromAuthorization || !g.current().exchange {
		return ""
	}
	cfg := g.conf()
	if cfg.Auth == nil {
		return ""
	}
	trusted := false
	for _, is := range cfg.Auth.OIDC {
		if is.Issuer == c.Issuer {
			trusted = true
			break
		}
	}
	if !trusted {
		return ""
	}
	tok, ok := config.CutScheme(strings.TrimSpace(r.Header.Get("Authorization")), "Bearer")
	if !ok {
		return ""
	}
	return strings.TrimSpace(tok)
}

// withSubjectToken returns ctx carrying the caller's subject token.
func withSubjectToken(ctx context.Context, tok string) context.Context {
	if tok == "" {
		return ctx
	}
	return context.WithValue(ctx, subjectTokenKey{}, tok)
}

// subjectFrom is the subject token of ctx's caller, "" for none.
func subjectFrom(ctx context.Context) string {
	s, _ := ctx.Value(subjectTokenKey{}).(string)
	return s
}

// exchangesToken reports whether server's credential is exchanged for
// the caller's token.
func (g *Gateway) exchangesToken(server string) bool {
	srv := g.conf().Servers[server]
	return srv != nil && srv.Auth != nil && config.ExchangesCallerToken(srv.Auth.Type)
}

// exchangeGate refuses 401, with the route's challenge, a request on a
// single-server route of an exchanging server from a caller without a
// subject token (S9.4).
func (g *Gateway) exchangeGate(r *http.Request, rt route) error {
	if !g.current().exchange || rt.prefixed || rt.single == "" || !rt.has(rt.single) || !g.exchangesToken(rt.single) {
		return nil
	}
	if (r.Method != http.MethodPost && r.Method != http.MethodGet) || subjectFrom(r.Context()) != "" {
		return nil
	}
	cfg := g.conf()
	c := oauth.Challenge{ResourceMetadata: g.prmURL(r), Scope: strings.Join(scopesOf(cfg), " ")}
	return rpcRefusal(http.StatusUnauthorized, jsonrpc.NewError(callers.CodeUnauthorized, "%s", noSubjectMessage(rt.single))).
		withHeader("WWW-Authenticate", c.String())
}

// noSubjectMessage says why a server is refused to a caller without a
// subject token.
func noSubjectMessage(server string) string {
	return fmt.Sprintf("Unauthorized: upstream %s exchanges the caller's own token: send Authorization: Bearer with a token of a trusted issuer (auth.oidc); a virtual key has none to exchange", server)
}

// noSubjectError is the JSON-RPC error of a call of an exchanging server
// by a caller without a subject token: nothing was sent.
func noSubjectError(server string, f upstream.Fault) *jsonrpc.Error {
	data, _ := json.Marshal(struct {
		Fault  string `json:"fault"`
		Status int    `json:"status"`
		Server string `json:"server"`
	}{f.Class, f.Status, server})
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: strings.TrimPrefix(noSubjectMessage(server), "Unauthorized: "), Data: data}
}
