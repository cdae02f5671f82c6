package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// Default clientInfo when Options leave it empty.
const (
	defaultClientName    = "mcpgate"
	defaultClientVersion = "dev"
)

// Connect opens a session with one upstream server: it starts the
// transport chosen by opts.Server.Transport, performs the initialize
// handshake offering the configured revision (C5.1), checks the answer and
// sends notifications/initialized. On any failure the transport is closed
// and nothing else is sent. ctx bounds the connection setup only.
func Connect(ctx context.Context, opts Options) (Session, error) {
	if opts.Server == nil {
		return nil, errors.New("upstream: no server configuration")
	}
	srv := opts.Server
	if transportOf(srv) == config.TransportOpenAPI {
		// No MCP handshake: the session is synthesised from the document.
		if opts.sigv4 == nil {
			opts.sigv4 = newSigV4(srv)
		}
		if opts.tokens == nil && srv.Auth != nil && srv.Auth.Type == config.AuthOAuth2 {
			opts.tokens = newTokenSource(srv.Name, srv.BaseURL, srv.Auth, tokenHTTPClient(srv, opts.HTTPClient), opts.Logger)
		}
		return dialOpenAPI(ctx, &opts)
	}
	offer, accept, err := revisionsFor(srv.ProtocolVersion)
	if err != nil {
		return nil, &Error{Server: srv.Name, Kind: KindProtocolVersion, Err: err}
	}
	if opts.tokens == nil && srv.Auth != nil && srv.Auth.Type == config.AuthOAuth2 {
		opts.tokens = newTokenSource(srv.Name, srv.URL, srv.Auth, tokenHTTPClient(srv, opts.HTTPClient), opts.Logger)
	}
	if opts.exchanger == nil && srv.Auth != nil && config.ExchangesCallerToken(srv.Auth.Type) {
		opts.exchanger = newExchanger(srv.Name, srv.URL, srv.Auth, tokenHTTPClient(srv, opts.HTTPClient), opts.Logger)
	}
	if opts.sigv4 == nil {
		opts.sigv4 = newSigV4(srv)
	}
	c := newConn(&opts)
	switch transportOf(srv) {
	case config.TransportStdio:
		_, sp := tracing.StartInternal(ctx, "mcp.upstream.start", srv.Name)
		err = startStdio(c, srv)
		tracing.End(sp, err, faultOf(err))
	case config.TransportSSE:
		err = dialSSE(ctx, c, &opts)
	case config.TransportHTTP:
		err = newStreamable(c, &opts)
	default:
		err = &Error{Server: srv.Name, Kind: KindInternal, Err: fmt.Errorf("unknown transport %q", srv.Transport)}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	hctx, sp := tracing.StartInternal(ctx, "mcp.upstream.handshake", srv.Name)
	err = c.handshake(hctx, &opts, offer, accept)
	tracing.End(sp, err, faultOf(err))
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// faultOf is err's kind, for a span; "" for nil.
func faultOf(err error) string {
	if err == nil {
		return ""
	}
	return string(KindOf(err))
}

// handshake opens the session: server/discover (2026-07-28) or initialize.
func (c *conn) handshake(ctx context.Context, opts *Options, offer string, accept []string) (err error) {
	srv := opts.Server
	switch {
	case srv.ProtocolVersion == mcpwire.Rev20260728:
		err = c.discover(ctx, opts, true)
	case opts.ProbeStateless && probesDiscover(srv):
		// auto: the stateless era when the upstream speaks it, else the
		// handshake (an error, or a discover result without 2026-07-28).
		if err = c.discover(ctx, opts, false); err != nil {
			c.log.Debug("upstream does not speak 2026-07-28; using initialize", "reason", err)
			err = c.initialize(ctx, opts, offer, accept)
		}
	default:
		err = c.initialize(ctx, opts, offer, accept)
	}
	return err
}

// probesDiscover says whether auto may try server/discover first: for
// streamable-HTTP upstreams (legacy SSE predates the stateless era, and a
// stdio server of the handshake era often takes any request before
// initialize as a fatal protocol error). The Manager asks for the probe
// only until it knows the server's era (Options.ProbeStateless).
func probesDiscover(srv *config.Server) bool {
	return (srv.ProtocolVersion == "" || srv.ProtocolVersion == config.ProtocolVersionAuto) && transportOf(srv) == config.TransportHTTP
}

// discoverResult is the part of a server/discover result the gateway reads.
type discoverResult struct {
	SupportedVersions []string        `json:"supportedVersions"`
	Capabilities      json.RawMessage `json:"capabilities"`
	Instructions      *string         `json:"instructions"`
	Meta              struct {
		ServerInfo json.RawMessage `json:"io.modelcontextprotocol/serverInfo"`
	} `json:"_meta"`
}

// discover opens a stateless (2026-07-28) session: server/discover instead
// of the handshake, and from then on every request carries the protocol
// version, client info and capabilities in its _meta (C1.4). required:
// the configuration pins the revision, so not speaking it is an error
// that says "protocol version".
func (c *conn) discover(ctx context.Context, opts *Options, required bool) error {
	name, version := opts.ClientName, opts.ClientVersion
	if name == "" {
		name = defaultClientName
	}
	if version == "" {
		version = defaultClientVersion
	}
	info := jsonrpc.AppendString([]byte(`{"name":`), name)
	info = append(info, `,"version":`...)
	info = append(jsonrpc.AppendString(info, version), '}')
	c.mu.Lock()
	c.stateless = &statelessMeta{clientInfo: info}
	c.mu.Unlock()
	if st, ok := c.t.(interface{ setStateless(bool) }); ok {
		st.setStateless(true)
	}
	raw, err := c.Call(ctx, mcpwire.MethodServerDiscover, json.RawMessage(`{}`))
	fallback := func(e error) error {
		c.mu.Lock()
		c.stateless = nil
		c.mu.Unlock()
		if st, ok := c.t.(interface{ setStateless(bool) }); ok {
			st.setStateless(false)
		}
		return e
	}
	if err != nil {
		if required {
			kind := KindOf(err)
			var rpc *jsonrpc.Error
			if errors.As(err, &rpc) {
				// An answer that is not a discover result: the upstream
				// does not speak the revision the config pins.
				kind = KindProtocolVersion
			}
			return fallback(c.during("server/discover (protocol version 2026-07-28)", kind, err))
		}
		return fallback(err)
	}
	var r discoverResult
	if json.Unmarshal(raw, &r) != nil {
		return fallback(c.invalidResponse("server/discover result is not an object"))
	}
	if !slices.Contains(r.SupportedVersions, mcpwire.Rev20260728) {
		return fallback(&Error{Server: c.server, Kind: KindProtocolVersion,
			Err: fmt.Errorf("protocol version 2026-07-28 not among the upstream's supported versions %q", r.SupportedVersions)})
	}
	ii := &InitInfo{
		ProtocolVersion: mcpwire.Rev20260728,
		Capabilities:    r.Capabilities,
		Caps:            mcpwire.ParseServerCaps(r.Capabilities),
		ServerInfo:      r.Meta.ServerInfo,
		Result:          raw,
	}
	if r.Instructions != nil {
		ii.Instructions = strings.TrimSpace(*r.Instructions)
		ii.HasInstructions = true
	}
	c.mu.Lock()
	c.info = ii
	c.mu.Unlock()
	c.log.Debug("upstream session is stateless", "protocol_version", mcpwire.Rev20260728)
	if ii.Caps.Tools || ii.Caps.Prompts || ii.Caps.Resources {
		if l, ok := c.t.(interface{ startListen() }); ok {
			l.startListen()
		}
	}
	return nil
}

// transportOf is the configured transport, inferred for a Server built in
// code that left it empty.
func transportOf(srv *config.Server) string {
	if srv.Transport != "" {
		return srv.Transport
	}
	if srv.Command != "" {
		return config.TransportStdio
	}
	return config.TransportHTTP
}

// revisionsFor returns the revision to offer and the answers to accept.
func revisionsFor(configured string) (offer string, accept []string, err error) {
	switch {
	case configured == "" || configured == config.ProtocolVersionAuto:
		return mcpwire.LatestHandshake, mcpwire.HandshakeRevisions, nil
	case mcpwire.IsHandshake(configured):
		return configured, []string{configured}, nil
	case configured == mcpwire.Rev20260728:
		return "", nil, nil // stateless: server/discover, no handshake
	default:
		return "", nil, fmt.Errorf("unknown protocol version %q (want auto or one of %s)", configured, mcpwire.SupportedList())
	}
}

// initializeResult is the part of an initialize result the gateway reads.
type initializeResult struct {
	ProtocolVersion *string         `json:"protocolVersion"`
	Capabilities    json.RawMessage `json:"capabilities"`
	ServerInfo      json.RawMessage `json:"serverInfo"`
	Instructions    *string         `json:"instructions"`
}

func (c *conn) initialize(ctx context.Context, opts *Options, offer string, accept []string) error {
	name, version := opts.ClientName, opts.ClientVersion
	if name == "" {
		name = defaultClientName
	}
	if version == "" {
		version = defaultClientVersion
	}
	caps := opts.ClientCapabilities
	if len(caps) == 0 || string(caps) == "null" {
		caps = json.RawMessage("{}")
	}
	params := []byte(`{"protocolVersion":`)
	params = jsonrpc.AppendString(params, offer)
	params = append(params, `,"capabilities":`...)
	params = append(params, caps...)
	params = append(params, `,"clientInfo":{"name":`...)
	params = jsonrpc.AppendString(params, name)
	params = append(params, `,"version":`...)
	params = jsonrpc.AppendString(params, version)
	params = append(params, "}}"...)

	raw, err := c.Call(ctx, mcpwire.MethodInitialize, params)
	if err != nil {
		var ue *Error
		if errors.As(err, &ue) {
			return err
		}
		return c.during("initialize", KindOf(err), err)
	}
	var r initializeResult
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &r) != nil {
		return c.invalidResponse("initialize result is not an object")
	}
	if r.ProtocolVersion == nil || *r.ProtocolVersion == "" {
		return c.invalidResponse("initialize result has no protocolVersion")
	}
	got := *r.ProtocolVersion
	if !slices.Contains(accept, got) {
		return &Error{Server: c.server, Kind: KindProtocolVersion, Err: versionMismatch(offer, got, len(accept) > 1)}
	}
	info := &InitInfo{
		ProtocolVersion: got,
		Capabilities:    r.Capabilities,
		Caps:            mcpwire.ParseServerCaps(r.Capabilities),
		ServerInfo:      r.ServerInfo,
		Result:          raw,
	}
	if r.Instructions != nil {
		info.Instructions = strings.TrimSpace(*r.Instructions)
		info.HasInstructions = true
	}
	c.mu.Lock()
	c.info = info
	c.mu.Unlock()
	if ai, ok := c.t.(afterInit); ok {
		ai.initialized(got)
	}
	if err := c.Notify(ctx, mcpwire.NotifyInitialized, nil); err != nil {
		return err
	}
	if st, ok := c.t.(interface{ start() }); ok {
		st.start()
	}
	c.log.Debug("upstream session initialized", "protocol_version", got)
	return nil
}

func versionMismatch(offer, got string, auto bool) error {
	if len(got) > 64 {
		got = got[:64] + "..."
	}
	if auto {
		return fmt.Errorf("unsupported protocol version %q from upstream (offered %s; supported: %s)",
			got, offer, strings.Join(mcpwire.HandshakeRevisions, ", "))
	}
	return fmt.Errorf("protocol version mismatch: offered %s, upstream answered %q", offer, got)
}
