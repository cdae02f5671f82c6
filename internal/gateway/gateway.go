// Package gateway is mcpgate's ingress: it serves MCP to downstream clients
// over streamable HTTP, legacy HTTP+SSE and stdio, and turns each message
// into work on the upstreams.
//
//	HTTP/stdio -> gates (origin, host, protocol version, body size)
//	           -> session (stateful by Mcp-Session-Id, or stateless)
//	           -> dispatch (method -> handler)
//	           -> catalog (merged, namespaced lists) / upstream (calls)
//	           <- relay (progress, logs, list_changed, sampling, elicitation,
//	              roots, cancellation) back to the downstream that caused it
//
// The gateway rewrites only what it must (names, ids, cursors, progress
// tokens); everything else passes through as raw bytes. It must not log
// tool arguments, cursors or credentials.
package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/guard"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/toolsearch"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/upstream"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// Defaults.
const (
	DefaultPageSize    = 1000
	DefaultIdleTimeout = 30 * time.Minute
	// DefaultMaxSessionsPerOwner is the per-owner session cap (S4.3).
	DefaultMaxSessionsPerOwner = 100
	// DefaultDownstreamTimeout bounds a server-initiated request relayed to
	// a downstream client (sampling and elicitation wait for a human).
	DefaultDownstreamTimeout = 10 * time.Minute
	keepAliveInterval        = 25 * time.Second
)

// Options configures a Gateway. The zero value of each field means its
// documented default.
type Options struct {
	Config  *config.Config
	Logger  *slog.Logger
	Version string
	// PageSize is the page size of merged lists (tools/list, ...).
	PageSize int
	// IdleTimeout ends stateful sessions with no traffic and nothing in flight.
	IdleTimeout time.Duration
	// MaxSessionsPerOwner caps one owner's stateful sessions (S4.3); 0 means
	// DefaultMaxSessionsPerOwner, < 0 no cap.
	MaxSessionsPerOwner int
	// Terminations remembers administrator-ended session ids (S8.2); nil
	// keeps them in memory.
	Terminations Terminations
	// Bus carries administrator terminations between replicas (SPEC S15,
	// fanout.go); nil: this replica's sessions are its own.
	Bus state.PubSub
	// Tickets, in a fleet, holds pending account connects so that each
	// step of one may land on any replica (connectshare.go); nil keeps
	// them in this process.
	Tickets state.Tickets
	// State is the shared state backend, probed for /readyz and
	// mcpgate_state_up (statehealth.go); nil: not reported.
	StateHealth StateChecker
	// State is the fleet's shared state (SPEC S15): with
	// fleet.session_keys, POST streams are resumable on any replica, GET
	// streams move between replicas, and sessions' log levels and
	// subscriptions are shared (resume.go, fleetbus.go). nil: none of
	// that; a disconnect cancels its call at once (C9.1). When Bus is nil
	// it is State.
	State state.Backend
	// Records is where every session is recorded for the fleet's admin
	// view and terminations (sessions_admin.go): the shared state of a
	// fleet whose sessions are sticky (no fleet.session_keys) as well as
	// of one whose sessions are sealed. nil: State.
	Records state.Backend
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
	// Authenticator identifies callers (S5); nil serves every caller
	// anonymously (the loopback-only mode of a gateway without auth).
	Authenticator Authenticator
	// Vault holds each person's own credentials (S19), which user_api_key
	// servers are called with; nil: those servers refuse every call.
	Vault *vault.Vault
	// Metrics receives the gateway's metrics and serves /metrics; nil
	// records nothing.
	Metrics *metrics.Metrics
	// MetricsOnMain serves /metrics on the gateway's own listener.
	MetricsOnMain bool
	// Audit receives one record per tool call; nil records nothing.
	Audit AuditSink
	// AccessLog receives one line per HTTP request (accesslog.go); nil
	// writes none.
	AccessLog *slog.Logger
	// HTTPClient is used for HTTP upstreams (nil: upstream's default).
	HTTPClient *http.Client
	// Tracer traces requests, messages and upstream calls (SPEC S16.2);
	// nil: no tracing, at no cost.
	Tracer *tracing.Provider
	// Usage sums a key's tool-call costs since a time, for the keys'
	// budgets (budget.go); nil: budgets are not enforced.
	Usage UsageFunc
	// Spending, with Usage, is where the replicas of a fleet count what
	// each key spent of its budget (the state driver redis): calls
	// reserve their cost there before they run. nil: each replica counts
	// its own calls beside the store's sum.
	Spending state.Spending
	// Replicas is the fleet's replica registry (SPEC S15, peers.go); with
	// fleet.session_keys this replica joins it and forwards what belongs
	// to another replica there. nil: no registry, nothing forwarded.
	Replicas state.Replicas
}

// Gateway serves the merged view of the configured upstreams.
type Gateway struct {
	recheck  time.Duration // how often streams re-check their key
	rechecks recheckSignal // RecheckStreams: re-check them now
	// state is what the configuration says, swapped as a whole when
	// servers are added or removed at runtime.
	state   atomic.Pointer[gwState]
	stateMu sync.Mutex // serialises runtime changes
	// file is what the config file defines (New's configuration, then
	// each reload's), as opposed to what the admin API added.
	file        atomic.Pointer[fileDefs]
	log         *slog.Logger
	version     string
	sep         string
	pageSize    int
	idleTimeout time.Duration
	maxPerOwner int
	terms       Terminations
	bus         state.PubSub
	// heard says whether this replica's followers of bus may have missed
	// a message (unheard.go); nil without a bus.
	heard *state.Heard
	// fresh coalesces the store reads made while heard is not trusted.
	fresh state.FreshReads[bool]
	// serverCheck re-reads a runtime server from the store (unheard.go);
	// nil: the admin API set none.
	serverCheck atomic.Pointer[ServerCheck]
	stateCheck  StateChecker
	stateHealth stateHealth
	shared      state.Backend // fleet mode's shared state; nil: none
	records     state.Backend // where sessions are recorded (Options.Records); nil: none
	instance    string        // this process's id in reports
	now         func() time.Time
	// loopback: the listener accepts loopback connections only, so the
	// DNS-rebinding guard (checkOriginHost) is on and, without
	// public_url, the base URL is the listener's own (ownBase). From the
	// listen address's text at New; from the address actually bound once
	// Listening is told it.
	loopback atomic.Bool

	up  *upstream.Manager
	cat *catalog.Catalog

	auth    Authenticator
	vault   *vault.Vault
	metrics *metrics.Metrics
	audit   AuditSink
	access  *slog.Logger      // nil: no access log
	budgets *guard.Budgets    // keys' budgets (budget.go); nil: not enforced
	tracer  *tracing.Provider // nil: no tracing
	// durableAudit, with audit.durable, is audit: answers wait for their
	// record's commit, at most auditWait (telemetry.go).
	durableAudit DurableAuditSink
	auditWait    time.Duration
	auditWarnAt  atomic.Int64
	// metricsOnMain: /metrics is served here (not on a listener of its own).
	metricsOnMain bool
	admin         http.Handler
	console       http.Handler    // the web console at /ui; nil: none
	authServer    http.Handler    // mcpgate's OAuth authorization server; nil: none
	confirmer     PersonConfirmer // proves a browser's oidc: person (elicitconnect.go); nil: none
	// httpClient fetches passthrough upstreams' metadata (nil: default).
	httpClient *http.Client
	prms       prmCache  // passthrough upstreams' metadata (S9.2)
	connect    connector // oauth2_user: registrations and pending connects

	sessions sync.Map // local id -> *session
	byHash   sync.Map // hashHex(local id) -> *session, for the fleet's notes (fleetbus.go)
	// ring seals session ids and requestState for the fleet
	// (fleet.session_keys; fleet.go); nil: ids are local to the process.
	ring      *fleet.Ring
	advertise string // fleet.advertise: where other replicas reach this one
	peers     *peers // the fleet's other replicas (peers.go); nil: none

	routes     sync.Map // routeKey -> route (read-only once stored)
	badNames   onceSet  // exposed tool names already warned about
	conflicts  onceSet  // names left out as ambiguous, already reported (names.go)
	routeCount atomic.Int64

	searchIdx toolsearch.Indexes[searchList] // by server (S20, toolsearch.go)
	usage     toolsearch.Usage               // tool calls per hybrid route (S20)
	// stageSeen, set by tests, hears each stage a call enters
	// (pipeline.go); nil in production.
	stageSeen atomic.Pointer[func(method, stage string)]

	// pending server-initiated requests relayed to downstreams, by the id
	// the gateway gave them, owned by the party they were sent to: only
	// its answer is taken (SPEC S24, owned.go).
	pending ownedTable[party, chan *jsonrpc.Message] // raw id ->
	// progress tokens minted for upstream calls, owned by the server each
	// was given to: only its notifications reach the caller.
	progress ownedTable[string, *progressRoute] // raw token ->

	subMu sync.Mutex
	subs  map[subKey]int // upstream subscriptions, ref-counted

	listen listeners // open subscriptions/listen streams (2026-07-28)
	// exchanges are the 2026-07-28 calls waiting for their client's
	// retry (S18.1), owned by the caller on the route that made them.
	exchanges ownedTable[party, *exchange] // exchange id ->
	// resumables are the resumable POST streams whose calls run here, by
	// stream key (resume.go).
	resumables sync.Map
	resumed    atomic.Int64 // streams resumed with Last-Event-ID here
	// listSeen: when each server's list changes were last told to this
	// replica's streams, by server and method (fleetbus.go).
	listSeen sync.Map

	// streams counts the open long-lived downstream streams
	// (limits.max_streams).
	streams atomic.Int64
	// inflight counts requests being served. A counter, not a WaitGroup:
	// requests may still start while Close waits (legacy SSE posts), which
	// a WaitGroup forbids.
	inflight atomic.Int64
	closing  atomic.Bool
	draining atomic.Bool // Drain: /readyz says 503, everything else is served
	stop     chan struct{}
	stopOnce sync.Once
	// bgCtx ends with Shutdown; bg counts the goroutines that follow it
	// (the termination follower), which Close waits for.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// New builds a gateway and its upstream manager and catalog. Call Start to
// launch upstreams and Close to stop them.
func New(o Options) *Gateway {
	cfg := o.Config
	g := &Gateway{
		recheck:     streamRecheck,
		log:         o.Logger,
		version:     o.Version,
		sep:         cfg.ToolNameSeparator,
		pageSize:    o.PageSize,
		idleTimeout: o.IdleTimeout,
		maxPerOwner: o.MaxSessionsPerOwner,
		terms:       o.Terminations,
		bus:         o.Bus,
		stateCheck:  o.StateHealth,
		shared:      o.State,
		records:     o.Records,
		vault:       o.Vault,
		now:         o.Now,
		subs:        map[subKey]int{},
		stop:        make(chan struct{}),
	}
	g.bgCtx, g.bgCancel = context.WithCancel(context.Background())
	g.fresh.Timeout = freshTimeout
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.connect.shared, g.connect.log = o.Tickets, g.log
	if g.sep == "" {
		g.sep = config.DefaultSeparator
	}
	if g.pageSize <= 0 {
		g.pageSize = DefaultPageSize
	}
	if g.idleTimeout <= 0 {
		g.idleTimeout = DefaultIdleTimeout
	}
	if g.maxPerOwner == 0 {
		g.maxPerOwner = DefaultMaxSessionsPerOwner
	}
	if g.terms == nil {
		g.terms = newMemTerminations()
	}
	if g.bus == nil && g.shared != nil {
		g.bus = g.shared
	}
	if g.bus != nil {
		g.heard = state.NewHeard()
	}
	if g.records == nil {
		g.records = g.shared
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.instance = newSessionID()[:12]
	g.auth = o.Authenticator
	g.httpClient = o.HTTPClient
	g.metrics, g.audit, g.metricsOnMain = o.Metrics, o.Audit, o.MetricsOnMain
	g.access = o.AccessLog
	if o.Usage != nil {
		g.budgets = guard.NewBudgets(o.Usage, o.Spending, g.now)
	}
	g.tracer = o.Tracer
	if d, ok := o.Audit.(DurableAuditSink); ok && cfg.Audit.DurableFor(cfg.Store.Driver) {
		g.durableAudit, g.auditWait = d, cfg.Audit.TimeoutOrDefault()
	}
	g.state.Store(newState(cfg))
	g.file.Store(&fileDefs{servers: cfg.Servers, toolsets: cfg.Toolsets})
	if ring, err := newRing(cfg); err != nil {
		// Validate refuses such keys; a Config built in code that skipped
		// it gets process-local ids, and says so.
		g.log.Error("fleet.session_keys unusable; session ids stay local to this process", "error", err)
	} else {
		g.ring = ring
	}
	if cfg.Fleet != nil {
		g.advertise = cfg.Fleet.Advertise
	}
	g.peers = newPeers(g, o.Replicas)
	if g.version == "" {
		g.version = "dev"
	}
	g.loopback.Store(netaddr.ListenIsLoopback(cfg.Listen))
	g.up = upstream.NewManager(upstream.ManagerOptions{
		Servers:       cfg.Servers,
		ClientName:    "mcpgate",
		ClientVersion: g.version,
		// The gateway can relay all three when the downstream that caused a
		// request declared them; otherwise it answers "not supported".
		ClientCapabilities: json.RawMessage(`{"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{},"url":{}}}`),
		Handler:            (*relay)(g),
		Logger:             g.log,
		HTTPClient:         o.HTTPClient,
		OnSessionStart:     g.onUpstreamSession,
		// One bound for every transport (S23); enforced by upstream.
		MaxMessageBytes:   int(g.limits().MaxUpstreamMessage),
		MaxBoundPerServer: g.limits().MaxBoundPerServer,
	})
	g.cat = catalog.New(g.up, g.log)
	return g
}

// Start launches the upstreams (stdio processes start at once) and the
// session janitor.
func (g *Gateway) Start(ctx context.Context) {
	g.up.Start(ctx)
	go g.janitor()
	if g.peers != nil {
		g.peers.join()
	}
	if g.bus != nil {
		// Tracked before serving: until each follower resynchronised,
		// what it keeps in step is checked against the store (unheard.go).
		g.heard.Track(followTerminationsName)
		g.bg.Add(1)
		go g.followTerminations()
		if g.fleetOn() {
			g.heard.Track(followSessionsName)
			g.bg.Add(1)
			go g.followSessions()
		}
	}
	if g.stateCheck != nil {
		// The first answer before serving, so /readyz never guesses.
		g.probeState(g.bgCtx)
		g.bg.Add(1)
		go g.watchState()
	}
}

// Upstreams exposes the upstream manager (health for admin and readiness).
func (g *Gateway) Upstreams() *upstream.Manager { return g.up }

// Shutdown stops accepting new work and ends the long-lived streams, so an
// HTTP server's Shutdown can wait for the in-flight calls alone.
func (g *Gateway) Shutdown() {
	g.closing.Store(true)
	g.stopOnce.Do(func() { close(g.stop) })
	g.bgCancel()
	g.endExchanges()
}

// Drain starts the lame-duck period of a shutdown (shutdown_delay):
// /readyz answers 503, so that load balancers take this replica out of
// rotation, while every request is still served.
func (g *Gateway) Drain() { g.draining.Store(true) }

// Close stops accepting work, waits (bounded by ctx) for in-flight calls,
// ends all sessions and stops the upstreams.
func (g *Gateway) Close(ctx context.Context) error {
	g.Shutdown()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for g.inflight.Load() > 0 {
		select {
		case <-t.C:
			continue
		case <-ctx.Done():
			g.log.Warn("shutdown: in-flight calls did not finish in time", "in_flight", g.inflight.Load())
		}
		break
	}
	g.bg.Wait()
	g.sessions.Range(func(_, v any) bool {
		v.(*session).close()
		return true
	})
	return g.up.Close()
}

// onUpstreamSession runs when an upstream session (re)starts: its lists may
// have changed (a restarted process), so drop them and tell the sessions
// that can see it.
func (g *Gateway) onUpstreamSession(server string, info *upstream.InitInfo) {
	g.cat.InvalidateServer(server)
	g.resubscribe(server)
	for _, k := range []catalog.Kind{catalog.Tools, catalog.Prompts, catalog.Resources} {
		g.broadcastListChanged(server, k)
	}
	if info != nil && info.Caps.Tools {
		go g.checkToolNames(server)
	}
}

// Listening tells the gateway the address its listener actually bound
// (net.Listener.Addr), which is what decides whether it serves loopback
// only: "LOCALHOST:4000", "ip6-localhost:4000" or "127.0.0.2:4000" bind
// loopback whatever the text looks like, and "localhost" may bind another
// address if the hosts file says so. Call it before serving.
func (g *Gateway) Listening(addr net.Addr) {
	g.loopback.Store(netaddr.IsBoundLoopback(addr))
}

// ServeHTTP routes every HTTP request of the gateway.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			g.log.Error("panic in handler", "panic", p, "path", r.URL.Path)
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "MCP request failed", "details": "internal error"})
		}
	}()
	if g.isPeerRequest(r) {
		// Before the metrics: a forwarded request is counted once, as
		// the request it carries.
		g.servePeer(w, r)
		return
	}
	// One status recorder serves the metrics and the access log.
	logged := g.access != nil && logsAccess(r.URL.Path)
	if g.metrics != nil || logged || g.tracer != nil {
		sw := &statusWriter{ResponseWriter: w}
		w = sw
		if g.tracer != nil && logsAccess(r.URL.Path) { // probes and scrapes: no trace
			var end func()
			r, end = g.startHTTPSpan(sw, r)
			defer end()
		}
		if g.metrics != nil {
			defer func() { g.metrics.ObserveRequest(routeKind(r.URL.Path), r.Method, sw.status) }()
		}
		if logged {
			var done func()
			w, r, done = g.startAccess(sw, r)
			defer done()
		}
	}
	switch r.URL.Path {
	case "/metrics":
		if g.metrics != nil && g.metricsOnMain {
			g.serveMetrics(w, r)
			return
		}
	case "/healthz":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	case "/readyz":
		g.serveReady(w, r)
		return
	case "/enabled":
		writeJSON(w, http.StatusOK, map[string]bool{"enabled": true})
		return
	}
	if err := g.checkOriginHost(r); err != nil {
		writeRPCError(w, http.StatusForbidden, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()})
		return
	}
	if r.URL.Path == wellKnownPRM || strings.HasPrefix(r.URL.Path, wellKnownPRM+"/") {
		g.serveProtectedResource(w, r)
		return
	}
	if g.isClientMetadataPath(r.URL.Path) {
		g.serveClientMetadata(w, r)
		return
	}
	if isConnectPath(r.URL.Path) {
		g.serveConnect(w, r)
		return
	}
	if isAuthServerPath(r.URL.Path) {
		if g.authServer == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found"})
			return
		}
		if g.conf().PublicURL == "" {
			// The authorization server names its issuer after the
			// request's Host when there is no public_url: it gets the
			// gateway's own (ownBase), never the one a client sent.
			base := g.ownBase(r)
			if base == "" {
				writeJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found", "details": "public_url is not set"})
				return
			}
			r = r.WithContext(r.Context()) // a copy whose Host may change
			r.Host = base[strings.Index(base, "://")+3:]
		}
		g.authServer.ServeHTTP(w, r)
		return
	}
	if isPersonalAlias(r.URL.Path) {
		// /me/credentials/<server> and /me/connections[/<server>]: the
		// person's own entries, also at the root (the admin API's /me).
		r = r.Clone(r.Context())
		r.URL.Path = AdminPrefix + strings.TrimPrefix(r.URL.Path, "/")
		r.URL.RawPath = ""
	}
	if isConsolePath(r.URL.Path) && g.console != nil {
		g.console.ServeHTTP(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, AdminPrefix) {
		if g.admin == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found"})
			return
		}
		// A bearer token for the admin API names it as its resource
		// (RFC 8707): the console's sign-in asks mcpgate's authorization
		// server for exactly that audience, so no MCP route's token is
		// an admin token, nor the other way round. An issuer's
		// gateway-wide audience (auth.oidc[].audience) does not count
		// here: only a token naming the admin API opens it (S22.4).
		r = r.WithContext(callers.WithAdminResource(r.Context(), g.AdminResource(r)))
		g.admin.ServeHTTP(w, r)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		// A CORS preflight of an allowed origin (checkOriginHost passed):
		// browsers send it without credentials and it does nothing, so it
		// is answered before authentication, else no browser client of a
		// gateway with keys could ever send its real request.
		setCORS(w.Header(), origin, r.Header.Values("Access-Control-Request-Headers"))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	r, ok := g.authenticate(w, r)
	if !ok {
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		// An allowed browser origin (the Inspector, a web client) gets CORS
		// headers, so the browser lets it read replies and session ids.
		setCORS(w.Header(), origin, r.Header.Values("Access-Control-Request-Headers"))
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	// A POST's body may be a 2026-07-28 request, whose unsupported
	// version is answered -32022 with the supported list (servePost
	// decides); other requests are checked here.
	if r.Method != http.MethodPost && !versionHeaderKnown(w, r) {
		return
	}
	rt, unknown, ok := g.routeFor(r.URL.Path, r.Header.Get("X-Mcp-Servers"))
	if !ok {
		if len(unknown) > 0 {
			writeRPCError(w, http.StatusNotFound, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Unknown MCP server %q", unknown[0]))
			return
		}
		http.NotFound(w, r)
		return
	}
	if st := g.st(); st.passthrough || st.userKeys || st.exchange {
		// The route the path names decides where a caller's Authorization
		// may go (S9.2): to the server of a single-server route only.
		ts := g.callerTokens(r, singleServer(&rt))
		ctx := context.WithValue(upstream.WithCallerTokens(r.Context(), ts.get), callerTokenSetKey{}, ts)
		r = r.WithContext(context.WithValue(ctx, baseURLKey{}, g.linkBase(r)))
	}
	if g.wantsDebug(r) {
		var done func()
		w, r, done = g.startDebug(w, r, rt)
		defer done()
	}
	_, kind := splitEndpoint(r.URL.Path)
	if kind != epSSEMessages {
		// A session's requests are narrowed with the session's route, once
		// the session is known; everything else here.
		if rt, ok = g.narrowFor(w, r, rt); !ok {
			return
		}
		// Pass-through servers: challenge, probe, or leave out (S9.2, S10).
		if rt, ok = g.passthroughGate(w, r, rt); !ok {
			return
		}
		if !g.exchangeGate(w, r, rt) {
			return
		}
	}
	switch kind {
	case epSSE:
		g.serveLegacySSE(w, r, rt)
	case epSSEMessages:
		g.serveLegacyMessage(w, r)
	default:
		switch r.Method {
		case http.MethodPost:
			g.servePost(w, r, rt)
		case http.MethodGet, http.MethodDelete:
			if r.Header.Get(mcpwire.HeaderSessionID) == "" && mcpwire.IsStatelessRevision(r.Header.Get(mcpwire.HeaderProtocolVersion)) {
				// The stateless era has no GET stream and no session to
				// end (transports: a server of only that era answers 405).
				w.Header().Set("Allow", "POST")
				writeRPCError(w, http.StatusMethodNotAllowed, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
					"Method not allowed: MCP %s has no %s; use POST (subscriptions/listen for notifications)", r.Header.Get(mcpwire.HeaderProtocolVersion), r.Method))
				return
			}
			if r.Method == http.MethodGet {
				g.serveGet(w, r)
			} else {
				g.serveDelete(w, r)
			}
		case http.MethodOptions:
			w.Header().Set("Allow", "GET, POST, DELETE, OPTIONS")
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Allow", "GET, POST, DELETE")
			writeRPCError(w, http.StatusMethodNotAllowed, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Method not allowed"))
		}
	}
}

// versionHeaderKnown rejects a session-era request whose
// MCP-Protocol-Version header names a revision the gateway does not speak
// (S2.2).
func versionHeaderKnown(w http.ResponseWriter, r *http.Request) bool {
	if v := r.Header.Get(mcpwire.HeaderProtocolVersion); v != "" && !mcpwire.IsKnown(v) {
		writeRPCError(w, http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Unsupported MCP-Protocol-Version %s; supported: %s", v, mcpwire.SupportedList()))
		return false
	}
	return true
}

// corsHeaders are the request headers a browser client may send.
const corsHeaders = "Content-Type, Accept, Authorization, Mcp-Session-Id, Mcp-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-Id, X-Mcp-Servers, X-Mcpgate-Api-Key"

// setCORS answers an allowed origin's cross-origin request. requested is
// the preflight's Access-Control-Request-Headers: the Mcp-Param-* names in
// it are allowed one by one, as CORS has no prefix wildcard and a tool's
// annotations decide which names exist.
func setCORS(h http.Header, origin string, requested []string) {
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
	allow := corsHeaders
	for _, line := range requested {
		for name := range strings.SplitSeq(line, ",") {
			name = strings.TrimSpace(name)
			if len(name) > len(mcpwire.HeaderParamPrefix) && strings.EqualFold(name[:len(mcpwire.HeaderParamPrefix)], mcpwire.HeaderParamPrefix) && mcpwire.IsToken(name) {
				allow += ", " + name
			}
		}
	}
	h.Set("Access-Control-Allow-Headers", allow)
	h.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate")
	h.Set("Access-Control-Max-Age", "600")
}

// serveReady answers /readyz. Anyone may probe it (load balancers send no
// credentials), so an anonymous probe learns readiness only: ready or not,
// and each server's and the state backend's status, without times or
// errors (an upstream's last error names internal hosts, ports and the
// resolver). A request that authenticates as an administrator (the master
// key, an admin key or an admin token, as the admin API takes them) also
// gets since and last_error, as GET /admin/v1/servers gives them.
func (g *Gateway) serveReady(w http.ResponseWriter, r *http.Request) {
	details := g.readyDetails(r)
	health := g.up.Health()
	ready := !g.closing.Load() && !g.draining.Load()
	servers := map[string]any{}
	for name, h := range health {
		entry := map[string]any{"state": h.State}
		if details {
			entry["since"] = h.Since.UTC().Format(time.RFC3339)
			if h.LastError != "" {
				entry["last_error"] = h.LastError
			}
		}
		servers[name] = entry
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	body := map[string]any{"ready": ready, "servers": servers}
	if st := g.stateReport(); st != nil {
		if !details {
			st = map[string]any{"status": st["status"]}
		}
		body["state"] = st
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, body)
}

// readyDetails reports whether r authenticates as an administrator, as
// the admin API takes one: a bearer token must name the admin API itself
// (WithAdminResource), so an issuer's gateway-wide audience, good on the
// MCP routes, gets no details. A request without a credential, or with
// one that fails, is an anonymous probe: it is not refused, it gets the
// status alone.
func (g *Gateway) readyDetails(r *http.Request) bool {
	if g.auth == nil || (r.Header.Get("Authorization") == "" && !hasKeyHeader(r)) {
		return false
	}
	c, f := g.auth.Authenticate(r.WithContext(callers.WithAdminResource(r.Context(), g.AdminResource(r))))
	return f == nil && c != nil && (c.Master || c.Admin)
}

// checkOriginHost applies S2.1: Origin allow-list and, on loopback, a Host
// allow-list against DNS rebinding.
func (g *Gateway) checkOriginHost(r *http.Request) error {
	if origin := r.Header.Get("Origin"); origin != "" && !g.originAllowed(origin) && !g.sameOrigin(r, origin) {
		g.metrics.SecurityRefusal(metrics.RefusedOrigin)
		return errString("Invalid Origin header")
	}
	if g.loopback.Load() && !netaddr.HostAllowed(r.Host, g.conf().AllowedHosts) {
		g.metrics.SecurityRefusal(metrics.RefusedHost)
		return errString("Invalid Host header")
	}
	return nil
}

// sameOrigin: the request comes from a page the gateway served itself (its
// login, consent and connect pages, the console), whose origin is the
// gateway's own (linkBase: public_url's, else the listener's on loopback,
// else the request's scheme and Host). Such a page is no cross-site
// caller, whatever allowed_origins lists.
func (g *Gateway) sameOrigin(r *http.Request, origin string) bool {
	base := g.linkBase(r)
	if i := strings.Index(base, "://"); i >= 0 {
		if j := strings.IndexByte(base[i+3:], '/'); j >= 0 {
			base = base[:i+3+j]
		}
	}
	return strings.EqualFold(base, strings.TrimRight(origin, "/"))
}

func (g *Gateway) originAllowed(origin string) bool {
	for _, o := range g.conf().AllowedOrigins {
		if o == "*" || strings.EqualFold(strings.TrimRight(o, "/"), strings.TrimRight(origin, "/")) {
			return true
		}
	}
	// A page served from loopback talking to a loopback gateway is the
	// local-tools case (the Inspector); a remote page is not.
	if g.loopback.Load() {
		if i := strings.Index(origin, "://"); i >= 0 {
			host, _, ok := netaddr.SplitHostHeader(origin[i+3:])
			return ok && netaddr.IsLoopbackHost(host)
		}
	}
	return false
}

type errString string

func (e errString) Error() string { return string(e) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeRPCError(w http.ResponseWriter, status int, e *jsonrpc.Error) {
	writeRPCErrorID(w, status, jsonrpc.ID{}, e)
}

// writeRPCErrorID is writeRPCError answering the request id.
func writeRPCErrorID(w http.ResponseWriter, status int, id jsonrpc.ID, e *jsonrpc.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(jsonrpc.Encode(jsonrpc.NewErrorResponse(id, e)))
}
