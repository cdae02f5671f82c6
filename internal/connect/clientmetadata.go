package connect

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// The gateway's client ID metadata document
// (draft-ietf-oauth-client-id-metadata-document): with an https
// public_url, the gateway is an OAuth client whose client_id is the URL of
// this document, so an authorization server that supports such documents
// needs no registration of it (oauth2_user servers without a client_id).
// The document says what a registration would: a public web client
// (token_endpoint_auth_method none, PKCE) with the connect callback as its
// only redirect URI.

// clientMetadataName is the client_name the document and dynamic
// registrations give the gateway.
const clientMetadataName = "mcpgate"

// clientMetadataURL is the document's URL, "" when the gateway publishes
// none (public_url is not https).
func (f *Flows) clientMetadataURL() string {
	u, _, ok := f.conf().ClientMetadataDocument()
	if !ok {
		return ""
	}
	return u
}

// isClientMetadataPath reports whether path is the document's.
func (f *Flows) isClientMetadataPath(path string) bool {
	_, p, ok := f.conf().ClientMetadataDocument()
	return ok && path == p
}

// clientMetadata is the document: its client_id is its own URL.
func (f *Flows) clientMetadata(docURL string) oauth.ClientMetadata {
	return oauth.ClientMetadata{
		ClientID:                docURL,
		ClientName:              clientMetadataName,
		RedirectURIs:            []string{f.connectRedirectURI()},
		GrantTypes:              []string{"authorization_code", "refresh_token"},
		ResponseTypes:           []string{"code"},
		TokenEndpointAuthMethod: "none",
		ApplicationType:         "web",
	}
}

// connectRedirectURI is the connect callback under public_url.
func (f *Flows) connectRedirectURI() string {
	return strings.TrimRight(f.conf().PublicURL, "/") + CallbackPath
}

// serveClientMetadata answers GET and HEAD of the document, cacheable for
// five minutes (authorization servers cache it; a changed public_url
// reaches them within that).
func (f *Flows) serveClientMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "Method Not Allowed"})
		return
	}
	docURL := f.clientMetadataURL()
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeJSON(w, http.StatusOK, f.clientMetadata(docURL))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
