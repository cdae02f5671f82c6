// Package gateway is mcpgate's ingress: it serves MCP to downstream clients
// over streamable HTTP, legacy HTTP+SSE and stdio, and turns each message
// into work on the upstreams.
//
//	HTTP/stdio -> gates (origin, host, protocol version, body size)
//	           -> session (stateful by Mcp-Session-Id, or sessionless)
//	           -> dispatch (method -> handler)
//	           -> catalog (merged, namespaced lists) / upstream (calls)
//	           <- relay (progress, logs, list_changed, sampling, elicitation,
//	              roots, cancellation) back to the downstream that caused it
//
// Over HTTP it offers handlers, not a router: the binary's one mux
// (cmd/mcpgate) mounts its Routes (handlers.go) beside the admin API, the
// console and the authorization server, whose paths it does not serve.
// Gates return their refusal; one adapter writes it (httperror.go).
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
	"github.com/mcpgate/mcpgate/internal/connect"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/guard"
	"github.com/mcpgate/mcpgate/internal/integrity"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
	sessions "github.com/mcpgate/mcpgate/internal/session"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tasks"
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
	// AdminPath is where the binary serves its admin API ("/admin/v1";
	// "": none). The gateway serves nothing there, but names it: the
	// route label of its requests' metrics and spans, the resource an
	// administrator's token must name for /readyz's details, and no MCP
	// route of its own.
	AdminPath string
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
	// Integrity reviews every list the catalog fetches and holds
	// changed definitions (tool integrity, issue 27; integrity.go); nil:
	// every definition is served as listed.
	Integrity *integrity.Keeper
	// Replicas is the fleet's replica registry (SPEC S15, peers.go); with
	// fleet.session_keys this replica joins it and forwards what belongs
	// to another replica there. nil: no registry, nothing forwarded.
	Replicas state.Replicas
	// Tasks is where the gateway-run tasks are kept beside memory when
	// task ids are sealed under fleet.session_keys (tasks.go): then any
	// replica, or this one after a restart, answers for any task. nil:
	// tasks live in this process alone.
	Tasks store.Tasks
}

// Gateway serves the merged view of the configured upstreams.
type Gateway struct {
	recheck  time.Duration  // how often streams re-check their key
	rechecks recheckSignal  // RecheckStreams: re-check them now
	watchers streamWatchers // the streams re-checked, and the loop that does (recheck.go)
	// gather is how long an input_required round waits for an upstream's
	// other questions (gatherWindow; tests on a loaded machine widen it).
	gather time.Duration
	// state is what the configuration says, swapped as a whole when
	// servers are added or removed at runtime.
	compiled atomic.Pointer[compiled]
	stateMu  sync.Mutex // serialises runtime changes
	// file is what the config file defines (New's configuration, then
	// each reload's), as opposed to what the admin API added.
	file        atomic.Pointer[fileDefs]
	log         *slog.Logger
	version     string
	sep         string
	pageSize    int
	idleTimeout time.Duration
	maxPerOwner int
	terms       sessions.Ends // the ended sessions' ids (S8.2); never nil once New returns
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
	// integrity holds changed definitions (integrity.go); nil: none.
	integrity *integrity.Keeper

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
	// adminPath is where the binary serves its admin API (Options);
	// the gateway serves nothing there.
	adminPath string
	// alone is ServeHTTP's handler: the gateway's Routes on a mux of
	// their own (handlers.go), built on first use.
	alone struct {
		once sync.Once
		h    http.Handler
	}
	// connect owns the person-credential flows: connect pages, pending
	// connects, registrations, passthrough metadata (elicitconnect.go).
	connect *connect.Flows

	sessions sessions.Table[*session] // this replica's stateful sessions (session.go)
	// ring seals session ids and requestState for the fleet
	// (fleet.session_keys; fleet.go); nil: ids are local to the process.
	ring      *fleet.Ring
	advertise string            // fleet.advertise: where other replicas reach this one
	peers     *fleetrelay.Peers // the fleet's other replicas (peers.go); nil: none

	routes    routeCache
	badNames  onceSet   // exposed tool names already warned about
	conflicts onceSet   // names left out as ambiguous, already reported (names.go)
	apps      appsCache // what MCP Apps read of each tool (apps.go)

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
	taskOuts  ownedTable[party, *taskOut]  // a 2025-11-25 gateway task's id -> where its call's messages go (tasks.go)
	exchanges ownedTable[party, *exchange] // exchange id ->
	// taskTable holds the MCP tasks the gateway runs itself (tasks.go),
	// owned by the caller on the route that made them.
	taskTable *tasks.Table
	// resumables are the resumable POST streams whose calls run here and
	// the resumed GETs served here (resume.go).
	resumables *fleetrelay.Resumables
	// fleetBus tells the other replicas about sessions, list changes and
	// terminations, and follows what they tell (fleetbus.go, fanout.go).
	fleetBus *fleetrelay.Bus

	// streams counts the open long-lived downstream streams
	// (limits.max_streams).
	streams atomic.Int64
	// held are the streams held off net/http (held.go).
	held heldStreams
	// hangups notices held streams' clients going away (held_linux.go).
	hangups hangupWatch
	// inflight counts requests being served. A counter, not a WaitGroup:
	// requests may still start while Close waits (legacy SSE posts), which
	// a WaitGroup forbids.
	inflight atomic.Int64
	closing  atomic.Bool
	draining atomic.Bool // Drain: /readyz says 503, everything else is served
	stop     chan struct{}
	stopOnce sync.Once
	// bgCtx ends with Shutdown: every goroutine the gateway starts
	// beside a request runs under it (or, where its work must outlive
	// Shutdown, under context.WithoutCancel(bgCtx) with a bound of its
	// own: detached). bg counts the loops Start starts (janitor, state
	// watch), which Close waits for before it ends the sessions, as it
	// waits for the fleet's (peers: the registry heartbeat; fleetBus:
	// the note followers), which their owners start from bgCtx. tasks
	// counts the shorter work started on the way (session bookkeeping,
	// upstream subscriptions, calls outliving their request, stream
	// claims kept), which Close waits for last. Goroutines of
	// a request's own (stdio requests, a listen stream's teardown) end
	// with it and say so where they start.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
	tasks    workers
}

// New builds a gateway and its upstream manager and catalog. Call Start to
// launch upstreams and Close to stop them.
func New(o Options) *Gateway {
	cfg := o.Config
	g := &Gateway{
		recheck:     streamRecheck,
		gather:      gatherWindow,
		log:         o.Logger,
		version:     o.Version,
		sep:         cfg.ToolNameSeparator,
		pageSize:    o.PageSize,
		idleTimeout: o.IdleTimeout,
		maxPerOwner: o.MaxSessionsPerOwner,
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
	g.terms = sessions.Ends{Terminations: o.Terminations, Now: g.now, For: g.idleTimeout}
	if g.terms.Terminations == nil {
		g.terms.Terminations = sessions.NewMemTerminations()
	}
	g.instance = sessions.NewID()[:12]
	g.auth = o.Authenticator
	g.connect = g.newConnect(o)
	g.metrics, g.audit, g.metricsOnMain = o.Metrics, o.Audit, o.MetricsOnMain
	g.access = o.AccessLog
	g.adminPath = strings.TrimSuffix(o.AdminPath, "/")
	if o.Usage != nil {
		g.budgets = guard.NewBudgets(o.Usage, o.Spending, g.now)
	}
	g.tracer = o.Tracer
	if d, ok := o.Audit.(DurableAuditSink); ok && cfg.Audit.DurableFor(cfg.Store.Driver) {
		g.durableAudit, g.auditWait = d, cfg.Audit.TimeoutOrDefault()
	}
	g.compiled.Store(compileConfig(cfg))
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
	g.taskTable = g.newTaskTable(cfg, o)
	g.fleetBus = g.newBus()
	g.resumables = g.newResumables()
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
		// MCP Apps too: an upstream's session is shared by callers, so
		// it is told that views can be shown, and the gateway keeps tools
		// only a view may call from clients that run none (apps.go).
		ClientCapabilities: json.RawMessage(`{"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{},"url":{}},"extensions":{"` + mcpwire.ExtUI + `":` + mcpwire.UISettingsDefault + `}}`),
		Handler:            (*relay)(g),
		Logger:             g.log,
		HTTPClient:         o.HTTPClient,
		OnSessionStart:     g.onUpstreamSession,
		// One bound for every transport (S23); enforced by upstream.
		MaxMessageBytes:   int(g.limits().MaxUpstreamMessage),
		MaxBoundPerServer: g.limits().MaxBoundPerServer,
	})
	g.cat = catalog.New(g.up, g.log)
	g.attachIntegrity(o.Integrity)
	return g
}

// Start launches the upstreams (stdio processes start at once) and the
// session janitor.
func (g *Gateway) Start(ctx context.Context) {
	g.up.Start(ctx)
	g.bg.Go(func() { g.janitor(g.bgCtx) })
	if g.peers != nil {
		g.peers.Start(g.bgCtx)
	}
	// Its followers are tracked before serving: until each
	// resynchronised, what it keeps in step is checked against the store
	// (unheard.go).
	g.fleetBus.Start((*busNotes)(g), (*terminations)(g))
	if g.stateCheck != nil {
		// The first answer before serving, so /readyz never guesses.
		g.probeState(g.bgCtx)
		g.bg.Go(g.watchState)
	}
}

// Upstreams exposes the upstream manager (health for admin and readiness).
func (g *Gateway) Upstreams() *upstream.Manager { return g.up }

// Shutdown stops accepting new work and ends the long-lived streams, so an
// HTTP server's Shutdown can wait for the in-flight calls alone.
func (g *Gateway) Shutdown() {
	g.closing.Store(true)
	g.stopOnce.Do(func() { close(g.stop) })
	// A held stream is no longer net/http's: its Server.Shutdown would
	// not end it.
	g.held.stopAll()
	g.hangups.close()
	g.bgCancel()
	g.resumables.Stop()
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
	// Running tasks' calls are cancelled and waited for while their
	// upstreams are still there to hear the cancellation.
	g.taskTable.Close()
	g.peers.Close()
	g.fleetBus.Close()
	g.connect.Close()
	for _, s := range g.sessions.All() {
		s.close()
	}
	err := g.up.Close()
	// Last: the sessions just ended started some (their copies' end in
	// the shared state), and a task still waiting on an upstream ended
	// with it.
	g.tasks.wait()
	return err
}

// workers counts goroutines that Close waits for and that may be started
// while it waits (by a request still in flight, by a session it ends): a
// sync.WaitGroup alone forbids an Add once Wait may have begun. Once
// wait has begun, start runs nothing: nothing of the gateway's runs after
// Close.
type workers struct {
	mu     sync.Mutex // mu guards the fields below
	closed bool
	wg     sync.WaitGroup
}

// start runs f in a goroutine wait waits for. false: wait has begun, and f
// was not run (the caller undoes what f would have undone).
func (w *workers) start(f func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.wg.Go(f)
	return true
}

// wait stops new goroutines and waits for those started.
func (w *workers) wait() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.wg.Wait()
}

// detached is the context of work started beside a request that must
// finish even when it began as the gateway shuts down (a copy's end
// recorded, the replica registry left): Shutdown does not end it, d
// bounds it, and Close waits for it (tasks or bg).
func (g *Gateway) detached(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(g.bgCtx), d)
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
		g.tasks.start(func() { g.checkToolNames(server) })
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

// versionHeaderKnown rejects a session-era request whose
// MCP-Protocol-Version header names a revision the gateway does not speak
// (S2.2).
func versionHeaderKnown(r *http.Request) error {
	if v := r.Header.Get(mcpwire.HeaderProtocolVersion); v != "" && !mcpwire.IsKnown(v) {
		return rpcRefusal(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Unsupported MCP-Protocol-Version %s; supported: %s", v, mcpwire.SupportedList()))
	}
	return nil
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
// gets since (for a server down, when it went down), last_error and its
// fault class, as GET /admin/v1/servers gives them.
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
			if h.Fault != "" {
				entry["fault"] = h.Fault
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
	c, f := g.auth.Authenticate(r.WithContext(callers.WithAdminResource(r.Context(), g.adminResource(r))))
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
