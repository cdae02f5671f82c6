package gateway

import (
	"context"
	"net/http"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/cancelctx"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/policy"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// Authenticator identifies the caller of a request (S5); *callers.Authenticator
// implements it.
type Authenticator interface {
	Authenticate(r *http.Request) (*callers.Caller, *callers.Failure)
}

// anonymousRequester is an optional capability of an Authenticator
// (*callers.Authenticator has it): whether Authenticate would serve a
// request as the anonymous caller on the request alone, so that
// authenticate can give it the caller remembered for its address instead
// (anonymousCaller).
type anonymousRequester interface {
	AnonymousRequest(r *http.Request) bool
}

// servesAnonymously reports whether g.auth would take r as the anonymous
// caller without looking up anything.
func (g *Gateway) servesAnonymously(r *http.Request) bool {
	a, ok := g.auth.(anonymousRequester)
	return ok && a.AnonymousRequest(r)
}

// internalHeaders are headers only the gateway may set: a client's copy is
// dropped (S2.4), so that scope comes from the route alone.
var internalHeaders = []string{"X-Mcp-Toolset-Id", "X-Mcpgate-Caller", "X-Mcpgate-Owner"}

// authenticate runs the caller gates of S2.3 and S2.4: the caller's key,
// the client-application allowlist, and the stripping of internal and
// gateway-credential headers. The request that comes back carries the
// caller and its identity; a refusal is returned for writeError.
func (g *Gateway) authenticate(r *http.Request) (*http.Request, error) {
	var c *callers.Caller
	clientIP := ""       // callers.ClientIP(r), when already known
	var anonID *Identity // the anonymous caller's identity, when shared
	if tokenInQuery(r) && oauthEnabled(g.conf()) {
		f := callers.InvalidRequest("access tokens are not accepted in the query string; send Authorization: Bearer")
		g.challenge(f, r)
		return r, failureRefusal(f)
	}
	if g.auth != nil && !g.servesAnonymously(r) {
		var f *callers.Failure
		// The route's resource is what a bearer token must name; only
		// a token's check asks for it.
		req := r
		resource := func() string { return g.resourceOf(req) }
		if !callers.SetResourceFuncInPlace(r.Context(), resource) {
			r = r.WithContext(callers.WithResourceFunc(r.Context(), resource))
		}
		if c, f = g.auth.Authenticate(r); f != nil {
			noteRefusal(r.Context(), f.Reason)
			g.challenge(f, r)
			return r, failureRefusal(f)
		}
	} else {
		c, anonID = anonymousCaller(r)
		clientIP = anonID.ClientIP
	}
	if a := g.conf().Auth; a != nil && a.AllowedClients != nil {
		l := a.AllowedClients
		f := callers.CheckClient(r, l.Header, l.Values)
		if f == nil && c.Issuer != "" && len(l.ClientIDs) > 0 && !slices.Contains(l.ClientIDs, c.ClientID) {
			// S2.3 by JWT claim: the OAuth client the token was issued to.
			f = callers.ClientNotAllowed()
		}
		if f != nil {
			noteRefusal(r.Context(), f.Reason)
			return r, failureRefusal(f)
		}
	}
	for _, h := range internalHeaders {
		r.Header.Del(h)
	}
	// The gateway key never travels upstream (S5.4); a token to exchange
	// (exchange.go) is kept before it goes.
	subject := g.subjectToken(r, c)
	ctx := g.keepCredentials(r.Context(), r.Header) // for a forwarded retry (peers.go)
	callers.StripCredentials(r.Header, c)
	// An identity set by an embedding layer (in code, never by a client)
	// stands; otherwise the caller's is used.
	var id *Identity
	if IdentityFrom(ctx) == nil {
		id = anonID
		if id == nil {
			if clientIP == "" {
				clientIP = callers.ClientIP(r)
			}
			id = &Identity{Owner: c.Owner, Alias: c.Alias, User: c.User, Team: c.Team, ClientIP: clientIP, Admin: c.Admin || c.Master,
				Issuer: c.Issuer, Subject: c.Subject}
			if id.Owner == "" {
				id.Owner = callers.OwnerOf(c, r)
			}
		}
	}
	noteCaller(ctx, c.Alias, c.User)
	tracing.NoteCaller(ctx, c.Alias, c.User)
	ctx = withCaller(ctx, c, id)
	ctx = withSubjectToken(ctx, subject)
	if c.RateLimitRPM > 0 {
		// Authenticate took one request of the limit: the first JSON-RPC
		// request this HTTP request carries is paid for (limits.go).
		ctx = withCallTicket(ctx)
	}
	if ctx == r.Context() {
		return r, nil // everything went in place
	}
	return r.WithContext(ctx), nil
}

// withCaller is ctx carrying the caller c and, when not nil, its identity
// id: in place when ctx is the listener's request context with room for
// them (cancelctx.SetInPlace), which spares the request a copy; otherwise in one
// context over ctx (WithIdentity and callers.NewContext together). A
// caller already in place is never replaced: a second authentication of
// the request wraps ctx, and the nearer caller wins, as with WithValue.
func withCaller(ctx context.Context, c *callers.Caller, id *Identity) context.Context {
	if !callers.SetInPlace(ctx, c) {
		if id != nil {
			return callers.NewContextWith(ctx, c, identityKey{}, id)
		}
		return callers.NewContext(ctx, c)
	}
	if id != nil && !cancelctx.SetInPlace(ctx, identityKey{}, id) {
		return context.WithValue(ctx, identityKey{}, id)
	}
	return ctx
}

// anonymousCaller is the caller of a gateway without authentication (or
// of a request its Authenticator would serve anonymously, on the request
// alone: callers.Authenticator.AnonymousRequest), and the identity
// authenticate gives it: {Anonymous: true} with the owner
// callers.OwnerOf gives it, and its callers.ClientIP. Without an
// Authorization header both follow from the client's address alone, and
// are remembered for it: hashing the address into an owner on every
// request of every client costs four allocations, and the two structs two
// more. The remembered ones are shared by every request from the address,
// and so are never written to once published (nothing on the call path
// writes to a request's Caller or Identity). Addresses share a few slots
// (direct-mapped, last one wins), so the memory stays bounded whatever
// the clients. A request with an Authorization header (the caller's
// upstream token, whose hash is its owner) gets structs of its own.
func anonymousCaller(r *http.Request) (*callers.Caller, *Identity) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || r.Header.Get("Authorization") != "" {
		c := &callers.Caller{Anonymous: true}
		c.Owner = callers.OwnerOf(c, r)
		return c, &Identity{Owner: c.Owner, ClientIP: callers.ClientIP(r)}
	}
	addr := ap.Addr()
	b := addr.As16()
	slot := &anonymousCallers[(uint(b[15])^uint(b[14])<<1^uint(b[13])<<2)%uint(len(anonymousCallers))]
	if a := slot.Load(); a != nil && a.addr == addr {
		return &a.caller, &a.id
	}
	a := &sharedAnonymous{addr: addr, caller: callers.Caller{Anonymous: true}}
	a.caller.Owner = callers.OwnerOf(&a.caller, r)
	a.id = Identity{Owner: a.caller.Owner, ClientIP: callers.ClientIP(r)}
	slot.Store(a)
	return &a.caller, &a.id
}

var anonymousCallers [64]atomic.Pointer[sharedAnonymous]

// sharedAnonymous is one address's remembered anonymous caller: read-only.
type sharedAnonymous struct {
	addr   netip.Addr
	caller callers.Caller
	id     Identity
}

// callerChecker re-checks a caller's key; *callers.Authenticator
// implements it.
type callerChecker interface {
	StillValid(ctx context.Context, c *callers.Caller) bool
}

// streamRecheck is how often a long-lived stream (a session's GET stream,
// a subscriptions/listen stream) re-checks the key it was opened with
// (Gateway.recheck, which tests shorten).
const streamRecheck = 15 * time.Second

// watchCaller calls end, once, when the key the request at ctx was
// accepted with is revoked, disabled or expires; it stops with done.
// Every other request is checked when it arrives; a stream lives on, and
// must not keep telling a revoked caller about changes.
func (g *Gateway) watchCaller(ctx context.Context, done <-chan struct{}, end func()) {
	check, ok := g.auth.(callerChecker)
	c := callers.FromContext(ctx)
	if !ok || c == nil || c.Master || c.Anonymous {
		return
	}
	// Checked once at once by the gateway's re-checker, then with every
	// other stream (recheck.go).
	w := &streamWatch{ctx: context.WithoutCancel(ctx), caller: c, check: check, done: done, end: end}
	g.watchers.add(w, g.tasks.start, g.recheckLoop)
}

// policyCaller is the policy's view of a caller.
func policyCaller(c *callers.Caller) *policy.Caller {
	if c == nil {
		return &policy.Caller{Anonymous: true}
	}
	return &policy.Caller{Alias: c.Alias, Master: c.Master, Admin: c.Admin, Anonymous: c.Anonymous, NoMCP: c.NoMCP,
		Servers: c.Servers, Tools: c.Tools, DenyTools: c.DenyTools, Toolsets: c.Toolsets, AccessGroups: c.AccessGroups}
}

// plainAnonymous reports whether c is the caller of a gateway without
// authentication: anonymous and granted nothing of its own, so its
// policy.Caller is {Anonymous: true} (policyCaller).
func plainAnonymous(c *callers.Caller) bool {
	return c != nil && c.Anonymous && c.Alias == "" && !c.Master && !c.Admin && !c.NoMCP &&
		c.Servers == nil && c.Tools == nil && c.DenyTools == nil && c.Toolsets == nil && c.AccessGroups == nil
}

// narrowFor applies the request's caller to rt, or returns its refusal.
func (g *Gateway) narrowFor(r *http.Request, rt route) (route, error) {
	var denied *policy.Denied
	if c := callers.FromContext(r.Context()); plainAnonymous(c) {
		rt, denied = g.narrowAnonymous(rt)
	} else {
		rt, denied = g.narrow(rt, policyCaller(c))
	}
	if denied != nil {
		return rt, rpcRefusal(denied.Status, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "%s", denied.Message))
	}
	return rt, nil
}

// RulesOf compiles the policy inputs of a config: per-server tool lists,
// toolsets and access groups.
func RulesOf(cfg *config.Config) policy.Rules {
	r := policy.Rules{
		Servers:      cfg.ServerNames(),
		ServerTools:  map[string]policy.ServerTools{},
		Toolsets:     map[string]map[string][]string{},
		AccessGroups: map[string][]string{},
	}
	for name, srv := range cfg.Servers {
		if srv.Tools != nil {
			r.ServerTools[name] = policy.ServerTools{Allow: srv.Tools.Allow, Deny: srv.Tools.Deny}
		}
	}
	for name, ts := range cfg.Toolsets {
		if ts != nil {
			r.Toolsets[name] = ts.Servers
		}
	}
	for name, servers := range cfg.AccessGroups {
		r.AccessGroups[name] = slices.Clone(servers)
	}
	return r
}
