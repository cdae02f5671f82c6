package upstream

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

// The token endpoint when token_url is absent: the pinned authorization
// server's metadata names it. Whatever an upstream's protected resource
// metadata names receives nothing.

// hitLog records the paths a fake server was asked for.
type hitLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *hitLog) add(p string) {
	l.mu.Lock()
	l.paths = append(l.paths, p)
	l.mu.Unlock()
}

func (l *hitLog) reset() {
	l.mu.Lock()
	l.paths = nil
	l.mu.Unlock()
}

func (l *hitLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.paths...)
}

// fakeServer serves routes (path -> handler), 404 elsewhere, logging every
// request's path.
func fakeServer(t *testing.T, tls bool, routes map[string]http.HandlerFunc) (*httptest.Server, *hitLog) {
	t.Helper()
	log := &hitLog{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r.URL.Path)
		if f := routes[r.URL.Path]; f != nil {
			f(w, r)
			return
		}
		http.NotFound(w, r)
	})
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv, log
}

func jsonAt(v func() any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, v()) }
}

func wantPaths(t *testing.T, name string, log *hitLog, want ...string) {
	t.Helper()
	if got := log.get(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s was asked for %q, want %q", name, got, want)
	}
}

// pinnedConfig is testOAuthConfig with the authorization server pinned.
func pinnedConfig(issuer string) *config.Auth {
	a := testOAuthConfig("")
	a.AuthorizationServer = issuer
	return a
}

func TestOAuth2PinnedAuthorizationServer(t *testing.T) {
	ec, _ := newTestKeys(t)

	t.Run("path-inserted metadata, private_key_jwt at its endpoint, aud the issuer", func(t *testing.T) {
		clk := newFakeClock()
		ep := &clientAuthEndpoint{t: t, method: config.PrivateKeyJWT, pub: ec.pub, alg: ec.alg, now: clk.Now}
		var as *httptest.Server
		as, asLog := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-authorization-server/tenant": jsonAt(func() any {
				return map[string]any{"issuer": as.URL + "/tenant", "token_endpoint": as.URL + "/tenant/token"}
			}),
			"/tenant/token": ep.ServeHTTP,
		})
		up, upLog := fakeServer(t, false, nil)
		ep.resource = up.URL + "/mcp"
		// The issuer, not the token endpoint (as/tenant/token): the audience
		// the MCP conformance suite's auth/client-credentials-jwt verifies.
		ep.aud = as.URL + "/tenant"
		a := &config.Auth{Type: config.AuthOAuth2, ClientID: "client-1", ClientAuth: config.PrivateKeyJWT, PrivateKey: ec.pem, AuthorizationServer: as.URL + "/tenant"}
		s := newTokenSource("srv", up.URL+"/mcp/", a, nil, nil)
		s.now = clk.Now
		if tok := mustToken(t, s); tok != "tok-1" {
			t.Fatalf("Token = %q", tok)
		}
		clk.Advance(2 * time.Hour)
		if tok := mustToken(t, s); tok != "tok-2" {
			t.Fatalf("second Token = %q", tok)
		}
		// Read once; the endpoint verified aud = as/tenant, twice; the MCP
		// server was not asked anything.
		wantPaths(t, "the MCP server", upLog)
		wantPaths(t, "the authorization server", asLog,
			"/.well-known/oauth-authorization-server/tenant", "/tenant/token", "/tenant/token")
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if len(ep.refused) > 0 || len(ep.claims) != 2 {
			t.Errorf("refused %v, verified %d", ep.refused, len(ep.claims))
		}
	})

	t.Run("OpenID configuration fallback", func(t *testing.T) {
		tokens := newTokenEndpoint(t, nil)
		var as *httptest.Server
		as, asLog := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/openid-configuration": jsonAt(func() any {
				return map[string]any{"issuer": as.URL, "token_endpoint": tokens.URL + "/token", "jwks_uri": 7}
			}),
		})
		up, _ := fakeServer(t, false, nil)
		s := newTokenSource("srv", up.URL+"/mcp", pinnedConfig(as.URL), nil, nil)
		if tok := mustToken(t, s); tok != "tok-1" {
			t.Fatalf("Token = %q", tok)
		}
		wantPaths(t, "the authorization server", asLog, "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")
		if r := tokens.requests(); len(r) != 1 || r[0].Form.Get("resource") != up.URL+"/mcp" || !strings.HasPrefix(r[0].Authz, "Basic ") {
			t.Errorf("token requests %+v", r)
		}
	})

	t.Run("appended OpenID configuration of an issuer with a path", func(t *testing.T) {
		tokens := newTokenEndpoint(t, nil)
		var as *httptest.Server
		as, asLog := fakeServer(t, false, map[string]http.HandlerFunc{
			"/realms/x/.well-known/openid-configuration": jsonAt(func() any {
				return map[string]any{"issuer": as.URL + "/realms/x", "token_endpoint": tokens.URL + "/token"}
			}),
		})
		mustToken(t, newTokenSource("srv", testServerURL, pinnedConfig(as.URL+"/realms/x"), nil, nil))
		wantPaths(t, "the authorization server", asLog, "/.well-known/oauth-authorization-server/realms/x",
			"/.well-known/openid-configuration/realms/x", "/realms/x/.well-known/openid-configuration")
	})

	t.Run("same-origin redirect followed", func(t *testing.T) {
		tokens := newTokenEndpoint(t, nil)
		var as *httptest.Server
		as, asLog := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-authorization-server": func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/meta/as.json", http.StatusFound)
			},
			"/meta/as.json": jsonAt(func() any { return map[string]any{"issuer": as.URL, "token_endpoint": tokens.URL + "/token"} }),
		})
		mustToken(t, newTokenSource("srv", testServerURL, pinnedConfig(as.URL), nil, nil))
		wantPaths(t, "the authorization server", asLog, "/.well-known/oauth-authorization-server", "/meta/as.json")
	})
}

// A hostile upstream's protected resource metadata names an
// authorization server of its own, with metadata and a token endpoint
// that would answer: it receives nothing, neither the client secret nor
// a client assertion nor a caller's token, with the authorization server
// pinned (the tokens come from the pinned one) or without any (the mint
// fails with an auth fault that names no address). The 401 the upstream
// answers with names the same metadata.
func TestUpstreamCannotChooseAuthorizationServer(t *testing.T) {
	var hostile, honest *httptest.Server
	hostile, hostileLog := fakeServer(t, false, map[string]http.HandlerFunc{
		"/.well-known/oauth-authorization-server": jsonAt(func() any {
			return map[string]any{"issuer": hostile.URL, "token_endpoint": hostile.URL + "/token"}
		}),
		"/token": func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]any{"access_token": "stolen", "token_type": "Bearer"})
		},
	})
	honestTokens := newTokenEndpoint(t, nil)
	honest, _ = fakeServer(t, false, map[string]http.HandlerFunc{
		"/.well-known/oauth-authorization-server": jsonAt(func() any {
			return map[string]any{"issuer": honest.URL, "token_endpoint": honestTokens.URL + "/token"}
		}),
	})
	up, upLog := fakeServer(t, false, map[string]http.HandlerFunc{
		"/.well-known/oauth-protected-resource/mcp": jsonAt(func() any {
			return map[string]any{"resource": "", "authorization_servers": []string{hostile.URL}}
		}),
		"/.well-known/oauth-protected-resource": jsonAt(func() any {
			return map[string]any{"authorization_servers": []string{hostile.URL}}
		}),
	})
	const subject = "subject-token-of-alice"

	for _, tc := range []struct {
		name string
		mint func(pin string) (string, error)
	}{
		{"oauth2", func(pin string) (string, error) {
			return newTokenSource("srv", up.URL+"/mcp", pinnedConfig(pin), nil, nil).Token(context.Background())
		}},
		{"oauth2 private_key_jwt", func(pin string) (string, error) {
			ec, _ := newTestKeys(t)
			a := &config.Auth{Type: config.AuthOAuth2, ClientID: "client-1", ClientAuth: config.PrivateKeyJWT, PrivateKey: ec.pem, AuthorizationServer: pin}
			return newTokenSource("srv", up.URL+"/mcp", a, nil, nil).Token(context.Background())
		}},
		{"oauth2_token_exchange", func(pin string) (string, error) {
			a := &config.Auth{Type: config.AuthTokenExchange, ClientID: "gw", ClientSecret: testClientSecret, AuthorizationServer: pin}
			return newExchanger("srv", up.URL+"/mcp", a, nil, nil).Token(context.Background(), subject)
		}},
		{"enterprise_managed", func(pin string) (string, error) {
			idp := newTokenEndpoint(t, func(w http.ResponseWriter, n int64) {
				writeJSON(w, http.StatusOK, map[string]any{"access_token": "jag-1", "issued_token_type": config.TokenTypeIDJAG, "token_type": "N_A"})
			})
			a := &config.Auth{Type: config.AuthEnterpriseManaged, ClientID: "gw", ClientSecret: testClientSecret, AuthorizationServer: pin,
				IdPTokenURL: idp.URL + "/idp", IdPClientID: "gw-at-idp"}
			return newExchanger("srv", up.URL+"/mcp", a, nil, nil).Token(context.Background(), subject)
		}},
	} {
		t.Run(tc.name+" pinned", func(t *testing.T) {
			hostileLog.reset()
			before := honestTokens.hits.Load()
			if tok, err := tc.mint(honest.URL); err != nil || tok == "stolen" {
				t.Fatalf("token %q, %v", tok, err)
			}
			if honestTokens.hits.Load() != before+1 {
				t.Errorf("the pinned authorization server minted %d tokens, want 1", honestTokens.hits.Load()-before)
			}
			wantPaths(t, "the upstream's authorization server", hostileLog)
			wantPaths(t, "the upstream", upLog)
		})
		t.Run(tc.name+" not pinned", func(t *testing.T) {
			hostileLog.reset()
			_, err := tc.mint("")
			checkTokenError(t, err, KindAuth, 0, []string{"neither token_url nor authorization_server is configured"},
				[]string{"127.0.0.1", "localhost", subject, testClientSecret})
			wantPaths(t, "the upstream's authorization server", hostileLog)
			wantPaths(t, "the upstream", upLog)
		})
	}
}

// A failure at the pinned authorization server or its token endpoint
// reaches the caller as what failed, never where: the addresses (and the
// network cause) are the log's.
func TestOAuth2PinnedRefused(t *testing.T) {
	tokens := newTokenEndpoint(t, nil)
	asMeta := func(issuer *string, extra map[string]any) http.HandlerFunc {
		return jsonAt(func() any {
			m := map[string]any{"issuer": *issuer, "token_endpoint": tokens.URL + "/token"}
			for k, v := range extra {
				m[k] = v
			}
			return m
		})
	}
	mint := func(t *testing.T, pin string, log *slog.Logger) error {
		t.Helper()
		s := newTokenSource("srv", testServerURL, pinnedConfig(pin), nil, log)
		_, err := s.Token(context.Background())
		return err
	}
	// No address of any test server in a caller's message.
	noAddr := []string{"127.0.0.1", "localhost", testClientSecret}

	t.Run("redirect to another origin", func(t *testing.T) {
		other, otherLog := fakeServer(t, false, nil)
		as, _ := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-authorization-server": func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.URL+"/.well-known/oauth-authorization-server", http.StatusFound)
			},
		})
		var logs strings.Builder
		err := mint(t, as.URL, slog.New(slog.NewTextHandler(&logs, nil)))
		checkTokenError(t, err, KindAuth, 0, []string{"upstream srv: authorization server metadata: redirect to another origin, not followed"}, noAddr)
		wantPaths(t, "the other origin", otherLog)
		if l := logs.String(); !strings.Contains(l, as.URL+"/.well-known/oauth-authorization-server") || !strings.Contains(l, other.URL) || !strings.Contains(l, "level=WARN") {
			t.Errorf("the log lacks the detail:\n%s", l)
		}
	})

	t.Run("oversized metadata", func(t *testing.T) {
		var asURL string
		as, _ := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-authorization-server": asMeta(&asURL, map[string]any{"padding": strings.Repeat("x", maxDiscoveryDocument)}),
		})
		asURL = as.URL
		err := mint(t, as.URL, nil)
		checkTokenError(t, err, KindInvalidResponse, http.StatusOK, []string{"authorization server metadata exceeds 1048576 bytes"}, noAddr)
	})

	t.Run("issuer mismatch", func(t *testing.T) {
		issuer := "https://evil.example"
		as, _ := fakeServer(t, false, map[string]http.HandlerFunc{"/.well-known/oauth-authorization-server": asMeta(&issuer, nil)})
		err := mint(t, as.URL, nil)
		checkTokenError(t, err, KindAuth, 0, []string{`authorization server metadata names issuer "https://evil.example", not the configured authorization_server`}, noAddr)
	})

	t.Run("http token endpoint for an https issuer", func(t *testing.T) {
		as, _ := fakeServer(t, true, nil)
		var asURL string
		as.Config.Handler = asMeta(&asURL, nil)
		asURL = as.URL
		s := newTokenSource("srv", testServerURL, pinnedConfig(as.URL), as.Client(), nil)
		_, err := s.Token(context.Background())
		checkTokenError(t, err, KindAuth, 0, []string{"token_endpoint missing, or not an https URL"}, noAddr)
	})

	t.Run("no metadata", func(t *testing.T) {
		as, asLog := fakeServer(t, false, nil)
		err := mint(t, as.URL+"/tenant", nil)
		checkTokenError(t, err, KindAuth, 0, []string{"no authorization server metadata at the configured authorization_server"}, noAddr)
		wantPaths(t, "the authorization server", asLog, "/.well-known/oauth-authorization-server/tenant",
			"/.well-known/openid-configuration/tenant", "/tenant/.well-known/openid-configuration", "/tenant/.well-known/oauth-authorization-server")
	})

	t.Run("unreachable", func(t *testing.T) {
		as, _ := fakeServer(t, false, nil)
		as.Close()
		err := mint(t, as.URL, nil)
		checkTokenError(t, err, KindUnreachable, 0, []string{"authorization server metadata: connection refused"}, append(noAddr, "dial"))
	})

	t.Run("http issuer beyond loopback is not fetched", func(t *testing.T) {
		err := mint(t, "http://as.example.invalid", nil)
		checkTokenError(t, err, KindAuth, 0, []string{"authorization_server is not an https URL"}, nil)
	})

	t.Run("token endpoint unreachable", func(t *testing.T) {
		dead, _ := fakeServer(t, false, nil)
		dead.Close()
		deadURL := dead.URL + "/token"
		var as *httptest.Server
		as, _ = fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-authorization-server": jsonAt(func() any { return map[string]any{"issuer": as.URL, "token_endpoint": deadURL} }),
		})
		var logs strings.Builder
		err := mint(t, as.URL, slog.New(slog.NewTextHandler(&logs, nil)))
		checkTokenError(t, err, KindUnreachable, 0, []string{"upstream srv: oauth2 token endpoint: connection refused"}, noAddr)
		if !strings.Contains(logs.String(), deadURL) {
			t.Errorf("the log lacks the endpoint:\n%s", logs.String())
		}
	})

	if n := tokens.hits.Load(); n != 0 {
		t.Errorf("the token endpoint got %d requests", n)
	}
}
