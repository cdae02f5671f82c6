// Package admin owns the gateway's REST admin API under /admin/v1 (SPEC
// S13): virtual keys, servers, toolsets, sessions, the catalog as a caller
// sees it, access explanations and the audit log, JSON in and out, with its
// OpenAPI document at /admin/v1/openapi.json. Every request must come from
// the master key or a key with admin rights; anything else gets 401 or a
// bare 403 that reveals nothing about what exists. The exception is /me,
// where every person (a key or JWT caller) manages their own upstream
// credentials and connections (credentials.go, connections.go). Its URL
// space on the gateway's origin, /me aliases and resource identifier
// included, is its own (routes.go): the binary mounts it, the gateway
// serves none of it. A handler never writes a refusal itself: it returns
// it, and one adapter (errors.go) writes the status, the JSON error and
// one log line, which never carries a request body or a secret.
//
// It decides nothing about MCP traffic itself: it reads and changes the
// store, asks the gateway for its live state, and tells the authenticator
// when a key changed so that a revoked key stops working at once. In a
// fleet it announces each change on the bus and applies the other
// replicas' (announce.go); it never imports a store or bus backend, and
// the store stays the only source of truth: an announcement only says
// what to re-read.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/integrity"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// Prefix is where the API is served.
const Prefix = "/admin/v1"

// maxBody bounds an admin request body.
const maxBody = 1 << 20

// Options wires the API to the rest of the gateway.
type Options struct {
	Gateway *gateway.Gateway
	Store   store.Store
	Config  *config.Config
	// Authenticate identifies the caller of an admin request.
	Authenticate func(*http.Request) (*callers.Caller, *callers.Failure)
	// OpenAccess lets anonymous callers administer: only for a gateway
	// with no auth configured whose listener is loopback only (the
	// quickstart), so that its console opens without a key. Even then a
	// request whose peer address is not loopback gets no admin powers
	// (openAccess): a listener that bound more than its text said, or a
	// proxy in front, never hands the API to a remote caller.
	OpenAccess bool
	// KeyChanged is called after a key was created, changed or revoked,
	// here or on another replica.
	KeyChanged func(alias string)
	// KeysFlushed is called when any key may have changed unseen (the
	// bus lost messages): every cached key must be read again.
	KeysFlushed func()
	// Bus carries admin changes between the replicas of a fleet
	// (announce.go); nil: this replica is alone, nothing is announced or
	// followed.
	Bus state.PubSub
	// Grants are the JWT callers' grants the authenticator reads; the
	// API lists them and adds runtime ones. nil: no grants endpoints.
	Grants *callers.GrantSet
	// Vault stores each person's own credentials (/me/credentials); nil:
	// no vault is configured.
	Vault *vault.Vault
	// Reload reads the config file again and applies it (POST /reload,
	// and another replica's announced reload); by names who asked, for
	// the audit log. An *InvalidConfigError means nothing changed. nil:
	// the endpoint answers 501.
	Reload func(ctx context.Context, by string) (*ReloadReport, error)
	// Stats reads each server's tool-call totals and latency quantiles,
	// and what the gateway dropped since it started (audit records,
	// exporters' records, log lines), from one read of the gateway's
	// metrics (GET /stats, the console's overview); nil: the endpoint
	// answers an empty list and no losses.
	Stats func() (metrics.Overview, error)
	// Metrics counts the admin changes some other replica did not
	// confirm in time (announce.go); nil: not counted.
	Metrics *metrics.Metrics
	// CheckServer reaches a server afresh, as mcpgate doctor does (a new
	// session's handshake, the tools/list walk, TLS expiry, the auth
	// result), for POST /servers/{name}/test; false when there is no such
	// server. nil: the endpoint answers 501.
	CheckServer func(ctx context.Context, name string) (any, bool)
	// Integrity is tool integrity's keeper (GET /integrity, approve,
	// reject); nil: those endpoints answer 501.
	Integrity *integrity.Keeper
	// Known names, for validating key attributes.
	Servers      func() []string
	Toolsets     func() []string
	AccessGroups func() []string
	Logger       *slog.Logger
	Now          func() time.Time
}

// API is the admin HTTP handler.
type API struct {
	o   Options
	mux *http.ServeMux
	log *slog.Logger
	id  string // names this API's announcements (announce.go)
	// confirms: this API's announcements waiting for every replica to
	// apply them (announce.go).
	confirms state.Confirms

	// The runtime servers and toolsets served as the store holds them
	// (announce.go).
	servers, toolsets *runtimeObjects

	// cfg is the configuration served: Options.Config, then each
	// reload's (SetConfig).
	cfg atomic.Pointer[config.Config]

	stop       func() // ends the follower; nil: not started
	bg         sync.WaitGroup
	synced     chan struct{} // closed once the follower resynced (following)
	syncedOnce sync.Once
}

// New builds the API.
func New(o Options) *API {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	for _, f := range []*func() []string{&o.Servers, &o.Toolsets, &o.AccessGroups} {
		if *f == nil {
			*f = func() []string { return nil }
		}
	}
	a := &API{o: o, mux: http.NewServeMux(), log: o.Logger, id: newInstanceID(), synced: make(chan struct{})}
	a.cfg.Store(o.Config)
	a.servers = &runtimeObjects{kind: store.KindServer, fromFile: a.fromFile, load: a.loadServer,
		unload: func(name string) bool { return a.o.Gateway.RemoveServer(name) }, applied: map[string]json.RawMessage{}}
	a.toolsets = &runtimeObjects{kind: store.KindToolset, fromFile: a.toolsetFromFile, load: a.loadToolset,
		unload: func(name string) bool { return a.o.Gateway.RemoveToolset(name) }, applied: map[string]json.RawMessage{}}
	for _, r := range routes {
		a.mux.HandleFunc(r.method+" "+Prefix+r.path, a.handle(r.handler(a)))
	}
	if o.Vault != nil && o.Bus != nil {
		// Every vault write of this process (a credential or connection
		// here, a person's connect or a refresh in the gateway) tells the
		// other replicas which entry to forget.
		o.Vault.OnChange(func(ctx context.Context, id string, deleted bool) {
			// A deletion revokes a person's credential or connection:
			// answered once every replica forgot it. A write (a new
			// value, a refresh, a last-use stamp: on the call path, under
			// the entry's lock) is told without waiting; the others only
			// drop the copy they cached.
			if deleted {
				a.announce(ctx, changeVault, id)
			} else {
				a.tell(ctx, changeVault, id)
			}
		})
	}
	return a
}

// route is one endpoint; the OpenAPI document is checked against this
// table by a test, so the two cannot drift apart.
type route struct {
	method, path string
	handler      func(*API) handlerFunc
}

var routes = []route{
	{"GET", "/openapi.json", func(a *API) handlerFunc { return a.openAPI }},
	{"POST", "/reload", func(a *API) handlerFunc { return a.reload }},
	{"GET", "/keys", func(a *API) handlerFunc { return a.listKeys }},
	{"POST", "/keys", func(a *API) handlerFunc { return a.createKey }},
	{"GET", "/keys/{alias}", func(a *API) handlerFunc { return a.getKey }},
	{"PATCH", "/keys/{alias}", func(a *API) handlerFunc { return a.updateKey }},
	{"DELETE", "/keys/{alias}", func(a *API) handlerFunc { return a.deleteKey }},
	{"GET", "/grants", func(a *API) handlerFunc { return a.listGrants }},
	{"PUT", "/grants/{kind}/{value}", func(a *API) handlerFunc { return a.putGrant }},
	{"DELETE", "/grants/{kind}/{value}", func(a *API) handlerFunc { return a.deleteGrant }},
	{"GET", "/servers", func(a *API) handlerFunc { return a.listServers }},
	{"POST", "/servers", func(a *API) handlerFunc { return a.addServer }},
	{"DELETE", "/servers/{name}", func(a *API) handlerFunc { return a.removeServer }},
	{"PATCH", "/servers/{name}", func(a *API) handlerFunc { return a.patchServer }},
	{"GET", "/servers/{name}/preview", func(a *API) handlerFunc { return a.previewServer }},
	{"GET", "/servers/{name}/tools", func(a *API) handlerFunc { return a.serverTools }},
	{"POST", "/servers/{name}/test", func(a *API) handlerFunc { return a.testServer }},
	{"PUT", "/servers/{name}/tools", func(a *API) handlerFunc { return a.putServerTools }},
	{"GET", "/stats", func(a *API) handlerFunc { return a.stats }},
	{"GET", "/stats/series", func(a *API) handlerFunc { return a.statsSeries }},
	{"GET", "/sessions", func(a *API) handlerFunc { return a.listSessions }},
	{"POST", "/sessions/terminate", func(a *API) handlerFunc { return a.terminateSessions }},
	{"GET", "/toolsets", func(a *API) handlerFunc { return a.listToolsets }},
	{"PUT", "/toolsets/{name}", func(a *API) handlerFunc { return a.putToolset }},
	{"DELETE", "/toolsets/{name}", func(a *API) handlerFunc { return a.deleteToolset }},
	{"GET", "/integrity", func(a *API) handlerFunc { return a.listIntegrity }},
	{"POST", "/integrity/{server}/approve", func(a *API) handlerFunc { return a.approveIntegrity }},
	{"POST", "/integrity/{server}/reject", func(a *API) handlerFunc { return a.rejectIntegrity }},
	{"GET", "/tools", func(a *API) handlerFunc { return a.listTools }},
	{"POST", "/tools/call", func(a *API) handlerFunc { return a.callTool }},
	{"GET", "/explain", func(a *API) handlerFunc { return a.explain }},
	{"GET", "/audit", func(a *API) handlerFunc { return a.listToolCalls }},
	{"GET", "/audit/events", func(a *API) handlerFunc { return a.listEvents }},
	{"GET", "/usage", func(a *API) handlerFunc { return a.usage }},
	{"GET", "/usage/series", func(a *API) handlerFunc { return a.usageSeries }},
	{"PUT", "/me/credentials/{server}", func(a *API) handlerFunc { return a.putCredential }},
	{"GET", "/me/credentials", func(a *API) handlerFunc { return a.listCredentials }},
	{"DELETE", "/me/credentials/{server}", func(a *API) handlerFunc { return a.deleteCredential }},
	{"GET", "/connections", func(a *API) handlerFunc { return a.listConnections }},
	{"DELETE", "/connections/{person}", func(a *API) handlerFunc { return a.revokePersonConnections }},
	{"DELETE", "/connections/{person}/{server}", func(a *API) handlerFunc { return a.revokeConnection }},
	{"GET", "/me/connections", func(a *API) handlerFunc { return a.listMyConnections }},
	{"GET", "/me/servers", func(a *API) handlerFunc { return a.listMyServers }},
	{"DELETE", "/me/connections/{server}", func(a *API) handlerFunc { return a.revokeMyConnection }},
}

// ServeHTTP authenticates the caller, then routes; a refusal is written
// by the one adapter, as every handler's.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := a.serve(w, r); err != nil {
		a.writeError(w, r, err)
	}
}

func (a *API) serve(w http.ResponseWriter, r *http.Request) error {
	_, pattern := a.mux.Handler(r)
	admit := a.admit
	if selfRoutes[pattern] {
		admit = a.admitPerson // a person's own entries: every person
	}
	caller, err := admit(r)
	if err != nil {
		return err
	}
	r = r.WithContext(withUnconfirmed(callers.NewContext(r.Context(), caller), w.Header()))
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if pattern == "" {
		// Unknown path or method: the same answer for both, no hint.
		return notFound("no such admin endpoint")
	}
	a.mux.ServeHTTP(w, r) // sets the path values the handlers read
	return nil
}

// admit lets the master key and admin keys in (and anonymous callers on an
// open, loopback-only gateway).
func (a *API) admit(r *http.Request) (*callers.Caller, error) {
	var c *callers.Caller
	if a.o.Authenticate != nil {
		var f *callers.Failure
		c, f = a.o.Authenticate(r)
		if f != nil {
			return nil, failed(f)
		}
	}
	switch {
	case c != nil && (c.Master || c.Admin):
		return c, nil
	case (c == nil || c.Anonymous) && a.openAccess(r):
		return &callers.Caller{Anonymous: true, Admin: true}, nil
	}
	return nil, refusal(http.StatusForbidden, "")
}

// openAccess reports whether an anonymous r may administer: the API is
// open (Options.OpenAccess) and r came from this host's loopback.
func (a *API) openAccess(r *http.Request) bool {
	if !a.o.OpenAccess {
		return false
	}
	// A request a proxy relayed (one on this host, say, publishing the
	// loopback listener) comes from a loopback peer but from someone
	// else: no anonymous administration for it.
	for _, h := range forwardHeaders {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && netaddr.IsLoopbackIP(ap.Addr().Unmap())
}

// forwardHeaders are the headers a reverse proxy adds for the client it
// relays.
var forwardHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip"}

// actor names the caller in the audit log.
func actor(ctx context.Context) string {
	c := callers.FromContext(ctx)
	switch {
	case c == nil || c.Anonymous:
		return "anonymous"
	case c.Master:
		return store.ActorMaster
	}
	return c.Alias
}

// audit records an admin action; a failure to record is logged, not
// returned: the action itself happened.
func (a *API) audit(ctx context.Context, action, target string, detail any) {
	a.auditAs(ctx, actor(ctx), action, target, detail)
}

// auditAs is audit with the actor named (a reload by SIGHUP has no caller).
func (a *API) auditAs(ctx context.Context, who, action, target string, detail any) {
	var raw json.RawMessage
	if detail != nil {
		raw, _ = json.Marshal(detail)
	}
	if n := unconfirmedOf(ctx); n > 0 {
		if string(raw) == "null" {
			raw = nil // a nil map or slice: no detail
		}
		// Not an object: the detail stays as it was (the header, the
		// log and the metric still say it).
		if withN, err := jsonrpc.Set(raw, "unconfirmed", strconv.AppendInt(nil, int64(n), 10)); err == nil {
			raw = withN
		}
	}
	if _, err := a.o.Store.AppendAudit(ctx, store.AuditEntry{Time: a.o.Now(), Actor: who, Action: action, Target: target, Detail: raw}); err != nil {
		a.log.Warn("admin audit write failed", "action", action, "error", err)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // messages like "must be >= 0" stay readable
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"Internal Server Error"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// decode reads a JSON body strictly: unknown fields are errors that name
// the field.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return refusal(http.StatusRequestEntityTooLarge, fmt.Sprintf("body exceeds %d bytes", maxBody))
		case errors.Is(err, io.EOF):
			return badRequest("a JSON body is required")
		}
		return badRequest("invalid JSON: " + jsonErr(err))
	}
	if dec.More() {
		return badRequest("invalid JSON: more than one value")
	}
	return nil
}

// jsonErr describes a decoding error without echoing values.
func jsonErr(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q must be %s", te.Field, te.Type.String())
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "json: unknown field ") {
		return "unknown field " + strings.TrimPrefix(msg, "json: unknown field ")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at offset %d", se.Offset)
	}
	return "malformed body"
}

func (a *API) listServers(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, a.o.Gateway.ServersStatus())
	return nil
}

func (a *API) listSessions(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, a.o.Gateway.FleetSessionsReport(r.Context()))
	return nil
}

// terminateRefused is a termination's 503: what was ended before it
// stopped, and why it did not end the rest.
type terminateRefused struct {
	gateway.TerminateResult
	Error   string `json:"error"`
	Details string `json:"details"`
}

type terminateRequest struct {
	SessionIDPrefix string `json:"session_id_prefix"`
	User            string `json:"user"`
}

func (a *API) terminateSessions(w http.ResponseWriter, r *http.Request) error {
	var req terminateRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	res, err := a.o.Gateway.TerminateSessions(r.Context(), req.SessionIDPrefix, req.User)
	if errors.Is(err, gateway.ErrNoSelector) {
		return badRequest(err.Error())
	}
	if res.Terminated > 0 || err == nil {
		detail := map[string]any{"user": req.User, "terminated": res.Terminated}
		if res.Unconfirmed > 0 {
			// Some replica may serve these until it hears of their end.
			detail["unconfirmed"] = res.Unconfirmed
		}
		a.audit(r.Context(), "session.terminate", req.SessionIDPrefix, detail)
	}
	if err != nil {
		// Not every matching session was ended: the operator is told,
		// with those that were, and may send it again (ended ones are
		// not counted twice).
		details := fmt.Sprintf("%d sessions were ended; ", res.Terminated)
		if errors.Is(err, gateway.ErrFleetUnreachable) {
			details += err.Error()
		} else {
			details += "the store did not record the end of the next one, which was not ended, nor any after it"
		}
		return refusal(http.StatusServiceUnavailable, "").
			withBody(terminateRefused{TerminateResult: res, Error: "Service Unavailable", Details: details + ": try again shortly"}).
			withHeader("Retry-After", "1").
			logged(slog.LevelError, "terminate sessions: not every matching session was ended", err, "terminated", res.Terminated)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// pageParams reads limit and the before cursor ("<unix ms>.<id>").
func pageParams(q map[string][]string) (limit int, before *store.Cursor, err error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if s := get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 {
			return 0, nil, errors.New("limit must be a positive integer")
		}
	}
	if s := get("before"); s != "" {
		ms, id, ok := strings.Cut(s, ".")
		t, err1 := strconv.ParseInt(ms, 10, 64)
		n, err2 := strconv.ParseInt(id, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return 0, nil, errors.New("before must be a cursor returned as next")
		}
		before = &store.Cursor{Time: time.UnixMilli(t).UTC(), ID: n}
	}
	return limit, before, nil
}

func cursorString(c *store.Cursor) string {
	if c == nil {
		return ""
	}
	return strconv.FormatInt(c.Time.UnixMilli(), 10) + "." + strconv.FormatInt(c.ID, 10)
}

// ToolCallRecord is one row of GET /admin/v1/audit.
type ToolCallRecord struct {
	ID            int64  `json:"id"`
	Time          string `json:"time"`
	KeyAlias      string `json:"key_alias,omitempty"`
	User          string `json:"user,omitempty"`
	Team          string `json:"team,omitempty"`
	Server        string `json:"server"`
	Tool          string `json:"tool"`
	Outcome       string `json:"outcome"`
	Fault         string `json:"fault,omitempty"`
	DurationMs    int64  `json:"duration_ms"`
	Session       string `json:"session,omitempty"`
	RequestBytes  int64  `json:"request_bytes"`
	ResponseBytes int64  `json:"response_bytes"`
	// Guardrail names the guardrail that blocked the call (outcome blocked).
	Guardrail string `json:"guardrail,omitempty"`
	// Cost is the call's price (servers.<name>.tools.costs).
	Cost float64 `json:"cost,omitempty"`
}

// ToolCallPage is GET /admin/v1/audit.
type ToolCallPage struct {
	Calls []ToolCallRecord `json:"calls"`
	Next  string           `json:"next,omitempty"`
}

func (a *API) listToolCalls(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, before, err := pageParams(q)
	if err != nil {
		return badRequest(err.Error())
	}
	f := store.ToolCallFilter{KeyAlias: q.Get("key"), User: q.Get("user"), Team: q.Get("team"),
		Server: q.Get("server"), Tool: q.Get("tool"), Outcome: q.Get("outcome"), Limit: limit, Before: before}
	if f.Since, err = timeParam(q.Get("since")); err != nil {
		return badRequest("since: " + err.Error())
	}
	calls, next, err := a.o.Store.ListToolCalls(r.Context(), f)
	if err != nil {
		return storeUnavailable("list tool calls", err)
	}
	page := ToolCallPage{Calls: make([]ToolCallRecord, 0, len(calls)), Next: cursorString(next)}
	for _, c := range calls {
		page.Calls = append(page.Calls, ToolCallRecord{ID: c.ID, Time: c.Time.UTC().Format(time.RFC3339Nano), KeyAlias: c.KeyAlias, User: c.User,
			Team: c.Team, Server: c.Server, Tool: c.Tool, Outcome: c.Outcome, Fault: c.ErrorClass, DurationMs: c.DurationMs,
			Session: c.SessionIDPrefix, RequestBytes: c.RequestBytes, ResponseBytes: c.ResponseBytes, Guardrail: c.Guardrail, Cost: c.Cost})
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// UsageRow is one key, user or team of GET /admin/v1/usage.
type UsageRow struct {
	Group string  `json:"group"`
	Calls int64   `json:"calls"`
	Cost  float64 `json:"cost"`
}

// UsageReport is GET /admin/v1/usage: tool calls and their cost summed
// per key alias, user or team over [since, until).
type UsageReport struct {
	By    string     `json:"by"`
	Since string     `json:"since,omitempty"`
	Until string     `json:"until,omitempty"`
	Total float64    `json:"total"`
	Usage []UsageRow `json:"usage"`
}

func (a *API) usage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.UsageFilter{By: q.Get("by")}
	if f.By == "" {
		f.By = store.UsageByKey
	}
	if _, ok := store.UsageColumn(f.By); !ok {
		return badRequest("by: must be key, user or team")
	}
	var err error
	if f.Since, err = timeParam(q.Get("since")); err != nil {
		return badRequest("since: " + err.Error())
	}
	if f.Until, err = timeParam(q.Get("until")); err != nil {
		return badRequest("until: " + err.Error())
	}
	ul, ok := a.o.Store.(store.UsageLog)
	if !ok {
		return refusal(http.StatusNotImplemented, "this store cannot sum usage")
	}
	rows, err := ul.SumUsage(r.Context(), f)
	if err != nil {
		return storeUnavailable("sum usage", err)
	}
	rep := UsageReport{By: f.By, Since: q.Get("since"), Until: q.Get("until"), Usage: make([]UsageRow, 0, len(rows))}
	for _, u := range rows {
		rep.Usage = append(rep.Usage, UsageRow{Group: u.Group, Calls: u.Calls, Cost: u.Cost})
		rep.Total += u.Cost
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

func timeParam(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, errors.New("must be an RFC 3339 time")
	}
	return t, nil
}

// EventRecord is one admin action in GET /admin/v1/audit/events.
type EventRecord struct {
	Time   string          `json:"time"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Target string          `json:"target,omitempty"`
	Detail json.RawMessage `json:"detail,omitempty"`
}

func (a *API) listEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, before, err := pageParams(q)
	if err != nil {
		return badRequest(err.Error())
	}
	entries, next, err := a.o.Store.ListAudit(r.Context(), store.AuditFilter{Actor: q.Get("actor"), Action: q.Get("action"), Limit: limit, Before: before})
	if err != nil {
		return storeUnavailable("list audit events", err)
	}
	out := struct {
		Events []EventRecord `json:"events"`
		Next   string        `json:"next,omitempty"`
	}{Events: make([]EventRecord, 0, len(entries)), Next: cursorString(next)}
	for _, e := range entries {
		out.Events = append(out.Events, EventRecord{Time: e.Time.UTC().Format(time.RFC3339Nano), Actor: e.Actor, Action: e.Action, Target: e.Target, Detail: e.Detail})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) previewServer(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	p, ok := a.o.Gateway.PreviewServer(name)
	if !ok {
		return notFound(fmt.Sprintf("no server %q", name))
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

// stats answers each server's tool-call totals since start and latency
// quantiles; a reader's rates are the differences of two reads.
func (a *API) stats(w http.ResponseWriter, r *http.Request) error {
	out := struct {
		Servers []metrics.ServerStat `json:"servers"`
		// State: the shared state backend (redis), when there is one,
		// for the overview to show an outage (the replica serves on,
		// degraded).
		State *gateway.SharedState `json:"state,omitempty"`
		// Losses: what was dropped since start, for the overview to
		// show (the log and the metrics say it too).
		Losses *metrics.Losses `json:"losses,omitempty"`
	}{Servers: []metrics.ServerStat{}}
	if a.o.Gateway != nil {
		out.State = a.o.Gateway.SharedState()
	}
	if a.o.Stats != nil {
		ov, err := a.o.Stats()
		if err != nil {
			e := refusal(http.StatusInternalServerError, err.Error())
			e.title = "Could not read the metrics"
			return e.logged(slog.LevelError, "read the metrics", err)
		}
		if ov.Servers != nil {
			out.Servers = ov.Servers
		}
		out.Losses = &ov.Losses
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
