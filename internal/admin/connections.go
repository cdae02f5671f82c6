package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// Connections (SPEC S19): each person's entries in the vault, whether
// tokens of an account they connected (oauth2_user, kind oauth) or a
// credential they stored (user_api_key, kind static). Administrators list
// them by server or person and revoke one or all of a person's; each
// person lists and revokes their own under /me. No answer carries a
// secret: issuer, scopes, expiry, times, never a token or key. A
// revocation takes effect for this process's next call at once (the
// vault's delete drops its read cache), and on the other replicas of a
// fleet once they hear of it (announce.go); one that missed the
// announcement serves what it cached for at most the vault's read TTL
// (5 s).
//
// A person is named as the vault names them: key:ALIAS for a virtual
// key, oidc:ISSUER|SUBJECT for a JWT caller (path-escaped in a URL).

// ConnectionInfo is one connection, without its secrets.
type ConnectionInfo struct {
	Person      string   `json:"person"`
	Server      string   `json:"server"`
	Kind        string   `json:"kind"`
	Issuer      string   `json:"issuer,omitempty"`
	Scopes      []string `json:"scopes,omitempty"`
	ExpiresAt   string   `json:"expires_at,omitempty"`
	Refreshable bool     `json:"refreshable,omitempty"`
	UpdatedAt   string   `json:"updated_at,omitempty"`
	LastUsed    string   `json:"last_used_at,omitempty"`
}

// ConnectionList is GET /connections and GET /me/connections.
type ConnectionList struct {
	Connections []ConnectionInfo `json:"connections"`
}

// RevokedConnections is DELETE /connections/{person}.
type RevokedConnections struct {
	Person  string   `json:"person"`
	Servers []string `json:"servers"`
}

func connectionOf(m vault.Meta) ConnectionInfo {
	return ConnectionInfo{Person: m.Person, Server: m.Server, Kind: m.Kind, Issuer: m.Issuer, Scopes: m.Scopes,
		ExpiresAt: timeString(m.Expiry), Refreshable: m.HasRefreshToken, UpdatedAt: timeString(m.UpdatedAt), LastUsed: timeString(m.LastUsed)}
}

// needVault refuses with 400 when no vault is configured.
func (a *API) needVault() error {
	if a.o.Vault == nil {
		return badRequest("the gateway has no vault configured")
	}
	return nil
}

// myEntries lists the caller's own entries: read by name for each known
// server, so no other person's entry is decrypted. An entry for a server
// no longer configured is not listed (DELETE still removes it).
func (a *API) myEntries(r *http.Request) ([]vault.Meta, error) {
	if a.o.Vault == nil {
		return nil, nil
	}
	servers := a.o.Servers()
	if servers == nil {
		servers = []string{}
	}
	return a.o.Vault.List(r.Context(), vault.Filter{Person: callers.PersonID(callers.FromContext(r.Context())), Servers: servers})
}

func (a *API) listConnections(w http.ResponseWriter, r *http.Request) error {
	if err := a.needVault(); err != nil {
		return err
	}
	q := r.URL.Query()
	// The names do not say whose an entry is: this opens every record.
	ms, err := a.o.Vault.List(r.Context(), vault.Filter{Person: q.Get("person"), Server: q.Get("server")})
	if err != nil {
		return storeUnavailable("list connections", err)
	}
	writeConnections(w, ms)
	return nil
}

func writeConnections(w http.ResponseWriter, ms []vault.Meta) {
	out := ConnectionList{Connections: make([]ConnectionInfo, 0, len(ms))}
	for _, m := range ms {
		out.Connections = append(out.Connections, connectionOf(m))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) revokeConnection(w http.ResponseWriter, r *http.Request) error {
	if err := a.needVault(); err != nil {
		return err
	}
	person, server := r.PathValue("person"), r.PathValue("server")
	if err := a.deleteEntry(r, person, server, fmt.Sprintf("%q has no connection to %q", person, server)); err != nil {
		return err
	}
	a.audit(r.Context(), "connection.revoke", server, map[string]string{"person": person})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteEntry deletes person's entry for server; the error is the
// refusal to answer (404 with missing when there is none).
func (a *API) deleteEntry(r *http.Request, person, server, missing string) error {
	err := a.o.Vault.Delete(r.Context(), person, server)
	switch {
	case errors.Is(err, vault.ErrNotFound):
		return notFound(missing)
	case errors.Is(err, vault.ErrInvalid):
		return badRequest("not a person and server the vault can hold")
	case err != nil:
		return storeUnavailable("revoke a connection", err, "server", server)
	}
	return nil
}

func (a *API) revokePersonConnections(w http.ResponseWriter, r *http.Request) error {
	if err := a.needVault(); err != nil {
		return err
	}
	person := r.PathValue("person")
	ms, err := a.o.Vault.List(r.Context(), vault.Filter{Person: person})
	if err != nil {
		return storeUnavailable("list a person's connections", err)
	}
	out := RevokedConnections{Person: person, Servers: []string{}}
	for _, m := range ms {
		err := a.o.Vault.Delete(r.Context(), person, m.Server)
		if err != nil && !errors.Is(err, vault.ErrNotFound) {
			return refusal(http.StatusServiceUnavailable, fmt.Sprintf("the store did not answer: revoked %d of %d (%v); try again shortly", len(out.Servers), len(ms), out.Servers)).
				withHeader("Retry-After", "1").
				logged(slog.LevelError, "revoke a connection", err, "server", m.Server)
		}
		if err == nil {
			out.Servers = append(out.Servers, m.Server)
		}
	}
	if len(out.Servers) == 0 {
		return notFound(fmt.Sprintf("%q has no connections", person))
	}
	slices.Sort(out.Servers)
	a.audit(r.Context(), "connection.revoke_all", person, map[string]any{"servers": out.Servers})
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) listMyConnections(w http.ResponseWriter, r *http.Request) error {
	ms, err := a.myEntries(r)
	if err != nil {
		return storeUnavailable("list connections", err)
	}
	writeConnections(w, ms)
	return nil
}

func (a *API) revokeMyConnection(w http.ResponseWriter, r *http.Request) error {
	if err := a.needVault(); err != nil {
		return err
	}
	server := r.PathValue("server")
	person := callers.PersonID(callers.FromContext(r.Context()))
	if err := a.deleteEntry(r, person, server, fmt.Sprintf("you have no connection to %q", server)); err != nil {
		return err
	}
	a.audit(r.Context(), "connection.revoke", server, nil)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// MyServer is a server the caller may use that needs their own account or
// credential, and whether they have connected it.
type MyServer struct {
	Server    string `json:"server"`
	Auth      string `json:"auth"` // user_api_key or oauth2_user
	Connected bool   `json:"connected"`
	// ConnectURL is where a browser connects an oauth2_user account.
	ConnectURL string `json:"connect_url,omitempty"`
}

// listMyServers answers the servers that need the caller's own account
// (oauth2_user) or credential (user_api_key), connected or not.
func (a *API) listMyServers(w http.ResponseWriter, r *http.Request) error {
	ms, err := a.myEntries(r)
	if err != nil {
		return storeUnavailable("list my servers", err)
	}
	have := map[string]bool{}
	for _, m := range ms {
		have[m.Server] = true
	}
	out := struct {
		Servers []MyServer `json:"servers"`
	}{Servers: []MyServer{}}
	for _, s := range a.o.Gateway.PersonalServersAs(callers.FromContext(r.Context())) {
		m := MyServer{Server: s.Name, Auth: s.Auth, Connected: have[s.Name]}
		if s.Auth == config.AuthOAuth2User {
			m.ConnectURL = "/oauth/connect/" + url.PathEscape(s.Name)
		}
		out.Servers = append(out.Servers, m)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
