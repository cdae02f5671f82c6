package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
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

// Bounds of the mirrored upstream metadata.
const (
	prmCacheTTL     = 5 * time.Minute
	prmNegativeTTL  = 30 * time.Second
	prmCacheEntries = 256
)

// prmEntry is one upstream's metadata, fetched at at: md nil when it has
// none; err when the fetch failed.
type prmEntry struct {
	at  time.Time
	md  *oauth.ProtectedResourceMetadata
	err error
}

// prmCache holds upstream metadata documents by server URL.
type prmCache struct {
	mu sync.Mutex
	m  map[string]prmEntry
}

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
	if !g.st().passthrough || (!rt.prefixed && rt.single != "") {
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

// passthroughGate runs S9.2 and S10 for a request on rt: false when it
// answered.
func (g *Gateway) passthroughGate(w http.ResponseWriter, r *http.Request, rt route) (route, bool) {
	if !g.st().passthrough {
		return rt, true
	}
	rt = g.withoutTokenless(r, rt)
	server, ok := g.passthroughChallenges(&rt)
	if !ok || (r.Method != http.MethodPost && r.Method != http.MethodGet) {
		return rt, true
	}
	if headerTokens(r.Header, server)(server) == "" {
		g.writePassthroughRefusal(w, r, server, http.StatusUnauthorized, false)
		return rt, false
	}
	if g.up.PerCall(server) {
		// No pooled session to probe: every call opens its own, and its
		// refusal is answered as the call's (noteRefusal).
		return rt, true
	}
	_, release, err := g.up.Acquire(r.Context(), server)
	if err == nil {
		release()
		return rt, true
	}
	if f := upstream.Classify(err); f.Class == upstream.FaultAuth {
		g.log.Info("passthrough upstream refused the caller's token", "server", server, "status", f.Status)
		g.writePassthroughRefusal(w, r, server, f.Status, true)
		return rt, false
	}
	// Unreachable, timed out, ...: the request itself meets it (S10).
	return rt, true
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

// writePassthroughRefusal answers 401 (with the challenge; invalid: the
// token was refused) or 403 for server.
func (g *Gateway) writePassthroughRefusal(w http.ResponseWriter, r *http.Request, server string, status int, invalid bool) {
	if status == http.StatusForbidden {
		writeRPCError(w, http.StatusForbidden, jsonrpc.NewError(callers.CodeForbidden, "Forbidden"))
		return
	}
	w.Header().Set("WWW-Authenticate", g.passthroughChallenge(r, invalid))
	msg := "Unauthorized: upstream " + server + " needs the caller's own token (Authorization: Bearer, or X-Mcp-" + server + "-Authorization)"
	if invalid {
		msg = "Unauthorized: upstream " + server + " refused the caller's token"
	}
	writeRPCError(w, http.StatusUnauthorized, jsonrpc.NewError(callers.CodeUnauthorized, "%s", msg))
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
	return g.faultError(server, err)
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
	srv := g.conf().Servers[server]
	up, err := g.upstreamPRM(r.Context(), srv.URL)
	switch {
	case err != nil:
		g.log.Warn("could not fetch a passthrough upstream's protected resource metadata", "server", server, "error", err)
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": "Bad Gateway", "details": "the protected resource metadata of upstream " + server + " could not be fetched"})
		return true
	case up == nil:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found", "details": "upstream " + server + " publishes no protected resource metadata"})
		return true
	}
	md := oauth.ProtectedResourceMetadata{
		Resource:               g.linkBase(r) + resourcePath(path),
		AuthorizationServers:   up.AuthorizationServers,
		ScopesSupported:        up.ScopesSupported,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "mcpgate: " + server,
	}
	w.Header().Set("Cache-Control", "max-age=300")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	writeJSON(w, http.StatusOK, md)
	return true
}

// upstreamPRM is the upstream's own protected resource metadata, cached
// for prmCacheTTL (a failure or its absence for prmNegativeTTL).
func (g *Gateway) upstreamPRM(ctx context.Context, serverURL string) (*oauth.ProtectedResourceMetadata, error) {
	c := &g.prms
	now := g.now()
	c.mu.Lock()
	if e, ok := c.m[serverURL]; ok {
		ttl := prmCacheTTL
		if e.md == nil {
			ttl = prmNegativeTTL
		}
		if now.Sub(e.at) < ttl {
			c.mu.Unlock()
			return e.md, e.err
		}
	}
	c.mu.Unlock()
	// The upstream is the operator's: its own origin may be private. The
	// fetch is bounded (1 MiB, 10 s, same-origin redirects only) and
	// finishes for the cache even when this client goes away.
	md, err := client.FetchResourceMetadata(context.WithoutCancel(ctx), serverURL, g.httpClient, true)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= prmCacheEntries {
		c.m = map[string]prmEntry{}
	}
	c.m[serverURL] = prmEntry{at: now, md: md, err: err}
	c.mu.Unlock()
	return md, err
}

// refusedByUpstream is the message of a passthrough server's 401/403 on
// a route of several servers: it refused the caller's token.
func refusedByUpstream(server string, status int) string {
	return fmt.Sprintf("upstream %s refused the caller's token (HTTP %d %s)", server, status, http.StatusText(status))
}
