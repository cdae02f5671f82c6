package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/admin"
	"github.com/mcpgate/mcpgate/internal/audit"
	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/console"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/integrity"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/authserver"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// serverTestTimeout bounds POST /admin/v1/servers/{name}/test.
const serverTestTimeout = 10 * time.Second

// stack is a gateway with everything it runs on: the store, the caller
// authenticator and the admin API.
type stack struct {
	gw *gateway.Gateway
	// accessFile is access_log.path, open; nil for the main log or none.
	accessFile *accessFile
	store      store.Store
	auth       *callers.Authenticator
	audit      *audit.Writer
	metrics    *metrics.Metrics
	// authServer is mcpgate's OAuth authorization server; nil without
	// auth.login.
	authServer *authserver.Server
	// vault holds each person's upstream credentials; nil without the
	// vault section.
	vault *vault.Vault
	// state is what replicas share (SPEC S15): built and closed here; with
	// the redis driver the authenticator's rate limits, the gateway's
	// termination fan-out and the admin API's change follower use it.
	state state.Backend
	// api is the admin API, whose follower applies the other replicas'
	// admin changes.
	api *admin.API
	// tracer exports spans (telemetry.tracing, OTEL_*); nil: tracing off.
	tracer *tracing.Provider
	// grants are the JWT callers' grants: the file's, replaced by a
	// reload, and the runtime ones.
	grants *callers.GrantSet
	// keeper is tool integrity's (integrity.go).
	keeper *integrity.Keeper
	// reload is the reloader once serve made one (POST /admin/v1/reload).
	reload *reloadRef
	// handler is the one router (newMux) over all of the above.
	handler http.Handler
}

// reloadRef lets the admin API, built before the reloader, call it.
type reloadRef struct{ p atomic.Pointer[reloader] }

func (r *reloadRef) reload(ctx context.Context, by string) (*admin.ReloadReport, error) {
	rl := r.p.Load()
	if rl == nil {
		return nil, errors.New("this gateway was not started from a config file it can reload")
	}
	return rl.reload(ctx, by)
}

// build wires the gateway for cfg: it opens the store cfg.Store names,
// makes the config's keys the store's config keys, and mounts the admin
// API. listen is where the gateway will listen (for the loopback rule).
func build(ctx context.Context, cfg *config.Config, log *slog.Logger, listen string) (*stack, error) {
	if cfg.ExposedWithoutAuth(listen) {
		return nil, fmt.Errorf("refusing to serve on %s without authentication: set auth.master_key or auth.keys, "+
			"or auth.anonymous: true to serve anyone who can reach it", listen)
	}
	// The --listen flag may have moved the listener since validation.
	if err := cfg.CheckPublicURL(netaddr.ListenIsLoopback(listen)); err != nil {
		return nil, fmt.Errorf("public_url: %w", err)
	}
	sb, err := openState(ctx, cfg.State, log)
	if err != nil {
		return nil, err
	}
	built := false
	defer func() {
		if !built {
			sb.Close()
		}
	}()
	// Tracing first: nothing else is built yet when it fails (an OTLP
	// protocol from the environment that does not exist), and it connects
	// lazily, so it costs a build that fails later nothing but this.
	tracer, err := tracing.New(ctx, cfg.Telemetry.Tracing, tracing.Options{Version: version(), Logger: log})
	if err != nil {
		return nil, fmt.Errorf("telemetry.tracing: %w", err)
	}
	defer func() {
		if !built {
			_ = tracer.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	res, err := st.SyncConfigKeys(ctx, configKeys(cfg))
	if err != nil {
		st.Close()
		if errors.Is(err, store.ErrConflict) {
			return nil, fmt.Errorf("config keys: %w (an alias in auth.keys belongs to a key created through the admin API; rename one)", err)
		}
		return nil, fmt.Errorf("config keys: %w", err)
	}
	if len(res.Added)+len(res.Updated)+len(res.Removed) > 0 {
		log.Info("config keys synced", "added", res.Added, "updated", res.Updated, "removed", res.Removed)
	}
	anonymous := cfg.AnonymousOnly() || (cfg.Auth != nil && cfg.Auth.Anonymous)
	if cfg.AnonymousOnly() && !(cfg.Auth != nil && cfg.Auth.Anonymous) {
		log.Warn("no auth configured: serving anonymous callers on loopback only; set auth.master_key or auth.keys to require keys")
	}
	master := ""
	if cfg.Auth != nil {
		master = cfg.Auth.MasterKey
	}
	grants := callers.NewGrantSet(callers.GrantsOf(cfg))
	m := metrics.New()
	copts := callers.Options{Keys: st, MasterKey: master, Anonymous: anonymous, Logger: log, GrantSet: grants}
	// bus carries administrator terminations and admin changes to the
	// other replicas; a single process (the memory driver) has none to
	// tell. tickets hold the browser flows' pending steps; stateChk is
	// probed for /readyz.
	var (
		bus      state.PubSub
		tickets  state.Tickets
		stateChk gateway.StateChecker
		// records hold every session for the fleet's admin view and
		// terminations, sealed sessions or sticky ones.
		records  state.Backend
		spending state.Spending
	)
	// reg is the replica registry: with fleet.session_keys the gateway
	// joins it and forwards to the other replicas (SPEC S15).
	var reg state.Replicas
	// gw is the gateway once built, whose live replica count the rate
	// limits' fallback divides by.
	var gw atomic.Pointer[gateway.Gateway]
	if cfg.State.DriverOrDefault() == config.StateRedis {
		bus, tickets, reg, stateChk, records = sb, sb, sb, sb, sb
		// Budgets too: every replica reserves a call's cost in one sum per
		// key, instead of each spending the whole budget.
		spending = sb
		// The rate limits are the fleet's (SPEC S15); with the memory
		// driver they stay the authenticator's own buckets, as they were.
		replicas := cfg.State.ReplicasOrDefault()
		copts.RateLimiter = sb
		copts.Replicas = func() int {
			// The registry's count, the last one read while Redis is down
			// (when this is asked), when it lists more than state.replicas.
			// A listing with fewer may lack replicas that have not renewed
			// since they or Redis (re)started: the first replica of a fleet
			// starting together lists itself alone until its next
			// heartbeat, and an outage then would leave it the whole limit.
			if g := gw.Load(); g != nil {
				return max(g.FleetSize(), replicas)
			}
			return replicas
		}
		copts.OnLimitMode = m.SetRateLimitDegraded
		copts.OnLimitLocal = m.RateLimitLocal
	}
	var (
		local []oauth.LocalIssuer
		as    *authserver.Server
	)
	if cfg.Auth != nil && cfg.Auth.Login != nil {
		var keys authserver.KeyAuthenticator
		if cfg.Auth.Login.Keys {
			keys = loginKeys{st}
		}
		var seal []byte
		if seal, err = cfg.Auth.Login.SealKeyBytes(); err != nil { // validated
			st.Close()
			return nil, fmt.Errorf("auth.login: %w", err)
		}
		var shared authserver.Shared
		if bus != nil {
			// A fleet: each step of a browser login may land on another
			// replica.
			shared = sb
		}
		as, err = authserver.New(ctx, authserver.Options{Login: cfg.Auth.Login, PublicURL: cfg.PublicURL, Store: st, Keys: keys, DataDir: cfg.DataDir, SealKey: seal, Shared: shared, Logger: log,
			// A token is for one route the gateway has, or its admin API,
			// and the consent page names it (SPEC S22).
			Routes: routeNamer{&gw}, Admins: personAdmins{st, grants},
			// Without public_url the issuer is the gateway's own base URL,
			// never a Host a client sent (newMux refuses a request
			// without one).
			Issuer: func(r *http.Request) string {
				if g := gw.Load(); g != nil {
					return g.BaseURL(r)
				}
				return ""
			}})
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("auth.login: %w", err)
		}
		// mcpgate's own tokens are verified by the same code as any
		// issuer's, with its public keys in hand.
		local = append(local, oauth.LocalIssuer{Match: as.MatchIssuer, Keys: as.PublicKeys,
			Claims: config.ClaimPaths{User: "user", Email: "email", Teams: "teams", Org: "org", Roles: "roles"}})
	}
	if cfg.Auth != nil && (len(cfg.Auth.OIDC) > 0 || len(local) > 0) {
		copts.Tokens = oauth.NewVerifier(oauth.VerifierOptions{Issuers: cfg.Auth.OIDC, Local: local, Logger: log})
	}
	auth := callers.New(copts)
	// The vault: each person's own upstream credentials (S19), sealed in
	// the store under the vault section's keys.
	var vlt *vault.Vault
	if cfg.Vault != nil {
		if vlt, err = vault.New(st, cfg.Vault.Keys, nil); err != nil {
			auth.Close()
			if as != nil {
				as.Close()
			}
			st.Close()
			return nil, fmt.Errorf("vault: %w", err)
		}
		if bus != nil {
			// A fleet: one replica at a time refreshes a person's tokens.
			vlt.ShareRefreshes(sb)
		}
	}
	exporters, err := auditExporters(cfg.Audit.Export, log, m)
	if err != nil {
		auth.Close()
		if as != nil {
			as.Close()
		}
		st.Close()
		return nil, err
	}
	keeper, err := newKeeper(cfg, st, exporters, m, log)
	if err != nil {
		auth.Close()
		if as != nil {
			as.Close()
		}
		st.Close()
		return nil, err
	}
	access, accessFile, err := openAccessLog(cfg.AccessLog, log)
	if err != nil {
		auth.Close()
		if as != nil {
			as.Close()
		}
		st.Close()
		return nil, err
	}
	m.CountLogDrops(logDrops(log, accessFile))
	aw := audit.NewWriter(st, audit.Options{QueueSize: auditQueue, Logger: log, OnDepth: m.SetAuditQueueDepth, OnDrop: m.AuditDropped, Exporters: exporters})
	// Keys' budgets read what a key spent from the audit log.
	var usage gateway.UsageFunc
	if ul, ok := st.(store.UsageLog); ok {
		usage = func(ctx context.Context, alias string, since time.Time) (float64, error) {
			us, err := ul.SumUsage(ctx, store.UsageFilter{By: store.UsageByKey, Key: alias, Since: since})
			total := 0.0
			for _, u := range us {
				total += u.Cost
			}
			return total, err
		}
	}
	g := gateway.New(gateway.Options{
		Usage:               usage,
		Spending:            spending,
		AccessLog:           access,
		Metrics:             m,
		MetricsOnMain:       cfg.MetricsListen == "",
		AdminPath:           admin.Prefix,
		Audit:               aw,
		Config:              cfg,
		Logger:              log,
		Version:             version(),
		Authenticator:       auth,
		MaxSessionsPerOwner: cfg.Sessions.MaxPerOwner,
		IdleTimeout:         cfg.Sessions.IdleTimeout,
		Terminations:        st,
		Bus:                 bus,
		Tickets:             tickets,
		Replicas:            reg,
		StateHealth:         stateChk,
		State:               fleetState(cfg, sb),
		Records:             records,
		Vault:               vlt,
		Tracer:              tracer,
		Integrity:           keeper,
		Tasks:               st,
	})
	gw.Store(g)
	// A replica that may have missed the announcement of a key's change
	// (its bus not heard) reads keys from the store per use meanwhile.
	auth.SetFresh(func() bool { return !g.BusHeard().Trusted() })
	if as != nil {
		g.SetPersonConfirmer(personConfirmer{as})
	}
	ref := &reloadRef{}
	var api *admin.API
	api = admin.New(admin.Options{
		Gateway:      g,
		Store:        st,
		Config:       cfg,
		Authenticate: auth.Authenticate,
		// Without any configured key the only callers are anonymous; the
		// admin API (and so the console) is theirs only while the gateway
		// listens on loopback alone: auth.anonymous on a wider listener
		// serves MCP to anyone, never the admin API.
		OpenAccess:   cfg.AnonymousOnly() && master == "" && netaddr.ListenIsLoopback(listen),
		KeyChanged:   auth.Invalidate,
		KeysFlushed:  auth.Flush,
		Bus:          bus,
		Servers:      func() []string { return g.ServerNames() },
		Toolsets:     g.ToolsetNames,
		AccessGroups: func() []string { return slices.Sorted(maps.Keys(api.Config().AccessGroups)) },
		Reload:       ref.reload,
		Grants:       grants,
		Vault:        vlt,
		Stats:        m.Overview,
		Metrics:      m,
		Integrity:    keeper,
		CheckServer: func(ctx context.Context, name string) (any, bool) {
			cur := g.Config()
			if cur.Servers[name] == nil {
				return nil, false
			}
			// The doctor's check of one server; its manager closes in the
			// background, as doctor's do.
			return checkServer(ctx, cur, name, serverTestTimeout, log, new(sync.WaitGroup)), true
		},
		Logger: log,
	})
	if err := api.ReloadGrants(ctx); err != nil {
		log.Warn("could not load runtime grants", "error", err)
	}
	// Servers added through the admin API come back after a restart; the
	// config file wins a name both define.
	if err := api.SyncServers(ctx); err != nil {
		log.Warn("could not load runtime servers", "error", err)
	}
	if err := api.SyncToolsets(ctx); err != nil { // they may name runtime servers
		log.Warn("could not load runtime toolsets", "error", err)
	}
	// With a bus, the other replicas' admin changes apply here too.
	api.Start()
	mnt := mounts{admin: api, console: console.Handler(), publicURL: cfg.PublicURL}
	if as != nil {
		mnt.authServer = as.Handler()
	}
	built = true
	return &stack{gw: g, keeper: keeper, store: st, auth: auth, audit: aw, metrics: m, authServer: as, vault: vlt, state: sb, api: api, accessFile: accessFile, tracer: tracer, grants: grants, reload: ref,
		handler: newMux(g, mnt)}, nil
}

// routeNamer names the gateway's MCP routes for the authorization
// server, which is built before the gateway: until the gateway is there,
// there is no route to name.
type routeNamer struct {
	gw *atomic.Pointer[gateway.Gateway]
}

func (r routeNamer) NameRoute(path string) (string, bool) {
	g := r.gw.Load()
	if g == nil {
		return "", false
	}
	return g.NameRoute(path)
}

// personAdmins says whether a person who signed in at mcpgate's
// authorization server has admin rights, the way the authenticator will
// judge their token on /admin/v1: a key login has its key's admin flag,
// an IdP login what the grants give its user, teams and roles.
type personAdmins struct {
	st     store.Keys
	grants *callers.GrantSet
}

func (p personAdmins) IsAdmin(ctx context.Context, person oauth.Identity) (bool, error) {
	if person.Key != "" {
		k, err := p.st.GetKeyByAlias(ctx, person.Key)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return err == nil && k.Admin, err
	}
	return callers.FromGrants(p.grants.All(), callers.Subject{User: person.User, Teams: person.Teams, Roles: person.Roles}).Admin, nil
}

// loginKeys lets a person log in at mcpgate's authorization server with a
// virtual key (auth.login.keys): the key must be a stored, enabled,
// unexpired key; the master key is not a login.
type loginKeys struct{ st store.Store }

func (l loginKeys) AuthenticateKey(ctx context.Context, secret string) (alias, user, team string, err error) {
	k, err := l.st.GetKeyByHash(ctx, store.HashKey(secret))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", "", "", authserver.ErrKeyRejected
	case err != nil:
		return "", "", "", err
	case k.Disabled || (!k.ExpiresAt.IsZero() && !time.Now().Before(k.ExpiresAt)):
		return "", "", "", authserver.ErrKeyRejected
	}
	user = k.User
	if user == "" {
		user = "key:" + k.Alias // tokens name a user; the key's grants apply
	}
	return k.Alias, user, k.Team, nil
}

// KeyActive is authserver.KeyChecker: a refresh of a key login ends when
// the key does.
func (l loginKeys) KeyActive(ctx context.Context, alias string) (bool, error) {
	k, err := l.st.GetKeyByAlias(ctx, alias)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !k.Disabled && (k.ExpiresAt.IsZero() || time.Now().Before(k.ExpiresAt)), nil
}

// close stops the gateway, then flushes the audit records of the calls it
// served (every acknowledged call is written), then closes the store and
// the shared state.
func (s *stack) close(ctx context.Context) error {
	s.api.Close() // before the store and the bus it reads
	err := s.gw.Close(ctx)
	s.auth.Close()
	if s.authServer != nil {
		s.authServer.Close()
	}
	// The flush gets its own budget: a drain that used up ctx must not
	// cost the records.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = errors.Join(err, s.audit.Close(fctx))
	// The spans of the last calls go out before the process does; a lost
	// collector is logged, not an unclean stop.
	_ = s.tracer.Shutdown(fctx)
	if s.accessFile != nil {
		err = errors.Join(err, s.accessFile.Close())
	}
	return errors.Join(err, s.store.Close(), s.state.Close())
}

// configKeys turns auth.keys into store records: secrets become hashes.
func configKeys(cfg *config.Config) []store.Key {
	if cfg.Auth == nil {
		return nil
	}
	out := make([]store.Key, 0, len(cfg.Auth.Keys))
	for _, k := range cfg.Auth.Keys {
		out = append(out, store.Key{
			Alias: k.Alias, KeyHash: store.HashKey(k.Key), KeyPrefix: store.KeyPrefix(k.Key),
			User: k.User, Team: k.Team, Servers: k.Servers, Tools: k.Tools, DenyTools: k.DenyTools,
			Toolsets: k.Toolsets, AccessGroups: k.AccessGroups, AllowedCIDRs: k.AllowedCIDRs,
			RateLimitRPM: k.RateLimitRPM, ExpiresAt: k.Expires, Admin: k.Admin, NoMCP: k.NoMCP,
			Source: store.SourceConfig,
		})
		if k.Budget != nil && k.Budget.Amount > 0 {
			out[len(out)-1].BudgetAmount, out[len(out)-1].BudgetPeriod = k.Budget.Amount, k.Budget.PeriodOrDefault()
		}
	}
	return out
}

// auditExporters builds the audit.export exporters, started. On an error
// the ones already started are closed.
func auditExporters(specs []config.AuditExport, log *slog.Logger, m *metrics.Metrics) ([]*audit.Exporter, error) {
	var out []*audit.Exporter
	for _, e := range specs {
		var sink audit.Sink
		var err error
		switch e.Type {
		case config.ExportJSONL:
			sink, err = audit.NewJSONL(e.Path, e.MaxSizeOrDefault(), e.MaxFilesOrDefault())
		case config.ExportWebhook:
			sink, err = audit.NewWebhook(audit.WebhookOptions{URL: e.URL, Headers: e.Headers,
				NDJSON: e.FormatOrDefault() == config.ExportFormatNDJSON, Timeout: e.TimeoutOrDefault()})
		default:
			err = fmt.Errorf("unknown type %q", e.Type)
		}
		name := e.NameOrDefault()
		if err != nil {
			for _, x := range out {
				_ = x.Close(context.Background()) // nothing queued yet
			}
			return nil, fmt.Errorf("audit.export %s: %w", name, err)
		}
		out = append(out, audit.NewExporter(sink, audit.ExportOptions{
			Name: name, QueueSize: e.QueueSizeOrDefault(), BatchSize: e.BatchOrDefault(),
			FlushInterval: e.FlushIntervalOrDefault(), Logger: log,
			OnDepth:   func(n int) { m.SetAuditExportDepth(name, n) },
			OnDrop:    func(n int) { m.AuditExportDropped(name, n) },
			OnFailure: func() { m.AuditExportFailed(name) },
		}))
	}
	return out, nil
}

// auditQueue is how many tool-call records wait for the store: about a
// second of calls at this machine's peak rate, while the writer drains
// every 200 ms. A record is ~220 bytes of live heap while it waits (the
// queue grows with its backlog and shrinks after, so the bound costs
// memory only while the disk stalls: 0.9 MB at 4096, about three times
// that in RSS at the GC target of 200%); drops are counted
// (mcpgate_audit_records_dropped_total) and logged.
const auditQueue = 4096

// personConfirmer is the authorization server's IdP login as the
// gateway's proof of a browser's person: a confirmation stands for the
// person of the tokens the server issues them (its issuer) and of the
// IdP's own tokens (auth.oidc callers with the same IdP).
type personConfirmer struct{ *authserver.Server }

func (c personConfirmer) ConfirmedPersons(code string) ([]string, bool) {
	cf, ok := c.Confirmed(code)
	if !ok {
		return nil, false
	}
	ids := []string{callers.PersonID(&callers.Caller{Issuer: cf.Issuer, Subject: cf.Subject})}
	if cf.IdPSubject != "" {
		ids = append(ids, callers.PersonID(&callers.Caller{Issuer: cf.IdPIssuer, Subject: cf.IdPSubject}))
	}
	return ids, true
}

// fleetState is the shared state the gateway's sessions use across
// replicas (resumable streams, GET stream takeover, shared log levels and
// subscriptions): only in fleet mode, where session ids are sealed so any
// replica opens them. A single process without fleet.session_keys keeps
// its sessions, streams and cancellation local.
func fleetState(cfg *config.Config, sb state.Backend) state.Backend {
	if keys, err := cfg.Fleet.SessionKeyBytes(); err != nil || len(keys) == 0 {
		return nil
	}
	return sb
}

// openAccessLog is the access log of cfg: off, the gateway's own log, or
// a JSON-lines file of its own (created 0600, appended to).
func openAccessLog(cfg config.AccessLog, log *slog.Logger) (*slog.Logger, *accessFile, error) {
	if !cfg.On() {
		return nil, nil, nil
	}
	if cfg.Path == "" {
		return log, nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("access_log.path: %w", err)
	}
	f, err := os.OpenFile(cfg.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("access_log.path: %w", err)
	}
	b := newLineBatch(f)
	return slog.New(newBatchHandler(b, formatJSON, nil)), &accessFile{File: f, batch: b}, nil
}

// logDrops counts the lines dropped by the batches of log and of the
// access log's file, while their output was blocked (logbatch.go).
func logDrops(log *slog.Logger, access *accessFile) func() int64 {
	var batches []*lineBatch
	if h, ok := log.Handler().(batchHandler); ok {
		batches = append(batches, h.batch)
	}
	if access != nil {
		batches = append(batches, access.batch)
	}
	return func() int64 {
		var n int64
		for _, b := range batches {
			n += b.Dropped()
		}
		return n
	}
}

// accessFile is access_log.path's file, whose lines are batched: Close
// writes the batch first.
type accessFile struct {
	*os.File
	batch *lineBatch
}

func (f *accessFile) Close() error {
	f.batch.Flush()
	return f.File.Close()
}
