package gateway

import (
	"net/http"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// AdminPrefix is where the admin API is served.
const AdminPrefix = "/admin/v1/"

// ServerStatus is one upstream in GET /admin/v1/servers (C11.3). The
// shape is a contract: `mcpgate servers status` and operators' scripts
// read it.
type ServerStatus struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Target    string `json:"target"` // URL without credentials, or the command
	Mode      string `json:"session_mode"`
	Auth      string `json:"auth"` // the auth type, never the credential
	State     string `json:"state"`
	Since     string `json:"since"`
	LastError string `json:"last_error,omitempty"`
	Sessions  int    `json:"sessions"`
}

// ServersReport is the body of GET /admin/v1/servers.
type ServersReport struct {
	Servers []ServerStatus `json:"servers"`
}

// serveAdmin answers the admin API. Only the read-only server status
// exists so far.
func (g *Gateway) serveAdmin(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case AdminPrefix + "servers":
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "Method Not Allowed"})
			return
		}
		writeJSON(w, http.StatusOK, g.ServersStatus())
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found"})
	}
}

// ServersStatus reports every configured upstream, by name.
func (g *Gateway) ServersStatus() ServersReport {
	health := g.up.Health()
	out := ServersReport{Servers: []ServerStatus{}}
	for _, name := range g.cfg.ServerNames() {
		srv := g.cfg.Servers[name]
		h := health[name]
		st := ServerStatus{
			Name:      name,
			Transport: srv.Transport,
			Target:    targetOf(srv),
			Mode:      h.Mode,
			Auth:      config.AuthNone,
			State:     h.State,
			LastError: h.LastError,
			Sessions:  h.Sessions,
		}
		if !h.Since.IsZero() {
			st.Since = h.Since.UTC().Format(time.RFC3339)
		}
		if srv.Auth != nil {
			st.Auth = srv.Auth.Type
		}
		out.Servers = append(out.Servers, st)
	}
	return out
}

func targetOf(srv *config.Server) string {
	if srv.URL != "" {
		return upstream.Preview(srv).URL
	}
	return srv.Command
}

// callerTokens reads the caller's own upstream credentials from a request
// (for passthrough servers): X-Mcp-<server>-Authorization for one server,
// else Authorization.
func callerTokens(h http.Header) func(string) string {
	return func(server string) string {
		if v := h.Get("X-Mcp-" + server + "-Authorization"); v != "" {
			return v
		}
		return h.Get("Authorization")
	}
}
