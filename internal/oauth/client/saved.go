package client

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// Saved is a plan and the client registered under it, as a caller keeps
// them to run refreshes and new authorizations after a restart without
// discovering and registering again. It holds the client secret: keep it
// sealed (the gateway keeps it in its vault). String and LogValue leave
// the secret out.
type Saved struct {
	ServerURL   string                   `json:"server_url"`
	RedirectURI string                   `json:"redirect_uri"`
	Resource    string                   `json:"resource"`
	Scopes      []string                 `json:"scopes,omitempty"`
	AuthServer  oauth.AuthServerMetadata `json:"authorization_server"`
	Legacy      bool                     `json:"legacy,omitempty"`
	Synthesized bool                     `json:"synthesized,omitempty"`
	Client      SavedClient              `json:"client"`
}

// SavedClient is a Client as saved (the same fields, with JSON names).
type SavedClient struct {
	ID              string    `json:"client_id"`
	Secret          string    `json:"client_secret,omitempty"`
	AuthMethod      string    `json:"token_endpoint_auth_method"`
	Source          string    `json:"source"`
	SecretExpiresAt time.Time `json:"client_secret_expires_at,omitzero"`
}

func (s Saved) String() string {
	return fmt.Sprintf("saved registration for %s: client %s (%s, %s) at %s", redactURL(s.ServerURL), s.Client.ID, s.Client.Source, s.Client.AuthMethod, redactURL(s.AuthServer.Issuer))
}

// GoString keeps %#v from printing the secret.
func (s Saved) GoString() string { return s.String() }

// LogValue keeps slog from printing the secret.
func (s Saved) LogValue() slog.Value {
	return slog.GroupValue(slog.String("server_url", redactURL(s.ServerURL)), slog.String("issuer", redactURL(s.AuthServer.Issuer)),
		slog.String("client_id", s.Client.ID), slog.String("auth_method", s.Client.AuthMethod))
}

// Save is p and c as a caller keeps them.
func (p *Plan) Save(c Client) Saved {
	return Saved{ServerURL: p.cfg.ServerURL, RedirectURI: p.cfg.RedirectURI, Resource: p.Resource, Scopes: slices.Clone(p.Scopes),
		AuthServer: p.AuthServer, Legacy: p.Legacy, Synthesized: p.Synthesized,
		Client: SavedClient(c)}
}

// ErrStaleRegistration: a saved registration for another server URL,
// redirect URI or authorization server than the config's.
var ErrStaleRegistration = errors.New("the saved registration was made for another server url, redirect uri or authorization server")

// Restore rebuilds the plan and client of s for cfg, whose ServerURL and
// RedirectURI (and AuthorizationServer, when set) must be the ones s was
// made for (ErrStaleRegistration otherwise); the rest of cfg (the HTTP client, AllowPrivate) is this
// run's. What s names is checked as discovery checks it, so a saved
// document cannot send the flow where a discovered one could not: the
// endpoints obey the upstream's URL rules, the resource covers the server.
func Restore(cfg Config, s Saved) (*Plan, Client, error) {
	if s.ServerURL != cfg.ServerURL || s.RedirectURI != cfg.RedirectURI {
		return nil, Client{}, ErrStaleRegistration
	}
	su, err := url.Parse(cfg.ServerURL)
	if err != nil || su.Host == "" || (su.Scheme != "https" && su.Scheme != "http") {
		return nil, Client{}, errors.New("oauth restore: the server url is not an absolute http or https URL")
	}
	serverResource, err := CanonicalResource(cfg.ServerURL)
	if err != nil {
		return nil, Client{}, fmt.Errorf("oauth restore: %w", err)
	}
	if r, err := resourceFor(s.Resource, serverResource); err != nil || r != s.Resource {
		return nil, Client{}, fmt.Errorf("oauth restore: %w", ErrResourceMismatch)
	}
	// A registration made at another authorization server than the one
	// the config now pins is not this config's: its client (and the
	// pre-registered secret the caller would put back in it) must not go
	// there.
	if pin := cfg.AuthorizationServer; pin != "" && s.AuthServer.Issuer != pin {
		return nil, Client{}, fmt.Errorf("oauth restore: %w", ErrStaleRegistration)
	}
	f, err := newFetcher(su, cfg.HTTPClient, cfg.AllowPrivate)
	if err != nil {
		return nil, Client{}, err
	}
	if _, err := f.checkURL(s.AuthServer.Issuer); err != nil {
		return nil, Client{}, fmt.Errorf("oauth restore: issuer: %w", err)
	}
	if err := checkEndpoints(f, &s.AuthServer); err != nil {
		return nil, Client{}, fmt.Errorf("oauth restore: %w", err)
	}
	c := Client(s.Client)
	if c.ID == "" {
		return nil, Client{}, errors.New("oauth restore: no client_id")
	}
	p := &Plan{Resource: s.Resource, AuthServer: s.AuthServer, Scopes: slices.Clone(s.Scopes),
		Legacy: s.Legacy, Synthesized: s.Synthesized, cfg: cfg, f: f}
	return p, c, nil
}
