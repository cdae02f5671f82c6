package gateway

import (
	"net/http"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// adminResource is the admin API's OAuth resource identifier (RFC 8707)
// for requests like r: the gateway's base URL and Options.AdminPath. ""
// (no token matches) without either.
func (g *Gateway) adminResource(r *http.Request) string {
	base := g.ownBase(r)
	if base == "" || g.adminPath == "" {
		return ""
	}
	return base + g.adminPath
}

// PreviewServer is the request the gateway would send to server (C3.8).
func (g *Gateway) PreviewServer(name string) (upstream.PreviewRequest, bool) {
	srv := g.conf().Servers[name]
	if srv == nil {
		return upstream.PreviewRequest{}, false
	}
	if srv.Transport == config.TransportStdio {
		return upstream.PreviewRequest{Method: "stdio", URL: srv.Command}, true
	}
	return upstream.Preview(srv), true
}

// ServerStatus is one upstream in GET /admin/v1/servers (C11.3). The
// shape is a contract: `mcpgate servers status` and operators' scripts
// read it.
type ServerStatus struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Target    string `json:"target"` // URL without credentials, or the command
	Mode      string `json:"session_mode"`
	Auth      string `json:"auth"`   // the auth type, never the credential
	Source    string `json:"source"` // "config" (the file) or "api" (added at runtime)
	State     string `json:"state"`
	Since     string `json:"since"` // when the state began: for a failing server, when it began to fail
	LastError string `json:"last_error,omitempty"`
	Fault     string `json:"fault,omitempty"` // the fault class of last_error (store.FaultClasses)
	Sessions  int    `json:"sessions"`
}

// ServersReport is the body of GET /admin/v1/servers.
type ServersReport struct {
	Servers []ServerStatus `json:"servers"`
}

// ServersStatus reports every configured upstream, by name.
func (g *Gateway) ServersStatus() ServersReport {
	health := g.up.Health()
	out := ServersReport{Servers: []ServerStatus{}}
	cfg := g.conf()
	for _, name := range cfg.ServerNames() {
		srv := cfg.Servers[name]
		h := health[name]
		st := ServerStatus{
			Name:      name,
			Transport: srv.Transport,
			Target:    targetOf(srv),
			Mode:      h.Mode,
			Auth:      config.AuthNone,
			Source:    g.sourceOf(name),
			State:     h.State,
			LastError: h.LastError,
			Fault:     h.Fault,
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

// headerTokens reads the caller's own upstream credentials from a request
// (for passthrough servers): X-Mcp-<server>-Authorization for that server,
// else Authorization, but Authorization only for single, the server of a
// single-server route ("" on a route of several servers). A caller's
// Authorization names no server: on /mcp, /mcp/a,b or a toolset it would
// reach every passthrough server of the route, each able to replay it
// against the others, so there only the header naming a server counts.
func headerTokens(h http.Header, single string) func(string) string {
	return func(server string) string {
		if v := h.Get("X-Mcp-" + server + "-Authorization"); v != "" {
			return v
		}
		if single != "" && server == single {
			return h.Get("Authorization")
		}
		return ""
	}
}

// singleServer is the server of rt when it is a single-server route
// (/mcp/<server>, /<server>/mcp), "" on a route of several servers.
func singleServer(rt *route) string {
	if rt == nil || rt.prefixed {
		return ""
	}
	return rt.single
}

// sourceOf says where a server was defined.
func (g *Gateway) sourceOf(name string) string {
	if _, ok := g.file.Load().servers[name]; ok {
		return "config"
	}
	return "api"
}
