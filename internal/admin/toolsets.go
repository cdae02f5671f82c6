package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Runtime toolsets (SPEC S7): created, replaced and removed through the
// API, stored as objects of kind toolset ({"servers": {server: [tools]}},
// as in the config file), validated like the file's and served at once.
// The config file's toolsets are read-only here, and win a name both
// define.

// toolsetDoc is a toolset as PUT takes it and the store keeps it.
type toolsetDoc struct {
	Servers map[string][]string `json:"servers"`
}

// parseToolset reads a stored or submitted toolset document strictly.
func parseToolset(doc json.RawMessage) (*config.Toolset, error) {
	var d toolsetDoc
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, errors.New("body: must be {\"servers\": {SERVER: [TOOL, ...]}}: " + jsonErr(err))
	}
	if len(d.Servers) == 0 {
		return nil, errors.New("servers: must name at least one server")
	}
	return &config.Toolset{Servers: d.Servers}, nil
}

func (a *API) putToolset(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if !serverNameRE.MatchString(name) {
		return badRequest("name: must match [a-z0-9][a-z0-9_-]*")
	}
	if a.toolsetFromFile(name) {
		return conflict(fmt.Sprintf("toolset %q is defined in the config file; change it there", name))
	}
	var d toolsetDoc
	if err := decode(r, &d); err != nil {
		return err
	}
	doc, _ := json.Marshal(d)
	ts, err := parseToolset(doc)
	if err != nil {
		return badRequest(err.Error())
	}
	a.toolsets.mu.Lock()
	defer a.toolsets.mu.Unlock()
	before, existed := a.o.Gateway.Toolset(name)
	if err := a.o.Gateway.SetToolset(name, ts); err != nil {
		return badRequest(err.Error())
	}
	o, err := a.o.Store.PutObject(r.Context(), store.KindToolset, name, doc)
	if err != nil {
		if existed {
			_ = a.o.Gateway.SetToolset(name, before) // it was valid
		} else {
			a.o.Gateway.RemoveToolset(name)
		}
		return storeError(err, name)
	}
	a.toolsets.applied[name] = o.Doc
	a.announce(r.Context(), changeToolset, name)
	a.audit(r.Context(), "toolset.put", name, nil)
	writeJSON(w, http.StatusOK, ToolsetView{Name: name, Servers: ts.Servers, Source: store.SourceAPI})
	return nil
}

func (a *API) deleteToolset(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if a.toolsetFromFile(name) {
		return conflict(fmt.Sprintf("toolset %q is defined in the config file; remove it there", name))
	}
	a.toolsets.mu.Lock()
	defer a.toolsets.mu.Unlock()
	err := a.o.Store.DeleteObject(r.Context(), store.KindToolset, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return storeError(err, name)
	}
	if err == nil {
		a.announce(r.Context(), changeToolset, name)
	}
	delete(a.toolsets.applied, name)
	if !a.o.Gateway.RemoveToolset(name) && err != nil {
		return notFound(fmt.Sprintf("no toolset %q", name))
	}
	a.audit(r.Context(), "toolset.delete", name, nil)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// loadToolset serves a stored toolset document (runtimeObjects.load).
func (a *API) loadToolset(_ context.Context, name string, doc json.RawMessage) error {
	ts, err := parseToolset(doc)
	if err != nil {
		return err
	}
	return a.o.Gateway.SetToolset(name, ts)
}

// toolsetFromFile reports whether the config file defines toolset name.
func (a *API) toolsetFromFile(name string) bool {
	if a.Config() == nil {
		return false
	}
	_, ok := a.Config().Toolsets[name]
	return ok
}
