// Package policy owns the gateway's one access decision: may caller C, on
// route R, see or call tool T of server S (and see S's prompts and
// resources), and which rule decided (SPEC S5.2, S6.2, S7). The same
// function answers tools/list filtering and tools/call gating, so a tool a
// caller cannot see is refused exactly like a tool that does not exist.
//
// It is pure computation over its own input types (Rules, Caller, Route):
// it must not import config, store or gateway, do I/O, log, or know how
// names are prefixed on the wire. The gateway maps its configuration into
// Rules, a virtual key (or the master key, or "no auth configured") into a
// Caller, and the URL path and x-mcp-servers header into a Route.
//
// Flow:
//
//	config -> Rules -> Compile -> *Policy           (once per config load)
//	key + path + header -> Policy.View -> *View     (once per request, or cached)
//	    or *Denied (403/404, exact client message)
//	tools/list:  Filter(view, items, ...)           (calls View.Tool per item)
//	tools/call:  View.Tool(server, tool).Allowed    (the same function)
//	admin:       Policy.Explain -> every check, and the deciding rule
//
// # Servers a caller may use
//
// The master key and the anonymous caller (no authentication configured)
// may use every configured server; a "no-mcp" key none, on any route,
// checked before anything else (it wins even over Master and Admin); a key
// whose Servers is nil every server; any other key the union of its Servers
// and the servers of each access group it is granted. Names of servers and
// groups that are not configured are ignored. Master and Anonymous ignore
// every per-key list (Servers, Tools, DenyTools, Toolsets, AccessGroups).
// Admin only matters on toolset routes (it passes the toolset grant check);
// otherwise an admin key is limited by its lists like any key. A nil
// *Caller is a key granted nothing: the package fails closed.
//
// # Routes
//
// Route.Servers are the servers the path names (/mcp/a,b, /<s>/mcp); nil
// selects every configured server (/mcp, /, /mcp/proxy, toolset routes).
// Route.Header is the x-mcp-servers list; it narrows the route and never
// widens it (SPEC S1.4): names the caller may not use, or that are not
// configured, are ignored.
//
// A server the path names that the caller may not use refuses the whole
// route with the same 404 answer as a server that is not configured
// (UnknownServerMessage), so a key cannot probe which servers exist. The
// Denied.Rule says which it was, for logs and explain only. This applies to
// every name of a multi-server path too: silently dropping an existing but
// forbidden server while refusing an unknown one would leak existence.
//
// # Toolset routes (/toolset/<name>/mcp, SPEC S7)
//
// Gates, in order:
//
//  1. a no-mcp key: 403 "API key is scoped to no MCP servers; toolset
//     access is denied."
//  2. a caller that is not master, admin or anonymous and lacks the toolset
//     in Caller.Toolsets: 403 "API key does not have access to toolset
//     '<name>'." This comes before the existence check, so a key without
//     the grant gets the same 403 whether or not the toolset exists.
//  3. a toolset that is not configured: 404 "Unknown toolset '<name>'."
//
// Past the gates the view is narrowed to the toolset: its servers are the
// keys of Rules.Toolsets[name], and on each of them only the listed tools
// (no wildcard; an empty list contributes no tools). The toolset grant is
// itself the permission for those tools: the key's Servers and Tools
// allow-lists do not apply to them, but the key's DenyTools and the
// server's configured allow and deny lists still do.
//
// "Access groups are kept": as in the reference implementation, which
// replaces the key's server list and tool permissions with the toolset's
// and preserves its access groups, a server granted to the key through an
// access group stays usable on the toolset route. On a server the toolset
// also lists, the toolset's tool list governs (the toolset narrows it); on a
// server outside the toolset the key's ordinary tool rules apply (config
// allow/deny, the key's Tools and DenyTools). Unlike the reference, the
// key's Tools allow-list is not dropped for such servers, so a toolset
// route never shows more of an access-group server than /mcp does. The
// key's directly listed Servers are not kept. Master and anonymous callers
// have no access groups: they see exactly the toolset.
//
// Toolset routes expose tools only, like a scoped tool bundle: every
// prompt and resource is invisible there (rule "toolset route exposes tools
// only"), and the gateway should not advertise those capabilities.
//
// # Tool visibility
//
// A tool (server, tool) is visible, and callable, iff every check passes,
// in this order (the first failure is the deciding rule):
//
//  1. the server is configured ("unknown server")
//  2. the path names it, when it names any ("server not on route")
//  3. the caller may use it on this route ("no-mcp key", "server not
//     granted to key", "toolset '<t>' does not include server")
//  4. the x-mcp-servers header names it, when present ("server not
//     selected by x-mcp-servers")
//  5. not in the server's configured deny list ("server deny list
//     (servers.<s>.tools.deny)")
//  6. in the server's configured allow list, when it has one ("server
//     allow list (servers.<s>.tools.allow)")
//  7. on a toolset route, for a toolset server: the toolset lists the pair
//     ("toolset '<t>' does not include tool")
//  8. not in the key's DenyTools[server] ("key deny_tools")
//  9. in the key's Tools[server], when the map has that server ("key tools
//     allow list"); skipped for toolset servers on a toolset route.
//
// Deny wins over allow everywhere: a name in both lists is denied. The
// configured lists apply to every caller, the master key included: they
// define what the gateway exposes of a server, not who may use it. An
// allowed decision names the grant: "master key", "anonymous caller", "key
// grants all servers", "key servers list", "access group '<g>'" or
// "toolset '<t>'".
//
// # Prompts and resources
//
// Visible iff the server passes checks 1-4 and the route is not a toolset
// route. Tool lists never filter prompts or resources.
package policy
