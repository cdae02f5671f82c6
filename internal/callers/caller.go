package callers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/cancelctx"
)

// Caller is the authenticated identity of one request. Authenticate returns
// a fresh Caller per request; its slices and maps are shared with the
// lookup cache and must not be modified.
type Caller struct {
	Alias string // the key's alias; "" for the master key and anonymous callers
	User  string // owning user id, "" for none
	Team  string // owning team id, "" for none

	Master    bool // presented the master key
	Admin     bool // may use the admin API (always true for Master)
	Anonymous bool // presented no gateway key on a gateway that serves anonymous callers
	NoMCP     bool // may use no MCP server on any route (SPEC S5.2)

	Servers      []string            // nil = every server, empty = none
	Tools        map[string][]string // server -> allowed tools
	DenyTools    map[string][]string // server -> denied tools
	Toolsets     []string
	AccessGroups []string

	RateLimitRPM int // requests per minute, 0 = unlimited
	// BudgetAmount caps the cost of the key's tool calls per BudgetPeriod
	// (store.BudgetDay, ...); 0 = none. The gateway enforces it.
	BudgetAmount float64
	BudgetPeriod string
	ExpiresAt    time.Time // zero = never

	// KeyFromAuthorization: the gateway key came in Authorization, which
	// the gateway must therefore drop before egress. When false,
	// Authorization (if any) is the caller's upstream token.
	KeyFromAuthorization bool

	// Owner is the fingerprint sessions are bound to (SPEC S4.1); see
	// OwnerOf. It never contains a secret, token, user id or address, only
	// their sha256.
	Owner string

	// JWT callers (SPEC S5.3): who the token says the caller is. Issuer
	// is "" for key and anonymous callers.
	Issuer      string
	Subject     string
	Email       string
	Teams       []string
	Org         string
	Roles       []string
	Scopes      []string
	ClientID    string    // the OAuth client the token was issued to
	TokenExpiry time.Time // when the token expires

	keyHash string // store.HashKey of the presented key; "" when none
}

// Prefixes of Caller.Owner, in order of precedence.
const (
	OwnerOIDC      = "oidc:"
	OwnerKey       = "key:"
	OwnerUser      = "user:"
	OwnerOAuth     = "oauth:"
	OwnerIP        = "ip:"
	OwnerAnonymous = "anonymous"
)

// OwnerOf returns the owner fingerprint of a caller making request r
// (SPEC S4.1): "oidc:" and the sha256 of issuer and subject for a JWT
// caller, else "key:" and the sha256 of the key's digest when the caller
// presented a gateway key (the master key included), else "user:" and the
// sha256 of the user id, else "oauth:" and the sha256 of an Authorization
// bearer that is not the gateway key, else "ip:" and the sha256 of the
// client address, else "anonymous". Everything is hashed so that session
// records never hold a secret or an address in the clear.
//
// Authenticate sets Caller.Owner with it; callers built elsewhere (a JWT
// authenticator) can use it directly. c may be nil.
func OwnerOf(c *Caller, r *http.Request) string {
	if c != nil && c.Issuer != "" {
		// A JWT caller is its issuer and subject, not the token: a
		// refreshed token keeps the sessions (SPEC S4, issue 12).
		return OwnerOIDC + sha256Hex(c.Issuer+"\x00"+c.Subject)
	}
	if c != nil && c.keyHash != "" {
		return OwnerKey + sha256Hex(c.keyHash)
	}
	if c != nil && c.User != "" {
		return OwnerUser + sha256Hex(c.User)
	}
	if c == nil || !c.KeyFromAuthorization {
		if tok, ok := bearerToken(r.Header.Get("Authorization")); ok {
			return OwnerOAuth + sha256Hex(tok)
		}
	}
	if ip := ClientIP(r); ip != "" {
		return OwnerIP + sha256Hex(ip)
	}
	return OwnerAnonymous
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// ClientIP returns the host part of r.RemoteAddr without brackets, in
// canonical form when it is an IP address (an IPv4-mapped IPv6 address as
// IPv4, no zone), so that one client always yields one string. It never
// consults X-Forwarded-For (see the package doc). "" when RemoteAddr is
// empty.
func ClientIP(r *http.Request) string {
	if a, ok := clientAddr(r); ok {
		return a.String()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}

// clientAddr parses r.RemoteAddr (with or without a port) into the address
// CIDRs are matched against.
func clientAddr(r *http.Request) (netip.Addr, bool) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		a = ap.Addr()
	} else if p, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(r.RemoteAddr, "["), "]")); err == nil {
		a = p
	} else {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// StripCredentials removes the gateway's credentials from h, the headers of
// a request about to be forwarded upstream: X-Mcpgate-Api-Key always, and
// Authorization when it carried the gateway key (SPEC S5.4). c may be nil
// (no caller: only the gateway header is removed).
func StripCredentials(h http.Header, c *Caller) {
	h.Del(HeaderAPIKey)
	if c != nil && c.KeyFromAuthorization {
		h.Del("Authorization")
	}
}

type contextKey struct{}

// NewContext returns ctx carrying c.
func NewContext(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, contextKey{}, c)
}

// NewContextWith is NewContext(context.WithValue(ctx, key, val), c) in one
// context: one allocation for what every authenticated request carries
// (the caller and the gateway's view of it) instead of two. key must be
// comparable, as for context.WithValue.
func NewContextWith(ctx context.Context, c *Caller, key, val any) context.Context {
	return &pairCtx{Context: ctx, c: c, key: key, val: val}
}

// pairCtx is NewContextWith's context: it answers the caller's key and
// key, and asks ctx for the rest, as two context.WithValue would.
type pairCtx struct {
	context.Context
	c        *Caller
	key, val any
}

// ValueParent implements cancelctx.ValueOnly: p only adds values.
func (p *pairCtx) ValueParent() context.Context { return p.Context }

func (p *pairCtx) Value(key any) any {
	if _, ok := key.(contextKey); ok {
		return p.c
	}
	if key == p.key {
		return p.val
	}
	return p.Context.Value(key)
}

// SetInPlace gives ctx the caller c in place, and reports whether it
// could: ctx takes values in place, has room, and holds no caller in
// place yet. false: NewContext(ctx, c) instead. Only the goroutine
// serving the request may call it, before any other can see ctx.
func SetInPlace(ctx context.Context, c *Caller) bool {
	return cancelctx.SetInPlace(ctx, contextKey{}, c)
}

// FromContext returns the caller stored by NewContext, or nil.
func FromContext(ctx context.Context) *Caller {
	c, _ := ctx.Value(contextKey{}).(*Caller)
	return c
}

// PersonID is the id a caller's own upstream credentials are stored
// under in the vault (SPEC S19): "oidc:<issuer>|<subject>" for a JWT
// caller, "key:<alias>" for a virtual-key caller, and "" for callers that
// are no one person: anonymous callers and the master key (shared by its
// operators). A key caller is its alias, not the key's user attribute: the
// user is a label an administrator sets on any key, and a credential is
// the person's who stored it with that key. c may be nil.
func PersonID(c *Caller) string {
	switch {
	case c == nil || c.Anonymous || c.Master:
		return ""
	case c.Issuer != "":
		return "oidc:" + c.Issuer + "|" + c.Subject
	case c.Alias != "":
		return "key:" + c.Alias
	}
	return ""
}
