package admin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"unicode"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Grants for JWT callers (SPEC S5.3), by user, team or role: the config
// file's (read-only here) and runtime ones, stored as objects of kind
// grant named "<kind>:<value>" and applied at once through the GrantSet
// the authenticator reads.

// GrantView is one grant in GET /admin/v1/grants.
type GrantView struct {
	Kind         string              `json:"kind"` // user, team or role
	Value        string              `json:"value"`
	Source       string              `json:"source"` // config or api
	Servers      []string            `json:"servers"`
	Tools        map[string][]string `json:"tools,omitempty"`
	DenyTools    map[string][]string `json:"deny_tools,omitempty"`
	Toolsets     []string            `json:"toolsets,omitempty"`
	AccessGroups []string            `json:"access_groups,omitempty"`
	Admin        bool                `json:"admin,omitempty"`
	RateLimitRPM int                 `json:"rate_limit_rpm,omitempty"`
}

func grantView(g config.Grant, source string) GrantView {
	kind, value := g.Subject()
	return GrantView{Kind: kind, Value: value, Source: source, Servers: g.Servers, Tools: g.Tools, DenyTools: g.DenyTools,
		Toolsets: g.Toolsets, AccessGroups: g.AccessGroups, Admin: g.Admin, RateLimitRPM: g.RateLimitRPM}
}

func (a *API) listGrants(w http.ResponseWriter, r *http.Request) error {
	out := struct {
		Grants []GrantView `json:"grants"`
	}{Grants: []GrantView{}}
	for _, g := range a.o.Grants.File() {
		out.Grants = append(out.Grants, grantView(g, store.SourceConfig))
	}
	for _, g := range a.o.Grants.Runtime() {
		out.Grants = append(out.Grants, grantView(g, store.SourceAPI))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// grantSubject reads {kind}/{value} of the path.
func grantSubject(r *http.Request) (kind, value string, err error) {
	kind, value = r.PathValue("kind"), r.PathValue("value")
	switch {
	case kind != "user" && kind != "team" && kind != "role":
		return "", "", errors.New("kind: must be user, team or role")
	case value == "" || len(value) > 256 || strings.ContainsFunc(value, unicode.IsControl):
		return "", "", errors.New("value: must be 1-256 bytes without control characters")
	}
	return kind, value, nil
}

// putGrant creates or replaces the runtime grant of a user, team or role.
// The body has a key's access fields: servers, tools, deny_tools,
// toolsets, access_groups, admin, rate_limit_rpm.
func (a *API) putGrant(w http.ResponseWriter, r *http.Request) error {
	kind, value, err := grantSubject(r)
	if err != nil {
		return badRequest(err.Error())
	}
	var in KeyAttributes
	if err := decode(r, &in); err != nil {
		return err
	}
	switch {
	case in.Alias != nil, in.User != nil, in.Team != nil, in.AllowedCIDRs.Set, in.Expires.Set, in.NoMCP != nil, in.Disabled != nil, in.AllServers != nil:
		return badRequest("a grant takes servers, tools, deny_tools, toolsets, access_groups, admin and rate_limit_rpm only")
	}
	var k store.Key
	if err := a.apply(&k, &in); err != nil {
		return badRequest(err.Error())
	}
	g := config.Grant{Servers: k.Servers, Tools: k.Tools, DenyTools: k.DenyTools, Toolsets: k.Toolsets, AccessGroups: k.AccessGroups,
		Admin: k.Admin, RateLimitRPM: k.RateLimitRPM}
	switch kind {
	case "user":
		g.User = value
	case "team":
		g.Team = value
	default:
		g.Role = value
	}
	doc, _ := json.Marshal(grantView(g, store.SourceAPI))
	if _, err := a.o.Store.PutObject(r.Context(), store.KindGrant, kind+":"+value, doc); err != nil {
		return storeError(err, kind+":"+value)
	}
	// Committed: the other replicas apply it even if this one cannot.
	a.announce(r.Context(), changeGrant, kind+":"+value)
	if err := a.ReloadGrants(r.Context()); err != nil {
		return refusal(http.StatusServiceUnavailable, "stored, but the grants could not be reloaded: "+err.Error()).
			logged(slog.LevelError, "reload grants after a change", err)
	}
	a.audit(r.Context(), "grant.put", kind+":"+value, nil)
	writeJSON(w, http.StatusOK, grantView(g, store.SourceAPI))
	return nil
}

func (a *API) deleteGrant(w http.ResponseWriter, r *http.Request) error {
	kind, value, err := grantSubject(r)
	if err != nil {
		return badRequest(err.Error())
	}
	if err := a.o.Store.DeleteObject(r.Context(), store.KindGrant, kind+":"+value); err != nil {
		return storeError(err, kind+":"+value)
	}
	// Committed: the other replicas apply it even if this one cannot.
	a.announce(r.Context(), changeGrant, kind+":"+value)
	if err := a.ReloadGrants(r.Context()); err != nil {
		return refusal(http.StatusServiceUnavailable, "deleted, but the grants could not be reloaded: "+err.Error()).
			logged(slog.LevelError, "reload grants after a change", err)
	}
	a.audit(r.Context(), "grant.delete", kind+":"+value, nil)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ReloadGrants reads the runtime grants from the store into the GrantSet;
// cmd/mcpgate calls it at start.
func (a *API) ReloadGrants(ctx context.Context) error {
	if a.o.Grants == nil {
		return nil
	}
	objs, err := a.o.Store.ListObjects(ctx, store.KindGrant)
	if err != nil {
		return err
	}
	var gs []config.Grant
	for _, o := range objs {
		var v GrantView
		if err := json.Unmarshal(o.Doc, &v); err != nil {
			a.log.Warn("ignoring an unreadable grant", "grant", o.Name, "error", err)
			continue
		}
		g := config.Grant{Servers: v.Servers, Tools: v.Tools, DenyTools: v.DenyTools, Toolsets: v.Toolsets, AccessGroups: v.AccessGroups,
			Admin: v.Admin, RateLimitRPM: v.RateLimitRPM}
		switch v.Kind {
		case "user":
			g.User = v.Value
		case "team":
			g.Team = v.Value
		case "role":
			g.Role = v.Value
		default:
			continue
		}
		gs = append(gs, g)
	}
	a.o.Grants.SetRuntime(gs)
	return nil
}
