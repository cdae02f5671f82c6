package gateway

import (
	"maps"
	"reflect"
	"slices"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// Reload (DESIGN decision 6): the config file, read again while serving,
// replaces what the file defined before. The state is swapped as a whole,
// as for the admin API's runtime changes (state.go), so a request reads
// the old configuration or the new one, never half of each; upstream
// servers change under it without failing a call in flight: a removed or
// replaced server's sessions take no new calls and close once their calls
// are over (upstream.Manager.RemoveServer). Which fields can change while
// serving is the caller's business (cmd/mcpgate/reload.go): Reload takes
// the configuration to serve as it is.

// fileDefs are the servers and toolsets the config file defines; the rest
// of the state's came through the admin API. Never modified: replaced.
type fileDefs struct {
	servers  map[string]*config.Server
	toolsets map[string]*config.Toolset
}

// ServerChanges are what a reload did to the config file's servers, each
// list sorted.
type ServerChanges struct {
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Changed []string `json:"changed,omitempty"`
}

// Empty reports whether no server changed.
func (c ServerChanges) Empty() bool {
	return len(c.Added)+len(c.Removed)+len(c.Changed) == 0
}

// Reload serves file, the config file read again (parsed and validated):
// its servers replace the file's previous ones (added ones start, removed
// ones drain and stop, changed ones get new upstream sessions while the
// old ones finish their calls), and everything else it says (policy,
// toolsets, access groups, tool overrides, limits, origins) is in the one
// state swapped in. Servers and toolsets added through the admin API stay,
// unless the file now defines their name (the file wins). On an error
// (the file together with the runtime objects does not validate) nothing
// changed.
//
// Sessions stay up; those whose view may have changed hear
// notifications/tools/list_changed (and prompts, resources): the sessions
// on a route of a server that changed, every session of the whole
// gateway when a server was added, and every session when callers' grants
// could have changed (keys, grants, access groups, toolsets).
func (g *Gateway) Reload(file *config.Config) (ServerChanges, error) {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	cur := g.conf()
	next, err := g.mergeLocked(file)
	if err != nil {
		return ServerChanges{}, err
	}
	var ch ServerChanges
	var removed []string // from the served set, file or runtime
	for name, srv := range next.Servers {
		old, ok := cur.Servers[name]
		switch {
		case !ok:
			ch.Added = append(ch.Added, name)
		case !reflect.DeepEqual(old, srv):
			ch.Changed = append(ch.Changed, name)
		}
	}
	for name := range cur.Servers {
		if _, ok := next.Servers[name]; !ok {
			removed = append(removed, name)
		}
	}
	ch.Removed = removed
	slices.Sort(ch.Added)
	slices.Sort(ch.Changed)
	slices.Sort(ch.Removed)

	// New and replaced upstreams first, so that the state never names a
	// server the manager lacks; removed ones after the swap, so that no
	// new request routes to them.
	for _, name := range slices.Concat(ch.Added, ch.Changed) {
		if old := cur.Servers[name]; old != nil && sameUpstream(old, next.Servers[name]) {
			continue // only what the gateway makes of it changed: the sessions stay
		}
		if err := g.up.AddServer(name, next.Servers[name]); err != nil {
			return ServerChanges{}, err // closed: the gateway is stopping
		}
	}
	g.file.Store(&fileDefs{servers: file.Servers, toolsets: file.Toolsets})
	g.compiled.Store(compileConfig(next))
	g.clearRoutes()
	for _, name := range ch.Removed {
		g.up.RemoveServer(name)
	}
	touched := map[string]bool{}
	for _, name := range slices.Concat(ch.Added, ch.Changed, ch.Removed) {
		touched[name] = true
		g.cat.InvalidateServer(name)
	}
	grants := !reflect.DeepEqual(cur.Auth, next.Auth) || !reflect.DeepEqual(cur.AccessGroups, next.AccessGroups) ||
		!reflect.DeepEqual(cur.Toolsets, next.Toolsets)
	if grants || len(touched) > 0 {
		g.announceViewChange(touched, len(ch.Added) > 0, grants)
	}
	return ch, nil
}

// CheckReload reports whether Reload would accept file, changing nothing:
// the file together with the runtime servers and toolsets must validate.
func (g *Gateway) CheckReload(file *config.Config) error {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	_, err := g.mergeLocked(file)
	return err
}

// mergeLocked is file with the runtime servers and toolsets it does not
// shadow, validated.
func (g *Gateway) mergeLocked(file *config.Config) (*config.Config, error) {
	cur := g.conf()
	prev := g.file.Load()
	next := *file
	next.Servers = maps.Clone(file.Servers)
	if next.Servers == nil {
		next.Servers = map[string]*config.Server{}
	}
	for name, srv := range cur.Servers {
		if _, ok := prev.servers[name]; ok {
			continue
		}
		if _, ok := next.Servers[name]; !ok {
			next.Servers[name] = srv // runtime, not shadowed by the file
		}
	}
	next.Toolsets = maps.Clone(file.Toolsets)
	for name, ts := range cur.Toolsets {
		if _, ok := prev.toolsets[name]; ok {
			continue
		}
		if _, ok := next.Toolsets[name]; !ok {
			if next.Toolsets == nil {
				next.Toolsets = map[string]*config.Toolset{}
			}
			next.Toolsets[name] = ts
		}
	}
	if err := next.Validate(); err != nil {
		return nil, err
	}
	return &next, nil
}

// sameUpstream reports whether two definitions of a server differ only in
// what the gateway applies itself (its tool policy and overrides, what the
// audit exporters see), so that its upstream sessions can stay.
func sameUpstream(a, b *config.Server) bool {
	x, y := *a, *b
	x.Tools, y.Tools = nil, nil
	x.Audit, y.Audit = nil, nil
	return reflect.DeepEqual(x, y)
}

// viewChangeKinds are the lists a reload may have changed.
var viewChangeKinds = []catalog.Kind{catalog.Tools, catalog.Prompts, catalog.Resources}

// announceViewChange sends list_changed to the sessions and listen
// streams whose view may have changed: those on a route of a touched
// server, those of the whole gateway when servers were added (their
// route is every server), or all of them.
func (g *Gateway) announceViewChange(touched map[string]bool, added, all bool) {
	concerns := func(rt *route) bool {
		if all || (added && rt.named == nil && rt.toolset == "") {
			return true
		}
		for _, s := range rt.servers {
			if touched[s] {
				return true
			}
		}
		return false
	}
	var notes []*jsonrpc.Message
	for _, k := range viewChangeKinds {
		notes = append(notes, jsonrpc.NewNotification(listChangedMethod(k), nil))
	}
	for _, s := range g.sessions.All() {
		if concerns(&s.route) {
			for _, n := range notes {
				s.Notify(n)
			}
		}
	}
	g.listen.each(func(ln *listener) {
		if !concerns(&ln.rt) {
			return
		}
		for _, n := range notes {
			if ln.filter.Wants(n.Method, nil) {
				_ = ln.out.send(jsonrpc.NewNotification(n.Method, mcpwire.WithSubscriptionID([]byte("{}"), ln.id)))
			}
		}
	})
}

// listChangedMethod is the list_changed notification of kind k.
func listChangedMethod(k catalog.Kind) string {
	switch k {
	case catalog.Prompts:
		return mcpwire.NotifyPromptsListChanged
	case catalog.Resources, catalog.Templates:
		return mcpwire.NotifyResourcesListChanged
	}
	return mcpwire.NotifyToolsListChanged
}
