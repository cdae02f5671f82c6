package openapi

import (
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// APIKeySlot is where the document wants an API key: a header, and the
// scheme written before the key in it ("" for the key alone).
type APIKeySlot struct {
	Header string
	Scheme string
}

// APIKeySlot reads the document's security schemes for where an api_key
// credential goes: the first (by name) of the schemes its security
// requirements use, else of all it declares, that is an apiKey in a
// header (in Authorization: "ApiKey <key>") or an http scheme other than
// basic and bearer (Authorization: "<scheme> <key>", as for
// scheme: ApiKey). ok is false when none is.
func (d *Doc) APIKeySlot() (slot APIKeySlot, ok bool) {
	if d.t.Components == nil || len(d.t.Components.SecuritySchemes) == 0 {
		return APIKeySlot{}, false
	}
	used := map[string]bool{}
	add := func(reqs openapi3.SecurityRequirements) {
		for _, r := range reqs {
			for name := range r {
				used[name] = true
			}
		}
	}
	add(d.t.Security)
	for _, t := range d.tools {
		add(t.security)
	}
	schemes := d.t.Components.SecuritySchemes
	for _, pass := range []bool{true, false} {
		for _, name := range sortedKeys(schemes) {
			if pass && !used[name] {
				continue
			}
			ref := schemes[name]
			if ref == nil || ref.Value == nil {
				continue
			}
			if slot, ok := apiKeySlotOf(ref.Value); ok {
				return slot, true
			}
		}
	}
	return APIKeySlot{}, false
}

func apiKeySlotOf(s *openapi3.SecurityScheme) (APIKeySlot, bool) {
	switch strings.ToLower(s.Type) {
	case "apikey":
		if !strings.EqualFold(s.In, "header") || s.Name == "" {
			return APIKeySlot{}, false // query and cookie keys: not supported
		}
		h := http.CanonicalHeaderKey(s.Name)
		if h == "Authorization" {
			return APIKeySlot{Header: h, Scheme: "ApiKey"}, true
		}
		return APIKeySlot{Header: h}, true
	case "http":
		sc := strings.TrimSpace(s.Scheme)
		if sc == "" || strings.EqualFold(sc, "bearer") || strings.EqualFold(sc, "basic") || strings.ContainsAny(sc, " \t") {
			return APIKeySlot{}, false
		}
		return APIKeySlot{Header: "Authorization", Scheme: sc}, true
	}
	return APIKeySlot{}, false
}
