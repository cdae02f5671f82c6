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
func (a *API) admitPerson(r *http.Request) (*callers.Caller, error) {
	var c *callers.Caller
	if a.o.Authenticate != nil {
		var f *callers.Failure
		c, f = a.o.Authenticate(r)
		if f != nil {
			return nil, failed(f)
		}
	}
	if callers.PersonID(c) == "" {
		return nil, refusal(http.StatusForbidden, "your own credentials are stored with a personal key or token (not the master key, not anonymously)")
	}
	return c, nil
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
func (a *API) userKeyServer(server string) error {
	if a.o.Gateway.AuthType(server) != config.AuthUserAPIKey {
		return badRequest(fmt.Sprintf("server %q does not take a credential of your own (its auth type is not user_api_key)", server))
	}
	return a.needVault()
}

func (a *API) putCredential(w http.ResponseWriter, r *http.Request) error {
	server := r.PathValue("server")
	if err := a.userKeyServer(server); err != nil {
		return err
	}
	var req CredentialRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	v := strings.TrimSpace(req.Value)
	switch {
	case v == "":
		return badRequest("value: required")
	case len(v) > MaxCredentialBytes:
		return badRequest(fmt.Sprintf("value: longer than %d bytes", MaxCredentialBytes))
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return badRequest("value: must not contain control characters")
	}
	person := callers.PersonID(callers.FromContext(r.Context()))
	e := vault.Entry{Person: person, Server: server, Kind: vault.KindStatic, AccessToken: v}
	if err := a.o.Vault.Put(r.Context(), e); err != nil {
		if errors.Is(err, vault.ErrInvalid) {
			return badRequest("the credential cannot be stored as given")
		}
		return storeUnavailable("store a credential", err, "server", server)
	}
	a.audit(r.Context(), "credential.put", server, nil)
	writeJSON(w, http.StatusOK, CredentialInfo{Server: server, UpdatedAt: timeString(a.o.Now())})
	return nil
}

func (a *API) listCredentials(w http.ResponseWriter, r *http.Request) error {
	ms, err := a.myEntries(r)
	if err != nil {
		return storeUnavailable("list credentials", err)
	}
	out := CredentialList{Credentials: []CredentialInfo{}}
	for _, m := range ms {
		out.Credentials = append(out.Credentials, infoOf(m))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) deleteCredential(w http.ResponseWriter, r *http.Request) error {
	server := r.PathValue("server")
	if err := a.userKeyServer(server); err != nil {
		return err
	}
	if err := a.deleteEntry(r, callers.PersonID(callers.FromContext(r.Context())), server, fmt.Sprintf("you have no credential stored for %q", server)); err != nil {
		return err
	}
	a.audit(r.Context(), "credential.delete", server, nil)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
