package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/admin"
	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Reload without a restart (DESIGN decision 6, issue 15 §3). Three
// triggers (SIGHUP, POST /admin/v1/reload, the file watcher) end in
// reloader.reload:
//
//	read + parse + validate (config.Parse, as at start; the gateway
//	  checks it with its runtime servers and toolsets)   -> invalid: nothing changes
//	fields read only at start: keep the running values  -> "restart required"
//	config keys -> store (one transaction), key cache flushed
//	file grants, admin API's view of the file
//	gateway: servers added / drained / replaced, one state swap, list_changed
//	open streams re-check their keys; the reload is audited and counted
//
// Fields that need a restart are never half-applied: the whole field
// keeps its running value, and the answer and the log name it.

// Fields read only at start, by config path. A production operator
// changes these by rolling the replicas: the listeners, the store and
// shared state, the fleet's session keys, the vault's keys, the audit
// pipeline, the access log file, telemetry, the OAuth issuer and login,
// the master key (the authenticator holds it), whether auth is on at all.
// Where a section mixes both (auth, limits, telemetry), each field is
// decided on its own.
var (
	restartTop = []string{"listen", "metrics_listen", "data_dir", "store", "state", "fleet", "vault",
		"audit", "access_log", "public_url", "client_metadata_url", "tool_name_separator", "sessions",
		"runtime_servers"} // runtime servers are loaded at start under it
	restartAuth      = []string{"master_key", "anonymous", "oidc", "login"}
	restartLimits    = []string{"max_upstream_message", "max_bound_sessions_per_server", "read_header_timeout", "idle_timeout", "standard_http_server"}
	restartTelemetry = []string{"tracing"} // the tracer and its exporter are built at start
)

// Fields a reload applies (the rest of each struct is restart-only). A
// test checks that every field is in one list or the other, so a new
// config field needs a decision.
var (
	reloadTop = []string{"allowed_origins", "allowed_hosts", "max_body_bytes", "servers", "shutdown_delay",
		"auth", "access_groups", "toolsets", "limits", "reload", "telemetry", "routes", "integrity"}
	reloadAuth      = []string{"allowed_clients", "keys", "grants"}
	reloadLimits    = []string{"max_batch", "max_inflight_per_session", "max_streams", "sse_write_timeout"}
	reloadTelemetry = []string{"debug_header"}
)

// reloader applies the config file at path again while serving. Safe for
// concurrent use: reloads are serialised.
type reloader struct {
	path   string
	listen string // the --listen flag, which overrides the file's listen
	stk    *stack
	log    *slog.Logger
	now    func() time.Time

	// applied wakes the watcher after a reload applied, which may have
	// turned watching on or changed its interval.
	applied chan struct{}

	mu  sync.Mutex
	cur *config.Config // served: the file last applied, with the start's restart-only fields
	sum [sha256.Size]byte
}

func newReloader(path, listen string, cfg *config.Config, stk *stack, log *slog.Logger) *reloader {
	r := &reloader{path: path, listen: listen, stk: stk, log: log, now: time.Now, cur: cfg, applied: make(chan struct{}, 1)}
	if data, err := os.ReadFile(path); err == nil {
		r.sum = sha256.Sum256(data)
	}
	stk.metrics.ConfigLoaded(r.now(), false)
	return r
}

// current is the configuration served now.
func (r *reloader) current() *config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// lastSum is the hash of the content the last reload read (valid or not).
func (r *reloader) lastSum() [sha256.Size]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sum
}

// reload reads the file again and applies it; by is who asked (an admin
// caller, "SIGHUP", "watch", "fleet:<caller>"). An *admin.InvalidConfigError
// means nothing changed. Every outcome is logged, counted and audited.
func (r *reloader) reload(ctx context.Context, by string) (*admin.ReloadReport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.sum
	rep, err := r.reloadLocked(ctx, by)
	var invalid *admin.InvalidConfigError
	switch {
	case errors.As(err, &invalid):
		r.stk.metrics.ConfigReload(metrics.ReloadInvalid)
		msgs := make([]string, 0, len(invalid.Problems))
		for _, p := range invalid.Problems {
			msgs = append(msgs, problemString(p))
		}
		r.log.Error("config reload refused: the file is invalid; nothing changed", "by", by, "file", r.path, "problems", msgs)
	case err != nil:
		// Not the file's fault (the store, a stopping gateway): the
		// watcher tries the same content again at its next tick.
		r.sum = seen
		r.stk.metrics.ConfigReload(metrics.ReloadFailed)
		r.log.Error("config reload failed", "by", by, "file", r.path, "error", err)
	default:
		result := metrics.ReloadUnchanged
		if rep.Changed {
			result = metrics.ReloadApplied
		}
		r.stk.metrics.ConfigReload(result)
		r.stk.metrics.ConfigLoaded(r.now(), len(rep.RestartRequired) > 0)
		select {
		case r.applied <- struct{}{}:
		default:
		}
		r.log.Info("config reloaded", "by", by, "file", r.path, "changed", rep.Changed,
			"servers_added", rep.Servers.Added, "servers_removed", rep.Servers.Removed, "servers_changed", rep.Servers.Changed,
			"keys_added", rep.Keys.Added, "keys_removed", rep.Keys.Removed, "keys_changed", rep.Keys.Changed, "sections", rep.Sections)
		if len(rep.RestartRequired) > 0 {
			r.log.Warn("config reload: these fields changed but are read only at start; they keep their running values until a restart",
				"restart_required", rep.RestartRequired)
		}
	}
	r.stk.api.RecordReload(context.WithoutCancel(ctx), by, r.path, rep, err)
	return rep, err
}

func problemString(p admin.ConfigProblem) string {
	s := p.Message
	if p.Path != "" {
		s = p.Path + ": " + s
	}
	if p.Line > 0 {
		s = fmt.Sprintf("%s (line %d)", s, p.Line)
	}
	return s
}

func (r *reloader) reloadLocked(ctx context.Context, by string) (*admin.ReloadReport, error) {
	data, err := os.ReadFile(r.path)
	if err != nil {
		return nil, admin.NewInvalidConfigError(fmt.Errorf("read %s: %w", r.path, err))
	}
	r.sum = sha256.Sum256(data)
	abs, err := filepath.Abs(r.path)
	if err != nil {
		return nil, admin.NewInvalidConfigError(err)
	}
	next, err := config.Parse(data, filepath.Dir(abs), os.LookupEnv)
	if err != nil {
		return nil, admin.NewInvalidConfigError(err)
	}
	if r.listen != "" {
		next.Listen = r.listen
	}
	rep := &admin.ReloadReport{By: by}
	rep.RestartRequired = keepStartOnly(r.cur, next)
	if next.ExposedWithoutAuth(next.Listen) {
		return nil, &admin.InvalidConfigError{Err: errors.New("no authentication left"),
			Problems: []admin.ConfigProblem{{Path: "auth", Message: "serving on " + next.Listen + " needs authentication: keep auth.master_key or auth.keys"}}}
	}
	if err := r.checkKeyAliases(ctx, next); err != nil {
		return nil, err
	}
	if err := r.stk.gw.CheckReload(next); err != nil {
		return nil, admin.NewInvalidConfigError(err)
	}
	rep.Sections = changedSections(r.cur, next)

	// Valid: apply. The store's key sync is one transaction; from here on
	// only the gateway stopping can fail.
	res, err := r.stk.store.SyncConfigKeys(ctx, configKeys(next))
	if err != nil {
		return nil, fmt.Errorf("config keys: %w", err)
	}
	rep.Keys = admin.KeyChanges{Added: res.Added, Removed: res.Removed, Changed: res.Updated}
	r.stk.grants.SetFile(callers.GrantsOf(next))
	r.stk.auth.Flush()
	ch, err := r.stk.gw.Reload(next)
	if err != nil {
		return nil, fmt.Errorf("servers: %w", err)
	}
	rep.Servers = ch
	r.stk.api.SetConfig(next)
	// Tool integrity reads each server's mode from the gateway's config;
	// a changed block (or patterns) makes every list be reviewed again.
	if integrityChanged(r.cur, next) {
		if err := applyIntegrity(r.stk.keeper, next); err != nil {
			r.log.Warn("config reload: integrity patterns not applied", "error", err)
		}
		for _, name := range r.stk.gw.ServerNames() {
			r.stk.keeper.Reload(name)
		}
	}
	// Runtime objects the file took or gave back a name of.
	if err := errors.Join(r.stk.api.SyncServers(ctx), r.stk.api.SyncToolsets(ctx)); err != nil {
		r.log.Warn("config reload: could not re-read the runtime servers and toolsets", "error", err)
	}
	// A revoked or changed key's open streams end now, not at their next
	// periodic check.
	r.stk.gw.RecheckStreams()
	r.cur = next
	rep.Changed = !ch.Empty() || len(res.Added)+len(res.Removed)+len(res.Updated) > 0 || len(rep.Sections) > 0
	return rep, nil
}

// checkKeyAliases refuses, before anything changes, a config key whose
// alias belongs to a key created through the admin API (the store's sync
// would refuse it after the servers changed).
func (r *reloader) checkKeyAliases(ctx context.Context, next *config.Config) error {
	if next.Auth == nil {
		return nil
	}
	var problems []admin.ConfigProblem
	for i, k := range next.Auth.Keys {
		got, err := r.stk.store.GetKeyByAlias(ctx, k.Alias)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return fmt.Errorf("config keys: %w", err)
		case got.Source != store.SourceConfig:
			problems = append(problems, admin.ConfigProblem{Path: fmt.Sprintf("auth.keys[%d].alias", i),
				Message: fmt.Sprintf("%q belongs to a key created through the admin API; rename one", k.Alias)})
		}
	}
	if len(problems) > 0 {
		return &admin.InvalidConfigError{Err: errors.New("config key aliases taken"), Problems: problems}
	}
	return nil
}

// keepStartOnly gives next the running values of the fields read only at
// start (cur's), and returns the paths of those that differ.
func keepStartOnly(cur, next *config.Config) []string {
	changed := keepFields("", reflect.ValueOf(cur).Elem(), reflect.ValueOf(next).Elem(), restartTop)
	changed = append(changed, keepFields("limits.", reflect.ValueOf(&cur.Limits).Elem(), reflect.ValueOf(&next.Limits).Elem(), restartLimits)...)
	changed = append(changed, keepFields("telemetry.", reflect.ValueOf(&cur.Telemetry).Elem(), reflect.ValueOf(&next.Telemetry).Elem(), restartTelemetry)...)
	// auth: with none configured the gateway serves anonymous callers
	// (loopback only); turning auth on or off changes the authenticator.
	if cur.AnonymousOnly() != next.AnonymousOnly() {
		next.Auth = cur.Auth
		return append(changed, "auth")
	}
	var ca, na config.CallerAuth
	if cur.Auth != nil {
		ca = *cur.Auth
	}
	if next.Auth != nil {
		na = *next.Auth
	}
	if c := keepFields("auth.", reflect.ValueOf(&ca).Elem(), reflect.ValueOf(&na).Elem(), restartAuth); len(c) > 0 {
		changed = append(changed, c...)
		next.Auth = &na
	}
	return changed
}

// keepFields copies the fields of struct cur named (by config key) in names
// into next where they differ, and returns prefix+name of each.
func keepFields(prefix string, cur, next reflect.Value, names []string) []string {
	var changed []string
	t := cur.Type()
	for i := range t.NumField() {
		name := configKey(t.Field(i))
		if !slices.Contains(names, name) {
			continue
		}
		if !reflect.DeepEqual(cur.Field(i).Interface(), next.Field(i).Interface()) {
			changed = append(changed, prefix+name)
			next.Field(i).Set(cur.Field(i))
		}
	}
	return changed
}

// changedSections are the top-level sections (auth's by field) that
// differ, beside servers and auth.keys, which are reported by name.
func changedSections(cur, next *config.Config) []string {
	var out []string
	cv, nv := reflect.ValueOf(cur).Elem(), reflect.ValueOf(next).Elem()
	t := cv.Type()
	for i := range t.NumField() {
		name := configKey(t.Field(i))
		switch name {
		case "", "servers":
			continue
		case "auth":
			var ca, na config.CallerAuth
			if cur.Auth != nil {
				ca = *cur.Auth
			}
			if next.Auth != nil {
				na = *next.Auth
			}
			at := reflect.TypeFor[config.CallerAuth]()
			for j := range at.NumField() {
				sub := configKey(at.Field(j))
				if sub != "" && sub != "keys" && !reflect.DeepEqual(reflect.ValueOf(ca).Field(j).Interface(), reflect.ValueOf(na).Field(j).Interface()) {
					out = append(out, "auth."+sub)
				}
			}
			continue
		}
		if !reflect.DeepEqual(cv.Field(i).Interface(), nv.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	return out
}

// configKey is a field's key in the config file ("" for none).
func configKey(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("config"), ",")
	return name
}

// watch reloads when the file's content changes (reload.watch), polling
// every reload.watch_interval until ctx ends. os.ReadFile follows
// symlinks, so a Kubernetes ConfigMap update (a swapped symlink) is seen.
// A file is tried once per distinct content: a half-written one fails to
// parse and is reported once; the finished one is applied on the next
// tick.
func (r *reloader) watch(ctx context.Context) {
	t := time.NewTimer(r.current().Reload.IntervalOrDefault())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.applied:
			// Perhaps a new interval, or watching just turned on: the
			// next look is one new interval from now.
			t.Reset(r.current().Reload.IntervalOrDefault()) // no stale tick since Go 1.23
			continue
		case <-t.C:
		}
		cur := r.current()
		t.Reset(cur.Reload.IntervalOrDefault())
		if !cur.Reload.Watch {
			continue
		}
		data, err := os.ReadFile(r.path)
		if err != nil {
			r.log.Debug("config watch: cannot read the file", "file", r.path, "error", err)
			continue
		}
		if sha256.Sum256(data) == r.lastSum() {
			continue
		}
		_, _ = r.reload(ctx, "watch") // logged, counted and audited there
	}
}
