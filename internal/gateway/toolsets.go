package gateway

import (
	"maps"
	"slices"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
)

// Runtime toolsets (SPEC S7): the admin API adds, replaces and removes
// toolsets while the gateway serves, as it does servers (state.go). A
// change builds a new state (the policy is compiled from the toolsets),
// so a request reads the old or the new toolset, never half of each.
// Which toolsets the config file owns is the admin API's business.

// SetToolset serves toolset name as ts (replacing one of that name),
// validated like the config file's: every server and tool it names must
// exist where the file would require it.
func (g *Gateway) SetToolset(name string, ts *config.Toolset) error {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	cur := g.conf()
	next := *cur
	next.Toolsets = maps.Clone(cur.Toolsets)
	if next.Toolsets == nil {
		next.Toolsets = map[string]*config.Toolset{}
	}
	servers := map[string][]string{}
	for s, tools := range ts.Servers {
		servers[s] = slices.Clone(tools)
	}
	next.Toolsets[name] = &config.Toolset{Servers: servers}
	if err := next.Validate(); err != nil {
		return err
	}
	g.swapToolsets(&next, cur.Toolsets[name], next.Toolsets[name])
	return nil
}

// RemoveToolset stops serving toolset name; false when there is none.
func (g *Gateway) RemoveToolset(name string) bool {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	cur := g.conf()
	old, ok := cur.Toolsets[name]
	if !ok {
		return false
	}
	next := *cur
	next.Toolsets = maps.Clone(cur.Toolsets)
	delete(next.Toolsets, name)
	g.swapToolsets(&next, old, nil)
	return true
}

// ToolsetNames are the toolsets served now, sorted.
func (g *Gateway) ToolsetNames() []string { return slices.Sorted(maps.Keys(g.conf().Toolsets)) }

// Toolset returns toolset name as served now (a copy).
func (g *Gateway) Toolset(name string) (*config.Toolset, bool) {
	ts, ok := g.conf().Toolsets[name]
	if !ok || ts == nil {
		return nil, false
	}
	servers := map[string][]string{}
	for s, tools := range ts.Servers {
		servers[s] = slices.Clone(tools)
	}
	return &config.Toolset{Servers: servers}, true
}

// swapToolsets installs cfg, whose toolset changed from before to after (nil:
// none). Catalogs stay: no upstream changed; the sessions of the servers
// either names hear that their tool list may have.
func (g *Gateway) swapToolsets(cfg *config.Config, before, after *config.Toolset) {
	g.compiled.Store(compileConfig(cfg))
	g.clearRoutes()
	touched := map[string]bool{}
	for _, ts := range []*config.Toolset{before, after} {
		if ts != nil {
			for s := range ts.Servers {
				touched[s] = true
			}
		}
	}
	for _, s := range slices.Sorted(maps.Keys(touched)) {
		g.broadcastListChanged(s, catalog.Tools)
	}
}
