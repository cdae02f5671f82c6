package oauth

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/config"
)

// decodeClaims decodes a JWT payload into a map with exact key matching
// (a struct would match "ISS" for iss) and numbers kept as written.
func decodeClaims(payload []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("claims are not an object")
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the claims object")
	}
	return m, nil
}

// numericDate reads an RFC 7519 NumericDate claim; ok is false when the
// claim is absent.
func numericDate(claims map[string]any, name string) (t time.Time, ok bool, err error) {
	v, present := claims[name]
	if !present {
		return time.Time{}, false, nil
	}
	n, isNum := v.(json.Number)
	if !isNum {
		return time.Time{}, true, errors.New("not a number")
	}
	// go-jose's parser bounds the value so that time.Unix cannot wrap a
	// far-future nbf into the past.
	var d jwt.NumericDate
	if err := d.UnmarshalJSON([]byte(n.String())); err != nil {
		return time.Time{}, true, err
	}
	return d.Time(), true, nil
}

// stringOrList reads a claim that may be one string or a list of strings
// (aud, roles, groups). Non-string list elements make it invalid.
func stringOrList(v any) ([]string, bool) {
	switch v := v.(type) {
	case string:
		return []string{v}, true
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// claimAt looks path up in claims: the whole path as one claim name first
// (namespaced claims such as "https://example.com/roles" contain dots),
// then each dotted prefix that names an object, recursively, so
// "realm_access.roles" finds {"realm_access": {"roles": [...]}}.
func claimAt(claims map[string]any, path string) (any, bool) {
	if path == "" {
		return nil, false
	}
	if v, ok := claims[path]; ok {
		return v, true
	}
	for i := 0; i < len(path); i++ {
		if path[i] != '.' {
			continue
		}
		if sub, ok := claims[path[:i]].(map[string]any); ok {
			if v, ok := claimAt(sub, path[i+1:]); ok {
				return v, true
			}
		}
	}
	return nil, false
}

func claimString(claims map[string]any, path string) string {
	v, _ := claimAt(claims, path)
	s, _ := v.(string)
	return s
}

// claimList reads a list claim, which may also be a single string; an
// element that is not a string is skipped rather than failing the token,
// since these claims only ever add grants.
func claimList(claims map[string]any, path string) []string {
	v, ok := claimAt(claims, path)
	if !ok {
		return nil
	}
	switch v := v.(type) {
	case string:
		if v == "" {
			return nil
		}
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok && s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// scopes reads scope (space-separated) or, without it, scp (a list, or a
// space-separated string as Entra ID writes it).
func scopes(claims map[string]any) []string {
	v, ok := claims["scope"]
	if !ok {
		v = claims["scp"]
	}
	var out []string
	switch v := v.(type) {
	case string:
		out = strings.Fields(v)
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, strings.Fields(s)...)
			}
		}
	}
	return out
}

// PersonOf reads who the claims name at the configured paths: user,
// email and org are strings; team is one string; teams and roles are a
// list of strings or one string; teams are team then teams, deduplicated.
// The user path defaults to sub; other empty paths are not read (config
// fills in its defaults). It is the one reading of claim paths, for
// access tokens here and ID tokens in the authorization server.
func PersonOf(claims map[string]any, p config.ClaimPaths) Identity {
	userPath := p.User
	if userPath == "" {
		userPath = "sub"
	}
	return Identity{
		User:  claimString(claims, userPath),
		Email: claimString(claims, p.Email),
		Org:   claimString(claims, p.Org),
		Roles: dedupe(claimList(claims, p.Roles)),
		Teams: dedupe(append(claimList(claims, p.Team), claimList(claims, p.Teams)...)),
	}
}

// identity maps verified claims to an Identity.
func identity(claims map[string]any, iss string, p config.ClaimPaths, local bool) (*Identity, error) {
	exp, _, _ := numericDate(claims, "exp")
	person := PersonOf(claims, p)
	id := &person
	id.Issuer, id.Scopes, id.Expiry, id.Subject = iss, scopes(claims), exp, claimString(claims, "sub")
	if id.User == "" {
		return nil, tokenError("token has no user claim", nil)
	}
	if id.ClientID = claimString(claims, "azp"); id.ClientID == "" {
		id.ClientID = claimString(claims, "client_id")
	}
	if local {
		// Only mcpgate's own authorization server says which virtual key
		// a person logged in with; from any other issuer the claim would
		// let an IdP admin pick a key.
		id.Key = claimString(claims, "mcpgate_key")
	}
	return id, nil
}

func dedupe(list []string) []string {
	if len(list) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(list))
	out := list[:0:0]
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
