package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// cimdUpstream is an MCP server whose authorization server (same origin)
// supports client ID metadata documents and dynamic registration; it
// counts registrations.
type cimdUpstream struct {
	*httptest.Server
	registrations atomic.Int32
}

func newCIMDUpstream(t *testing.T) *cimdUpstream {
	t.Helper()
	u := &cimdUpstream{}
	mux := http.NewServeMux()
	u.Server = httptest.NewServer(mux)
	t.Cleanup(u.Close)
	base := u.URL
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(oauth.ProtectedResourceMetadata{Resource: base + "/mcp", AuthorizationServers: []string{base}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(oauth.AuthServerMetadata{Issuer: base, AuthorizationEndpoint: base + "/authorize", TokenEndpoint: base + "/token",
			RegistrationEndpoint: base + "/register", CodeChallengeMethodsSupported: []string{"S256"}, ResponseTypesSupported: []string{"code"},
			TokenEndpointAuthMethodsSupported: []string{"none"}, ClientIDMetadataDocumentSupported: true})
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		u.registrations.Add(1)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(oauth.ClientMetadata{ClientID: "dynamic-client", TokenEndpointAuthMethod: "none"})
	})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	return u
}

// connectStart builds a gateway with publicURL (and client_metadata_url
// docURL, when set) in front of up and returns the gateway's test server
// and where GET /oauth/connect/up sends the person.
func connectStart(t *testing.T, up *cimdUpstream, publicURL, docURL string) (*httptest.Server, *url.URL) {
	t.Helper()
	const key = "ada-gateway-key-0123456789"
	vkeys := []config.VaultKey{{ID: "k1", Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}}
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__", PublicURL: publicURL, ClientMetadataURL: docURL,
		Auth:  &config.CallerAuth{Keys: []config.KeyConfig{{Alias: "ada", Key: key}}},
		Vault: &config.Vault{Keys: vkeys},
		Servers: map[string]*config.Server{
			"up": {Name: "up", Transport: config.TransportHTTP, URL: up.URL + "/mcp", Timeout: 5 * time.Second, ProtocolVersion: "2025-06-18", Auth: &config.Auth{Type: config.AuthOAuth2User}},
		}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stk.close(context.Background()) })
	hs := httptest.NewServer(stk.handler)
	t.Cleanup(hs.Close)
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/oauth/connect/up", nil)
	req.Header.Set("X-Mcpgate-Api-Key", key)
	c := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if resp.StatusCode != http.StatusFound || err != nil {
		t.Fatalf("connect: %d %v", resp.StatusCode, err)
	}
	return hs, loc
}

// With an https public_url the gateway publishes its client ID metadata
// document and, at an authorization server that supports such documents,
// uses its URL as the client_id instead of registering; without one it
// registers dynamically.
func TestOAuth2UserClientMetadataDocument(t *testing.T) {
	clearAdminEnv(t)
	for _, tc := range []struct {
		name, public, doc, wantID, path string
	}{
		{"default path", "https://gw.example", "", "https://gw.example/oauth/client-metadata.json", "/oauth/client-metadata.json"},
		{"configured url", "https://gw.example/base", "https://gw.example/base/client.json", "https://gw.example/base/client.json", "/client.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newCIMDUpstream(t)
			hs, loc := connectStart(t, up, tc.public, tc.doc)
			q := loc.Query()
			if got := q.Get("client_id"); got != tc.wantID {
				t.Errorf("client_id %q, want %q", got, tc.wantID)
			}
			redirect := tc.public + "/oauth/connect/callback"
			if got := q.Get("redirect_uri"); got != redirect {
				t.Errorf("redirect_uri %q, want %q", got, redirect)
			}
			if n := up.registrations.Load(); n != 0 {
				t.Errorf("%d dynamic registrations beside the document", n)
			}

			resp, err := http.Get(hs.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var md oauth.ClientMetadata
			if err := json.NewDecoder(resp.Body).Decode(&md); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d %v", tc.path, resp.StatusCode, err)
			}
			if md.ClientID != tc.wantID || len(md.RedirectURIs) != 1 || md.RedirectURIs[0] != redirect || md.TokenEndpointAuthMethod != "none" ||
				md.ClientSecret != "" || len(md.GrantTypes) != 2 || md.GrantTypes[1] != "refresh_token" {
				t.Errorf("document %+v", md)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=300" {
				t.Errorf("Cache-Control %q", cc)
			}
			post, err := http.Post(hs.URL+tc.path, "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			post.Body.Close()
			if post.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("POST %s: %d", tc.path, post.StatusCode)
			}
		})
	}
	t.Run("http public_url: dynamic registration, no document", func(t *testing.T) {
		up := newCIMDUpstream(t)
		hs, loc := connectStart(t, up, "", "")
		if got := loc.Query().Get("client_id"); got != "dynamic-client" {
			t.Errorf("client_id %q, want the dynamic registration's", got)
		}
		if n := up.registrations.Load(); n != 1 {
			t.Errorf("%d dynamic registrations, want 1", n)
		}
		resp, err := http.Get(hs.URL + "/oauth/client-metadata.json")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("the document without an https public_url: %d", resp.StatusCode)
		}
	})
}
