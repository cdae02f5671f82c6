// Package config owns the gateway's configuration file: its YAML shape (a
// public contract), defaults, ${VAR} expansion, path resolution and
// validation. It turns bytes into a checked *Config and nothing more: it
// does not start servers, open listeners, read flags or log, and its error
// messages never echo values that may carry secrets (header values, env
// values, URLs, arguments, the master key and caller keys).
//
// Flow (Parse):
//
//	defaults -> strict decode (unknown keys are errors, reported with their
//	path) -> ${VAR} expansion of decoded string values -> normalise
//	(trim, resolve relative paths against Dir) -> validation.
//
// A Config built in code may leave defaulted fields at their zero value;
// Validate accepts that and consumers read zero as the documented default.
// A Config returned by Parse or Load has every default filled in.
package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Defaults for fields whose zero value means "use the default".
const (
	DefaultListen       = "127.0.0.1:4000"
	DefaultSeparator    = "__"
	DefaultTimeout      = 60 * time.Second
	DefaultMaxBodyBytes = 4 << 20
	// DefaultDataDir is resolved against Config.Dir like any relative
	// data_dir: "data" next to the config file.
	DefaultDataDir             = "data"
	DefaultMaxSessionsPerOwner = 100              // SPEC S4.3
	DefaultIdleTimeout         = 30 * time.Minute // SPEC S12
)

// Transports an upstream server can be reached over.
const (
	TransportStdio = "stdio"
	TransportSSE   = "sse"  // legacy HTTP+SSE (2024-11-05)
	TransportHTTP  = "http" // streamable HTTP
)

// ProtocolVersionAuto lets the gateway negotiate the protocol revision with
// the upstream server. It is the default for Server.ProtocolVersion.
const ProtocolVersionAuto = "auto"

// protocolVersions are the values accepted for protocol_version, in the
// order they are listed in error messages.
var protocolVersions = []string{
	ProtocolVersionAuto,
	"2024-11-05",
	"2025-03-26",
	"2025-06-18",
	"2025-11-25",
	"2026-07-28",
}

// Config is the gateway configuration. The zero value of Listen,
// ToolNameSeparator, MaxBodyBytes, DataDir and the fields of Sessions and Limits means
// the matching Default constant.
type Config struct {
	// Listen is the host:port the gateway serves on. The --listen flag
	// overrides it; that is the caller's job.
	Listen string
	// AllowedOrigins are the browser origins (scheme://host[:port],
	// lower-cased, no trailing slash) allowed to call the gateway; "*"
	// allows all.
	AllowedOrigins []string
	// AllowedHosts are Host names (lower-cased, no port, IPv6 without
	// brackets) accepted in addition to loopback names when listening on
	// loopback.
	AllowedHosts []string
	// ToolNameSeparator joins server name and tool name in the catalog.
	ToolNameSeparator string
	// MaxBodyBytes caps the size of a request body.
	MaxBodyBytes int64
	// Servers are the upstream MCP servers, keyed by name.
	Servers map[string]*Server

	// DataDir is the embedded store's directory. A relative data_dir is
	// resolved against Dir, so Parse turns the default into Dir/data (or
	// "data", relative to the working directory, when Dir is "").
	DataDir string
	// MetricsListen is a separate host:port for /metrics; "" serves it on
	// Listen.
	MetricsListen string

	// Auth says who may call the gateway; nil means the file has no auth
	// block. With no auth block the gateway serves anonymous callers on
	// loopback only and logs a warning; listening beyond loopback without
	// auth refuses to start unless auth.anonymous: true is explicit (see
	// ExposedWithoutAuth).
	Auth *CallerAuth
	// AccessGroups maps a group name to the servers it grants; keys list
	// groups in KeyConfig.AccessGroups.
	AccessGroups map[string][]string
	// Toolsets are named sets of (server, tools), served on
	// /toolset/<name>/mcp (SPEC S7).
	Toolsets map[string]*Toolset
	// Sessions bounds downstream sessions (SPEC S4.3, S8, S12).
	Sessions SessionLimits
	// Limits keep one caller from hurting the rest (SPEC S23).
	Limits Limits

	// Dir is the directory of the config file ("" for Parse with an empty
	// dir); relative cwd and command paths are resolved against it.
	Dir string
}

// Server is one upstream MCP server. The zero value of Timeout and
// ProtocolVersion means DefaultTimeout and ProtocolVersionAuto.
type Server struct {
	Name      string // the key in Config.Servers
	Transport string // TransportStdio, TransportSSE or TransportHTTP

	// stdio only. Command is resolved against Config.Dir when it is a
	// relative path with a separator (./bin/notes); a bare name (npx) is
	// left for PATH lookup. Cwd is resolved against Config.Dir and, when
	// the file leaves it empty, Parse sets it to Config.Dir.
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string

	// sse and http only.
	URL     string
	Headers map[string]string

	// Timeout is the per-request read timeout, for every transport.
	Timeout time.Duration
	// ProtocolVersion is ProtocolVersionAuto or a protocol revision.
	ProtocolVersion string

	// Auth is how the gateway authenticates to the server (sse and http
	// only); nil means none.
	Auth *Auth
	// TLS configures https connections to the server; nil means the
	// defaults (verify against the system roots).
	TLS *TLS
	// SessionMode is SessionShared (the default: one upstream session per
	// credential, reused by every downstream call) or SessionPerCall (a
	// new upstream session for each operation, ended with DELETE when it
	// returns).
	SessionMode string

	// Tools is the server's tool policy (SPEC S6.2, S6.3); nil means every
	// tool is visible under its own name.
	Tools *ToolPolicy
}

// Session modes of a server.
const (
	SessionShared  = "shared"
	SessionPerCall = "per_call"
)

// Auth types (SPEC C3).
const (
	AuthNone          = "none"
	AuthAPIKey        = "api_key"       // X-API-Key: value
	AuthBearer        = "bearer_token"  // Authorization: Bearer value
	AuthToken         = "token"         // Authorization: token value
	AuthBasic         = "basic"         // Authorization: Basic base64(user:pass)
	AuthAuthorization = "authorization" // Authorization: value, verbatim
	AuthOAuth2        = "oauth2"        // client credentials, minted by the gateway
	AuthPassthrough   = "passthrough"   // the caller's own upstream token
)

// AuthTypes lists the accepted auth types, in the order error messages
// name them.
var AuthTypes = []string{AuthNone, AuthAPIKey, AuthBearer, AuthToken, AuthBasic, AuthAuthorization, AuthOAuth2, AuthPassthrough}

// Auth is a server's egress credential.
type Auth struct {
	Type  string // one of AuthTypes
	Value string // the credential (static types)
	// HeaderName is the credential slot: the header that carries the
	// credential instead of Authorization / X-API-Key ("" = default).
	HeaderName string

	// oauth2 client credentials (RFC 6749 section 4.4).
	TokenURL     string
	ClientID     string
	ClientSecret string
	Scopes       []string
	Audience     string
}

// TLS is a server's TLS client configuration. Relative paths are resolved
// against Config.Dir.
type TLS struct {
	// Verify checks the server certificate (default true). false is for
	// test rigs only; the gateway logs a warning when it is set.
	Verify   *bool
	CAFile   string // PEM roots to trust instead of the system pool
	CertFile string // client certificate (PEM), with KeyFile
	KeyFile  string
}

// ToolPolicy filters and renames one server's tools for every caller,
// before per-key permissions apply. Names are the upstream's own.
type ToolPolicy struct {
	// Allow lists the visible tools; nil means all, empty means none.
	Allow []string
	// Deny hides tools, whatever Allow says.
	Deny []string
	// Overrides change how a tool is shown, keyed by its upstream name.
	// A call by the display name resolves to the upstream name.
	Overrides map[string]ToolOverride
}

// Allows reports whether the policy lets callers see the upstream tool
// name. A nil policy allows everything.
func (p *ToolPolicy) Allows(name string) bool {
	if p == nil {
		return true
	}
	return (p.Allow == nil || slices.Contains(p.Allow, name)) && !slices.Contains(p.Deny, name)
}

// ToolOverride is how one tool is shown to callers; an empty field keeps
// the upstream's value.
type ToolOverride struct {
	Name        string // display name, within the MCP tool-name rule
	Description string
}

// VerifyCerts reports whether server certificates are verified.
func (t *TLS) VerifyCerts() bool { return t == nil || t.Verify == nil || *t.Verify }

// FieldError is one problem with one field of the configuration. Parse and
// Validate return these joined with errors.Join.
type FieldError struct {
	Path string // e.g. "servers.calc.url"; "" for the document as a whole
	Line int    // line in the YAML file, or 0 when unknown
	Err  error
}

func (e *FieldError) Error() string {
	msg := "invalid"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Path != "" {
		msg = e.Path + ": " + msg
	}
	if e.Line > 0 {
		msg = fmt.Sprintf("%s (line %d)", msg, e.Line)
	}
	return msg
}

func (e *FieldError) Unwrap() error { return e.Err }

// Load reads and parses the config file at path, expanding ${VAR} from the
// process environment. Config.Dir is the absolute directory of path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	c, err := Parse(data, filepath.Dir(abs), os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", path, err)
	}
	return c, nil
}

// Parse parses a config document. dir becomes Config.Dir; lookupEnv
// resolves ${VAR} references (nil means no variable is set). The error, if
// any, joins every problem found, each a *FieldError naming its field.
func Parse(data []byte, dir string, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	c := &Config{
		Listen:            DefaultListen,
		ToolNameSeparator: DefaultSeparator,
		MaxBodyBytes:      DefaultMaxBodyBytes,
		DataDir:           DefaultDataDir,
		Sessions: SessionLimits{
			MaxPerOwner: DefaultMaxSessionsPerOwner,
			IdleTimeout: DefaultIdleTimeout,
			UnknownID:   UnknownIDReject,
		},
		Limits: DefaultLimits(),
		Dir:    dir,
	}
	if err := decode(data, c); err != nil {
		return nil, err
	}
	if err := c.expand(lookupEnv); err != nil {
		return nil, err
	}
	if err := c.normalise(); err != nil {
		return nil, err
	}
	// Defaults were set before decoding, so a zero value left now was
	// written in the file (or expanded from an empty variable): strict.
	if err := c.validate(true); err != nil {
		return nil, err
	}
	return c, nil
}

// ServerNames returns the server names in sorted order.
func (c *Config) ServerNames() []string {
	return slices.Sorted(maps.Keys(c.Servers))
}

// Validate checks c and returns every problem found, joined; each is a
// *FieldError naming its field. Zero values of defaulted fields are valid.
func (c *Config) Validate() error {
	return c.validate(false)
}

// errorList collects FieldErrors in the order they are found.
type errorList []error

func (l *errorList) add(path string, line int, format string, args ...any) {
	*l = append(*l, &FieldError{Path: path, Line: line, Err: fmt.Errorf(format, args...)})
}

func (l errorList) err() error { return errors.Join(l...) }
