package authserver

import (
	"net/http"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// ScopesSupported are advertised in the metadata. Scopes carry no
// authority at this server (grants decide), so any well-formed scope is
// granted as asked; these are the ones it names: mcp, the default, and
// offline_access, which MCP clients add when it is listed (refresh tokens
// are issued either way).
var ScopesSupported = []string{DefaultScope, "offline_access"}

var clientAuthMethods = []string{authNone, authSecretBasic, authSecretPost}

// metadata returns the RFC 8414 authorization server metadata for an
// issuer.
func (s *Server) metadata(issuer string) oauth.AuthServerMetadata {
	return oauth.AuthServerMetadata{
		Issuer:                                     issuer,
		AuthorizationEndpoint:                      issuer + "/oauth/authorize",
		TokenEndpoint:                              issuer + "/oauth/token",
		RegistrationEndpoint:                       issuer + "/oauth/register",
		RevocationEndpoint:                         issuer + "/oauth/revoke",
		JWKSURI:                                    issuer + "/oauth/jwks",
		ScopesSupported:                            ScopesSupported,
		ResponseTypesSupported:                     []string{"code"},
		ResponseModesSupported:                     []string{"query"},
		GrantTypesSupported:                        []string{"authorization_code", "refresh_token"},
		TokenEndpointAuthMethodsSupported:          clientAuthMethods,
		RevocationEndpointAuthMethodsSupported:     clientAuthMethods,
		CodeChallengeMethodsSupported:              []string{"S256"},
		AuthorizationResponseIssParameterSupported: true,
		ClientIDMetadataDocumentSupported:          true,
	}
}

func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeJSON(w, http.StatusOK, s.metadata(s.Issuer(r)))
	return nil
}

func (s *Server) serveJWKS(w http.ResponseWriter, r *http.Request) error {
	// Short: a new key is published the moment it signs, and verifiers
	// that cache the set refetch on an unknown kid anyway.
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Header().Set("Content-Type", "application/jwk-set+json")
	writeJSON(w, http.StatusOK, s.PublicKeys())
	return nil
}
