package admin

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/store"
)

// callerFor is the caller an operator asks about: the key named by alias,
// or (no alias) the master key's view of everything.
func (a *API) callerFor(r *http.Request, alias string) (*callers.Caller, error) {
	if alias == "" {
		return &callers.Caller{Master: true, Admin: true}, nil
	}
	k, err := a.o.Store.GetKeyByAlias(r.Context(), alias)
	if err != nil {
		return nil, storeError(err, alias)
	}
	return CallerOfKey(k), nil
}

// CallerOfKey is the caller a key makes (what the authenticator would
// produce for a request with it, minus its address checks): its rate
// limit and budget included, so that a call made as the key counts
// against both like the key's own calls.
func CallerOfKey(k store.Key) *callers.Caller {
	return &callers.Caller{Alias: k.Alias, User: k.User, Team: k.Team, Admin: k.Admin, NoMCP: k.NoMCP,
		Servers: k.Servers, Tools: k.Tools, DenyTools: k.DenyTools, Toolsets: k.Toolsets, AccessGroups: k.AccessGroups,
		RateLimitRPM: k.RateLimitRPM, BudgetAmount: k.BudgetAmount, BudgetPeriod: k.BudgetPeriod, ExpiresAt: k.ExpiresAt}
}

// ToolsetView is one toolset in GET /admin/v1/toolsets.
type ToolsetView struct {
	Name    string              `json:"name"`
	Servers map[string][]string `json:"servers"`
	Source  string              `json:"source"` // config or api
}

// listToolsets lists the toolsets served now: the config file's and the
// runtime ones (toolsets.go).
func (a *API) listToolsets(w http.ResponseWriter, r *http.Request) error {
	out := struct {
		Toolsets []ToolsetView `json:"toolsets"`
	}{Toolsets: []ToolsetView{}}
	for _, name := range a.o.Gateway.ToolsetNames() {
		if ts, ok := a.o.Gateway.Toolset(name); ok {
			source := store.SourceAPI
			if a.toolsetFromFile(name) {
				source = store.SourceConfig
			}
			out.Toolsets = append(out.Toolsets, ToolsetView{Name: name, Servers: ts.Servers, Source: source})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) listTools(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	c, err := a.callerFor(r, q.Get("key"))
	if err != nil {
		return err
	}
	tools, err := a.o.Gateway.ToolsAs(r.Context(), c, q.Get("route"))
	if err != nil {
		return routeError(err)
	}
	writeJSON(w, http.StatusOK, struct {
		Tools []gateway.ToolInfo `json:"tools"`
	}{tools})
	return nil
}

// routeError is the refusal of the gateway's answer to a request made as
// a caller: an unknown route is the operator's mistake, anything else
// went wrong upstream.
func routeError(err error) *apiError {
	if errors.Is(err, gateway.ErrRoute) {
		return badRequest(err.Error())
	}
	return refusal(http.StatusBadGateway, err.Error())
}

// ExplainView is GET /admin/v1/explain.
type ExplainView struct {
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule"`
	Key     string `json:"key,omitempty"`
	User    string `json:"user,omitempty"`
	Route   string `json:"route"`
	Server  string `json:"server,omitempty"`
	Tool    string `json:"tool"`
	Steps   any    `json:"steps"`
}

func (a *API) explain(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	tool := q.Get("tool")
	if tool == "" {
		return badRequest("tool: required")
	}
	var c *callers.Caller
	if s := (callers.Subject{User: q.Get("user"), Teams: q["team"], Roles: q["role"]}); q.Get("key") == "" && (s.User != "" || len(s.Teams) > 0 || len(s.Roles) > 0) {
		// A JWT caller with this user, teams and roles (SPEC S5.3): what
		// the grants give it.
		grants := callers.GrantsOf(a.Config())
		if a.o.Grants != nil {
			grants = a.o.Grants.All()
		}
		jc := callers.FromGrants(grants, s)
		jc.User = s.User
		c = &jc
	} else {
		var err error
		if c, err = a.callerFor(r, q.Get("key")); err != nil {
			return err
		}
	}
	route := q.Get("route")
	if route == "" {
		route = "/mcp"
	}
	ex, err := a.o.Gateway.ExplainAs(c, route, tool)
	if err != nil {
		return routeError(err)
	}
	v := ExplainView{Allowed: ex.Decision.Allowed, Rule: ex.Decision.Rule, Key: q.Get("key"), User: q.Get("user"), Route: route, Server: ex.Server, Tool: tool, Steps: ex.Steps}
	if ex.Denied != nil {
		v.Allowed, v.Rule = false, ex.Denied.Rule
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

type callRequest struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Key       string          `json:"key"`
	Route     string          `json:"route"`
}

// callTool makes a tools/call as a key (or as the master key) and answers
// the tool result; the audit log records who made it.
func (a *API) callTool(w http.ResponseWriter, r *http.Request) error {
	var req callRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return badRequest("name: required")
	}
	if len(req.Arguments) > 0 && req.Arguments[0] != '{' && string(req.Arguments) != "null" {
		return badRequest("arguments: must be a JSON object")
	}
	if string(req.Arguments) == "null" {
		req.Arguments = nil
	}
	c, err := a.callerFor(r, req.Key)
	if err != nil {
		return err
	}
	res, rpcErr, err := a.o.Gateway.CallAs(r.Context(), c, req.Route, req.Name, req.Arguments)
	if err != nil {
		return routeError(err)
	}
	a.audit(r.Context(), "tool.call", req.Name, map[string]any{"as": req.Key, "route": req.Route})
	if rpcErr != nil {
		// The caller's mistake (an unknown or invisible tool, bad
		// arguments) is a 400; anything else went wrong upstream.
		status := http.StatusBadGateway
		switch rpcErr.Code {
		case jsonrpc.CodeInvalidParams, jsonrpc.CodeMethodNotFound:
			status = http.StatusBadRequest
		case callers.CodeRateLimited:
			// The key's rate limit or budget: a call as the key counts
			// against both, as the key's own calls do.
			status = http.StatusTooManyRequests
		}
		return refusal(status, "").withBody(struct {
			Error   string `json:"error"`
			Details string `json:"details"`
			Code    int64  `json:"code"`
		}{"Tool call failed", rpcErr.Message, rpcErr.Code})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(res)
	return nil
}
