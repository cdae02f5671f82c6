package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// A person's own credentials for user_api_key servers (SPEC S19, BYOK):
// /me/credentials is open to every authenticated caller who is one person
// (a virtual key or a JWT; not the master key, not anonymous), and only
// ever reads or changes that person's entries (callers.PersonID). No
// answer, log line or audit record carries a value.

// MaxCredentialBytes bounds a stored credential.
const MaxCredentialBytes = 8 << 10

// selfRoutes are the patterns every person may use, beside the admin ones.
var selfRoutes = map[string]bool{
	"PUT " + Prefix + "/me/credentials/{server}":    true,
	"GET " + Prefix + "/me/credentials":             true,
	"DELETE " + Prefix + "/me/credentials/{server}": true,
	"GET " + Prefix + "/me/connections":             true,
	"GET " + Prefix + "/me/servers":                 true,
	"DELETE " + Prefix + "/me/connections/{server}": true,
}

// admitPerson lets in any caller who is a person.
func (a *API) admitPerson(w http.ResponseWriter, r *http.Request) (*callers.Caller, bool) {
	var c *callers.Caller
	if a.o.Authenticate != nil {
		var f *callers.Failure
		c, f = a.o.Authenticate(r)
		if f != nil {
			f.Write(w)
			return nil, false
		}
	}
	if callers.PersonID(c) == "" {
		writeError(w, http.StatusForbidden, "Forbidden", "your own credentials are stored with a personal key or token (not the master key, not anonymously)")
		return nil, false
	}
	return c, true
}

// CredentialRequest is the body of PUT /me/credentials/{server}.
type CredentialRequest struct {
	Value string `json:"value"`
}

// CredentialInfo is one stored credential, without its value.
type CredentialInfo struct {
	Server    string `json:"server"`
	UpdatedAt string `json:"updated_at,omitempty"`
	LastUsed  string `json:"last_used_at,omitempty"`
}

// CredentialList is GET /me/credentials.
type CredentialList struct {
	Credentials []CredentialInfo `json:"credentials"`
}

func infoOf(m vault.Meta) CredentialInfo {
	return CredentialInfo{Server: m.Server, UpdatedAt: timeString(m.UpdatedAt), LastUsed: timeString(m.LastUsed)}
}

func timeString(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// userKeyServer checks that server takes each person's own credential.
func (a *API) userKeyServer(w http.ResponseWriter, server string) bool {
	if a.o.Gateway.AuthType(server) != config.AuthUserAPIKey {
		writeError(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("server %q does not take a credential of your own (its auth type is not user_api_key)", server))
		return false
	}
	if a.o.Vault == nil {
		writeError(w, http.StatusBadRequest, "Bad Request", "the gateway has no vault configured")
		return false
	}
	return true
}

func (a *API) putCredential(w http.ResponseWriter, r *http.Request) {
	server := r.PathValue("server")
	if !a.userKeyServer(w, server) {
		return
	}
	var req CredentialRequest
	if !decode(w, r, &req) {
		return
	}
	v := strings.TrimSpace(req.Value)
	switch {
	case v == "":
		writeError(w, http.StatusBadRequest, "Bad Request", "value: required")
		return
	case len(v) > MaxCredentialBytes:
		writeError(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("value: longer than %d bytes", MaxCredentialBytes))
		return
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		writeError(w, http.StatusBadRequest, "Bad Request", "value: must not contain control characters")
		return
	}
	person := callers.PersonID(callers.FromContext(r.Context()))
	e := vault.Entry{Person: person, Server: server, Kind: vault.KindStatic, AccessToken: v}
	if err := a.o.Vault.Put(r.Context(), e); err != nil {
		if errors.Is(err, vault.ErrInvalid) {
			writeError(w, http.StatusBadRequest, "Bad Request", "the credential cannot be stored as given")
			return
		}
		a.log.Error("store a credential", "server", server, "error", err)
		storeUnavailable(w)
		return
	}
	a.audit(r.Context(), "credential.put", server, nil)
	writeJSON(w, http.StatusOK, CredentialInfo{Server: server, UpdatedAt: timeString(a.o.Now())})
}

func (a *API) listCredentials(w http.ResponseWriter, r *http.Request) {
	ms, err := a.myEntries(r)
	if err != nil {
		a.log.Error("list credentials", "error", err)
		storeUnavailable(w)
		return
	}
	out := CredentialList{Credentials: []CredentialInfo{}}
	for _, m := range ms {
		out.Credentials = append(out.Credentials, infoOf(m))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) deleteCredential(w http.ResponseWriter, r *http.Request) {
	server := r.PathValue("server")
	if !a.userKeyServer(w, server) {
		return
	}
	if !a.deleteEntry(w, r, callers.PersonID(callers.FromContext(r.Context())), server, fmt.Sprintf("you have no credential stored for %q", server)) {
		return
	}
	a.audit(r.Context(), "credential.delete", server, nil)
	w.WriteHeader(http.StatusNoContent)
}
