// Package metrics owns the gateway's Prometheus metrics (SPEC S16.1): HTTP
// requests, tool calls and their latency, upstream health, downstream
// sessions, catalog sizes and name conflicts, the audit queue and whether rate limits are
// global (shared state) or replica-local. It registers them, with the
// Go runtime and process collectors, on a registry of its own (never the
// global one, so tests and embedders get exactly these series) and serves
// that registry in the Prometheus text format.
//
// It does not decide what is observed: the gateway, the upstream manager,
// the audit writer and the caller authenticator call the Observe/Set
// methods. It must never be handed a session id, a key, a secret or a tool
// argument as a label value; every label is bounded by the gateway's own
// configuration:
//
//   - route: a route kind chosen by the code ("mcp", "sse", "admin",
//     "health", "metrics"), never a request path;
//   - method: the HTTP method, folded to "OTHER" unless it is a standard one,
//     because clients choose it;
//   - code: the HTTP status the gateway wrote (it writes a small set);
//   - server: a configured upstream name;
//   - tool: a tool name from the gateway's catalog. Callers pass a tool that
//     is in the catalog of server, or [UnknownTool] for anything else (a
//     misspelt or invented name), so a client cannot mint series;
//   - outcome: "ok", "tool_error" or a fault class, the one list in
//     internal/store (store.FaultClasses); fault: a fault class;
//   - state, kind: fixed sets.
//
// A nil *Metrics is valid and records nothing, so components can take one
// optionally. The observation methods are safe for concurrent use and take
// no lock of this package on the hot path: a tool call is one lock-free map
// load of its cached series plus atomic adds; the first observation of a
// series creates and caches it.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric this package defines.
const Namespace = "mcpgate"

// UnknownTool is the tool label of a call naming a tool that is not in the
// catalog.
const UnknownTool = "unknown"

// Upstream health states, as the upstream manager reports them (C11.3).
// mcpgate_upstream_up has one series per state, exactly one of them 1.
const (
	StateStarting = "starting"
	StateReady    = "ready"
	StateDegraded = "degraded"
	StateDown     = "down"
)

var states = [...]string{StateStarting, StateReady, StateDegraded, StateDown}

// ToolCallBuckets are the bounds, in seconds, of the tool-call latency
// histogram: 1ms (a cached or local tool) to 60s (the default call
// timeout), roughly 1-2.5-5 per decade.
var ToolCallBuckets = []float64{
	.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60,
}

// Metrics holds the gateway's collectors and the registry they are on.
type Metrics struct {
	reg *prometheus.Registry

	requests    *prometheus.CounterVec   // route, method, code
	toolCalls   *prometheus.CounterVec   // server, tool, outcome
	toolLatency *prometheus.HistogramVec // server, tool
	upstreamUp  *prometheus.GaugeVec     // server, state
	sessions    prometheus.Gauge
	catalog     *prometheus.GaugeVec   // server, kind
	conflicts   *prometheus.CounterVec // server, kind
	refusals    *prometheus.CounterVec // kind
	unconfirmed *prometheus.CounterVec // kind (fleet confirmations)
	auditDepth  prometheus.Gauge
	auditDrops  prometheus.Counter
	auditUnconf prometheus.Counter
	searches    prometheus.Histogram   // search_tools calls (S20)
	exportDepth *prometheus.GaugeVec   // exporter
	exportDrops *prometheus.CounterVec // exporter
	exportFails *prometheus.CounterVec // exporter
	limitLocal  prometheus.Gauge       // 1 while rate limits are replica-local
	limitLocalN prometheus.Counter     // decisions taken locally
	stateUp     prometheus.Gauge       // 1 while the shared state answers
	fleetSize   prometheus.Gauge       // replicas in the registry, as this one last read it
	reload      reloadMetrics          // config reloads (reload.go)
	guardBlocks *prometheus.CounterVec // server, guardrail, phase
	guardRedact *prometheus.CounterVec // server, guardrail, phase
	guardFails  *prometheus.CounterVec // server, guardrail
	listFails   *prometheus.CounterVec // server, kind, fault
	integrity   *prometheus.CounterVec // server, kind, event
	tasks       *prometheus.GaugeVec   // status (working, input_required)
	tasksEnded  *prometheus.CounterVec // server, outcome
	tasksRefuse *prometheus.CounterVec // server, reason

	// tools caches the two series of each (server, tool, outcome), so an
	// observation is one map load instead of two hashed vector lookups.
	// Read-mostly and lock-free on hits; bounded like the labels.
	tools sync.Map // toolKey -> *toolSeries
	// toolsMu orders filling tools (read side, first observation of a
	// series only) against ForgetServer (write side), so a series created
	// while its server is forgotten is never cached detached from the
	// vectors.
	toolsMu sync.RWMutex

	// healthMu serialises SetUpstreamHealth, so two racing calls for one
	// server cannot leave two states hot. Health changes are rare; no
	// observation path takes it.
	healthMu sync.Mutex
}

// New returns Metrics registered on a new private registry that also holds
// the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "http_requests_total",
			Help:      "HTTP requests served, by route kind, method and status code.",
		}, []string{"route", "method", "code"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "tool_calls_total",
			Help:      "Tool calls handled, by upstream server, tool and outcome.",
		}, []string{"server", "tool", "outcome"}),
		// No outcome label: it would multiply the bucket series by the
		// number of outcomes for little gain; tool_calls_total has the
		// outcome split.
		toolLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "tool_call_duration_seconds",
			Help:      "Tool call latency as seen by the gateway, by upstream server and tool.",
			Buckets:   ToolCallBuckets,
		}, []string{"server", "tool"}),
		upstreamUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "upstream_up",
			Help:      "Upstream health: 1 for the server's current state (starting, ready, degraded, down), 0 for the others.",
		}, []string{"server", "state"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "downstream_sessions",
			Help:      "Live downstream MCP sessions.",
		}),
		catalog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "catalog_items",
			Help:      "Items in the gateway's catalog, by upstream server and kind (tools, prompts, resources, resourceTemplates).",
		}, []string{"server", "kind"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "catalog_name_conflicts_total",
			Help:      "Names (tool or prompt names as exposed, resource URIs) left out of a route and refused because more than one item would have them, by upstream server involved and kind; each name is counted once.",
		}, []string{"server", "kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "security_refusals_total",
			Help:      "Requests refused because they reached for what is not the sender's, by kind: foreign_answer (an answer to a server request sent to another session or caller), foreign_session (another owner's session id), foreign_retry (requestState on another route), host (a Host the loopback listener does not serve), origin (a foreign browser Origin), peer_auth (a fleet hop whose signature does not verify).",
		}, []string{"kind"}),
		unconfirmed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "fleet_unconfirmed_total",
			Help:      "Ends and changes this replica announced that some other replica did not confirm within 2 s, by kind: termination (a session ended, counted per session: that replica may serve its copy until it hears of the end or resynchronises), admin_change (a key, server, toolset, grant, revoked credential or review: that replica may serve the old one meanwhile).",
		}, []string{"kind"}),
		auditDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "audit_queue_depth",
			Help:      "Tool-call audit records waiting to be written.",
		}),
		auditDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "audit_records_dropped_total",
			Help:      "Tool-call audit records dropped (queue full, or the store failed twice).",
		}),
		searches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "tool_search_duration_seconds",
			Help:      "search_tools calls on search and hybrid routes (SPEC S20) and how long each took in the gateway: the upstream lists (cached), the caller's visibility and the ranking.",
			Buckets:   []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		auditUnconf: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "audit_unconfirmed_total",
			Help:      "Tool calls answered (audit.durable) before their audit record was committed: the wait ran out or the record was dropped.",
		}),
		exportDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "audit_export_queue_depth",
			Help:      "Tool-call audit records waiting for an exporter (audit.export), by exporter name.",
		}, []string{"exporter"}),
		exportDrops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "audit_export_dropped_total",
			Help:      "Tool-call audit records an exporter dropped: its queue was full, or a batch failed every attempt.",
		}, []string{"exporter"}),
		exportFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "audit_export_failures_total",
			Help:      "Batches an exporter failed to deliver after every attempt (their records are dropped).",
		}, []string{"exporter"}),
		limitLocal: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "ratelimit_degraded",
			Help:      "1 while rate limits are enforced per replica (limit/N) because the shared state is unavailable, 0 while they are global.",
		}),
		limitLocalN: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "ratelimit_local_decisions_total",
			Help:      "Rate-limit decisions this replica took on its own because the shared state was unavailable.",
		}),
		stateUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "state_up",
			Help:      "1 while the shared state backend (state.driver) answers this replica's probe (every second), 0 while it does not. Always 1 with the memory driver.",
		}),
		fleetSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "fleet_replicas",
			Help:      "Replicas in the fleet registry (this one included) at this replica's last read of it, every heartbeat; 1 outside a fleet. While the shared state is unavailable, rate limits are divided by the larger of this and state.replicas: a value below the fleet's real size there lets the fleet allow more than a limit.",
		}),
		// Guardrail names come from the config: bounded.
		guardBlocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "guardrail_blocks_total",
			Help:      "Tool calls a guardrail blocked (SPEC S21), by upstream server, guardrail name and phase (pre, post).",
		}, []string{"server", "guardrail", "phase"}),
		guardRedact: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "guardrail_redactions_total",
			Help:      "Replacements a redact guardrail (or a webhook's rewrite) made, by upstream server, guardrail name and phase.",
		}, []string{"server", "guardrail", "phase"}),
		guardFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "guardrail_webhook_failures_total",
			Help:      "Guardrail webhook calls that failed or timed out and let the call go on (fail_open), by upstream server and guardrail name.",
		}, []string{"server", "guardrail"}),
		listFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "upstream_list_failures_total",
			Help:      "A client's listings (tools, prompts, resources, resourceTemplates) that an upstream failed to give, by upstream server, kind and fault class; on a route of several servers that server was left out of the answer.",
		}, []string{"server", "kind", "fault"}),
		// Events are internal/integrity's fixed actions: bounded.
		integrity: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "integrity_changes_total",
			Help:      "Tool integrity events (docs/security.md \"Tool integrity\"), by upstream server, kind (tool, prompt, template) and event (changed, added, held, finding, reverted, approved, rejected).",
		}, []string{"server", "kind", "event"}),
		tasks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "tasks",
			Help:      "MCP tasks running on this replica, by status (working, input_required: waiting for its client's answer).",
		}, []string{"status"}),
		tasksEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "tasks_ended_total",
			Help:      "MCP tasks run here that ended, by upstream server and outcome (completed, failed, cancelled, expired: its TTL passed while it ran).",
		}, []string{"server", "outcome"}),
		tasksRefuse: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "tasks_refused_total",
			Help:      "Task-augmented calls refused a task, by upstream server and reason (max_per_caller, store: the task store did not answer).",
		}, []string{"server", "reason"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.toolCalls, m.toolLatency, m.upstreamUp,
		m.sessions, m.catalog, m.conflicts, m.refusals, m.unconfirmed, m.auditDepth, m.auditDrops, m.auditUnconf, m.searches,
		m.exportDepth, m.exportDrops, m.exportFails,
		m.limitLocal, m.limitLocalN, m.stateUp, m.fleetSize,
		m.guardBlocks, m.guardRedact, m.guardFails, m.listFails, m.integrity,
		m.tasks, m.tasksEnded, m.tasksRefuse,
	)
	m.reload = newReloadMetrics(m.reg)
	// Up until a probe says otherwise: the memory driver is never probed.
	m.stateUp.Set(1)
	m.fleetSize.Set(1) // alone until a fleet's registry says otherwise
	return m
}

// Registry is the registry the metrics are on, for a component that owns
// collectors of its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format. A
// collector that fails does not hide the others.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.reg, // promhttp_metric_handler_errors_total
	})
}

// ObserveRequest counts one HTTP request. route is a route kind chosen by
// the caller's code, never a path.
func (m *Metrics) ObserveRequest(route, method string, status int) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(route, foldMethod(method), codeLabel(status)).Inc()
}

// ObserveToolCall counts one tool call and its latency. tool must be a tool
// in server's catalog, or UnknownTool.
func (m *Metrics) ObserveToolCall(server, tool, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	v, ok := m.tools.Load(toolKey{server, tool, outcome})
	if !ok {
		v = m.newToolSeries(server, tool, outcome)
	}
	ts := v.(*toolSeries)
	ts.calls.Inc()
	ts.latency.Observe(d.Seconds())
}

func (m *Metrics) newToolSeries(server, tool, outcome string) any {
	m.toolsMu.RLock()
	defer m.toolsMu.RUnlock()
	v, _ := m.tools.LoadOrStore(toolKey{server, tool, outcome}, &toolSeries{
		calls:   m.toolCalls.WithLabelValues(server, tool, outcome),
		latency: m.toolLatency.WithLabelValues(server, tool),
	})
	return v
}

type toolKey struct{ server, tool, outcome string }

type toolSeries struct {
	calls   prometheus.Counter
	latency prometheus.Observer
}

// SetUpstreamHealth records server's health state: the series for state
// becomes 1 and the other states' 0. A state outside the four known ones
// sets all four to 0.
func (m *Metrics) SetUpstreamHealth(server, state string) {
	if m == nil {
		return
	}
	m.healthMu.Lock()
	defer m.healthMu.Unlock()
	// Zero the others before raising the new one: a concurrent scrape may
	// see no state hot for an instant, never two.
	var hot prometheus.Gauge
	for _, s := range states {
		g := m.upstreamUp.WithLabelValues(server, s)
		if s == state {
			hot = g
			continue
		}
		g.Set(0)
	}
	if hot != nil {
		hot.Set(1)
	}
}

// SetSessions records the number of live downstream sessions.
func (m *Metrics) SetSessions(n int) {
	if m == nil {
		return
	}
	m.sessions.Set(float64(n))
}

// SetCatalogSize records how many items of kind server contributes to the
// catalog.
func (m *Metrics) SetCatalogSize(server, kind string, n int) {
	if m == nil {
		return
	}
	m.catalog.WithLabelValues(server, kind).Set(float64(n))
}

// NameConflict counts a name of kind a route left out because server and
// at least one other item would both have it.
func (m *Metrics) NameConflict(server, kind string) {
	if m == nil {
		return
	}
	m.conflicts.WithLabelValues(server, kind).Inc()
}

// Kinds of mcpgate_fleet_unconfirmed_total.
const (
	UnconfirmedTermination = "termination"
	UnconfirmedAdminChange = "admin_change"
)

// FleetUnconfirmed counts n ends or changes of kind (an Unconfirmed*
// constant) that some other replica did not confirm in time: until it
// hears of them, it may serve what was ended or changed.
func (m *Metrics) FleetUnconfirmed(kind string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.unconfirmed.WithLabelValues(kind).Add(float64(n))
}

// Kinds of mcpgate_security_refusals_total: a fixed set.
const (
	RefusedForeignAnswer  = "foreign_answer"
	RefusedForeignSession = "foreign_session"
	RefusedForeignRetry   = "foreign_retry"
	RefusedHost           = "host"
	RefusedOrigin         = "origin"
	RefusedPeerAuth       = "peer_auth"
)

// SecurityRefusal counts a request refused because it reached for what is
// not its sender's (kind: one of the Refused* constants). Operators alert
// on it: a caller probing other callers' state shows here first.
func (m *Metrics) SecurityRefusal(kind string) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(kind).Inc()
}

// SetAuditQueueDepth records how many audit records are waiting.
func (m *Metrics) SetAuditQueueDepth(n int) {
	if m == nil {
		return
	}
	m.auditDepth.Set(float64(n))
}

// IntegrityChange counts a tool integrity event (event: its action
// without the "integrity." prefix).
func (m *Metrics) IntegrityChange(server, kind, event string) {
	if m == nil {
		return
	}
	m.integrity.WithLabelValues(server, kind, event).Inc()
}

// GuardrailBlock counts a call a guardrail blocked.
func (m *Metrics) GuardrailBlock(server, guardrail, phase string) {
	if m == nil {
		return
	}
	m.guardBlocks.WithLabelValues(server, guardrail, phase).Inc()
}

// GuardrailRedactions counts n replacements a guardrail made.
func (m *Metrics) GuardrailRedactions(server, guardrail, phase string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.guardRedact.WithLabelValues(server, guardrail, phase).Add(float64(n))
}

// ListFailure counts a client's listing of kind that server failed to
// give, with the failure's fault class.
func (m *Metrics) ListFailure(server, kind, fault string) {
	if m == nil {
		return
	}
	m.listFails.WithLabelValues(server, kind, fault).Inc()
}

// GuardrailWebhookFailure counts a failed webhook that let the call on.
func (m *Metrics) GuardrailWebhookFailure(server, guardrail string) {
	if m == nil {
		return
	}
	m.guardFails.WithLabelValues(server, guardrail).Inc()
}

// AuditUnconfirmed counts a tool call answered before its durable audit
// record was committed.
func (m *Metrics) AuditUnconfirmed() {
	if m == nil {
		return
	}
	m.auditUnconf.Inc()
}

// ObserveToolSearch records one search_tools call and its duration.
func (m *Metrics) ObserveToolSearch(d time.Duration) {
	if m == nil {
		return
	}
	m.searches.Observe(d.Seconds())
}

// CountLogDrops makes mcpgate_log_lines_dropped_total read dropped, the
// lines the process's logs dropped while their output was blocked (a
// full pipe, a stalled disk): the log cannot say so itself until it
// moves again. Called once, before serving.
func (m *Metrics) CountLogDrops(dropped func() int64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: Namespace,
		Name:      "log_lines_dropped_total",
		Help:      "Log lines (access lines) dropped while the log's output was blocked.",
	}, func() float64 { return float64(dropped()) }))
}

// AuditDropped counts n dropped audit records.
func (m *Metrics) AuditDropped(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.auditDrops.Add(float64(n))
}

// SetAuditExportDepth records how many records wait for an exporter.
func (m *Metrics) SetAuditExportDepth(exporter string, n int) {
	if m == nil {
		return
	}
	m.exportDepth.WithLabelValues(exporter).Set(float64(n))
}

// AuditExportDropped counts n records an exporter dropped.
func (m *Metrics) AuditExportDropped(exporter string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.exportDrops.WithLabelValues(exporter).Add(float64(n))
}

// AuditExportFailed counts a batch an exporter could not deliver.
func (m *Metrics) AuditExportFailed(exporter string) {
	if m == nil {
		return
	}
	m.exportFails.WithLabelValues(exporter).Inc()
}

// SetRateLimitDegraded records whether rate limits are replica-local
// (the shared state is unavailable) or global.
func (m *Metrics) SetRateLimitDegraded(degraded bool) {
	if m == nil {
		return
	}
	if degraded {
		m.limitLocal.Set(1)
	} else {
		m.limitLocal.Set(0)
	}
}

// SetFleetReplicas records how many replicas the fleet registry listed
// at this replica's last read.
func (m *Metrics) SetFleetReplicas(n int) {
	if m == nil {
		return
	}
	m.fleetSize.Set(float64(n))
}

// SetStateUp records whether the shared state backend answers.
func (m *Metrics) SetStateUp(up bool) {
	if m == nil {
		return
	}
	if up {
		m.stateUp.Set(1)
	} else {
		m.stateUp.Set(0)
	}
}

// RateLimitLocal counts one rate-limit decision taken replica-locally.
func (m *Metrics) RateLimitLocal() {
	if m == nil {
		return
	}
	m.limitLocalN.Inc()
}

// SetTasks records the tasks running on this replica: working, and
// waiting for their client's answer (input_required).
func (m *Metrics) SetTasks(working, inputRequired int) {
	if m == nil {
		return
	}
	m.tasks.WithLabelValues("working").Set(float64(working))
	m.tasks.WithLabelValues("input_required").Set(float64(inputRequired))
}

// TaskEnded counts a task of server that ended with outcome (completed,
// failed, cancelled, expired).
func (m *Metrics) TaskEnded(server, outcome string) {
	if m == nil {
		return
	}
	m.tasksEnded.WithLabelValues(server, outcome).Inc()
}

// TaskRefused counts a call refused a task of server, for reason
// (max_per_caller, store).
func (m *Metrics) TaskRefused(server, reason string) {
	if m == nil {
		return
	}
	m.tasksRefuse.WithLabelValues(server, reason).Inc()
}

// ForgetServer deletes every series labelled with server, for a server
// removed at runtime, so it stops being exported.
func (m *Metrics) ForgetServer(server string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"server": server}
	m.toolsMu.Lock()
	for k := range m.tools.Range {
		if k.(toolKey).server == server {
			m.tools.Delete(k)
		}
	}
	m.toolCalls.DeletePartialMatch(l)
	m.toolLatency.DeletePartialMatch(l)
	m.toolsMu.Unlock()
	m.catalog.DeletePartialMatch(l)
	m.conflicts.DeletePartialMatch(l)
	m.guardBlocks.DeletePartialMatch(l)
	m.guardRedact.DeletePartialMatch(l)
	m.guardFails.DeletePartialMatch(l)
	m.listFails.DeletePartialMatch(l)
	m.integrity.DeletePartialMatch(l)
	m.tasksEnded.DeletePartialMatch(l)
	m.tasksRefuse.DeletePartialMatch(l)
	m.healthMu.Lock()
	m.upstreamUp.DeletePartialMatch(l)
	m.healthMu.Unlock()
}

// foldMethod bounds the method label: a client can send any token as a
// method.
func foldMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPut,
		http.MethodPatch, http.MethodHead, http.MethodOptions:
		return method
	}
	return "OTHER"
}

// codes holds the label of every valid status code, so the hot path does
// not format (and allocate) one per request.
var codes = func() (c [600]string) {
	for i := 100; i < len(c); i++ {
		c[i] = strconv.Itoa(i)
	}
	return c
}()

func codeLabel(status int) string {
	if status < 100 || status >= len(codes) {
		return "other"
	}
	return codes[status]
}
