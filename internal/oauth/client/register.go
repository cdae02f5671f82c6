package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// Token endpoint authentication methods (RFC 7591 2, OAuth 2.1).
const (
	AuthNone              = "none"
	AuthClientSecretBasic = "client_secret_basic"
	AuthClientSecretPost  = "client_secret_post"
)

// How a Client came to be.
const (
	SourcePreregistered    = "preregistered"
	SourceMetadataDocument = "metadata_document"
	SourceDynamic          = "dynamic"
)

// ErrNoRegistration: no pre-registered client, no client ID metadata
// document the authorization server accepts, no registration endpoint.
var ErrNoRegistration = errors.New("no way to register a client at this authorization server: configure a client_id")

// Client is a registration at one authorization server. Its String and
// LogValue leave the secret out; the vault stores it whole.
type Client struct {
	ID     string
	Secret string
	// AuthMethod is the token endpoint authentication method: none,
	// client_secret_basic or client_secret_post.
	AuthMethod string
	// Source is preregistered, metadata_document or dynamic.
	Source string
	// SecretExpiresAt is when a dynamically registered secret expires;
	// zero for never.
	SecretExpiresAt time.Time
}

func (c Client) String() string {
	return fmt.Sprintf("client %s (%s, %s)", c.ID, c.Source, c.AuthMethod)
}

// GoString keeps %#v from printing the secret.
func (c Client) GoString() string { return c.String() }

// LogValue keeps slog from printing the secret.
func (c Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("client_id", c.ID), slog.String("source", c.Source), slog.String("auth_method", c.AuthMethod))
}

// Register returns the client to use, in the MCP spec's order: the
// pre-registered one from Config; else the client ID metadata document
// when the authorization server says client_id_metadata_document_supported
// and Config.ClientMetadataURL is set; else a dynamic registration
// (RFC 7591) at its registration_endpoint; else ErrNoRegistration. It
// refuses first, as AuthorizeURL does, an authorization server without
// PKCE S256, so no registration is made for a flow that cannot run.
func (p *Plan) Register(ctx context.Context) (Client, error) {
	if err := p.checkPKCE(); err != nil {
		return Client{}, err
	}
	as := &p.AuthServer
	if p.cfg.ClientID != "" {
		c := Client{ID: p.cfg.ClientID, Secret: p.cfg.ClientSecret, Source: SourcePreregistered}
		c.AuthMethod = chooseAuthMethod(as.TokenEndpointAuthMethodsSupported, c.Secret != "")
		if c.AuthMethod == "" {
			return Client{}, fmt.Errorf("oauth register: the authorization server supports none of the token endpoint auth methods the pre-registered client can use (%s)",
				sanitize(strings.Join(as.TokenEndpointAuthMethodsSupported, " "), 200))
		}
		return c, nil
	}
	if as.ClientIDMetadataDocumentSupported && p.cfg.ClientMetadataURL != "" {
		if err := checkMetadataURL(p.cfg.ClientMetadataURL); err != nil {
			return Client{}, err
		}
		return Client{ID: p.cfg.ClientMetadataURL, AuthMethod: AuthNone, Source: SourceMetadataDocument}, nil
	}
	if as.RegistrationEndpoint == "" {
		return Client{}, fmt.Errorf("oauth register: %w", ErrNoRegistration)
	}
	return p.register(ctx)
}

// checkMetadataURL: a client ID metadata document URL is https with a
// path (draft-ietf-oauth-client-id-metadata-document 3).
func checkMetadataURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" || strings.Trim(u.Path, "/") == "" {
		return errors.New("oauth register: the client metadata URL must be https with a path")
	}
	return nil
}

// chooseAuthMethod picks a token endpoint auth method the server lists
// (RFC 8414 2: an absent list means client_secret_basic) that the client
// can use: with a secret, client_secret_basic, then client_secret_post;
// without, none.
func chooseAuthMethod(supported []string, haveSecret bool) string {
	if len(supported) == 0 {
		supported = []string{AuthClientSecretBasic}
	}
	if !haveSecret {
		if slices.Contains(supported, AuthNone) {
			return AuthNone
		}
		return ""
	}
	for _, m := range []string{AuthClientSecretBasic, AuthClientSecretPost} {
		if slices.Contains(supported, m) {
			return m
		}
	}
	return ""
}

// register is the RFC 7591 registration: mcpgate is a confidential web
// client when the server offers a secret-based method, else a public one.
func (p *Plan) register(ctx context.Context) (Client, error) {
	if p.cfg.RedirectURI == "" {
		return Client{}, errors.New("oauth register: no redirect URI configured")
	}
	method := chooseAuthMethod(p.AuthServer.TokenEndpointAuthMethodsSupported, true)
	if method == "" {
		method = chooseAuthMethod(p.AuthServer.TokenEndpointAuthMethodsSupported, false)
	}
	if method == "" {
		return Client{}, errors.New("oauth register: the authorization server supports no token endpoint auth method mcpgate can use")
	}
	name := p.cfg.ClientName
	if name == "" {
		name = "mcpgate"
	}
	req := oauth.ClientMetadata{
		ClientName:              name,
		RedirectURIs:            []string{p.cfg.RedirectURI},
		GrantTypes:              []string{"authorization_code", "refresh_token"},
		ResponseTypes:           []string{"code"},
		TokenEndpointAuthMethod: method,
		Scope:                   strings.Join(p.Scopes, " "),
		ApplicationType:         "web",
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Client{}, err
	}
	ep := p.AuthServer.RegistrationEndpoint
	status, data, err := p.f.post(ctx, ep, "application/json", string(body), nil)
	if err != nil {
		return Client{}, fmt.Errorf("oauth register: %w", err)
	}
	if status != http.StatusCreated && status != http.StatusOK {
		return Client{}, fmt.Errorf("oauth register: %s: %w", redactURL(ep), oauthError(status, data))
	}
	var got oauth.ClientMetadata
	if err := decodeObject(data, &got); err != nil || got.ClientID == "" {
		return Client{}, fmt.Errorf("oauth register: %s: the response has no client_id", redactURL(ep))
	}
	c := Client{ID: got.ClientID, Secret: got.ClientSecret, AuthMethod: got.TokenEndpointAuthMethod, Source: SourceDynamic}
	if c.AuthMethod == "" {
		c.AuthMethod = method
	}
	switch c.AuthMethod {
	case AuthNone:
		c.Secret = ""
	case AuthClientSecretBasic, AuthClientSecretPost:
		if c.Secret == "" {
			return Client{}, fmt.Errorf("oauth register: %s: registered for %s without a client_secret", redactURL(ep), c.AuthMethod)
		}
	default:
		return Client{}, fmt.Errorf("oauth register: %s: registered for token endpoint auth method %q, which mcpgate does not use", redactURL(ep), sanitize(c.AuthMethod, 64))
	}
	if got.ClientSecretExpiresAt > 0 {
		c.SecretExpiresAt = time.Unix(got.ClientSecretExpiresAt, 0)
	}
	return c, nil
}
