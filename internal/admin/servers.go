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
// served at once. Only sse and http servers: a stdio server is a command
// line to run, which the network must not be able to supply.

var serverNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// ParseServer turns a server document (the fields of one entry of the
// config file's servers map, as JSON) into a validated server. dir
// resolves relative paths (tls files).
func ParseServer(name string, doc json.RawMessage, dir string) (*config.Server, error) {
	if !serverNameRE.MatchString(name) {
		return nil, errors.New("name: must match [a-z0-9][a-z0-9_-]*")
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(doc, &probe); err != nil {
		return nil, errors.New("body: must be a JSON object of server fields")
	}
	delete(probe, "name")
	body, _ := json.Marshal(probe)
	// JSON is YAML: the config file's decoder gives the same strict
	// checks and the same field-naming messages.
	nameKey, _ := json.Marshal(name)
	cfg, err := config.Parse([]byte(`{"servers":{`+string(nameKey)+`:`+string(body)+`}}`), dir, nil)
	if err != nil {
		// Lines are of the document built here, not of the caller's body.
		for _, fe := range config.FieldErrors(err) {
			fe.Line = 0
		}
		return nil, err
	}
	srv := cfg.Servers[name]
	if srv.Transport == config.TransportStdio {
		return nil, errors.New("transport: stdio servers run a command and can only be defined in the config file")
	}
	return srv, nil
}

type serverRequest struct {
	Name string `json:"name"`
}

func (a *API) addServer(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if !decode(w, r, &raw) {
		return
	}
	var req serverRequest
	_ = json.Unmarshal(raw, &req)
	dir := ""
	if a.Config() != nil {
		dir = a.Config().Dir
	}
	srv, err := ParseServer(req.Name, raw, dir)
	if err != nil {
		writeError(w, http.StatusBadRequest, "Bad Request", err.Error())
		return
	}
	a.servers.mu.Lock()
	defer a.servers.mu.Unlock()
	if err := a.o.Gateway.AddServer(r.Context(), req.Name, srv, a.fromFile); err != nil {
		if errors.Is(err, gateway.ErrServerExists) {
			writeError(w, http.StatusConflict, "Conflict", err.Error())
			return
		}
		writeError(w, http.StatusBadRequest, "Bad Request", err.Error())
		return
	}
	o, err := a.o.Store.PutObject(r.Context(), store.KindServer, req.Name, raw)
	if err != nil {
		a.o.Gateway.RemoveServer(req.Name)
		delete(a.servers.applied, req.Name)
		a.storeError(w, err, req.Name)
		return
	}
	a.servers.applied[req.Name] = o.Doc
	a.announce(r.Context(), changeServer, req.Name)
	a.audit(r.Context(), "server.add", req.Name, map[string]any{"transport": srv.Transport})
	writeJSON(w, http.StatusCreated, map[string]string{"name": req.Name, "transport": srv.Transport})
}

func (a *API) removeServer(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if a.fromFile(name) {
		writeError(w, http.StatusConflict, "Conflict", fmt.Sprintf("server %q is defined in the config file; remove it there", name))
		return
	}
	// A toolset naming a server that is gone would make every later
	// change fail validation, here and on every replica.
	for _, ts := range a.o.Gateway.ToolsetNames() {
		if t, ok := a.o.Gateway.Toolset(ts); ok && t.Servers[name] != nil {
			writeError(w, http.StatusConflict, "Conflict", fmt.Sprintf("server %q is in toolset %q; change or remove the toolset first", name, ts))
			return
		}
	}
	a.servers.mu.Lock()
	defer a.servers.mu.Unlock()
	err := a.o.Store.DeleteObject(r.Context(), store.KindServer, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		a.storeError(w, err, name)
		return
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
		writeError(w, http.StatusNotFound, "Not Found", fmt.Sprintf("no server %q", name))
		return
	}
	a.audit(r.Context(), "server.remove", name, nil)
	w.WriteHeader(http.StatusNoContent)
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
	dir := ""
	if a.Config() != nil {
		dir = a.Config().Dir
	}
	srv, err := ParseServer(name, doc, dir)
	if err != nil {
		return err
	}
	return a.o.Gateway.AddServer(ctx, name, srv, a.fromFile)
}
