package client_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
)

// A pre-registered confidential client belongs to the authorization
// server the config pins: the upstream's resource metadata naming
// another one (which would answer every request) changes nothing, that
// one receives nothing, and the secret goes to the pinned one's token
// endpoint only. Without the pin the upstream's choice is used, as the
// MCP spec has it (the case the config refuses with a client_secret).
func TestDiscoverPinnedAuthorizationServer(t *testing.T) {
	hostile := newFake(t)
	hostile.json("/.well-known/oauth-authorization-server", func() any {
		md := asMetadata(hostile.url)
		md.TokenEndpointAuthMethodsSupported = []string{"client_secret_basic", "client_secret_post"}
		return md
	})
	hostile.json("/token", func() any { return map[string]any{"access_token": "stolen", "token_type": "bearer"} })
	honest := newFake(t)
	honest.json("/.well-known/oauth-authorization-server", func() any {
		md := asMetadata(honest.url)
		md.TokenEndpointAuthMethodsSupported = []string{"client_secret_post"}
		return md
	})
	honest.json("/token", func() any {
		return map[string]any{"access_token": "at-honest", "token_type": "bearer", "refresh_token": "rt-1"}
	})
	up := newFake(t)
	up.json("/.well-known/oauth-protected-resource/mcp", func() any {
		return oauth.ProtectedResourceMetadata{Resource: up.url + "/mcp", AuthorizationServers: []string{hostile.url}, ScopesSupported: []string{"read"}}
	})

	cfg := client.Config{ServerURL: up.url + "/mcp", RedirectURI: callback, ClientID: "gw", ClientSecret: "pre-registered-Secr3t",
		AuthorizationServer: honest.url}
	p, err := client.Discover(t.Context(), cfg, challenge(`Bearer resource_metadata="`+up.url+`/.well-known/oauth-protected-resource/mcp"`))
	if err != nil {
		t.Fatal(err)
	}
	if p.AuthServer.Issuer != honest.url || p.Resource != up.url+"/mcp" || !slices.Equal(p.Scopes, []string{"read"}) {
		t.Errorf("plan %v", p)
	}
	c, err := p.Register(t.Context())
	if err != nil || c.Source != client.SourcePreregistered || c.AuthMethod != client.AuthClientSecretPost {
		t.Fatalf("register: %+v %v", c, err)
	}
	if tok, err := p.Exchange(t.Context(), c, "the-code", "the-verifier", honest.url); err != nil || tok.AccessToken != "at-honest" {
		t.Fatalf("exchange: %v %v", tok, err)
	}
	if form := honest.lastForm(); form.Get("client_secret") != "pre-registered-Secr3t" {
		t.Errorf("the pinned authorization server got %v", form)
	}
	if got := hostile.paths(); len(got) != 0 {
		t.Errorf("the upstream's authorization server was asked for %q", got)
	}

	// A registration saved at another authorization server (before the
	// pin) is not restored for the pinned config.
	unpinned := cfg
	unpinned.AuthorizationServer, unpinned.ClientSecret = "", ""
	hp, err := client.Discover(t.Context(), unpinned, nil)
	if err != nil || hp.AuthServer.Issuer != hostile.url {
		t.Fatalf("unpinned discovery: %v %v", hp, err)
	}
	doc, _ := json.Marshal(hp.Save(client.Client{ID: "gw", Source: client.SourcePreregistered, AuthMethod: client.AuthClientSecretPost}))
	var saved client.Saved
	_ = json.Unmarshal(doc, &saved)
	if _, _, err := client.Restore(cfg, saved); !errors.Is(err, client.ErrStaleRegistration) {
		t.Errorf("restore of a registration at another authorization server: %v, want ErrStaleRegistration", err)
	}
	if _, _, err := client.Restore(unpinned, saved); err != nil {
		t.Errorf("restore without a pin: %v", err)
	}

	// The pinned one's metadata must name exactly its issuer.
	liar := newFake(t)
	liar.json("/.well-known/oauth-authorization-server", func() any { return asMetadata(hostile.url) })
	cfg.AuthorizationServer = liar.url
	if _, err := client.Discover(t.Context(), cfg, nil); !errors.Is(err, client.ErrIssuerMismatch) {
		t.Errorf("issuer mismatch: %v", err)
	}
}
