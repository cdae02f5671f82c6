package gateway

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// The connect flow's client registrations outlive the process: each is
// kept in the vault (sealed, with its secret, rotated with the entries),
// as the discovered plan's essentials and the client, so that after a
// restart a person's tokens are refreshed with the client they were
// issued to instead of the person having to connect again. Memory
// (connector.regs) stays the first place looked: the vault is read once
// per server and process, and written once per registration.

// connectConfig is the OAuth client configuration of srv for redirect.
func (g *Gateway) connectConfig(srv *config.Server, redirect string) client.Config {
	cfg := client.Config{ServerURL: srv.URL, ClientID: srv.Auth.ClientID, ClientSecret: srv.Auth.ClientSecret,
		RedirectURI: redirect, Scopes: srv.Auth.Scopes, HTTPClient: g.httpClient, ClientName: clientMetadataName,
		AuthorizationServer: srv.Auth.AuthorizationServer}
	if redirect == g.connectRedirectURI() {
		// The document names this redirect URI only.
		cfg.ClientMetadataURL = g.clientMetadataURL()
	}
	return cfg
}

// remember makes reg server's registration in memory.
func (c *connector) remember(server string, reg *connReg) {
	c.mu.Lock()
	if c.regs == nil {
		c.regs = map[string]*connReg{}
	}
	c.regs[server] = reg
	c.mu.Unlock()
}

// fits reports whether reg may serve srv now: made for its URL and (unless
// redirect is "", as for a refresh, which must use the client its tokens
// were issued to whatever the redirect) for redirect, at the
// authorization server the config pins, if it pins one, and for the
// client the config names, if it names one.
func (reg *connReg) fits(srv *config.Server, redirect string) bool {
	if reg.url != srv.URL || (redirect != "" && reg.redirect != redirect) {
		return false
	}
	if pin := srv.Auth.AuthorizationServer; pin != "" && reg.plan.AuthServer.Issuer != pin {
		return false
	}
	if id := srv.Auth.ClientID; id != "" {
		return reg.client.Source == client.SourcePreregistered && reg.client.ID == id
	}
	return reg.client.Source != client.SourcePreregistered
}

// storedRegistration is server's registration kept in the vault, restored
// for srv and remembered; nil when there is none that fits.
func (g *Gateway) storedRegistration(ctx context.Context, server string, srv *config.Server, redirect string) *connReg {
	if g.vault == nil {
		return nil
	}
	doc, err := g.vault.GetRegistration(ctx, server)
	if errors.Is(err, vault.ErrNotFound) {
		return nil
	}
	if err != nil {
		g.log.Warn("oauth2_user: the kept client registration cannot be read", "server", server, "error", err)
		return nil
	}
	var s client.Saved
	if err := json.Unmarshal(doc, &s); err != nil {
		g.log.Warn("oauth2_user: the kept client registration is not valid", "server", server)
		return nil
	}
	if redirect == "" {
		redirect = s.RedirectURI
	}
	plan, cl, err := client.Restore(g.connectConfig(srv, redirect), s)
	if err != nil {
		g.log.Info("oauth2_user: the kept client registration is not used", "server", server, "error", err)
		return nil
	}
	if cl.Source == client.SourcePreregistered {
		cl.Secret = srv.Auth.ClientSecret // the config's, which may have been rotated
	}
	reg := &connReg{plan: plan, client: cl, redirect: s.RedirectURI, url: s.ServerURL}
	if !reg.fits(srv, redirect) {
		return nil
	}
	g.connect.remember(server, reg)
	return reg
}

// keepRegistration writes reg to the vault. A failure is logged: the
// registration still serves this process, and people connected with it
// connect again after a restart.
func (g *Gateway) keepRegistration(ctx context.Context, server string, reg *connReg) {
	saved := reg.plan.Save(reg.client)
	g.log.Debug("oauth2_user: client registered", "server", server, "registration", saved) // Saved.LogValue: no secret
	doc, err := json.Marshal(saved)
	if err == nil {
		err = g.vault.PutRegistration(context.WithoutCancel(ctx), server, doc)
	}
	clear(doc)
	if err != nil {
		g.log.Warn("oauth2_user: the client registration could not be kept; after a restart people connect again", "server", server, "error", err)
	}
}
