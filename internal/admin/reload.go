package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
)

// POST /reload reads the config file again and applies what changed
// (DESIGN decision 6). The work is Options.Reload's (cmd/mcpgate); the API
// authorises it, answers with what changed or with the file's problems,
// and in a fleet tells the other replicas to reload their own files.

// ReloadReport is what a reload changed. Names only: never a secret.
type ReloadReport struct {
	// Changed: something was applied (false: the file says what is
	// served already).
	Changed bool                  `json:"changed"`
	Servers gateway.ServerChanges `json:"servers"`
	// Keys are the aliases of auth.keys added, removed or changed.
	Keys KeyChanges `json:"keys"`
	// Sections are the other top-level sections that changed and were
	// applied (policy, toolsets, access_groups, limits, ...).
	Sections []string `json:"sections,omitempty"`
	// RestartRequired are the fields that changed but are only read at
	// start: still served as before, until a restart.
	RestartRequired []string `json:"restart_required,omitempty"`
	// By is who reloaded: an admin caller, "SIGHUP", "watch", or
	// "fleet:<caller>" for another replica's reload.
	By string `json:"by"`
}

// KeyChanges are the aliases of config keys a reload changed.
type KeyChanges struct {
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Changed []string `json:"changed,omitempty"`
}

// ConfigProblem is one problem of a config file, by field.
type ConfigProblem struct {
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// InvalidConfigError is a config file that cannot be served: nothing
// changed.
type InvalidConfigError struct {
	Problems []ConfigProblem
	Err      error
}

func (e *InvalidConfigError) Error() string { return "invalid config: " + e.Err.Error() }
func (e *InvalidConfigError) Unwrap() error { return e.Err }

// NewInvalidConfigError lists err's field errors (config.FieldErrors).
func NewInvalidConfigError(err error) *InvalidConfigError {
	e := &InvalidConfigError{Err: err}
	for _, fe := range config.FieldErrors(err) {
		msg := "invalid"
		if fe.Err != nil {
			msg = fe.Err.Error()
		}
		e.Problems = append(e.Problems, ConfigProblem{Path: fe.Path, Line: fe.Line, Message: msg})
	}
	if len(e.Problems) == 0 {
		e.Problems = []ConfigProblem{{Message: err.Error()}}
	}
	return e
}

// reloadBody is the answer to a refused reload.
type reloadBody struct {
	Error    string          `json:"error"`
	Details  string          `json:"details,omitempty"`
	Problems []ConfigProblem `json:"problems,omitempty"`
}

func (a *API) reload(w http.ResponseWriter, r *http.Request) error {
	if a.o.Reload == nil {
		return refusal(http.StatusNotImplemented, "this gateway has no config file to reload")
	}
	by := actor(r.Context())
	rep, err := a.o.Reload(r.Context(), by)
	var invalid *InvalidConfigError
	switch {
	case errors.As(err, &invalid):
		return refusal(http.StatusUnprocessableEntity, "").withBody(reloadBody{Error: "Unprocessable Entity",
			Details: "the config file is invalid; nothing changed", Problems: invalid.Problems})
	case err != nil:
		return refusal(http.StatusInternalServerError, "reload failed: "+err.Error()).
			logged(slog.LevelError, "config reload failed", err, "by", by)
	}
	// Each replica reads its own file: the others reload theirs, so that
	// one request through a load balancer reloads the fleet.
	a.tell(r.Context(), changeReload, by)
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// followReload reloads this replica's file because another replica was
// asked to: the outcome is logged (and audited by Options.Reload), as
// for SIGHUP.
func (a *API) followReload(by string) {
	if a.o.Reload == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.o.Reload(ctx, "fleet:"+by); err != nil {
		a.log.Error("config reload asked by another replica failed", "by", by, "error", err)
	}
}

// SetConfig makes the API see cfg, the config file reloaded: the file's
// servers and toolsets (read-only here), its directory, its grants.
// Runtime objects whose name the file took or released are looked at
// again by the next SyncServers/SyncToolsets.
func (a *API) SetConfig(cfg *config.Config) {
	old := a.cfg.Swap(cfg)
	forget := func(r *runtimeObjects, in func(*config.Config, string) bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for name := range r.applied {
			if (old != nil && in(old, name)) || in(cfg, name) {
				delete(r.applied, name)
			}
		}
	}
	forget(a.servers, func(c *config.Config, n string) bool { _, ok := c.Servers[n]; return ok })
	forget(a.toolsets, func(c *config.Config, n string) bool { _, ok := c.Toolsets[n]; return ok })
}

// Config is the configuration served now (Options.Config, then each
// reload's); nil in tests that built the API without one.
func (a *API) Config() *config.Config { return a.cfg.Load() }

// ReloadAuditAction is the audit log's action of a reload, and of a
// refused one.
const (
	ReloadAuditAction       = "config.reload"
	ReloadFailedAuditAction = "config.reload_failed"
)

// RecordReload writes a reload to the audit log (the admin actions' log,
// GET /audit/events): who, and what changed, or how many problems the
// file had. Never values.
func (a *API) RecordReload(ctx context.Context, by, file string, rep *ReloadReport, err error) {
	action, detail := ReloadAuditAction, any(rep)
	if err != nil {
		action = ReloadFailedAuditAction
		var invalid *InvalidConfigError
		if errors.As(err, &invalid) {
			paths := make([]string, 0, len(invalid.Problems))
			for _, p := range invalid.Problems {
				if p.Path != "" {
					paths = append(paths, p.Path)
				}
			}
			detail = map[string]any{"problems": len(invalid.Problems), "fields": strings.Join(paths, ", ")}
		} else {
			detail = map[string]any{"error": "apply failed"}
		}
	}
	a.auditAs(ctx, by, action, file, detail)
}
