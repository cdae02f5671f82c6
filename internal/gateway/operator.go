package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/policy"
)

// What operators ask of the gateway on a caller's behalf (the admin API):
// the catalog as a caller sees it on a route, why a tool is or is not
// callable, and a call made as that caller. Each goes through the same
// route resolution and policy view as an MCP request, so the answers are
// the ones a client with that key would get.

// ToolInfo is one tool of a caller's view.
type ToolInfo struct {
	Name         string `json:"name"`
	Server       string `json:"server"`
	UpstreamName string `json:"upstream_name"`
	Description  string `json:"description,omitempty"`
	// InputSchema is the tool's inputSchema as the upstream sent it (the
	// console's playground builds its form from it).
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// ErrRoute is returned for a route path that names nothing the gateway
// serves (or that the caller may not use).
var ErrRoute = errors.New("route")

// routeAs resolves path for caller c exactly as ServeHTTP would.
func (g *Gateway) routeAs(c *callers.Caller, path string) (route, error) {
	if path == "" {
		path = "/mcp"
	}
	rt, unknown, ok := g.routeFor(path, "")
	if !ok {
		if len(unknown) > 0 {
			return rt, fmt.Errorf("%w: unknown MCP server %q", ErrRoute, unknown[0])
		}
		return rt, fmt.Errorf("%w: %s is not an MCP route", ErrRoute, path)
	}
	rt, denied := g.narrow(rt, policyCaller(c))
	if denied != nil {
		return rt, fmt.Errorf("%w: %s", ErrRoute, denied.Message)
	}
	return rt, nil
}

// ToolsAs lists the tools caller c sees on the route path, as tools/list
// would (every page).
func (g *Gateway) ToolsAs(ctx context.Context, c *callers.Caller, path string) ([]ToolInfo, error) {
	rt, err := g.routeAs(c, path)
	if err != nil {
		return nil, err
	}
	ctx = callers.NewContext(ctx, c)
	items, err := g.mergedList(ctx, &rt, catalog.Tools)
	if err != nil {
		return nil, err
	}
	out := make([]ToolInfo, 0, len(items))
	for _, it := range items {
		desc, _ := jsonrpc.GetString(it.Raw, "description")
		if o, ok := g.current().overrides[it.Server][it.Key]; ok && o.Description != "" {
			desc = o.Description
		}
		schema, _ := jsonrpc.GetPath(it.Raw, "inputSchema")
		out = append(out, ToolInfo{Name: g.exposed(&rt, catalog.Tools, it.Server, it.Key), Server: it.Server, UpstreamName: it.Key, Description: desc, InputSchema: schema})
	}
	return out, nil
}

// ExplainAs says whether caller c may call the tool named name (as a
// client on path names it) and which rule decided.
func (g *Gateway) ExplainAs(c *callers.Caller, path, name string) (policy.Explanation, error) {
	if path == "" {
		path = "/mcp"
	}
	rt, unknown, ok := g.routeFor(path, "")
	if !ok {
		if len(unknown) > 0 {
			return policy.Explanation{}, fmt.Errorf("%w: unknown MCP server %q", ErrRoute, unknown[0])
		}
		return policy.Explanation{}, fmt.Errorf("%w: %s is not an MCP route", ErrRoute, path)
	}
	// Without the catalog, the configuration says which item the name
	// could be: within one server, the tool an override shows under it
	// comes first. A name of no server, or of several, is explained as a
	// name of none.
	server, upName := "", name
	if c := g.candidates(nil, &rt, catalog.Tools, name); len(c) > 0 && !slices.ContainsFunc(c, func(r toolRef) bool { return r.server != c[0].server }) {
		server, upName = c[0].server, c[0].name
	}
	return g.current().policy.Explain(policyCaller(c), policy.Route{Servers: rt.named, Header: rt.header, Toolset: rt.toolset}, server, upName), nil
}

// CallAs makes tools/call as caller c on the route path without a session, and
// returns the result (or the JSON-RPC error a client would get).
func (g *Gateway) CallAs(ctx context.Context, c *callers.Caller, path, name string, args json.RawMessage) (json.RawMessage, *jsonrpc.Error, error) {
	rt, err := g.routeAs(c, path)
	if err != nil {
		return nil, nil, err
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	params := append(append(append([]byte(`{"name":`), jsonrpc.String(name)...), `,"arguments":`...), args...)
	params = append(params, '}')
	m := jsonrpc.NewRequest(jsonrpc.Int64ID(1), mcpwire.MethodToolsCall, params)
	// The call is the key's, as if its client had made it: its rate limit
	// and budget, its person's own credentials, its audit record.
	ctx = g.withCaller(ctx, c)
	sc := &scope{g: g, rt: &rt, out: discardSender{}}
	reply := g.serve(ctx, sc, m)
	if reply == nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "no reply"), nil
	}
	return reply.Result, reply.Error, nil
}

// discardSender drops messages related to an operator's call (progress,
// logs); server-initiated requests are refused for want of a client.
type discardSender struct{}

func (discardSender) send(*jsonrpc.Message) error {
	return errors.New("an operator call has no client to answer server requests")
}

// checkToolNames warns about configured tool names server does not have:
// a toolset, an allow list or an override naming a tool that does not exist
// is almost always a typo, and would otherwise silently grant nothing.
func (g *Gateway) checkToolNames(server string) {
	ctx, cancel := context.WithTimeout(g.bgCtx, 30*time.Second)
	defer cancel()
	items, err := g.cat.List(ctx, server, catalog.Tools)
	if err != nil {
		return
	}
	have := make(map[string]bool, len(items))
	for _, it := range items {
		have[it.Key] = true
	}
	for _, name := range MissingTools(g.conf(), server, have) {
		g.log.Warn("config names a tool the server does not have", "server", server, "tool", name.Tool, "where", name.Where)
	}
}

// MissingTool is a configured tool name a server does not offer.
type MissingTool struct{ Where, Tool string }

// MissingTools lists the tool names cfg gives server (toolsets, allow
// list, overrides) that are not in have, sorted.
func MissingTools(cfg *config.Config, server string, have map[string]bool) []MissingTool {
	var out []MissingTool
	for _, ts := range slices.Sorted(maps.Keys(cfg.Toolsets)) {
		if t := cfg.Toolsets[ts]; t != nil {
			for _, name := range t.Servers[server] {
				if !have[name] {
					out = append(out, MissingTool{Where: "toolsets." + ts, Tool: name})
				}
			}
		}
	}
	if srv := cfg.Servers[server]; srv != nil && srv.Tools != nil {
		for _, name := range srv.Tools.Allow {
			if !have[name] {
				out = append(out, MissingTool{Where: "servers." + server + ".tools.allow", Tool: name})
			}
		}
		for _, name := range slices.Sorted(maps.Keys(srv.Tools.Overrides)) {
			if !have[name] {
				out = append(out, MissingTool{Where: "servers." + server + ".tools.overrides", Tool: name})
			}
		}
	}
	return out
}

// UpstreamTool is one tool as the upstream lists it, before the server's
// tool policy: whether the policy shows it, and under which name.
type UpstreamTool struct {
	Name        string `json:"name"` // the upstream's name
	Description string `json:"description,omitempty"`
	Visible     bool   `json:"visible"`
	DisplayName string `json:"display_name,omitempty"` // the override's name, if any
}

// ServerTools lists every tool server offers (with the server's own
// credentials) and its tool policy, for the admin API.
func (g *Gateway) ServerTools(ctx context.Context, server string) ([]UpstreamTool, *config.ToolPolicy, error) {
	srv := g.conf().Servers[server]
	if srv == nil {
		return nil, nil, ErrRoute
	}
	items, err := g.cat.List(ctx, server, catalog.Tools)
	if err != nil {
		return nil, nil, err
	}
	out := make([]UpstreamTool, 0, len(items))
	for _, it := range items {
		desc, _ := jsonrpc.GetString(it.Raw, "description")
		t := UpstreamTool{Name: it.Key, Description: desc, Visible: srv.Tools.Allows(it.Key)}
		if srv.Tools != nil {
			t.DisplayName = srv.Tools.Overrides[it.Key].Name
		}
		out = append(out, t)
	}
	return out, srv.Tools, nil
}

// PersonalServer is a server a person calls with their own credentials:
// Auth is user_api_key (a credential they store) or oauth2_user (an
// account they connect).
type PersonalServer struct {
	Name string `json:"server"`
	Auth string `json:"auth"`
}

// PersonalServersAs are the servers caller c may use on /mcp that need c's
// own credentials, sorted by name.
func (g *Gateway) PersonalServersAs(c *callers.Caller) []PersonalServer {
	rt, err := g.routeAs(c, "/mcp")
	if err != nil {
		return nil
	}
	cfg := g.conf()
	servers := rt.servers
	if rt.view != nil {
		servers = rt.view.Servers()
	}
	var out []PersonalServer
	for _, name := range servers {
		srv := cfg.Servers[name]
		if srv == nil || srv.Auth == nil {
			continue
		}
		if t := srv.Auth.Type; t == config.AuthUserAPIKey || t == config.AuthOAuth2User {
			out = append(out, PersonalServer{Name: name, Auth: t})
		}
	}
	return out
}
