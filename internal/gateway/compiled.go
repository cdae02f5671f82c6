package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/guard"
	"github.com/mcpgate/mcpgate/internal/policy"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// compiled is everything the gateway derives from its configuration. It is
// immutable: a runtime change builds a new one and swaps it in, so a
// request reads one consistent snapshot without locks.
type compiled struct {
	cfg    *config.Config
	names  []string // server names, sorted
	policy *policy.Policy
	// Tool overrides (S6.3): server -> upstream name -> override, and
	// server -> display name -> upstream name.
	overrides map[string]map[string]config.ToolOverride
	reverse   map[string]map[string]string
	// passthrough: some server forwards the caller's own token, so
	// requests carry the caller's upstream credentials in their context.
	passthrough bool
	// userKeys: some server is called with each person's own stored
	// credential (user_api_key) or connected token (oauth2_user).
	userKeys bool
	// exchange: some server exchanges the caller's own token
	// (oauth2_token_exchange, enterprise_managed; exchange.go).
	exchange bool
	// limits are cfg.Limits with every default filled in (S23).
	limits config.Limits
	// guards are the compiled guardrails (S21) by server, and
	// routeGuards by route path; compiled here so a reload applies them.
	guards, routeGuards map[string]*guard.Set
	// auditRedact are the argument redaction patterns of each server
	// whose audit records its calls' arguments, built once here rather
	// than for every call.
	auditRedact map[string][]string
}

func compileConfig(cfg *config.Config) *compiled {
	st := &compiled{
		cfg:       cfg,
		names:     slices.Sorted(maps.Keys(cfg.Servers)),
		policy:    policy.Compile(RulesOf(cfg)),
		overrides: map[string]map[string]config.ToolOverride{},
		reverse:   map[string]map[string]string{},
		limits:    cfg.Limits.OrDefaults(),
	}
	st.guards, st.routeGuards = compileGuards(cfg)
	for name, srv := range cfg.Servers {
		if srv.Audit != nil && srv.Audit.Arguments {
			if st.auditRedact == nil {
				st.auditRedact = map[string][]string{}
			}
			st.auditRedact[name] = srv.Audit.RedactPatterns()
		}
		if srv.Auth != nil && srv.Auth.Type == config.AuthPassthrough {
			st.passthrough = true
		}
		if srv.Auth != nil && (srv.Auth.Type == config.AuthUserAPIKey || srv.Auth.Type == config.AuthOAuth2User) {
			st.userKeys = true
		}
		if srv.Auth != nil && config.ExchangesCallerToken(srv.Auth.Type) {
			st.exchange = true
		}
		if srv.Tools == nil || len(srv.Tools.Overrides) == 0 {
			continue
		}
		st.overrides[name] = srv.Tools.Overrides
		st.reverse[name] = map[string]string{}
		for up, o := range srv.Tools.Overrides {
			if o.Name != "" {
				st.reverse[name][o.Name] = up
			}
		}
	}
	return st
}

func (g *Gateway) current() *compiled    { return g.compiled.Load() }
func (g *Gateway) conf() *config.Config  { return g.compiled.Load().cfg }
func (g *Gateway) limits() config.Limits { return g.compiled.Load().limits }

// ErrServerExists refuses to replace a server the config file defines.
var ErrServerExists = errors.New("server exists")

// AddServer serves one more upstream server (or replaces a runtime one of
// that name): validated like a config file's, connected like one, and
// announced to connected clients with list_changed. fromFile names the
// servers of the config file, which the API may not replace. A runtime
// server is the API caller's word, not the operator's: unless
// runtime_servers.allow_link_local, it may not reach link-local or cloud
// metadata addresses (config.Server.DenyLinkLocal, enforced at every
// dial; a URL naming one literally is refused here).
func (g *Gateway) AddServer(ctx context.Context, name string, srv *config.Server, fromFile func(string) bool) error {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	if fromFile != nil && fromFile(name) {
		return fmt.Errorf("%w: %q is defined in the config file", ErrServerExists, name)
	}
	s := *srv
	s.Name = name
	s.DenyLinkLocal = !g.conf().RuntimeServers.AllowLinkLocal
	if err := upstream.RefusedTargets(&s); err != nil {
		return err
	}
	next := *g.conf()
	next.Servers = maps.Clone(next.Servers)
	if next.Servers == nil {
		next.Servers = map[string]*config.Server{}
	}
	next.Servers[name] = &s
	if err := next.Validate(); err != nil {
		return err
	}
	if err := g.up.AddServer(name, &s); err != nil {
		return err
	}
	g.swap(&next, name)
	return nil
}

// RemoveServer stops serving a runtime server; false when there is none
// of that name.
func (g *Gateway) RemoveServer(name string) bool {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	cur := g.conf()
	if _, ok := cur.Servers[name]; !ok {
		return false
	}
	next := *cur
	next.Servers = maps.Clone(cur.Servers)
	delete(next.Servers, name)
	g.up.RemoveServer(name)
	g.swap(&next, name)
	return true
}

// swap installs a new configuration: routes resolve again, the changed
// server's lists are fetched again, and sessions hear about it.
func (g *Gateway) swap(cfg *config.Config, changed string) {
	g.compiled.Store(compileConfig(cfg))
	g.clearRoutes()
	g.cat.InvalidateServer(changed)
	for _, k := range []catalog.Kind{catalog.Tools, catalog.Prompts, catalog.Resources} {
		g.broadcastListChanged(changed, k)
	}
}

// clearRoutes forgets the resolved routes: they were resolved against
// the state just replaced.
func (g *Gateway) clearRoutes() {
	g.routes.clear()
}

// Config is the configuration served now (the file's, with the runtime
// servers and toolsets): a snapshot that must not be modified.
func (g *Gateway) Config() *config.Config { return g.conf() }

// ServerNames are the servers served now (config file and runtime).
func (g *Gateway) ServerNames() []string { return slices.Clone(g.current().names) }
