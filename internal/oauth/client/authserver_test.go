package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/authserver"
	"github.com/mcpgate/mcpgate/internal/oauth/authserver/astest"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

const (
	callback = "http://127.0.0.1:9/oauth/callback"
	goodKey  = "mcpgate_test_good-key"
)

// keys accepts one pasted key.
type keys struct{}

func (keys) AuthenticateKey(_ context.Context, secret string) (string, string, string, error) {
	if secret != goodKey {
		return "", "", "", authserver.ErrKeyRejected
	}
	return "ada-laptop", "ada", "eng", nil
}

// asUpstream is mcpgate's own authorization server and, on the same
// origin, an MCP endpoint that answers 401 with a resource_metadata URL
// off the well-known path, and the protected resource metadata there.
type asUpstream struct {
	srv  *authserver.Server
	ts   *httptest.Server
	base string
	mcp  string
}

func newASUpstream(t *testing.T) *asUpstream {
	t.Helper()
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u := &asUpstream{ts: httptest.NewUnstartedServer(nil)}
	u.base = "http://" + u.ts.Listener.Addr().String()
	u.mcp = u.base + "/mcp"
	u.srv, err = authserver.New(t.Context(), authserver.Options{Login: &config.Login{Keys: true}, PublicURL: u.base,
		Store: st, Keys: keys{}, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.srv.Close() })
	mux := http.NewServeMux()
	mux.Handle("/", u.srv.Handler())
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", oauth.Challenge{ResourceMetadata: u.base + "/meta/mcp-prm"}.String())
		w.WriteHeader(http.StatusUnauthorized)
	})
	mux.HandleFunc("/meta/mcp-prm", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, oauth.ProtectedResourceMetadata{Resource: u.mcp, AuthorizationServers: []string{u.base}, ScopesSupported: []string{"mcp"}})
	})
	u.ts.Config.Handler = mux
	u.ts.Start()
	t.Cleanup(u.ts.Close)
	return u
}

// TestFlowAgainstAuthServer drives the whole flow against mcpgate's own
// authorization server: discovery from a real 401, dynamic registration,
// the authorization request through the key login and consent pages, the
// code exchange with the iss check, two refreshes with rotation; the
// access token's aud is the resource.
func TestFlowAgainstAuthServer(t *testing.T) {
	u := newASUpstream(t)
	ctx := t.Context()
	resp, err := http.Get(u.mcp)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the MCP endpoint answered %d", resp.StatusCode)
	}

	plan, err := client.Discover(ctx, client.Config{ServerURL: u.mcp, RedirectURI: callback, ClientName: "mcpgate test"}, resp)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Resource != u.mcp || plan.AuthServer.Issuer != u.base || plan.Legacy || !slices.Equal(plan.Scopes, []string{"mcp", "offline_access"}) {
		t.Fatalf("plan: resource %q, issuer %q, legacy %t, scopes %q", plan.Resource, plan.AuthServer.Issuer, plan.Legacy, plan.Scopes)
	}

	c, err := plan.Register(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source != client.SourceDynamic || c.ID == "" || c.AuthMethod != client.AuthClientSecretBasic || c.Secret == "" {
		t.Fatalf("registration: %v (secret set: %t)", c, c.Secret != "")
	}

	authURL, verifier, err := plan.AuthorizeURL(c, "state-1")
	if err != nil {
		t.Fatal(err)
	}
	q := mustParse(t, authURL).Query()
	for k, want := range map[string]string{"resource": u.mcp, "scope": "mcp offline_access", "state": "state-1", "code_challenge_method": "S256",
		"client_id": c.ID, "redirect_uri": callback, "response_type": "code"} {
		if q.Get(k) != want {
			t.Errorf("authorization request %s = %q, want %q", k, q.Get(k), want)
		}
	}

	b := newBrowser(t)
	p := b.Get(authURL)
	p = b.Submit(u.base, p, `name="key"`, url.Values{"key": {goodKey}})
	p = b.Submit(u.base, p, `name="decision"`, url.Values{"decision": {"approve"}})
	if p.Location == nil {
		t.Fatalf("not sent back to the callback: status %d\n%s", p.Status, p.Body)
	}
	cb := p.Location.Query()
	if cb.Get("state") != "state-1" || cb.Get("code") == "" {
		t.Fatalf("callback query %v", cb)
	}

	tok, err := plan.Exchange(ctx, c, cb.Get("code"), verifier, cb.Get("iss"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.TokenType != "Bearer" || tok.RefreshToken == "" || tok.Expiry.IsZero() || tok.Scope != "mcp offline_access" {
		t.Fatalf("token: %v", tok)
	}
	if aud := audience(t, u, tok.AccessToken); !slices.Equal(aud, []string{u.mcp}) {
		t.Errorf("aud = %q, want [%s]", aud, u.mcp)
	}
	if s := tok.String() + c.String() + c.GoString(); strings.Contains(s, tok.AccessToken) || strings.Contains(s, tok.RefreshToken) || strings.Contains(s, c.Secret) {
		t.Errorf("String leaks a credential: %s", s)
	}

	r1, err := plan.Refresh(ctx, c, tok.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if r1.RefreshToken == "" || r1.RefreshToken == tok.RefreshToken || r1.AccessToken == tok.AccessToken {
		t.Error("the refresh did not rotate the tokens")
	}
	if aud := audience(t, u, r1.AccessToken); !slices.Equal(aud, []string{u.mcp}) {
		t.Errorf("refreshed aud = %q", aud)
	}
	r2, err := plan.Refresh(ctx, c, r1.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if r2.RefreshToken == r1.RefreshToken {
		t.Error("the second refresh did not rotate")
	}
	// The rotated-out token is refused, as an OAuth error.
	_, err = plan.Refresh(ctx, c, tok.RefreshToken)
	var te *client.TokenError
	if !errors.As(err, &te) || te.Code != "invalid_grant" || strings.Contains(err.Error(), tok.RefreshToken) {
		t.Errorf("reused refresh token: %v", err)
	}

	// The code is single-use (and its reuse revokes what it gave); the
	// error names neither it nor the verifier.
	if _, err := plan.Exchange(ctx, c, cb.Get("code"), verifier, cb.Get("iss")); err == nil {
		t.Error("a code was redeemed twice")
	} else if msg := err.Error(); strings.Contains(msg, cb.Get("code")) || strings.Contains(msg, verifier) || strings.Contains(msg, c.Secret) {
		t.Errorf("the error holds a credential: %v", err)
	}
}

// TestFlowAgainstAuthServerPreregistered: discovery by the well-known
// URIs (no 401 at hand), then a pre-registered client from the config.
func TestFlowAgainstAuthServerPreregistered(t *testing.T) {
	u := newASUpstream(t)
	ctx := t.Context()
	// Registered as an operator would, before the config names it.
	plan, err := client.Discover(ctx, client.Config{ServerURL: u.mcp, RedirectURI: callback}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Resource != u.mcp || plan.AuthServer.Issuer != u.base {
		t.Fatalf("well-known discovery without a challenge: %q %q", plan.Resource, plan.AuthServer.Issuer)
	}
	reg, err := plan.Register(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []client.Config{
		{ServerURL: u.mcp, RedirectURI: callback, ClientID: reg.ID, ClientSecret: reg.Secret},
	} {
		plan, err := client.Discover(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := plan.Register(ctx)
		if err != nil || c.Source != client.SourcePreregistered || c.ID != reg.ID || c.AuthMethod != client.AuthClientSecretBasic {
			t.Fatalf("pre-registered: %v, %v", c, err)
		}
		authURL, verifier, err := plan.AuthorizeURL(c, "s")
		if err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t)
		p := b.Submit(u.base, b.Get(authURL), `name="key"`, url.Values{"key": {goodKey}})
		p = b.Submit(u.base, p, `name="decision"`, url.Values{"decision": {"approve"}})
		if _, err := plan.Exchange(ctx, c, p.Location.Query().Get("code"), verifier, p.Location.Query().Get("iss")); err != nil {
			t.Fatal(err)
		}
	}
}

func audience(t *testing.T, u *asUpstream, tok string) []string {
	t.Helper()
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	set := u.srv.PublicKeys()
	ks := set.Key(parsed.Headers[0].KeyID)
	if len(ks) != 1 {
		t.Fatalf("no public key %q", parsed.Headers[0].KeyID)
	}
	var c jwt.Claims
	if err := parsed.Claims(ks[0].Key, &c); err != nil {
		t.Fatal(err)
	}
	return c.Audience
}

// The test browser is astest's, stopping at the client's callback.
type browser = astest.Browser

func newBrowser(t *testing.T) *browser { return astest.NewBrowser(t, callback) }
