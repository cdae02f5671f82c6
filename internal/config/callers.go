package config

import (
	"net"
	"net/netip"
	"strings"
	"time"
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
	MasterKey string
	// Anonymous lets callers without a key in, and is the explicit opt-in
	// to serving anonymous callers beyond loopback.
	Anonymous bool
	// AllowedClients is the client-application allowlist (SPEC S2.3); nil
	// means no check.
	AllowedClients *ClientAllowlist
	// Keys are the keys declared in the file; the admin API can add
	// runtime keys beside them.
	Keys []KeyConfig
}

// ClientAllowlist admits a request only when the Header names one of
// Values.
type ClientAllowlist struct {
	Header string // HTTP header to read, e.g. X-Client-Name
	// Values are the allowed header values, lower-cased by Parse: compare
	// them with the lower-cased header value (case-insensitive, otherwise
	// exact).
	Values []string
}

// KeyConfig is a virtual key declared in the config file (SPEC S5.2).
type KeyConfig struct {
	Alias string // unique, [A-Za-z0-9][A-Za-z0-9_.@-]{0,127}
	Key   string // the secret itself; at least 16 characters
	User  string // owning user id, "" for none
	Team  string // owning team id, "" for none

	// Servers the key may use: nil (the key omitted) means all, a non-nil
	// empty slice means none.
	Servers []string
	// Tools is a per-server allow list of upstream tool names: a server
	// missing from the map allows all its tools, an empty list none.
	Tools map[string][]string
	// DenyTools hides upstream tools per server, whatever Tools says.
	DenyTools    map[string][]string
	Toolsets     []string // names in Config.Toolsets
	AccessGroups []string // names in Config.AccessGroups
	// AllowedCIDRs restrict client addresses; empty means any. Parse
	// leaves them in canonical form (netip.Prefix.String() of the masked
	// prefix; a bare IP becomes /32 or /128).
	AllowedCIDRs []string
	RateLimitRPM int       // requests per minute; 0 = unlimited
	Expires      time.Time // zero = never; UTC after Parse
	Admin        bool
	NoMCP        bool // may use no MCP server on any route

	// Line is the line of the key's entry in the file, for messages; 0
	// when built in code.
	Line int
}

// Toolset is a named set of (server, tools) (SPEC S7).
type Toolset struct {
	// Servers maps a server name to upstream tool names; each server
	// lists at least one tool.
	Servers map[string][]string
}

// SessionLimits bound downstream sessions. Zero values mean
// DefaultMaxSessionsPerOwner, DefaultIdleTimeout and UnknownIDReject.
type SessionLimits struct {
	// MaxPerOwner caps the stateful sessions of one owner (SPEC S4.3).
	MaxPerOwner int
	// IdleTimeout ends sessions with no request in flight for this long
	// (SPEC S12).
	IdleTimeout time.Duration
	// UnknownID is UnknownIDReject (the default: 404, the client starts
	// over) or UnknownIDServe (serve the request as a new stateless one)
	// for a session id the gateway does not know (SPEC S8.3). An id the
	// gateway remembers as ended is 404 either way (S8.2).
	UnknownID string
}

// AnonymousOnly reports whether the config declares no way to
// authenticate: no master key and no keys. Keys added at runtime through
// the admin API are not counted; the config cannot know them.
func (c *Config) AnonymousOnly() bool {
	return c.Auth == nil || (c.Auth.MasterKey == "" && len(c.Auth.Keys) == 0)
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

// loopbackListen reports whether the host of the host:port listen is a
// loopback address or localhost.
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
