// Package config owns the gateway's configuration file: its YAML shape (a
// public contract), defaults, ${VAR} expansion, path resolution and
// validation. It turns bytes into a checked *Config and nothing more: it
// does not start servers, open listeners, read flags or log, and its error
// messages never echo values that may carry secrets (header values, env
// values, URLs, arguments, the master key and caller keys).
//
// Flow (Parse):
//
//	defaults (from the types' tags) -> strict decode (unknown keys are
//	errors, reported with their path; ${VAR} expanded in decoded string
//	values) -> normalise (trim, resolve relative paths against Dir) ->
//	validation (the tags' rules, then those no tag expresses).
//
// The same struct tags give JSONSchema (for editors) and Reference
// (docs/config.md), so the three cannot drift apart (schema.go).
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
	"reflect"
	"slices"
	"strings"
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
	// TransportOpenAPI: an HTTP API described by an OpenAPI 3 document,
	// each operation a tool (SPEC C12).
	TransportOpenAPI = "openapi"
)

// ProtocolVersionAuto lets the gateway negotiate the protocol revision with
// the upstream server. It is the default for Server.ProtocolVersion.
const ProtocolVersionAuto = "auto"

// Config is the gateway configuration. The zero value of Listen,
// ToolNameSeparator, MaxBodyBytes, DataDir and the fields of Sessions and
// Limits means the matching Default constant. The tags are the file's
// schema (schema.go); their doc texts are the reference, docs/config.md.
type Config struct {
	// Listen: the --listen flag overrides it; that is the caller's job.
	Listen string `config:"listen,default=127.0.0.1:4000,expand,trim" doc:"The host:port the gateway serves on (the --listen flag overrides it). Listening beyond loopback needs an auth block, or auth.anonymous: true."`
	// AllowedOrigins are lower-cased, without a trailing slash, by Parse.
	AllowedOrigins []string `config:"allowed_origins,expand" doc:"Browser origins (scheme://host[:port]) allowed to call the gateway; \"*\" allows all. A request with another Origin gets 403."`
	// AllowedHosts are lower-cased, without port, IPv6 without brackets.
	AllowedHosts      []string `config:"allowed_hosts,expand" doc:"Host names accepted beside the loopback names when the listener bound a loopback address, however listen spells it (the DNS-rebinding guard; any other Host gets 403). Without public_url, such a name with the listener's own port is a base URL the gateway may name itself by."`
	ToolNameSeparator string   `config:"tool_name_separator,default=__" doc:"Joins server and tool names in the merged catalog (calc__add); one or more of [A-Za-z0-9_.-]."`
	MaxBodyBytes      int64    `config:"max_body_bytes,default=4MiB,size,positive" doc:"Request body limit: a larger body gets 413 with JSON-RPC -32600 \"Request body exceeds N bytes\"."`
	// Servers are the upstream MCP servers, keyed by name.
	Servers map[string]*Server `config:"servers" keys:"^[a-z0-9][a-z0-9_-]*$" doc:"The upstream MCP servers, keyed by name: [a-z0-9][a-z0-9_-]*, not containing the tool name separator nor beginning or ending with one of its characters (with __, a_ is refused: its tool x and server a's tool _x would both be a___x)."`

	// DataDir: Parse resolves it against Dir, so the default becomes
	// Dir/data (or "data", relative to the working directory, when Dir is
	// "").
	DataDir string `config:"data_dir,default=data,expand,trim,path" doc:"Directory of the gateway's files, created on first start: the embedded SQLite store (keys, runtime objects, audit) unless store.driver is postgres, and the OAuth seal key."`
	// Store: the zero value means SQLite in DataDir.
	Store Store `config:"store" doc:"Where keys, runtime objects, terminated sessions and the audit logs are kept: the embedded SQLite store in data_dir (the default), or PostgreSQL for a fleet of replicas (SPEC S15)."`
	Audit Audit `config:"audit" doc:"How tool-call audit records reach the store."`
	// AccessLog: the zero value logs every request to the main log.
	AccessLog AccessLog `config:"access_log" doc:"The access log: one line per HTTP request."`
	// ShutdownDelay: the lame-duck period before the listener closes.
	ShutdownDelay time.Duration `config:"shutdown_delay,min=0" doc:"On SIGTERM, how long the gateway keeps serving with /readyz answering 503 before it stops accepting requests: the time a load balancer needs to take the replica out of rotation (its health-check interval, a Kubernetes readiness probe's period). Then in-flight calls drain (10 s). 0 (the default): stop accepting at once."`
	MetricsListen string        `config:"metrics_listen,expand,trim" doc:"A separate host:port for /metrics; empty serves it on listen."`
	// PublicURL is how clients reach the gateway ("" = on loopback, the
	// listener's own address; see Config.CheckPublicURL).
	PublicURL string `config:"public_url,expand,trim" doc:"The gateway's external base URL (https://mcp.example.com, or with a path prefix). OAuth resource identifiers (the audience a token must carry), metadata URLs, the authorization server's issuer and the login redirect are built from it, never from a request's Host or X-Forwarded-* headers. Required with auth.oidc or auth.login when listen is not a loopback address, and in a fleet. Empty: on loopback, the listener's own (the Host name the DNS-rebinding guard allowed, with the port bound); beyond loopback, links shown to a requester use its Host, and no token is accepted against it."`
	// ClientMetadataURL is where mcpgate's client ID metadata document
	// is published ("" = the default under an https public_url); see
	// Config.ClientMetadataDocument.
	ClientMetadataURL string `config:"client_metadata_url,expand,trim" doc:"The URL of the gateway's OAuth client ID metadata document (draft-ietf-oauth-client-id-metadata-document), which the gateway serves and uses as its client_id for oauth2_user servers without a client_id whose authorization server supports such documents (else it registers dynamically). It must be under public_url, which must be https, and end in .json; the gateway serves it at its path below public_url. Empty: <public_url>/oauth/client-metadata.json when public_url is https, else no document."`

	// Auth says who may call the gateway; nil means the file has no auth
	// block. With no auth block the gateway serves anonymous callers on
	// loopback only and logs a warning; listening beyond loopback without
	// auth refuses to start unless auth.anonymous: true is explicit (see
	// ExposedWithoutAuth).
	Auth *CallerAuth `config:"auth" doc:"Who may call the gateway (SPEC S5). Without it anonymous callers are served, on loopback only."`
	// AccessGroups maps a group name to the servers it grants; keys list
	// groups in KeyConfig.AccessGroups.
	AccessGroups map[string][]string `config:"access_groups" keys:"^[^\\x00-\\x1f\\x7f]+$" doc:"Named sets of servers, granted to keys by name (auth.keys[].access_groups)."`
	// Toolsets are named sets of (server, tools) (SPEC S7).
	Toolsets map[string]*Toolset `config:"toolsets" keys:"^[a-z0-9][a-z0-9_-]*$" doc:"Named sets of (server, tools), each served on its own route /toolset/<name>/mcp (SPEC S7); names are [a-z0-9][a-z0-9_-]*."`
	// Sessions bounds downstream sessions (SPEC S4.3, S8, S12).
	Sessions SessionLimits `config:"sessions" doc:"Bounds on downstream sessions (SPEC S4.3, S8, S12)."`
	// Limits keep one caller from hurting the rest (SPEC S23).
	Limits Limits `config:"limits" doc:"Limits that keep one caller from hurting the rest (SPEC S23); each has a default and an error that names it."`
	// Vault holds the keys of the per-person credential vault (SPEC S19);
	// nil means the file has no vault block.
	Vault *Vault `config:"vault" doc:"The per-person upstream credential vault (SPEC S19): the keys its entries are encrypted under at rest."`
	// Fleet makes the replicas of a fleet one gateway to their clients
	// (SPEC S15); nil means the file has no fleet block.
	Fleet *Fleet `config:"fleet" doc:"Replicas serving one fleet (SPEC S15): the keys that seal session ids, so any replica continues a session another started."`
	// State is where the replicas' shared state lives (SPEC S15).
	State State `config:"state" doc:"The backend of the state replicas share (SPEC S15): memory (the default, one process) or redis (a fleet)."`
	// Routes: per-route tool listing and guardrails, by route path.
	Routes map[string]*RouteConfig `config:"routes" keys:"^/" entry:"route" doc:"What a route path does beyond its servers, keyed by the path (/mcp, /mcp/<server>, /toolset/<name>/mcp, ...): how it lists tools (SPEC S20) and the guardrails of its calls (S21)."`
	// Telemetry: traces and the debug header (SPEC S16.2, S16.4).
	Telemetry Telemetry `config:"telemetry" doc:"Traces and per-call diagnostics (SPEC S16.2, S16.4)."`
	// Reload: how a changed config file is applied while serving.
	Reload Reload `config:"reload" doc:"Applying a changed config file without a restart: SIGHUP, POST /admin/v1/reload, or (opt-in) watching the file."`
	// Integrity: tool integrity's defaults and scanner rules (issue 27).
	Integrity *Integrity `config:"integrity" doc:"Tool integrity (docs/security.md \"Tool integrity\"): every server's default mode (pin, warn, off) and first-sight approval (auto, manual), and scanner rules of your own. A server's own integrity block overrides mode and approve."`
	// RuntimeServers: what servers added through the admin API may reach.
	RuntimeServers RuntimeServers `config:"runtime_servers" doc:"What servers added through the admin API (runtime servers) may reach. The servers of this file are the operator's and are not restricted."`

	// Dir is the directory of the config file ("" for Parse with an empty
	// dir); relative cwd and command paths are resolved against it.
	Dir string
}

// Server is one upstream MCP server. The zero value of Timeout and
// ProtocolVersion means DefaultTimeout and ProtocolVersionAuto.
type Server struct {
	Name      string `config:",mapkey"` // the key in Config.Servers
	Transport string `config:"transport,required,enum=stdio|sse|http|openapi,disc=transport" doc:"How the server is reached: stdio (a child process the gateway starts and supervises), sse (legacy HTTP+SSE, 2024-11-05), http (streamable HTTP) or openapi (an HTTP API described by an OpenAPI 3.0 or 3.1 document: each operation is a tool, each call an HTTP request)."`

	// stdio only. Parse sets an empty Cwd to Config.Dir.
	Command string            `config:"command,required,when=stdio,expand,command" doc:"The program to run, never through a shell. A relative path with a separator (./bin/notes) is resolved against the config file's directory; a bare name (npx) is looked up in PATH."`
	Args    []string          `config:"args,when=stdio,expand" doc:"Arguments, passed as they are (no shell, no word splitting)."`
	Env     map[string]string `config:"env,when=stdio,expand,secret" doc:"Variables added to the process's environment; stdio servers take their credentials here."`
	Cwd     string            `config:"cwd,when=stdio,expand,path" doc:"Working directory; empty means the config file's directory."`

	// sse and http only.
	URL     string            `config:"url,required,when=sse|http,expand,secret" doc:"The endpoint, http or https. It may carry credentials, so no message echoes it."`
	Headers map[string]string `config:"headers,when=sse|http|openapi,expand,secret" doc:"Static headers sent with every request (names and values trimmed). Headers the gateway sets itself (Mcp-Session-Id, Content-Type, Host, ...) are refused."`

	// openapi only.
	Spec       string             `config:"spec,required,when=openapi,expand,trim" doc:"The OpenAPI 3.0 or 3.1 document (JSON or YAML): a file, relative to the config file's directory, or an http(s) URL fetched when the server is connected (public addresses only, no redirects to another origin, at most 16MiB, within timeout). External $refs are not followed."`
	BaseURL    string             `config:"base_url,when=openapi,expand,trim,secret" doc:"Where the API's requests go, http or https; operation paths are appended to it. Absent: the document's first servers entry. A document fetched by URL may only name its own origin (a relative servers URL is resolved against it; another origin is refused, and its requests are dialled as the document was, public addresses only unless the spec URL names a loopback host), whatever a later fetch says; a document file must name an absolute URL, and keeps the origin it named when first read until a restart."`
	Operations *OpenAPIOperations `config:"operations,when=openapi" doc:"Which of the document's operations become tools. Absent: all of them."`

	Timeout         time.Duration `config:"timeout,default=60s,positive" doc:"Per-request read timeout, for every transport."`
	ProtocolVersion string        `config:"protocol_version,default=auto,enum=auto|2024-11-05|2025-03-26|2025-06-18|2025-11-25|2026-07-28" doc:"The MCP revision spoken to the server; auto negotiates it."`

	// Auth is how the gateway authenticates to the server (sse and http
	// only); nil means none.
	Auth *Auth `config:"auth" doc:"How the gateway authenticates to the server (sse, http and openapi; a stdio server takes credentials in env). Absent means none."`
	// TLS configures https connections to the server; nil means the
	// defaults (verify against the system roots).
	TLS *TLS `config:"tls,when=sse|http|openapi" doc:"TLS client settings for an https server. Without it the system roots are used (SSL_CERT_FILE and SSL_CERT_DIR work as for any Go program)."`
	// SessionMode is SessionShared (the default) or SessionPerCall.
	SessionMode string `config:"session_mode,default=shared,enum=shared|per_call" doc:"shared: one upstream session per credential, reused by every downstream call. per_call: a new upstream session for each operation, ended with DELETE when it returns."`

	// Tools is the server's tool policy (SPEC S6.2, S6.3); nil means every
	// tool is visible under its own name.
	// Audit is the server's audit settings; nil means the defaults (no
	// arguments exported).
	Audit *ServerAudit `config:"audit" doc:"What the audit exporters see of this server's calls. Absent: no arguments."`

	// Guardrails: checks before and after this server's tool calls.
	// Provenance says where the server came from (mcpgate import writes
	// it); tool integrity keeps it with the server's pins.
	Provenance *Provenance `config:"provenance" doc:"Where this server came from: mcpgate import writes the client file it was imported from and the package it runs. Kept with the server's tool integrity pins and shown in their review; it changes nothing else."`

	Guardrails *Guardrails `config:"guardrails" doc:"Guardrails of this server's tool calls (SPEC S21): pre checks before the call goes upstream, post checks on the result."`

	// Integrity overrides the top-level mode and approve for this server.
	Integrity *Integrity `config:"integrity" doc:"This server's tool integrity: mode (pin, warn, off) and approve (auto, manual) override the top-level integrity block's."`

	// Tasks is how the server's tools run as MCP tasks; nil means the
	// defaults (TasksDefaults).
	Tasks *ServerTasks `config:"tasks" doc:"How this server's tool calls run as MCP tasks (2025-11-25 task-augmented tools/call). Absent: mode relay, ttl 1h, max_per_caller 100."`

	Tools *ToolPolicy `config:"tools" doc:"The server's tool policy, applied for every caller before per-key permissions (SPEC S6.2, S6.3). Absent means every tool, under its own name."`

	// DenyLinkLocal is never read from a file: the gateway sets it on a
	// server added through the admin API unless
	// runtime_servers.allow_link_local, and the upstream package then
	// refuses to dial link-local and cloud metadata addresses for it.
	DenyLinkLocal bool
}

// OpenAPIOperations selects the operations of an openapi server: an
// operation is a tool when include is empty or matches it, and exclude
// does not.
type OpenAPIOperations struct {
	Include []string `config:"include" doc:"operationIds or \"METHOD /path\" patterns (the path as written in the document; * matches within a path segment, as in path.Match) of the operations to offer. Empty: all."`
	Exclude []string `config:"exclude" doc:"operationIds or \"METHOD /path\" patterns of operations not to offer; exclude wins over include."`
}

// ServerTasks is a server's tasks block.
type ServerTasks struct {
	Mode         string        `config:"mode,default=relay,enum=relay|gateway|off" doc:"relay: a task-augmented call of a tool the server runs as a task (it declares tasks and the tool's execution.taskSupport is optional or required) creates the task upstream, which the gateway's task follows; any other tool's call is run as a task by the gateway itself. gateway: the gateway runs every task-augmented call itself, calling the server plainly, and offers every tool as a task (even one the server lists as forbidden: the server only says it does not run it as a task itself); a tool the server runs only as a task is still created upstream and waited for. off: the server's tools are not offered as tasks; a task-augmented call to one is refused, and a tool it runs only as a task is not bridged."`
	TTL          time.Duration `config:"ttl,default=1h,positive" doc:"How long a task and its result are kept from its creation; a caller asking for a longer ttl gets this one. A task still running at its ttl is cancelled."`
	MaxPerCaller int           `config:"max_per_caller,default=100,min=1" doc:"Tasks one caller may hold of this server on one route at once, running or finished and kept; past it a task-augmented call is refused."`
	AnswerWithin time.Duration `config:"answer_within" doc:"2026-07-28 (extension io.modelcontextprotocol/tasks), where the server decides what becomes a task: how long the gateway waits for a call it would make a task to end by itself. A call that ends within it is answered plainly (the extension's immediate result) and no task is kept; one still running then, or one whose upstream asks the client a question first, is answered with a task handle. 0 (the default): every such call is a task at once. At most 1m."`
}

// Task modes of a server.
const (
	TasksRelay   = "relay"
	TasksGateway = "gateway"
	TasksOff     = "off"
)

// TasksDefaults is the tasks block of a server that has none.
var TasksDefaults = ServerTasks{Mode: TasksRelay, TTL: time.Hour, MaxPerCaller: 100}

// TaskSettings is s's tasks block, or the defaults.
func (s *Server) TaskSettings() ServerTasks {
	if s == nil || s.Tasks == nil {
		return TasksDefaults
	}
	return *s.Tasks
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
	AuthAWSSigV4      = "aws_sigv4"     // every request signed with AWS Signature Version 4
	AuthUserAPIKey    = "user_api_key"  // each person's own static credential, from the vault
	AuthOAuth2User    = "oauth2_user"   // each person's own OAuth token, connected once, from the vault
	// AuthTokenExchange: the caller's own token (a JWT of an auth.oidc
	// issuer) exchanged for one for the server (RFC 8693).
	AuthTokenExchange = "oauth2_token_exchange"
	// AuthEnterpriseManaged: the caller's IdP ID token exchanged at the
	// IdP for an identity assertion JWT authorization grant (ID-JAG), which
	// the server's authorization server redeems (RFC 7523) for an access
	// token: the MCP enterprise-managed authorization extension (SEP-990).
	AuthEnterpriseManaged = "enterprise_managed"
)

// Token types of RFC 8693 section 3 (and the ID-JAG draft).
const (
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
	TokenTypeIDToken     = "urn:ietf:params:oauth:token-type:id_token"
	TokenTypeJWT         = "urn:ietf:params:oauth:token-type:jwt"
	TokenTypeIDJAG       = "urn:ietf:params:oauth:token-type:id-jag"
)

// SubjectTokenTypeOrDefault is the subject_token_type of an
// oauth2_token_exchange block: the configured one, else access_token.
func (a *Auth) SubjectTokenTypeOrDefault() string {
	if a.SubjectTokenType == "" {
		return TokenTypeAccessToken
	}
	return a.SubjectTokenType
}

// ExchangesCallerToken reports whether the auth type exchanges the
// caller's own validated token (oauth2_token_exchange, enterprise_managed).
func ExchangesCallerToken(typ string) bool {
	return typ == AuthTokenExchange || typ == AuthEnterpriseManaged
}

// AuthTypes lists the accepted auth types, in the order error messages
// name them: the enum of Auth.Type.
var AuthTypes = enumOf[Auth]("Type")

// Auth is a server's egress credential.
type Auth struct {
	Type  string `config:"type,required,enum=none|api_key|bearer_token|token|basic|authorization|oauth2|passthrough|aws_sigv4|user_api_key|oauth2_user|oauth2_token_exchange|enterprise_managed,disc=auth type,expand,trim,lower" doc:"none, bearer_token (Authorization: Bearer), token (Authorization: token), api_key (X-API-Key), basic, authorization (the value verbatim), oauth2 (client credentials, minted by the gateway), passthrough (each caller's own token), aws_sigv4 (every request signed with AWS Signature Version 4, credentials from the AWS default chain), user_api_key (each person's own static credential, stored with PUT /admin/v1/me/credentials/<server> and sealed in the vault: Authorization: Bearer, or verbatim in header_name; needs the vault section) or oauth2_user (each person connects their own upstream account once, in a browser at /oauth/connect/<server>: the gateway runs the authorization code flow with PKCE against the server's authorization server, seals the tokens in the vault and refreshes them; needs the vault section), oauth2_token_exchange (the caller's own token, a JWT an auth.oidc issuer signed, exchanged at token_url for a token for this server, RFC 8693; needs auth.oidc) or enterprise_managed (the caller's ID token from the company IdP, an auth.oidc issuer, exchanged at idp_token_url for an identity assertion JWT authorization grant, ID-JAG, which the server's authorization server redeems for an access token with the JWT bearer grant, RFC 7523: the MCP enterprise-managed authorization extension; needs auth.oidc)."`
	Value string `config:"value,required,when=api_key|bearer_token|token|basic|authorization,expand,secret" doc:"The credential. Exactly one scheme goes out: \"Bearer abc\" and \"abc\" both send Authorization: Bearer abc. For basic: user:password, or \"Basic <base64>\" sent as is."`
	// HeaderName "" means Authorization, or X-API-Key for api_key.
	HeaderName string `config:"header_name,when=api_key|bearer_token|token|basic|authorization|oauth2|passthrough|user_api_key|oauth2_token_exchange|enterprise_managed,expand,trim" doc:"The header that carries the credential instead of Authorization (X-API-Key for api_key). A static header of that name cannot shadow it. For user_api_key the person's value goes in it verbatim (in Authorization it gets the Bearer scheme)."`
	// Header is header_name's other spelling for user_api_key (the shape
	// of the issue that introduced it); validate folds it into HeaderName.
	Header string `config:"header,when=user_api_key,expand,trim" doc:"For user_api_key, the same as header_name (either may be used, not both with different values)."`

	// oauth2 client credentials (RFC 6749 section 4.4).
	TokenURL   string `config:"token_url,when=oauth2|oauth2_token_exchange,expand,trim" doc:"The client-credentials (for oauth2_token_exchange: the token exchange) token endpoint, http or https; called with no redirects. Give token_url or authorization_server: the gateway's client credentials go only to a token endpoint the config names, never to one the server's metadata names."`
	ClientAuth string `config:"client_auth,when=oauth2|oauth2_token_exchange|enterprise_managed,enum=client_secret_basic|client_secret_post|private_key_jwt,expand,trim,lower" doc:"How the gateway authenticates at the token endpoint (for enterprise_managed: at the server's authorization server): client_secret_basic (HTTP Basic, the default), client_secret_post (client_id and client_secret in the form) or private_key_jwt (a JWT signed with private_key or private_key_file, RFC 7523; its aud is token_url, or the issuer identifier of authorization_server). Every token request also carries resource, the server's canonical URI (RFC 8707)."`
	ClientID   string `config:"client_id,required=oauth2|oauth2_token_exchange|enterprise_managed,when=oauth2|oauth2_user|oauth2_token_exchange|enterprise_managed,expand,trim" doc:"The gateway's client id at the token endpoint (for enterprise_managed: at the server's authorization server, which redeems the ID-JAG; the IdP puts it in the ID-JAG). For oauth2_user, a client pre-registered at the server's authorization server; absent, the gateway registers itself (a client ID metadata document when the authorization server supports one, else dynamic client registration)."`
	// ClientSecret is required for the secret methods (validate.go).
	ClientSecret string `config:"client_secret,when=oauth2|oauth2_user|oauth2_token_exchange|enterprise_managed,expand,trim,secret" doc:"The gateway's client secret: required for client_secret_basic and client_secret_post, not allowed for private_key_jwt. For oauth2_user, the pre-registered client's secret, if it has one (only with client_id)."`
	// PrivateKey or PrivateKeyFile (exactly one) for private_key_jwt.
	PrivateKey     string   `config:"private_key,when=oauth2|oauth2_token_exchange|enterprise_managed,expand,trim,secret" doc:"For private_key_jwt: the PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC; RSA of 2048 bits or more, EC on P-256), typically ${VAR}. Never shown. Exactly one of private_key and private_key_file."`
	PrivateKeyFile string   `config:"private_key_file,when=oauth2|oauth2_token_exchange|enterprise_managed,expand,trim,path=private_key" doc:"For private_key_jwt: a file holding the PEM private key, relative to the config file. It is read again for every token request, so a rotated key is picked up."`
	SigningAlg     string   `config:"signing_alg,when=oauth2|oauth2_token_exchange|enterprise_managed,enum=ES256|RS256,expand,trim" doc:"For private_key_jwt: the client assertion's algorithm. Default from the key: ES256 for an EC P-256 key, RS256 for an RSA key."`
	Scopes         []string `config:"scopes,when=oauth2|oauth2_user|oauth2_token_exchange|enterprise_managed,expand" doc:"Scopes to request; each one token without spaces or quotes. For oauth2_user, absent: the scopes of the server's challenge or protected resource metadata."`
	Audience       string   `config:"audience,when=oauth2|oauth2_token_exchange,expand,trim" doc:"The audience parameter of the token request, for servers that need one (oauth2_token_exchange: the logical name of the server at the token service, RFC 8693)."`

	// AuthorizationServer pins the authorization server that may receive
	// the gateway's client credentials (and, for token exchange, the
	// caller's token) when the token endpoint is not configured.
	AuthorizationServer string `config:"authorization_server,when=oauth2|oauth2_user|oauth2_token_exchange|enterprise_managed,expand,trim" doc:"The issuer identifier (RFC 8414) of the server's authorization server, https (http only on a loopback host), without query or fragment: the only authorization server the gateway's client secret, client assertion or a caller's token is sent to when no token_url is given. Its token endpoint is read from its own metadata (RFC 8414, else OpenID Connect discovery), whose issuer must be exactly this value; what the server's protected resource metadata names is not used. oauth2 and oauth2_token_exchange: token_url or authorization_server, one of them. enterprise_managed: required (it is also the ID-JAG's audience). oauth2_user: required with client_secret (a pre-registered confidential client belongs to one authorization server), else optional; when set, the connect flow uses this authorization server instead of the ones the server's metadata names."`

	// oauth2_token_exchange (RFC 8693).
	Resource         string `config:"resource,when=oauth2_token_exchange,expand,trim" doc:"The resource parameter of the token exchange: an absolute URI without fragment (RFC 8707). Absent: the server's canonical URL."`
	SubjectTokenType string `config:"subject_token_type,when=oauth2_token_exchange,enum=urn:ietf:params:oauth:token-type:access_token|urn:ietf:params:oauth:token-type:id_token|urn:ietf:params:oauth:token-type:jwt,expand,trim" doc:"What the caller's token is, for the token service: access_token (the default), id_token or jwt, as RFC 8693 URNs."`

	// enterprise_managed: the IdP's side of the exchange (its token
	// endpoint and the gateway's client there).
	IdPTokenURL     string `config:"idp_token_url,required,when=enterprise_managed,expand,trim" doc:"The company IdP's token endpoint, where the caller's ID token is exchanged for an ID-JAG (RFC 8693, requested_token_type urn:ietf:params:oauth:token-type:id-jag; audience the server's authorization server issuer, resource the server's canonical URL); http or https, called with no redirects. The server's own token endpoint is read from authorization_server's metadata."`
	IdPClientID     string `config:"idp_client_id,required,when=enterprise_managed,expand,trim" doc:"The gateway's client id at the IdP."`
	IdPClientSecret string `config:"idp_client_secret,when=enterprise_managed,expand,trim,secret" doc:"The gateway's client secret at the IdP (HTTP Basic); absent: a public client, idp_client_id goes in the form."`

	// aws_sigv4: the signing scope. The credentials come from the AWS SDK's
	// default chain (environment, shared config and credentials files, web
	// identity, container and instance metadata), never from this file.
	Region  string `config:"region,required,when=aws_sigv4,expand,trim" doc:"The AWS region the requests are signed for (eu-west-1): lowercase letters, digits and dashes."`
	Service string `config:"service,required,when=aws_sigv4,expand,trim" doc:"The AWS service signing name: execute-api (API Gateway), lambda (Lambda function URLs), bedrock-agentcore, ...; lowercase letters, digits and dashes."`
}

// Client authentication methods of an oauth2 auth block (RFC 7591 2).
const (
	ClientSecretBasic = "client_secret_basic"
	ClientSecretPost  = "client_secret_post"
	PrivateKeyJWT     = "private_key_jwt"
)

// ClientAuthMethod is the effective client_auth: client_secret_basic when
// none is set.
func (a *Auth) ClientAuthMethod() string {
	if a.ClientAuth == "" {
		return ClientSecretBasic
	}
	return a.ClientAuth
}

// TLS is a server's TLS client configuration: each PEM as a value or as
// a file (relative paths are resolved against Config.Dir), never both.
type TLS struct {
	// Verify nil means true.
	Verify   *bool  `config:"verify,default=true" doc:"Check the server certificate. false is for test rigs only; the gateway logs a warning when it is set."`
	CA       string `config:"ca,expand,trim" doc:"PEM roots to trust instead of the system pool, the certificates themselves (typically ${VAR}). Exactly one of ca and ca_file."`
	CAFile   string `config:"ca_file,expand,trim,path=ca" doc:"A file of PEM roots to trust instead of the system pool."`
	Cert     string `config:"cert,expand,trim" doc:"Client certificate (PEM) for mutual TLS, the certificate itself, with key or key_file. Exactly one of cert and cert_file."`
	CertFile string `config:"cert_file,expand,trim,path=cert" doc:"A file of the client certificate (PEM) for mutual TLS, with key_file or key."`
	Key      string `config:"key,expand,trim,secret" doc:"Private key (PEM) of the client certificate, the key itself (typically ${VAR}). Never shown. Exactly one of key and key_file."`
	KeyFile  string `config:"key_file,expand,trim,path=key" doc:"A file of the private key (PEM) of the client certificate."`
}

// ToolPolicy filters and renames one server's tools for every caller,
// before per-key permissions apply. Names are the upstream's own.
type ToolPolicy struct {
	// Allow lists the visible tools; nil means all, empty means none.
	Allow []string `config:"allow,ornone" doc:"The tools callers may see at all; absent means all, [] means none."`
	// Deny hides tools, whatever Allow says.
	Deny []string `config:"deny" doc:"Tools hidden whatever allow says."`
	// Overrides change how a tool is shown, keyed by its upstream name.
	// A call by the display name resolves to the upstream name.
	Overrides map[string]ToolOverride `config:"overrides" entry:"tool" doc:"How a tool is shown, keyed by its upstream name; a call by the display name reaches the upstream tool."`
	// Costs price a call by upstream tool name, "*" for the others
	// (SPEC S21); CostPerKB adds a price per 1,000 result bytes.
	Costs     map[string]float64 `config:"costs,min=0" doc:"The cost of one call (in your currency units), by upstream tool name; * prices the tools not named. Recorded in each audit record. Absent: calls cost nothing."`
	CostPerKB float64            `config:"cost_per_kb,min=0" doc:"A cost added per 1,000 bytes of the result, recorded with the call's."`
}

// CallCost is what one call of tool costs with a result of resultBytes:
// its price (or *'s) plus cost_per_kb per 1,000 bytes. A nil policy
// prices nothing.
func (p *ToolPolicy) CallCost(tool string, resultBytes int64) float64 {
	if p == nil {
		return 0
	}
	c, ok := p.Costs[tool]
	if !ok {
		c = p.Costs["*"]
	}
	return c + p.CostPerKB*float64(resultBytes)/1000
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
	Name        string `config:"name" doc:"Display name: 1-128 characters of [A-Za-z0-9_.-] (the MCP tool-name rule), unique on the server."`
	Description string `config:"description" doc:"Description shown instead of the upstream's."`
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
	return parse(data, dir, lookupEnv, false)
}

// ParseRuntime parses a document that comes from the network (the admin
// API's runtime servers) as Parse does with no directory and no
// variables, except that no field may name a file on the gateway's host
// (a path or command field: tls.ca_file, auth.private_key_file, cwd,
// ...). Such a field is refused by name while decoding, before anything
// looks at the file, so the answer is the same whether it exists or not;
// the content goes in the field's value form (tls.ca, auth.private_key).
func ParseRuntime(data []byte) (*Config, error) {
	return parse(data, "", nil, true)
}

func parse(data []byte, dir string, lookupEnv func(string) (string, bool), noHostFiles bool) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	c := &Config{Dir: dir}
	setDefaults(typeOf(reflect.TypeFor[Config]()), reflect.ValueOf(c).Elem())
	lines, err := decode(data, c, lookupEnv, noHostFiles)
	if err != nil {
		return nil, err
	}
	if err := c.normalise(); err != nil {
		return nil, withLines(err, lines)
	}
	// Defaults were set before decoding, so a zero value left now was
	// written in the file (or expanded from an empty variable): strict.
	if err := c.validate(true); err != nil {
		return nil, withLines(err, lines)
	}
	return c, nil
}

// withLines gives each problem found after decoding the line of its path
// in the file, or of its nearest ancestor there (a missing required key
// points at its section).
func withLines(err error, lines map[string]int) error {
	for _, fe := range FieldErrors(err) {
		if fe.Line != 0 || fe.Path == "" {
			continue
		}
		best := ""
		for k, line := range lines {
			if len(k) > len(best) && strings.HasPrefix(fe.Path, k) &&
				(len(k) == len(fe.Path) || fe.Path[len(k)] == '.' || fe.Path[len(k)] == '[') {
				best, fe.Line = k, line
			}
		}
	}
	return err
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

// FieldErrors flattens an error of Parse, Load or Validate into its
// problems, in order. A part that is not a *FieldError (a file that cannot
// be read) becomes one without a path.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, p := range e.Unwrap() {
				walk(p)
			}
		case *FieldError:
			out = append(out, e)
		default:
			// Load's "load config PATH: ..." around the problems.
			if u := errors.Unwrap(err); u != nil && errors.As(u, new(*FieldError)) {
				walk(u)
				return
			}
			out = append(out, &FieldError{Err: err})
		}
	}
	walk(err)
	return out
}

// Provenance is where a server's definition came from.
type Provenance struct {
	Source  string `config:"source,trim" doc:"Where the server's entry came from, for example the client file it was imported from (\"claude-desktop /home/me/.config/Claude/claude_desktop_config.json\")."`
	Version string `config:"version,trim" doc:"What the server runs, as pinned where it came from: a package and its version (\"npm @modelcontextprotocol/server-everything@2026.8.31\"), a container image, or a version the operator states."`
}
