package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Runtime servers are added through the API with the same fields as a
// server in the config file (JSON instead of YAML), validated by the same
// code, stored in the store (so they come back after a restart), and
// served at once. Only sse, http and openapi servers: a stdio server is a
// command line to run, which the network must not be able to supply. For
// the same reason a runtime server names no file on the gateway's host:
// certificates and keys come as values (tls.ca, tls.cert, tls.key,
// auth.private_key), never as paths (config.ParseRuntime), and an openapi
// document by URL only. Every way in (POST, PATCH, the tools PUT, and a
// stored document loaded at start or from another replica) goes through
// ParseServer.

var serverNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// ParseServer turns a server document (the fields of one entry of the
// config file's servers map, as JSON) into a validated server, for a
// gateway whose tool name separator is sep ("" means the default).
func ParseServer(name string, doc json.RawMessage, sep string) (*config.Server, error) {
	if !serverNameRE.MatchString(name) {
		return nil, errors.New("name: must match [a-z0-9][a-z0-9_-]*")
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(doc, &probe); err != nil {
		return nil, errors.New("body: must be a JSON object of server fields")
	}
	delete(probe, "name")
	if string(probe["transport"]) == `"`+config.TransportStdio+`"` {
		return nil, errStdio
	}
	body, _ := json.Marshal(probe)
	if sep == "" {
		sep = config.DefaultSeparator
	}
	// JSON is YAML: the config file's decoder gives the same strict
	// checks and the same field-naming messages.
	nameKey, _ := json.Marshal(name)
	sepValue, _ := json.Marshal(sep)
	cfg, err := config.ParseRuntime([]byte(`{"tool_name_separator":` + string(sepValue) + `,"servers":{` + string(nameKey) + `:` + string(body) + `}}`))
	if err != nil {
		// Lines are of the document built here, not of the caller's body.
		for _, fe := range config.FieldErrors(err) {
			fe.Line = 0
		}
		return nil, err
	}
	srv := cfg.Servers[name]
	if srv.Transport == config.TransportStdio {
		return nil, errStdio
	}
	if srv.Transport == config.TransportOpenAPI && !config.IsSpecURL(srv.Spec) {
		// A file path would read the gateway host's files on a caller's word.
		return nil, errors.New("spec: a runtime openapi server's spec must be an http or https URL (files only in the config file)")
	}
	return srv, nil
}

var errStdio = errors.New("transport: stdio servers run a command and can only be defined in the config file")

// separator is the tool name separator of the served configuration.
func (a *API) separator() string {
	if c := a.Config(); c != nil {
		return c.ToolNameSeparator
	}
	return ""
}

type serverRequest struct {
	Name string `json:"name"`
}

func (a *API) addServer(w http.ResponseWriter, r *http.Request) error {
	var raw json.RawMessage
	if err := decode(r, &raw); err != nil {
		return err
	}
	var req serverRequest
	_ = json.Unmarshal(raw, &req)
	a.servers.mu.Lock()
	defer a.servers.mu.Unlock()
	srv, err := a.putServer(r, req.Name, raw, "server.add")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]string{"name": req.Name, "transport": srv.Transport})
	return nil
}

// putServer validates, serves and stores the runtime server name as doc
// (the fields of a config-file entry), announces it and records action;
// the error is the refusal to answer. The caller holds a.servers.mu.
func (a *API) putServer(r *http.Request, name string, doc json.RawMessage, action string) (*config.Server, error) {
	srv, err := ParseServer(name, doc, a.separator())
	if err != nil {
		return nil, badRequest(err.Error())
	}
	prev, replacing := a.servers.applied[name]
	if err := a.o.Gateway.AddServer(r.Context(), name, srv, a.fromFile); err != nil {
		if errors.Is(err, gateway.ErrServerExists) {
			return nil, conflict(err.Error())
		}
		return nil, badRequest(err.Error())
	}
	o, err := a.o.Store.PutObject(r.Context(), store.KindServer, name, doc)
	if err != nil {
		// Not durable, so not made: this replica serves what the store
		// still holds (the version it replaced, or nothing).
		a.o.Gateway.RemoveServer(name)
		delete(a.servers.applied, name)
		if replacing {
			if lerr := a.loadServer(context.WithoutCancel(r.Context()), name, prev); lerr != nil {
				a.log.Warn("could not serve a runtime server's stored version again after a failed change", "server", name, "error", lerr)
			} else {
				a.servers.applied[name] = prev
			}
		}
		return nil, storeError(err, name)
	}
	a.servers.applied[name] = o.Doc
	a.announce(r.Context(), changeServer, name)
	a.audit(r.Context(), action, name, map[string]any{"transport": srv.Transport})
	return srv, nil
}

// serverTools lists what a server offers before its tool policy, with the
// policy and whether the API may change it (runtime servers only).
func (a *API) serverTools(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	tools, policy, err := a.o.Gateway.ServerTools(r.Context(), name)
	if errors.Is(err, gateway.ErrRoute) {
		return notFound(fmt.Sprintf("no server %q", name))
	}
	if err != nil {
		return refusal(http.StatusBadGateway, err.Error())
	}
	if policy == nil {
		policy = &config.ToolPolicy{}
	}
	source := store.SourceAPI
	if a.fromFile(name) {
		source = store.SourceConfig
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": name, "source": source, "policy": toolPolicyView(policy), "tools": tools})
	return nil
}

// toolPolicyView is a tool policy as the API's JSON: allow null (all) or
// a list, deny and overrides never null.
func toolPolicyView(p *config.ToolPolicy) map[string]any {
	o := map[string]any{}
	for k, v := range p.Overrides {
		o[k] = map[string]string{"name": v.Name, "description": v.Description}
	}
	deny := p.Deny
	if deny == nil {
		deny = []string{}
	}
	costs := p.Costs
	if costs == nil {
		costs = map[string]float64{}
	}
	return map[string]any{"allow": p.Allow, "deny": deny, "overrides": o, "costs": costs, "cost_per_kb": p.CostPerKB}
}

// putServerTools replaces a runtime server's tool policy (allow, deny,
// overrides), keeping every other field as stored.
func (a *API) putServerTools(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	var body map[string]any
	if err := decode(r, &body); err != nil {
		return err
	}
	if body == nil {
		return badRequest("body: must be a JSON object of tool policy fields (allow, deny, overrides, costs, cost_per_kb)")
	}
	// A merge patch of the entry's tools: the editor's three fields are
	// replaced (absent means none: null removes them), the rest of the
	// policy (costs, cost_per_kb) is kept unless the body names it.
	for _, k := range []string{"allow", "deny", "overrides"} {
		if _, ok := body[k]; !ok {
			body[k] = nil
		}
	}
	if _, err := a.patchStored(r, name, map[string]any{"tools": body}, "server.tools", "change its tools there"); err != nil {
		return err
	}
	return a.serverTools(w, r)
}

func (a *API) removeServer(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if a.fromFile(name) {
		return conflict(fmt.Sprintf("server %q is defined in the config file; remove it there", name))
	}
	// A toolset naming a server that is gone would make every later
	// change fail validation, here and on every replica.
	for _, ts := range a.o.Gateway.ToolsetNames() {
		if t, ok := a.o.Gateway.Toolset(ts); ok && t.Servers[name] != nil {
			return conflict(fmt.Sprintf("server %q is in toolset %q; change or remove the toolset first", name, ts))
		}
	}
	a.servers.mu.Lock()
	defer a.servers.mu.Unlock()
	err := a.o.Store.DeleteObject(r.Context(), store.KindServer, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return storeError(err, name)
	}
	if err == nil {
		// Deleted here: every replica must stop serving it, whether or
		// not this one did.
		a.announce(r.Context(), changeServer, name)
	}
	delete(a.servers.applied, name)
	// Stored but not served here (this replica missed its addition) is
	// still removed.
	if !a.o.Gateway.RemoveServer(name) && err != nil {
		return notFound(fmt.Sprintf("no server %q", name))
	}
	a.audit(r.Context(), "server.remove", name, nil)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// fromFile reports whether the config file defines server name.
func (a *API) fromFile(name string) bool {
	if a.Config() == nil {
		return false
	}
	_, ok := a.Config().Servers[name]
	return ok
}

// loadServer serves a stored server document (runtimeObjects.load).
func (a *API) loadServer(ctx context.Context, name string, doc json.RawMessage) error {
	srv, err := ParseServer(name, doc, a.separator())
	if err != nil {
		// A document stored by an older version may name a host file:
		// it is not served (the warning names the field) until it is
		// sent again with the content itself, or removed.
		return err
	}
	return a.o.Gateway.AddServer(ctx, name, srv, a.fromFile)
}

// testServer connects to a server afresh and reports the verdict, as
// mcpgate doctor does for one server (its upstream sessions in service
// are not touched).
func (a *API) testServer(w http.ResponseWriter, r *http.Request) error {
	if a.o.CheckServer == nil {
		return refusal(http.StatusNotImplemented, "this gateway cannot test servers")
	}
	name := r.PathValue("name")
	res, ok := a.o.CheckServer(r.Context(), name)
	if !ok {
		return notFound(fmt.Sprintf("no server %q", name))
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// patchServer changes a runtime server with a JSON merge patch (RFC 7396)
// of its entry: the members present replace the stored ones, null removes
// one, and the rest (its credentials among them) stays as stored.
func (a *API) patchServer(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	var patch any
	if err := decode(r, &patch); err != nil {
		return err
	}
	if _, isObj := patch.(map[string]any); !isObj {
		return badRequest("body: must be a JSON object (a merge patch of the server's fields)")
	}
	srv, err := a.patchStored(r, name, patch, "server.update", "change it there")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": name, "transport": srv.Transport})
	return nil
}

// patchStored applies a merge patch to the runtime server name's stored
// entry and serves the result (putServer); a config-file server is
// refused (where says where to change it instead). The error is the
// refusal to answer.
func (a *API) patchStored(r *http.Request, name string, patch any, action, where string) (*config.Server, error) {
	if a.fromFile(name) {
		return nil, conflict(fmt.Sprintf("server %q is defined in the config file; %s", name, where))
	}
	a.servers.mu.Lock()
	defer a.servers.mu.Unlock()
	stored, ok := a.servers.applied[name]
	if !ok {
		return nil, notFound(fmt.Sprintf("no runtime server %q", name))
	}
	var doc any
	if json.Unmarshal(stored, &doc) != nil {
		return nil, refusal(http.StatusInternalServerError, "the stored server is not a JSON object")
	}
	merged, ok := mergePatch(doc, patch).(map[string]any)
	if !ok {
		return nil, refusal(http.StatusInternalServerError, "the stored server is not a JSON object")
	}
	delete(merged, "name")
	next, _ := json.Marshal(merged)
	return a.putServer(r, name, next, action)
}

// mergePatch applies an RFC 7396 merge patch to target.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}
