package policy

import (
	"net/http"
	"slices"
)

// View is one caller's compiled view of one route: which servers it may
// use there and, through Tool, Prompt and Resource, what it may see and
// call. It is immutable and safe for concurrent use, so the gateway may
// cache it per (caller, route) until the rules or the key change. The
// methods of a nil *View refuse everything.
type View struct {
	p       *Policy
	ts      *toolset     // nil off toolset routes
	servers []serverView // by server index
	usable  []string     // sorted names of the servers with ok set
}

// serverView is the caller's standing on one configured server.
type serverView struct {
	ok         bool   // checks 1-4 of the package doc passed
	rule       string // the grant when ok, else the first failed check
	viaToolset bool   // tools limited to the toolset's, key Tools skipped

	keyAllowSet bool    // the key's Tools map has this server
	keyAllow    nameSet // valid when keyAllowSet
	keyDeny     nameSet

	// Inputs to the checks, marked in one pass over the caller and route.
	inKey    bool   // listed in Caller.Servers
	group    string // rule of the first of the caller's groups granting it
	onRoute  bool   // listed in Route.Servers
	inHeader bool   // listed in Route.Header
	grantOK  bool   // the caller may use it on this route (check 3)
	grant    string // the rule of check 3
}

// Denied is a refusal of a whole route. Status and Message are what the
// client gets; Rule is for logs and explain only, since it may reveal that
// a refused server exists.
type Denied struct {
	Status  int    `json:"status"`  // http.StatusForbidden or http.StatusNotFound
	Message string `json:"message"` // exact client text (SPEC S7)
	Rule    string `json:"rule"`
}

// Error returns the client message, so a *Denied can travel as an error.
func (d *Denied) Error() string { return d.Message }

const ruleNoView = "route refused"

// noGrants stands in for a nil *Caller: a key granted nothing.
var noGrants = Caller{Servers: []string{}}

// View compiles what caller c may see on route rt, or refuses the route:
// 403 on the toolset gates, 404 for an unknown toolset or a path naming a
// server c may not use (see the package doc for the exact order).
func (p *Policy) View(c *Caller, rt Route) (*View, *Denied) {
	return p.view(c, &rt, nil)
}

// view is View with an optional trace of the route-level checks.
func (p *Policy) view(c *Caller, rt *Route, t *trace) (*View, *Denied) {
	if c == nil {
		c = &noGrants
	}
	var ts *toolset
	if name := rt.Toolset; name != "" {
		// Rule strings naming the toolset are built only for a trace or a
		// refusal: this runs on every request.
		if t != nil {
			t.fail("no-mcp sentinel", !c.NoMCP, ruleNoMCP)
		}
		if c.NoMCP {
			return nil, &Denied{http.StatusForbidden, msgNoMCPToolset, ruleNoMCP}
		}
		granted := toolsetGranted(c, name)
		if t != nil {
			t.fail("toolset grant", granted, toolsetGrantRule(c, name))
		}
		if !granted {
			return nil, &Denied{http.StatusForbidden, toolsetNotGrantedMsg(name), toolsetGrantRule(c, name)}
		}
		var known bool
		ts, known = p.toolsets[name]
		if t != nil {
			t.fail("toolset configured", known, unknownToolsetRule(name))
		}
		if !known {
			return nil, &Denied{http.StatusNotFound, unknownToolsetMsg(name), unknownToolsetRule(name)}
		}
	}

	v := &View{p: p, ts: ts, servers: make([]serverView, len(p.names))}
	key := isKey(c)
	if key {
		for _, s := range c.Servers {
			if i, ok := p.index[s]; ok {
				v.servers[i].inKey = true
			}
		}
		for _, g := range c.AccessGroups {
			if grp := p.groups[g]; grp != nil {
				for _, i := range grp.servers {
					if v.servers[i].group == "" {
						v.servers[i].group = grp.rule
					}
				}
			}
		}
	}
	for _, s := range rt.Servers {
		if i, ok := p.index[s]; ok {
			v.servers[i].onRoute = true
		}
	}
	for _, s := range rt.Header {
		if i, ok := p.index[s]; ok {
			v.servers[i].inHeader = true
		}
	}

	n := 0
	for i := range v.servers {
		sv := &v.servers[i]
		sv.grantOK, sv.grant, sv.viaToolset = p.grantServer(c, ts, sv, i)
		sv.ok, sv.rule = serverState(rt, sv, nil)
		if sv.ok {
			n++
			if key {
				sv.keyLists(c, p.names[i])
			}
		}
	}

	// A named server the caller may not use answers like an unknown one.
	for _, s := range rt.Servers {
		i, known := p.index[s]
		passed, rule := known, ruleUnknownServer
		if known {
			passed, rule = v.servers[i].grantOK, v.servers[i].grant
		}
		if t != nil {
			t.fail("path names '"+s+"'", passed, rule)
		}
		if !passed {
			return nil, &Denied{http.StatusNotFound, UnknownServerMessage(s), rule}
		}
	}

	v.usable = make([]string, 0, n)
	for i, s := range p.names {
		if v.servers[i].ok {
			v.usable = append(v.usable, s)
		}
	}
	return v, nil
}

// toolsetGranted is gate 2 of a toolset route.
func toolsetGranted(c *Caller, name string) bool {
	return c.Master || c.Anonymous || c.Admin || slices.Contains(c.Toolsets, name)
}

// toolsetGrantRule names what passed or failed gate 2.
func toolsetGrantRule(c *Caller, name string) string {
	switch {
	case c.Master:
		return ruleMaster
	case c.Anonymous:
		return ruleAnonymous
	case c.Admin:
		return ruleAdmin
	case slices.Contains(c.Toolsets, name):
		return toolsetGrantedRule(name)
	}
	return toolsetNotGrantedRule(name)
}

// grantServer is check 3: may c use server i on this route, ignoring which
// servers the path and header select. viaToolset reports that the toolset
// grants the server, so its tools are the toolset's.
func (p *Policy) grantServer(c *Caller, ts *toolset, sv *serverView, i int) (ok bool, rule string, viaToolset bool) {
	switch {
	case c.NoMCP:
		return false, ruleNoMCP, false
	case ts != nil:
		if ts.tools[i] != nil {
			return true, ts.rule, true
		}
		if sv.group != "" { // access groups are kept (package doc)
			return true, sv.group, false
		}
		return false, ts.excludesServer, false
	case c.Master:
		return true, ruleMaster, false
	case c.Anonymous:
		return true, ruleAnonymous, false
	case c.Servers == nil:
		return true, ruleAllServers, false
	case sv.inKey:
		return true, ruleKeyServers, false
	case sv.group != "":
		return true, sv.group, false
	}
	return false, ruleNotGranted, false
}

// serverState runs checks 2-4 on a server whose grant is computed; the
// first failure decides. With a trace it records every check.
func serverState(rt *Route, sv *serverView, t *trace) (bool, string) {
	if rt.Servers != nil && t.fail("server on route", sv.onRoute, ruleNotOnRoute) {
		return false, ruleNotOnRoute
	}
	if t.fail("server granted", sv.grantOK, sv.grant) {
		return false, sv.grant
	}
	if rt.Header != nil && t.fail("x-mcp-servers", sv.inHeader, ruleNotInHeader) {
		return false, ruleNotInHeader
	}
	if t.failed() {
		return false, t.first
	}
	return true, sv.grant
}

// keyLists copies the key's per-server tool lists for server name.
func (sv *serverView) keyLists(c *Caller, name string) {
	sv.keyDeny = newNameSet(c.DenyTools[name])
	if sv.viaToolset {
		return // the toolset grant is the permission for its tools
	}
	if list, ok := c.Tools[name]; ok {
		sv.keyAllowSet, sv.keyAllow = true, newNameSet(list)
	}
}

// Servers returns the servers the caller may use on this route, sorted.
// The gateway talks to these upstreams only.
func (v *View) Servers() []string {
	if v == nil {
		return nil
	}
	return slices.Clone(v.usable)
}

// Toolset returns the toolset of the route, "" off toolset routes. On a
// toolset route only tools are visible: the gateway should not advertise
// prompts or resources there.
func (v *View) Toolset() string {
	if v == nil || v.ts == nil {
		return ""
	}
	return v.ts.name
}

// Tool decides whether the caller may see and call tool of server (the
// upstream's own tool name). tools/list and tools/call must both ask it.
func (v *View) Tool(server, tool string) Decision {
	if v == nil {
		return Decision{Rule: ruleNoView}
	}
	i, ok := v.p.index[server]
	if !ok {
		return Decision{Rule: ruleUnknownServer}
	}
	return v.tool(i, tool, nil)
}

// tool runs checks 5-9 after the server's state; with a trace it records
// every applicable check and the first failure still decides.
func (v *View) tool(i int, tool string, t *trace) Decision {
	sv := &v.servers[i]
	if !sv.ok && t == nil {
		return Decision{Rule: sv.rule}
	}
	sr := &v.p.servers[i]
	if !sr.deny.empty() && t.fail("server deny list", !sr.deny.has(tool), sr.denyRule) {
		return Decision{Rule: sr.denyRule}
	}
	if sr.allow != nil && t.fail("server allow list", sr.allow.has(tool), sr.allowRule) {
		return Decision{Rule: sr.allowRule}
	}
	if sv.viaToolset && t.fail("toolset tools", v.ts.tools[i].has(tool), v.ts.excludesTool) {
		return Decision{Rule: v.ts.excludesTool}
	}
	if !sv.keyDeny.empty() && t.fail("key deny_tools", !sv.keyDeny.has(tool), ruleKeyDenyTools) {
		return Decision{Rule: ruleKeyDenyTools}
	}
	if sv.keyAllowSet && t.fail("key tools", sv.keyAllow.has(tool), ruleKeyTools) {
		return Decision{Rule: ruleKeyTools}
	}
	if t.failed() {
		return Decision{Rule: t.first}
	}
	return Decision{Allowed: true, Rule: sv.rule}
}

// Prompt decides whether the caller may see and get prompt name of server:
// the server must be usable on this route, and the route must not be a
// toolset route. Tool lists do not filter prompts.
func (v *View) Prompt(server, name string) Decision { return v.nonTool(server) }

// Resource decides whether the caller may see and read resource uri of
// server (resource templates too), by the same rule as Prompt.
func (v *View) Resource(server, uri string) Decision { return v.nonTool(server) }

func (v *View) nonTool(server string) Decision {
	if v == nil {
		return Decision{Rule: ruleNoView}
	}
	i, ok := v.p.index[server]
	if !ok {
		return Decision{Rule: ruleUnknownServer}
	}
	sv := &v.servers[i]
	switch {
	case !sv.ok:
		return Decision{Rule: sv.rule}
	case v.ts != nil:
		return Decision{Rule: ruleToolsOnly}
	}
	return Decision{Allowed: true, Rule: sv.rule}
}

// FilterTools returns, in order, the items whose (server, tool) v allows,
// asking View.Tool for each: a listing hides exactly what a call refuses.
// key maps an item to its server and upstream tool name. items is not
// modified.
func FilterTools[T any](v *View, items []T, key func(T) (server, tool string)) []T {
	out := make([]T, 0, len(items))
	for _, it := range items {
		if v.Tool(key(it)).Allowed {
			out = append(out, it)
		}
	}
	return out
}
