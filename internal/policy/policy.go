package policy

import (
	"fmt"
	"slices"
)

// Rules are the gateway-wide rules, built once from the configuration and
// rebuilt (then recompiled) when it changes. Compile copies what it keeps,
// so Rules may be reused or modified afterwards.
type Rules struct {
	// Servers names every configured server. Names elsewhere in Rules, in
	// a Caller or in a Route that are not listed here are ignored.
	Servers []string
	// ServerTools are the per-server tool lists from the configuration
	// (servers.<s>.tools); a server missing from the map exposes all its
	// tools.
	ServerTools map[string]ServerTools
	// Toolsets maps a toolset name to the tools it grants, per server.
	// The servers of a toolset are the keys of its map; each lists exact
	// tool names (an empty list grants no tool of that server).
	Toolsets map[string]map[string][]string
	// AccessGroups maps a group name to the servers it grants.
	AccessGroups map[string][]string
}

// ServerTools is a server's configured tool filter. Deny wins over Allow.
type ServerTools struct {
	Allow []string // nil = every tool; empty = none
	Deny  []string
}

// Caller is who is calling, built by the gateway from a virtual key, the
// master key, or the absence of authentication. A Caller passed to
// Policy.View may be modified afterwards: the View copies what it keeps.
type Caller struct {
	// Alias names the caller in explanations; it plays no part in the
	// decision.
	Alias string
	// Master is the master key: every server on every route, subject to
	// the configured server tool lists; per-key lists are ignored.
	Master bool
	// Admin passes the toolset grant check; it widens nothing else.
	Admin bool
	// Anonymous is the caller when no authentication is configured: like
	// Master, everything the configured rules allow.
	Anonymous bool
	// NoMCP is the "no-mcp" sentinel: no server on any route, and 403 on
	// toolset routes. It is checked before everything else.
	NoMCP bool
	// Servers are the servers the key grants: nil = all, empty = none.
	Servers []string
	// Tools limits a server's tools to a list (server -> allowed tools); a
	// server missing from the map keeps all its tools, an empty list none.
	Tools map[string][]string
	// DenyTools removes tools (server -> denied tools), on every route.
	DenyTools map[string][]string
	// Toolsets are the toolsets the key may use through /toolset/<name>/mcp.
	Toolsets []string
	// AccessGroups grant the servers of each named group, on every route.
	AccessGroups []string
}

// Route is what the request URL and headers selected, before the caller is
// considered.
type Route struct {
	// Servers are the servers the path names (/mcp/a,b, /<s>/mcp); nil when
	// it names none (/mcp, /, /mcp/proxy, toolset routes), which selects
	// every server. A named server the caller may not use refuses the
	// route like an unknown server.
	Servers []string
	// Header is the x-mcp-servers header split on commas; nil when the
	// header is absent. It narrows the route and never widens it; names
	// the caller may not use are ignored.
	Header []string
	// Toolset is the <name> of /toolset/<name>/mcp, "" on other routes.
	Toolset string
}

// Decision is the answer for one tool, prompt or resource.
type Decision struct {
	Allowed bool `json:"allowed"`
	// Rule is the rule that decided: the first failed check, or the grant
	// that allowed it. Short and stable; for logs and explain, never for
	// the client (a refused tool looks unknown).
	Rule string `json:"rule"`
}

// Rule strings that do not name a server, group or toolset. The others are
// built by Compile (see the package doc for their shapes).
const (
	ruleMaster        = "master key"
	ruleAnonymous     = "anonymous caller"
	ruleAdmin         = "admin key"
	ruleNoMCP         = "no-mcp key"
	ruleAllServers    = "key grants all servers"
	ruleKeyServers    = "key servers list"
	ruleNotGranted    = "server not granted to key"
	ruleUnknownServer = "unknown server"
	ruleNotOnRoute    = "server not on route"
	ruleNotInHeader   = "server not selected by x-mcp-servers"
	ruleKeyTools      = "key tools allow list"
	ruleKeyDenyTools  = "key deny_tools"
	ruleToolsOnly     = "toolset route exposes tools only"
)

// Client messages (SPEC S7). They are exact: clients and tests match them.
const msgNoMCPToolset = "API key is scoped to no MCP servers; toolset access is denied."

// UnknownServerMessage is the client message for a route naming a server
// that is not configured, or that the caller may not use (the two must be
// indistinguishable). The gateway uses it for its own unknown-server
// answer so both stay identical.
func UnknownServerMessage(name string) string {
	return fmt.Sprintf("Unknown MCP server %q", name)
}

// Policy is a compiled Rules. It is immutable and safe for concurrent use.
type Policy struct {
	names    []string       // configured servers, sorted, unique
	index    map[string]int // name -> position in names and servers
	servers  []serverRules
	toolsets map[string]*toolset
	groups   map[string]*group
}

// serverRules is one server's configured tool filter, compiled.
type serverRules struct {
	allow     *nameSet // nil = every tool
	deny      nameSet
	allowRule string
	denyRule  string
}

type toolset struct {
	name           string
	tools          []*nameSet // by server index; nil = server not in the toolset
	rule           string     // grants a pair
	excludesTool   string
	excludesServer string
}

type group struct {
	rule    string
	servers []int // indexes of configured servers
}

// Compile compiles r into a Policy. It never fails: names that are not
// configured servers are ignored (validation, with field names, is the
// config layer's job).
func Compile(r Rules) *Policy {
	p := &Policy{
		index:    make(map[string]int, len(r.Servers)),
		toolsets: make(map[string]*toolset, len(r.Toolsets)),
		groups:   make(map[string]*group, len(r.AccessGroups)),
	}
	for _, s := range r.Servers {
		if s != "" {
			p.names = append(p.names, s)
		}
	}
	slices.Sort(p.names)
	p.names = slices.Compact(p.names)
	p.servers = make([]serverRules, len(p.names))
	for i, s := range p.names {
		p.index[s] = i
		st := r.ServerTools[s]
		sr := &p.servers[i]
		if st.Allow != nil {
			a := newNameSet(st.Allow)
			sr.allow = &a
		}
		sr.deny = newNameSet(st.Deny)
		sr.allowRule = fmt.Sprintf("server allow list (servers.%s.tools.allow)", s)
		sr.denyRule = fmt.Sprintf("server deny list (servers.%s.tools.deny)", s)
	}
	for name, perServer := range r.Toolsets {
		ts := &toolset{
			name:           name,
			tools:          make([]*nameSet, len(p.names)),
			rule:           fmt.Sprintf("toolset '%s'", name),
			excludesTool:   fmt.Sprintf("toolset '%s' does not include tool", name),
			excludesServer: fmt.Sprintf("toolset '%s' does not include server", name),
		}
		for s, tools := range perServer {
			if i, ok := p.index[s]; ok {
				set := newNameSet(tools)
				ts.tools[i] = &set
			}
		}
		p.toolsets[name] = ts
	}
	for name, servers := range r.AccessGroups {
		g := &group{rule: fmt.Sprintf("access group '%s'", name)}
		for _, s := range servers {
			if i, ok := p.index[s]; ok && !slices.Contains(g.servers, i) {
				g.servers = append(g.servers, i)
			}
		}
		p.groups[name] = g
	}
	return p
}

// Toolset gate strings; built on demand, since they only appear on a
// refusal or in an explanation.
func toolsetGrantedRule(name string) string { return fmt.Sprintf("toolset '%s' granted to key", name) }
func toolsetNotGrantedRule(name string) string {
	return fmt.Sprintf("toolset '%s' not granted to key", name)
}
func toolsetNotGrantedMsg(name string) string {
	return fmt.Sprintf("API key does not have access to toolset '%s'.", name)
}
func unknownToolsetRule(name string) string { return fmt.Sprintf("unknown toolset '%s'", name) }
func unknownToolsetMsg(name string) string  { return fmt.Sprintf("Unknown toolset '%s'.", name) }

// smallSet is the size up to which a nameSet scans a slice instead of
// hashing: tool lists are usually a handful of names.
const smallSet = 8

// nameSet is an immutable set of names.
type nameSet struct {
	list []string
	m    map[string]struct{}
}

func newNameSet(names []string) nameSet {
	if len(names) <= smallSet {
		return nameSet{list: slices.Clone(names)}
	}
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return nameSet{m: m}
}

func (s *nameSet) has(name string) bool {
	if s.m != nil {
		_, ok := s.m[name]
		return ok
	}
	return slices.Contains(s.list, name)
}

func (s *nameSet) empty() bool { return len(s.list) == 0 && len(s.m) == 0 }
