package connect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
	"github.com/mcpgate/mcpgate/internal/upstream"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// The connect flow's client registrations outlive the process: each is
// kept in the vault (sealed, with its secret, rotated with the entries),
// as the discovered plan's essentials and the client, so that after a
// restart a person's tokens are refreshed with the client they were
// issued to instead of the person having to connect again. Memory
// (registrations) stays the first place looked: the vault is read once
// per server and process, and written once per registration.

// connReg is a client registered at a server's authorization server,
// with the plan it was registered under.
type connReg struct {
	plan     *client.Plan
	client   client.Client
	redirect string
	url      string // the server URL it was made for
}

// registration returns server's registration for srv and redirect (""
// for any, see fits): the one in memory, else the one kept in the vault
// (registration.go); nil when none fits.
func (f *Flows) registration(ctx context.Context, server string, srv *config.Server, redirect string) *connReg {
	if r := f.regs.get(server); r != nil && r.fits(srv, redirect) {
		return r
	}
	return f.storedRegistration(ctx, server, srv, redirect)
}

// connectRegistration is server's registration for redirect: the one in
// memory or the vault, else a discovery (from the 401 of an
// unauthenticated probe) and a registration, remembered and kept.
func (f *Flows) connectRegistration(ctx context.Context, server string, srv *config.Server, redirect string) (*connReg, error) {
	if reg := f.registration(ctx, server, srv, redirect); reg != nil {
		return reg, nil
	}
	cfg := f.connectConfig(srv, redirect)
	probe := f.probeUnauthenticated(ctx, srv)
	if probe != nil {
		defer probe.Body.Close()
	}
	plan, err := client.Discover(ctx, cfg, probe)
	if err != nil {
		return nil, err
	}
	cl, err := plan.Register(ctx)
	if err != nil {
		return nil, err
	}
	reg := &connReg{plan: plan, client: cl, redirect: redirect, url: srv.URL}
	f.regs.remember(server, reg)
	f.keepRegistration(ctx, server, reg)
	return reg, nil
}

// probeUnauthenticated sends an initialize without credentials to srv's
// MCP endpoint: its 401 names the protected resource metadata. nil when
// the answer is no 401 (discovery then uses the well-known URIs). A
// runtime server's probe has its address guard (upstream.GuardedHTTPClient).
func (f *Flows) probeUnauthenticated(ctx context.Context, srv *config.Server) *http.Response {
	ctx, cancel := context.WithTimeout(ctx, client.FetchTimeout)
	defer cancel()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcpgate","version":"connect"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(body))
	if err != nil {
		return nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	hc, err := upstream.GuardedHTTPClient(srv, f.httpClient)
	if err != nil {
		return nil
	}
	nc := *hc
	nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := nc.Do(req)
	if err != nil {
		return nil
	}
	if resp.StatusCode != http.StatusUnauthorized {
		resp.Body.Close()
		return nil
	}
	// Discover reads only the headers; the body is bounded and dropped.
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return resp
}

// connectConfig is the OAuth client configuration of srv for redirect.
func (f *Flows) connectConfig(srv *config.Server, redirect string) client.Config {
	cfg := client.Config{ServerURL: srv.URL, ClientID: srv.Auth.ClientID, ClientSecret: srv.Auth.ClientSecret,
		RedirectURI: redirect, Scopes: srv.Auth.Scopes, HTTPClient: f.httpClient, ClientName: clientMetadataName,
		AuthorizationServer: srv.Auth.AuthorizationServer}
	if redirect == f.connectRedirectURI() {
		// The document names this redirect URI only.
		cfg.ClientMetadataURL = f.clientMetadataURL()
	}
	return cfg
}

// registrations owns the registrations in memory, by server.
type registrations struct {
	// mu guards the fields below.
	mu   sync.Mutex
	regs map[string]*connReg // server -> registration
}

// get is server's registration in memory, nil when there is none.
func (c *registrations) get(server string) *connReg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.regs[server]
}

// remember makes reg server's registration in memory.
func (c *registrations) remember(server string, reg *connReg) {
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
func (f *Flows) storedRegistration(ctx context.Context, server string, srv *config.Server, redirect string) *connReg {
	if f.vault == nil {
		return nil
	}
	doc, err := f.vault.GetRegistration(ctx, server)
	if errors.Is(err, vault.ErrNotFound) {
		return nil
	}
	if err != nil {
		f.log.Warn("oauth2_user: the kept client registration cannot be read", "server", server, "error", err)
		return nil
	}
	var s client.Saved
	if err := json.Unmarshal(doc, &s); err != nil {
		f.log.Warn("oauth2_user: the kept client registration is not valid", "server", server)
		return nil
	}
	if redirect == "" {
		redirect = s.RedirectURI
	}
	plan, cl, err := client.Restore(f.connectConfig(srv, redirect), s)
	if err != nil {
		f.log.Info("oauth2_user: the kept client registration is not used", "server", server, "error", err)
		return nil
	}
	if cl.Source == client.SourcePreregistered {
		cl.Secret = srv.Auth.ClientSecret // the config's, which may have been rotated
	}
	reg := &connReg{plan: plan, client: cl, redirect: s.RedirectURI, url: s.ServerURL}
	if !reg.fits(srv, redirect) {
		return nil
	}
	f.regs.remember(server, reg)
	return reg
}

// keepRegistration writes reg to the vault. A failure is logged: the
// registration still serves this process, and people connected with it
// connect again after a restart.
func (f *Flows) keepRegistration(ctx context.Context, server string, reg *connReg) {
	saved := reg.plan.Save(reg.client)
	f.log.Debug("oauth2_user: client registered", "server", server, "registration", saved) // Saved.LogValue: no secret
	doc, err := json.Marshal(saved)
	if err == nil {
		err = f.vault.PutRegistration(context.WithoutCancel(ctx), server, doc)
	}
	clear(doc)
	if err != nil {
		f.log.Warn("oauth2_user: the client registration could not be kept; after a restart people connect again", "server", server, "error", err)
	}
}
