package gateway

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/connect"
)

// CredentialsPath is where a person stores their own credential for a
// user_api_key server: the admin API's /me/credentials/{server}, which
// the binary serves (the gateway only names it in its error).
func CredentialsPath(server string) string {
	return "/admin/v1/me/credentials/" + server
}

// callerTokens is the caller's own upstream credential for each server of
// a request: for a user_api_key server the one the person stored in the
// vault, for an oauth2_user server "Bearer <the access token the person
// connected>" (refreshed when it is about to expire) (looked up once per request and server; "" when there is none,
// and for callers who are no one person), for an oauth2_token_exchange or
// enterprise_managed server the caller's subject token (exchange.go:
// exchanged by egress, never sent itself), for the others what the request
// carries (passthrough). Never another person's, never a shared one.
//
// single is the server of the request's single-server route ("" for a
// route of several servers): only it may receive the caller's
// Authorization header (headerTokens).
func (g *Gateway) callerTokens(r *http.Request, single string) *callerTokenSet {
	// Not cancelled with the request: a 2026-07-28 call goes on across
	// its client's retries (input_required rounds) after the request that
	// began it has been answered. The vault reads and token refreshes are
	// bounded on their own.
	ctx := context.WithoutCancel(r.Context())
	return &callerTokenSet{g: g, ctx: ctx, req: r, headers: headerTokens(r.Header, single), person: callers.PersonID(callers.FromContext(ctx))}
}

// noHeaders is the header credentials of a call no client request
// carried (the stdio front, an operator's call as a key): none.
func noHeaders(string) string { return "" }

// callerTokenSet is callerTokens' memo for one request.
type callerTokenSet struct {
	g   *Gateway
	ctx context.Context
	// req is the request, for the links a refusal names (connectURL):
	// worked out only then, not for every call. nil: no HTTP request
	// (the stdio front, an operator's call).
	req     *http.Request
	headers func(string) string
	person  string
	mu      sync.Mutex
	stored  []storedToken // a request calls one or two servers: a slice, not a map
}

// storedToken is the memo of one server's credential.
type storedToken struct{ server, token string }

// get is the caller's credential for server (see callerTokens).
func (t *callerTokenSet) get(server string) string {
	g := t.g
	srv := g.conf().Servers[server]
	if srv != nil && srv.Auth != nil && config.ExchangesCallerToken(srv.Auth.Type) {
		return subjectFrom(t.ctx) // exchanged by egress, never sent itself
	}
	if srv == nil || srv.Auth == nil || (srv.Auth.Type != config.AuthUserAPIKey && srv.Auth.Type != config.AuthOAuth2User) {
		return t.headers(server)
	}
	if t.person == "" || g.vault == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.stored {
		if s.server == server {
			return s.token
		}
	}
	var tok string
	if srv.Auth.Type == config.AuthOAuth2User {
		tok = g.connect.OAuthCredential(t.ctx, t.person, server)
	} else {
		tok = g.connect.StoredCredential(t.ctx, t.person, server)
	}
	t.stored = append(t.stored, storedToken{server, tok})
	return tok
}

// forget drops server's memo: the person has just connected (again).
func (t *callerTokenSet) forget(server string) {
	t.mu.Lock()
	t.stored = slices.DeleteFunc(t.stored, func(s storedToken) bool { return s.server == server })
	t.mu.Unlock()
}

type callerTokenSetKey struct{}

// forgetCallerToken drops the memo of ctx's request for server, so the
// next call reads the vault again.
func forgetCallerToken(ctx context.Context, server string) {
	if t, ok := ctx.Value(callerTokenSetKey{}).(*callerTokenSet); ok {
		t.forget(server)
	}
}

// AuthType is the auth type of server's egress credentials: "" for an
// unknown server, config.AuthNone for a server without an auth block.
func (g *Gateway) AuthType(server string) string {
	srv := g.conf().Servers[server]
	switch {
	case srv == nil:
		return ""
	case srv.Auth == nil || srv.Auth.Type == "":
		return config.AuthNone
	}
	return srv.Auth.Type
}

// connectURL is where the person of ctx's request connects server: under
// the request's link base (linkBase), else public_url.
func (g *Gateway) connectURL(ctx context.Context, server string) string {
	base := ""
	if t, ok := ctx.Value(callerTokenSetKey{}).(*callerTokenSet); ok && t.req != nil {
		base = g.linkBase(t.req)
	}
	if base == "" {
		base = strings.TrimRight(g.conf().PublicURL, "/")
	}
	return base + connect.Path(server)
}
