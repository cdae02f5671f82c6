package connect

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
	"github.com/mcpgate/mcpgate/internal/upstream"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// A person's own credentials for egress, as kept in the vault: the
// static one they stored for a user_api_key server, the tokens they
// connected for an oauth2_user server (refreshed here).

// OAuthCredential is person's connected access token for server as an
// Authorization value, refreshed first when it expires within
// refreshMargin; "" when there is none (or it expired and cannot be
// refreshed). A refresh refused with invalid_grant deletes the entry: the
// person has to connect again.
func (f *Flows) OAuthCredential(ctx context.Context, person, server string) string {
	e, ok := f.entryOfKind(ctx, person, server, vault.KindOAuth)
	if !ok {
		return ""
	}
	now := f.now()
	expired := !e.Expiry.IsZero() && !now.Before(e.Expiry)
	if !e.Expiry.IsZero() && now.Add(refreshMargin).After(e.Expiry) {
		if ne, ok := f.refreshConnected(ctx, person, server); ok {
			e = ne
			expired = false
		} else if expired {
			return ""
		}
	}
	if expired || e.AccessToken == "" {
		return ""
	}
	if err := f.vault.Touch(context.WithoutCancel(ctx), person, server); err != nil && !errors.Is(err, vault.ErrNotFound) {
		f.log.Debug("vault last-use write failed", "server", server, "error", err)
	}
	return "Bearer " + e.AccessToken
}

// refreshConnected refreshes person's tokens for server, one refresh at a
// time per entry (Vault.Refresh).
func (f *Flows) refreshConnected(ctx context.Context, person, server string) (vault.Entry, bool) {
	srv := f.conf().Servers[server]
	if srv == nil || srv.Auth == nil {
		return vault.Entry{}, false
	}
	reg := f.registration(ctx, server, srv, "")
	if reg == nil {
		f.log.Warn("oauth2_user: cannot refresh, no client registration for the server's url (none kept, or the config changed); the person must connect again", "server", server)
		return vault.Entry{}, false
	}
	ne, err := f.vault.Refresh(ctx, person, server, func(ctx context.Context, cur vault.Entry) (vault.Entry, error) {
		if cur.Kind != vault.KindOAuth {
			return vault.Entry{}, errors.New("not an oauth entry")
		}
		if cur.Expiry.IsZero() || cur.Expiry.After(f.now().Add(refreshMargin)) {
			return cur, nil // refreshed by another caller meanwhile
		}
		if cur.RefreshToken == "" {
			return vault.Entry{}, errors.New("no refresh token")
		}
		tok, err := reg.plan.Refresh(ctx, reg.client, cur.RefreshToken)
		if err != nil {
			return vault.Entry{}, err
		}
		f.log.Debug("oauth2_user: tokens refreshed", "server", server, "token", tok) // Token.LogValue: no token
		cur.AccessToken, cur.Expiry = tok.AccessToken, tok.Expiry
		if tok.RefreshToken != "" {
			cur.RefreshToken = tok.RefreshToken
		}
		if tok.Scope != "" {
			cur.Scopes = strings.Fields(tok.Scope)
		}
		return cur, nil
	})
	if err != nil {
		var te *client.TokenError
		if errors.As(err, &te) && te.Code == "invalid_grant" {
			f.log.Info("oauth2_user: refresh token refused; the connection is removed", "server", server)
			if err := f.vault.Delete(context.WithoutCancel(ctx), person, server); err != nil && !errors.Is(err, vault.ErrNotFound) {
				f.log.Warn("vault delete failed", "server", server, "error", err)
			}
		} else {
			f.log.Warn("oauth2_user: refresh failed", "server", server, "error", err)
		}
		return vault.Entry{}, false
	}
	return ne, true
}

// StoredCredential reads person's static credential for server and
// records its use. Errors are logged by kind and server, never with the
// entry.
func (f *Flows) StoredCredential(ctx context.Context, person, server string) string {
	e, ok := f.entryOfKind(ctx, person, server, vault.KindStatic)
	if !ok {
		return ""
	}
	if err := f.vault.Touch(context.WithoutCancel(ctx), person, server); err != nil && !errors.Is(err, vault.ErrNotFound) {
		f.log.Debug("vault last-use write failed", "server", server, "error", err)
	}
	return e.AccessToken
}

// Need reports whether err, from a call of server for person, is one a
// (re)connect of the person's account can cure, and the scopes to ask
// for then (nil: the plan's own).
func (f *Flows) Need(ctx context.Context, person, server string, err error) (scopes []string, need bool) {
	if err == nil || person == "" || f.vault == nil || f.authType(server) != config.AuthOAuth2User {
		return nil, false
	}
	if errors.Is(err, upstream.ErrNoCredential) {
		return nil, true
	}
	var ue *upstream.Error
	if !errors.As(err, &ue) || ue.Kind != upstream.KindAuth {
		return nil, false
	}
	switch ue.Status {
	case http.StatusUnauthorized:
		// The token was sent and refused (revoked at the server): a new
		// connect, with what was granted before.
		return f.grantedScopes(ctx, person, server), true
	case http.StatusForbidden:
		resp := &http.Response{StatusCode: ue.Status, Header: http.Header{"Www-Authenticate": {ue.Challenge}}}
		return client.StepUp(f.grantedScopes(ctx, person, server), resp)
	}
	return nil, false
}

func (f *Flows) grantedScopes(ctx context.Context, person, server string) []string {
	e, err := f.vault.Get(ctx, person, server)
	if err != nil {
		return nil
	}
	return e.Scopes
}

// authType is server's auth type, "" for an unknown server (as the
// gateway's AuthType says it).
func (f *Flows) authType(server string) string {
	srv := f.conf().Servers[server]
	switch {
	case srv == nil:
		return ""
	case srv.Auth == nil || srv.Auth.Type == "":
		return config.AuthNone
	}
	return srv.Auth.Type
}

// entryOfKind reads person's vault entry for server when it is of kind; a
// read failure is logged by server, never with the entry, and the call
// goes without a credential (and fails upstream).
func (f *Flows) entryOfKind(ctx context.Context, person, server, kind string) (vault.Entry, bool) {
	e, err := f.vault.Get(ctx, person, server)
	switch {
	case errors.Is(err, vault.ErrNotFound):
		return vault.Entry{}, false
	case err != nil:
		f.log.Warn("vault read failed; the call goes without a credential and fails", "server", server, "error", err)
		return vault.Entry{}, false
	case e.Kind != kind:
		return vault.Entry{}, false
	}
	return e, true
}
