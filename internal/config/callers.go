package config

import (
	"cmp"
	"errors"
	"time"

	"github.com/mcpgate/mcpgate/internal/netaddr"
)

// CallerAuth says who may call the gateway (SPEC S5). It is unrelated to
// Server.Auth, which is how the gateway authenticates to an upstream.
//
// With no auth block (Config.Auth nil), or one without a master key and
// without keys, every caller is anonymous. The gateway then serves on
// loopback only and logs a warning; listening beyond loopback without auth
// refuses to start unless auth.anonymous: true is explicit. See
// Config.AnonymousOnly and Config.ExposedWithoutAuth.
type CallerAuth struct {
	// MasterKey administers everything; "" means none. At least 16
	// characters when set.
	MasterKey string `config:"master_key,expand,trim,secret" doc:"The key that administers everything; at least 16 characters. Compared in constant time, never logged."`
	// Anonymous lets callers without a key in, and is the explicit opt-in
	// to serving anonymous callers beyond loopback.
	Anonymous bool `config:"anonymous" doc:"Let callers without a key in; the explicit opt-in to serving anonymous callers beyond loopback."`
	// AllowedClients is the client-application allowlist (SPEC S2.3); nil
	// means no check.
	AllowedClients *ClientAllowlist `config:"allowed_clients" doc:"Admit only client applications that name themselves in a header, or (JWT callers) whose token was issued to a listed OAuth client (SPEC S2.3); absent means no check."`
	// Keys are the keys declared in the file; the admin API can add
	// runtime keys beside them.
	Keys []KeyConfig `config:"keys" doc:"Virtual keys declared in the file (SPEC S5.2); the admin API adds runtime keys beside them."`
	// OIDC are the issuers whose JWTs are callers (SPEC S5.3).
	OIDC []OIDCIssuer `config:"oidc" doc:"Issuers whose JWT bearer tokens are accepted as callers (SPEC S5.3), beside virtual keys."`
	// Login enables the built-in authorization server; nil means none.
	Login *Login `config:"login" doc:"mcpgate's own OAuth 2.1 authorization server, for MCP clients that sign in with a browser: it federates the login to the company IdP (or takes a virtual key) and issues short-lived JWTs."`
	// Grants say what JWT callers may use, by user, team or role.
	Grants []Grant `config:"grants" doc:"What JWT callers may use, by user, team or role; a caller gets the union of the grants it matches, and nothing without one."`
}

// ClientAllowlist admits a request only when the Header names one of
// Values.
type ClientAllowlist struct {
	Header string `config:"header,trim" doc:"The HTTP header to read, e.g. X-Client-Name; required unless client_ids is set."`
	// Values are the allowed header values, lower-cased by Parse: compare
	// them with the lower-cased header value (case-insensitive, otherwise
	// exact).
	Values []string `config:"values,expand,trim,lower" doc:"The allowed header values, compared case-insensitively; at least one with header."`
	// ClientIDs admit JWT callers by the OAuth client their token was
	// issued to (azp, else client_id; SPEC S2.3 "by JWT claim").
	ClientIDs []string `config:"client_ids,expand,trim" doc:"For JWT callers: the OAuth clients (the token's azp, else client_id) that are admitted; a JWT caller of another client gets 403. Callers with a key are judged by header only."`
}

// KeyConfig is a virtual key declared in the config file (SPEC S5.2).
type KeyConfig struct {
	Alias string `config:"alias,required,expand,trim" doc:"The key's name in logs, audit and the admin API: unique, [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}."`
	Key   string `config:"key,required,expand,trim,secret" doc:"The secret itself, at least 16 characters; stored and compared as a sha256 hash only."`
	User  string `config:"user,expand,trim" doc:"The user who owns the key (at most 256 bytes)."`
	Team  string `config:"team,expand,trim" doc:"The team that owns the key (at most 256 bytes)."`

	// Servers the key may use: nil (the key omitted) means all, a non-nil
	// empty slice means none.
	Servers []string `config:"servers,ornone" doc:"The servers the key may use: absent means all, [] means none."`
	// Tools is a per-server allow list of upstream tool names: a server
	// missing from the map allows all its tools, an empty list none.
	Tools map[string][]string `config:"tools" doc:"Per-server allow list of upstream tool names: a server not listed allows all its tools, [] none."`
	// DenyTools hides upstream tools per server, whatever Tools says.
	DenyTools    map[string][]string `config:"deny_tools" doc:"Per-server upstream tool names hidden whatever tools says."`
	Toolsets     []string            `config:"toolsets" doc:"Toolsets (names in toolsets) the key may use on their routes."`
	AccessGroups []string            `config:"access_groups" doc:"Access groups (names in access_groups) whose servers the key may use."`
	// AllowedCIDRs restrict client addresses; empty means any. Parse
	// leaves them in canonical form (netip.Prefix.String() of the masked
	// prefix; a bare IP becomes /32 or /128).
	AllowedCIDRs []string `config:"allowed_cidrs" doc:"Client addresses the key works from (CIDRs, or bare IPs); empty means any."`
	RateLimitRPM int      `config:"rate_limit_rpm,min=0" doc:"Requests per minute: each JSON-RPC request counts (every request of a batch, every request of a stdio front, every call made as the key through the admin API); above it 429 with Retry-After, or the same error (-32029) for a request of a batch. 0 means unlimited."`
	// Budget caps the cost of the key's tool calls per period; nil: none.
	Budget  *Budget   `config:"budget" doc:"The most the key's tool calls may cost per period (the costs of servers.<name>.tools.costs); every tools/call reserves its cost before it runs, on every transport and each call of a batch; past it a call is refused (-32029; HTTP 429 with Retry-After for a request alone) until the next period. With state.driver redis the replicas share one sum, and a budgeted key's calls are refused (503) while Redis does not answer. Absent: no budget."`
	Expires time.Time `config:"expires" doc:"When the key stops working; absent means never."`
	Admin   bool      `config:"admin" doc:"The key may use the admin API."`
	NoMCP   bool      `config:"no_mcp" doc:"The key may use no MCP server on any route (an admin-only key)."`

	// Line is the line of the key's entry in the file, for messages; 0
	// when built in code.
	Line int `config:",line"`
}

// Toolset is a named set of (server, tools) (SPEC S7).
type Toolset struct {
	// Servers maps a server name to upstream tool names; each server
	// lists at least one tool.
	Servers map[string][]string `config:"servers,nonempty=server" doc:"Server name to the upstream tool names of the toolset; each server lists at least one tool."`
}

// SessionLimits bound downstream sessions. Zero values mean
// DefaultMaxSessionsPerOwner, DefaultIdleTimeout and UnknownIDReject.
type SessionLimits struct {
	// MaxPerOwner caps the stateful sessions of one owner (SPEC S4.3).
	MaxPerOwner int `config:"max_per_owner,default=100,min=1" doc:"Stateful sessions one owner may hold (SPEC S4.3); the owner's own oldest idle session makes room for a new one."`
	// IdleTimeout ends sessions with no request in flight for this long
	// (SPEC S12).
	IdleTimeout time.Duration `config:"idle_timeout,default=30m,positive" doc:"A session with no request in flight for this long ends (SPEC S12); an ended id is remembered as long."`
	// UnknownID is UnknownIDReject or UnknownIDServe (SPEC S8.3).
	UnknownID string `config:"unknown_id,default=reject,enum=reject|serve,trim,lower" doc:"A session id the gateway never issued: reject answers 404 so the client re-initializes (the MCP transport's rule); serve serves the request as a new sessionless one (the reference gateway's lenient behaviour). An ended id is 404 either way."`
}

// AnonymousOnly reports whether the config declares no way to
// authenticate: no master key, no keys, no issuer and no login. Keys added at runtime through
// the admin API are not counted; the config cannot know them.
func (c *Config) AnonymousOnly() bool {
	return c.Auth == nil || (c.Auth.MasterKey == "" && len(c.Auth.Keys) == 0 && len(c.Auth.OIDC) == 0 && c.Auth.Login == nil)
}

// ExposedWithoutAuth reports whether serving on listen (host:port) must be
// refused: the config is AnonymousOnly, auth.anonymous is not true, and
// listen is not a loopback address (127.0.0.0/8, ::1 or localhost). An
// empty host (":4000") listens on every interface and so is exposed, and
// so is a listen address that does not parse.
//
// The rule: with no auth block the gateway serves anonymous callers on
// loopback only and logs a warning; listening beyond loopback without auth
// refuses to start unless auth.anonymous: true is explicit. listen is a
// parameter because the --listen flag may override Config.Listen.
func (c *Config) ExposedWithoutAuth(listen string) bool {
	if !c.AnonymousOnly() || (c.Auth != nil && c.Auth.Anonymous) {
		return false
	}
	return !loopbackListen(listen)
}

// loopbackListen reports whether the host of the host:port listen names
// loopback by itself (netaddr.ListenIsLoopback): a name that only
// resolves to loopback counts as exposed here, and serve judges the
// address it bound as well.
func loopbackListen(listen string) bool { return netaddr.ListenIsLoopback(listen) }

// OAuthCallers reports whether callers may present OAuth tokens: an issuer
// (auth.oidc) or mcpgate's own authorization server (auth.login).
func (c *Config) OAuthCallers() bool {
	return c.Auth != nil && (len(c.Auth.OIDC) > 0 || c.Auth.Login != nil)
}

// CheckPublicURL applies SPEC S22.4 for a listener that binds loopback
// only (loopback) or not: with OAuth callers, every route's resource (the
// audience a token must carry), its metadata and the issuer come from
// public_url, never from a request's Host header, so public_url is
// required beyond loopback, and in a fleet, whose replicas must all name
// the same resource. On loopback without it the gateway names its own
// listener. Validate calls it with the listen address's text; serve again
// with the address it bound (and the --listen flag's).
func (c *Config) CheckPublicURL(loopback bool) error {
	if !c.OAuthCallers() || c.PublicURL != "" {
		return nil
	}
	if !loopback {
		return errors.New("required with auth.oidc or auth.login when listen (" + cmp.Or(c.Listen, DefaultListen) +
			") is not a loopback address (127.0.0.1, [::1] or localhost): the resource a token must be issued for is built from it, never from a request's Host header")
	}
	if c.Fleet != nil && len(c.Fleet.SessionKeys) > 0 {
		return errors.New("required with auth.oidc or auth.login in a fleet (fleet.session_keys): every replica must name the same resource")
	}
	return nil
}

// Budget is a cost cap per period (UTC days, weeks from Monday, months).
type Budget struct {
	Amount float64 `config:"amount,min=0" doc:"The most the calls may cost in one period, in the units of the costs."`
	Period string  `config:"period,enum=day|week|month,trim,lower" doc:"day, week (from Monday) or month, in UTC. Default: month."`
}

// PeriodOrDefault is the budget's period, month when unset.
func (b *Budget) PeriodOrDefault() string {
	if b == nil || b.Period == "" {
		return "month"
	}
	return b.Period
}
