package gateway

import (
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/policy"
)

// ParseServersInPath extracts the server names a request path names (S1.3).
// It returns nil when the path names no server (the whole gateway).
//
//	/mcp, /mcp/sse, /mcp/sse/messages -> nil
//	/<s>/mcp                           -> [s]
//	/mcp/a,b and /mcp/a,b/tools        -> [a b]
//	/mcp/custom_solutions/user_123/x   -> [custom_solutions/user_123]
func ParseServersInPath(path string) []string {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	trimmed := strings.TrimRight(path, "/")
	if trimmed == "/mcp/sse" || trimmed == "/mcp/sse/messages" {
		return nil
	}
	var segs []string
	for _, s := range strings.Split(path, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	if len(segs) >= 2 && segs[1] == "mcp" && segs[0] != "mcp" {
		return []string{segs[0]}
	}
	if len(segs) < 2 || segs[0] != "mcp" || !strings.HasPrefix(path, "/mcp/") {
		return nil
	}
	rest := strings.Join(segs[1:], "/")
	if strings.Contains(rest, ",") {
		// A trailing path after the list (/mcp/a,b/tools) is not part of it.
		if i := strings.LastIndex(rest, ","); i >= 0 {
			if j := strings.IndexByte(rest[i:], '/'); j >= 0 {
				rest = rest[:i+j]
			}
		}
		var out []string
		for _, s := range strings.Split(rest, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	// Single server: a name may contain one slash.
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) >= 2 {
		return []string{parts[0] + "/" + parts[1]}
	}
	return []string{parts[0]}
}

// endpointKind is what a path asks for once its route is known.
type endpointKind int

const (
	epStreamable  endpointKind = iota
	epSSE                      // legacy GET stream
	epSSEMessages              // legacy POST
)

// splitEndpoint separates a legacy-SSE suffix from a path:
// /sse, /mcp/sse, /mcp/<s>/sse and /<s>/mcp/sse (each with /messages).
func splitEndpoint(path string) (base string, kind endpointKind) {
	p := strings.TrimRight(path, "/")
	switch {
	case strings.HasSuffix(p, "/sse/messages"):
		return strings.TrimSuffix(p, "/sse/messages"), epSSEMessages
	case strings.HasSuffix(p, "/sse"):
		return strings.TrimSuffix(p, "/sse"), epSSE
	case p == "/messages":
		// Some clients post to /messages next to /sse.
		return "", epSSEMessages
	}
	return p, epStreamable
}

// route is the set of upstreams a request addresses. resolveRoute gives
// what the URL names; narrow then applies the caller's view (policy), and
// servers becomes what the caller may use on it.
type route struct {
	servers  []string // sorted, unique, all configured
	prefixed bool     // names carry "<server><sep>"; false on single-server routes
	single   string   // the server of a single-server route
	proxy    bool     // /mcp/proxy: tools only (S1.2)
	path     string   // base path used to build the legacy SSE endpoint
	toolset  string   // /toolset/<name>/mcp (S7)

	named  []string // the servers the path names; nil: the whole gateway
	header []string // the x-mcp-servers list; nil: no header

	// id names the route as the party of a sessionless caller knows it
	// (routeID of path and header), computed once when it resolves: the
	// same route comes back from the cache on every request.
	id string

	// view is the caller's view of the route (set by narrow): what it may
	// list and call. nil means everything the route names.
	view *policy.View

	// anon caches the anonymous caller's view of this route (narrow): set
	// once by resolveRoute, shared by the copies of the route the cache
	// hands out, and so by every request of a gateway without keys.
	anon *anonView
}

// anonView is the anonymous caller's narrowing of one route under one
// policy: a configuration change brings a new policy, which misses.
type anonView struct {
	last atomic.Pointer[anonNarrowed]
}

type anonNarrowed struct {
	policy  *policy.Policy
	view    *policy.View
	servers []string // read-only: shared by every request
}

func (r route) has(server string) bool {
	_, ok := slices.BinarySearch(r.servers, server)
	return ok
}

// routeCacheMax bounds the route cache; paths are client-chosen.
const routeCacheMax = 1024

type routeKey struct{ path, header string }

// routeCache holds the routes that resolved, at most routeCacheMax of
// them; a configuration change clears it (they were resolved against the
// state it replaced). Read on every request, so readers share the lock.
type routeCache struct {
	mu sync.RWMutex // mu guards the fields below
	m  map[routeKey]route
}

func (c *routeCache) get(k routeKey) (route, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	rt, ok := c.m[k]
	return rt, ok
}

// add keeps rt under k unless the cache is full or holds k already (a
// route, once stored, is read-only).
func (c *routeCache) add(k routeKey, rt route) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[routeKey]route{}
	}
	if _, ok := c.m[k]; ok || len(c.m) >= routeCacheMax {
		return
	}
	c.m[k] = rt
}

func (c *routeCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}

// routeFor is resolveRoute with a cache of the routes that resolved: the
// same few paths come back on every request.
func (g *Gateway) routeFor(path, header string) (route, []string, bool) {
	k := routeKey{path, header}
	if rt, ok := g.routes.get(k); ok {
		return rt, nil, true
	}
	rt, unknown, ok := g.resolveRoute(path, header)
	if ok {
		g.routes.add(k, rt)
	}
	return rt, unknown, ok
}

// resolveRoute maps a URL path (and the x-mcp-servers header) to a route.
// unknown lists names that are not configured servers.
func (g *Gateway) resolveRoute(path, header string) (rt route, unknown []string, ok bool) {
	base, _ := splitEndpoint(path)
	rt.path = base
	if name, ok := toolsetOf(base); ok {
		// The toolset's servers; the policy decides whether the caller may
		// use it (S7) and says so with its own 403/404.
		rt.toolset = name
		rt.prefixed = true
		if ts := g.conf().Toolsets[name]; ts != nil {
			rt.servers = slices.Sorted(maps.Keys(ts.Servers))
			rt.named = rt.servers
		}
	} else if base == "" || base == "/" || base == "/mcp" {
		rt.servers = g.current().names
		rt.prefixed = true
	} else if base == "/mcp/proxy" && !g.known("proxy") {
		rt.servers = g.current().names
		rt.prefixed = true
		rt.proxy = true
	} else {
		names := ParseServersInPath(base + "/")
		if names == nil {
			return rt, nil, false
		}
		single := len(names) == 1 && !strings.Contains(strings.TrimPrefix(base, "/mcp/"), ",")
		var list []string
		for _, n := range names {
			if n2, err := url.PathUnescape(n); err == nil {
				n = n2
			}
			if !g.known(n) {
				// "a/b" from the slash rule: our names have no slash, so
				// "/mcp/notes/extra" means notes.
				if i := strings.IndexByte(n, '/'); i > 0 && g.known(n[:i]) {
					n = n[:i]
				} else {
					unknown = append(unknown, n)
					continue
				}
			}
			list = append(list, n)
		}
		if len(unknown) > 0 {
			return rt, unknown, false
		}
		slices.Sort(list)
		rt.servers = slices.Compact(list)
		rt.named = rt.servers
		rt.prefixed = !single
		if single {
			rt.single = rt.servers[0]
		}
	}
	if header = strings.TrimSpace(header); header != "" {
		rt.header = []string{}
		var narrowed []string
		for _, s := range strings.Split(header, ",") {
			if s = strings.TrimSpace(s); s != "" {
				rt.header = append(rt.header, s)
				if rt.has(s) {
					narrowed = append(narrowed, s)
				}
			}
		}
		slices.Sort(narrowed)
		rt.servers = slices.Compact(narrowed)
	}
	rt.id = routeID(rt.path, rt.header)
	rt.anon = new(anonView)
	return rt, nil, true
}

// toolsetOf recognises /toolset/<name>/mcp.
func toolsetOf(base string) (string, bool) {
	rest, ok := strings.CutPrefix(base, "/toolset/")
	if !ok {
		return "", false
	}
	name, tail, _ := strings.Cut(rest, "/")
	if name == "" || (tail != "" && tail != "mcp") {
		return "", false
	}
	return name, true
}

// narrow applies the caller's view to rt (S5, S6.2, S7): the servers it
// may use on this route, and the view every list and call consults. A
// refused route comes back as *policy.Denied.
func (g *Gateway) narrow(rt route, c *policy.Caller) (route, *policy.Denied) {
	v, denied := g.current().policy.View(c, policy.Route{Servers: rt.named, Header: rt.header, Toolset: rt.toolset})
	if denied != nil {
		return rt, denied
	}
	return narrowed(rt, v, v.Servers()), nil
}

func narrowed(rt route, v *policy.View, servers []string) route {
	rt.view = v
	rt.servers = servers
	if !rt.prefixed && len(rt.servers) == 1 {
		rt.single = rt.servers[0]
	}
	return rt
}

// narrowAnonymous is narrow for the anonymous caller (no authentication
// configured), whose view of a route is the same on every request: it is
// compiled once per route and policy instead of on every request. A
// refusal is not cached (it is computed again, as narrow does).
func (g *Gateway) narrowAnonymous(rt route) (route, *policy.Denied) {
	p := g.current().policy
	if rt.anon != nil {
		if n := rt.anon.last.Load(); n != nil && n.policy == p {
			return narrowed(rt, n.view, n.servers), nil
		}
	}
	v, denied := p.View(&policy.Caller{Anonymous: true}, policy.Route{Servers: rt.named, Header: rt.header, Toolset: rt.toolset})
	if denied != nil {
		return rt, denied
	}
	n := &anonNarrowed{policy: p, view: v, servers: v.Servers()}
	if rt.anon != nil {
		rt.anon.last.Store(n)
	}
	return narrowed(rt, n.view, n.servers), nil
}

// allows reports whether the route's view lets the caller see item (name:
// upstream tool or prompt name, or resource URI) of server.
func (rt *route) allows(k catalog.Kind, server, name string) bool {
	if rt.view == nil {
		return true
	}
	switch k {
	case catalog.Tools:
		return rt.view.Tool(server, name).Allowed
	case catalog.Prompts:
		return rt.view.Prompt(server, name).Allowed
	default:
		return rt.view.Resource(server, name).Allowed
	}
}

func (g *Gateway) known(name string) bool {
	_, ok := g.conf().Servers[name]
	return ok
}
