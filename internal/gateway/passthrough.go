package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/connect"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// Pass-through servers and their auth challenges (S9.2, S9.5, S10).
//
// A `passthrough` server authenticates the person itself: the caller's
// own upstream token travels in X-Mcp-<server>-Authorization, else, on a
// single-server route only, in Authorization (when Authorization is not
// the gateway's own credential: a gateway key or JWT there is stripped
// before egress and never counts). On a route of several servers a
// caller's Authorization goes to none of them (headerTokens): it names no
// server, and each passthrough server could replay it at the others.
// On a single-server route (/mcp/<server>, /<server>/mcp) the gateway acts
// as that server's protected resource:
//
//   - a request without a token for it gets 401 with
//     `WWW-Authenticate: Bearer resource_metadata="<the route's metadata>"`
//     before any session starts (S9.2);
//   - the route's metadata mirrors the upstream's own RFC 9728 document:
//     its authorization_servers and scopes_supported, with the gateway's
//     resource for the route;
//   - a token is probed with the upstream (a pooled session's initialize;
//     once per token while its session lives): a 401 becomes a 401 with
//     error="invalid_token", a 403 a 403 "Forbidden", anything else lets
//     the request through (S10); a later call the upstream answers 401
//     or 403 is answered the same way instead of HTTP 200.
//
// On a route of several servers (/mcp, /mcp/a,b, toolsets) no challenge
// can name one server's authorization server, so a passthrough server the
// caller sent no token for is left out of the caller's view, and a call
// it refuses is a JSON-RPC error saying that it refused the caller's
// token.
//
// When the gateway authenticates its own callers with OAuth (OIDC issuers
// or its own authorization server), Authorization and the route's
// metadata belong to the gateway: no passthrough challenge is sent (it
// would send the client to the upstream's authorization server and make it
// replace its gateway token), upstream tokens go in
// X-Mcp-<server>-Authorization, and a missing or refused one is the
// JSON-RPC error of the merged route. A caller with a gateway key in
// X-Mcpgate-Api-Key keeps Authorization for its upstream token.

// isPassthrough reports whether server forwards the caller's own token.
func (g *Gateway) isPassthrough(server string) bool {
	srv := g.conf().Servers[server]
	return srv != nil && srv.Auth != nil && srv.Auth.Type == config.AuthPassthrough
}

// passthroughChallenges reports whether the gateway answers for the
// passthrough server of single-server route rt with HTTP challenges, and
// which server that is.
func (g *Gateway) passthroughChallenges(rt *route) (string, bool) {
	if rt.prefixed || rt.single == "" || !rt.has(rt.single) || !g.isPassthrough(rt.single) {
		return "", false
	}
	return rt.single, !oauthEnabled(g.conf())
}

// withoutTokenless leaves out of a route of several servers the
// passthrough servers the caller sent no token for.
func (g *Gateway) withoutTokenless(r *http.Request, rt route) route {
	if !g.current().passthrough || (!rt.prefixed && rt.single != "") {
		return rt
	}
	tokens := headerTokens(r.Header, "")
	var keep []string
	for _, s := range rt.servers {
		if g.isPassthrough(s) && tokens(s) == "" {
			continue
		}
		keep = append(keep, s)
	}
	if len(keep) != len(rt.servers) {
		if keep == nil {
			keep = []string{}
		}
		rt.servers = keep
	}
	return rt
}

// passthroughGate runs S9.2 and S10 for a request on rt: the route to
// serve, or the refusal.
func (g *Gateway) passthroughGate(r *http.Request, rt route) (route, error) {
	if !g.current().passthrough {
		return rt, nil
	}
	rt = g.withoutTokenless(r, rt)
	server, ok := g.passthroughChallenges(&rt)
	if !ok || (r.Method != http.MethodPost && r.Method != http.MethodGet) {
		return rt, nil
	}
	if headerTokens(r.Header, server)(server) == "" {
		return rt, g.passthroughRefusal(r, server, http.StatusUnauthorized, false)
	}
	if g.up.PerCall(server) {
		// No pooled session to probe: every call opens its own, and its
		// refusal is answered as the call's (noteRefusal).
		return rt, nil
	}
	_, release, err := g.up.Acquire(r.Context(), server)
	if err == nil {
		release()
		return rt, nil
	}
	if f := upstream.Classify(err); f.Class == upstream.FaultAuth {
		g.log.Info("passthrough upstream refused the caller's token", "server", server, "status", f.Status)
		return rt, g.passthroughRefusal(r, server, f.Status, true)
	}
	// Unreachable, timed out, ...: the request itself meets it (S10).
	return rt, nil
}

// passthroughChallenge is the WWW-Authenticate value of a 401 for the
// passthrough server of r's route.
func (g *Gateway) passthroughChallenge(r *http.Request, invalid bool) string {
	c := oauth.Challenge{ResourceMetadata: g.prmURL(r)}
	if invalid {
		c.Error = "invalid_token"
	}
	return c.String()
}

// passthroughRefusal is the 401 (with the challenge; invalid: the
// token was refused) or 403 for server.
func (g *Gateway) passthroughRefusal(r *http.Request, server string, status int, invalid bool) *httpError {
	if status == http.StatusForbidden {
		return rpcRefusal(http.StatusForbidden, jsonrpc.NewError(callers.CodeForbidden, "Forbidden"))
	}
	msg := "Unauthorized: upstream " + server + " needs the caller's own token (Authorization: Bearer, or X-Mcp-" + server + "-Authorization)"
	if invalid {
		msg = "Unauthorized: upstream " + server + " refused the caller's token"
	}
	return rpcRefusal(http.StatusUnauthorized, jsonrpc.NewError(callers.CodeUnauthorized, "%s", msg)).
		withHeader("WWW-Authenticate", g.passthroughChallenge(r, invalid))
}

// refusal is an upstream's 401/403 to a passthrough call, answered as an
// HTTP status instead of a JSON-RPC error in a 200.
type refusalReply struct {
	status    int
	challenge string // WWW-Authenticate of a 401
}

// noteRefusal records on the POST being answered that the passthrough
// server of its single-server route refused the caller's token.
func (g *Gateway) noteRefusal(sc *scope, server string, err error) {
	ps, ok := sc.out.(*postSender)
	if !ok || ps.req == nil || sc.rt == nil {
		return
	}
	if s, ok := g.passthroughChallenges(sc.rt); !ok || s != server {
		return
	}
	f := upstream.Classify(err)
	if f.Class != upstream.FaultAuth {
		return
	}
	rr := &refusalReply{status: f.Status}
	if f.Status != http.StatusForbidden {
		rr.status = http.StatusUnauthorized
		rr.challenge = g.passthroughChallenge(ps.req, true)
	}
	ps.mu.Lock()
	ps.refused = rr
	ps.mu.Unlock()
}

// upstreamFault is faultError for a request's scope: a passthrough
// refusal on a single-server route is also noted for the HTTP answer.
func (g *Gateway) upstreamFault(ctx context.Context, sc *scope, server string, err error) *jsonrpc.Error {
	g.noteRefusal(sc, server, err)
	tracing.NoteOutcome(ctx, tracing.OutcomeFault, string(upstream.Classify(err).Class))
	if errors.Is(err, upstream.ErrNoCredential) && g.AuthType(server) == config.AuthOAuth2User {
		// Nothing was sent: the person has to connect their account (S19).
		rpcErr := g.faultError(server, err)
		rpcErr.Message = fmt.Sprintf("connect your account for %s at %s", server, g.connectURL(ctx, server))
		return rpcErr
	}
	if scopes, ok := g.stepUpScopes(ctx, server, err); ok {
		// A 403 insufficient_scope to a person who connects by hand (a
		// client that can be asked is sent the link, elicitconnect.go):
		// the link asks for the wider scopes; the plain one would ask
		// for the old ones again.
		rpcErr := g.faultError(server, err)
		rpcErr.Message = fmt.Sprintf("%s needs more access (%s): connect your account for %s again at %s", server, strings.Join(scopes, " "), server, connect.StepUpLink(g.connectURL(ctx, server), scopes))
		return rpcErr
	}
	return g.faultError(server, err)
}

// stepUpScopes are the scopes a person's connection to server needs
// when err is its upstream's 403 insufficient_scope: what was granted
// and what the challenge asks for. false: err is no such refusal of an
// oauth2_user server, or there is no person.
func (g *Gateway) stepUpScopes(ctx context.Context, server string, err error) ([]string, bool) {
	var ue *upstream.Error
	if !errors.As(err, &ue) || ue.Kind != upstream.KindAuth || ue.Status != http.StatusForbidden || g.AuthType(server) != config.AuthOAuth2User {
		return nil, false
	}
	person := callers.PersonID(callers.FromContext(ctx))
	if person == "" {
		return nil, false
	}
	scopes, need := g.connect.Need(ctx, person, server, err)
	return scopes, need && len(scopes) > 0
}

// passthroughMetadata serves the protected resource metadata of a
// single-server passthrough route: the upstream's authorization servers
// and scopes, the gateway's resource. false: the route is not one.
func (g *Gateway) passthroughMetadata(w http.ResponseWriter, r *http.Request, path string) bool {
	if oauthEnabled(g.conf()) {
		return false
	}
	rt, _, ok := g.routeFor(path, "")
	if !ok {
		return false
	}
	server, ok := g.passthroughChallenges(&rt)
	if !ok {
		return false
	}
	// The upstream's document, mirrored (connect.ServeResourceMetadata).
	g.connect.ServeResourceMetadata(w, r, server, g.linkBase(r)+resourcePath(path))
	return true
}

// refusedByUpstream is the message of a passthrough server's 401/403 on
// a route of several servers: it refused the caller's token.
func refusedByUpstream(server string, status int) string {
	return fmt.Sprintf("upstream %s refused the caller's token (HTTP %d %s)", server, status, http.StatusText(status))
}
