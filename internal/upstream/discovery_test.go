package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Discovery of the token endpoint when token_url is absent: a fake MCP
// server's protected resource metadata names a fake authorization server,
// whose metadata names its token endpoint.

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

func TestOAuth2DiscoverTokenURL(t *testing.T) {
	ec, _ := newTestKeys(t)

	t.Run("path-inserted metadata, private_key_jwt at the discovered endpoint, aud the issuer", func(t *testing.T) {
		clk := newFakeClock()
		ep := &clientAuthEndpoint{t: t, method: config.PrivateKeyJWT, pub: ec.pub, alg: ec.alg, now: clk.Now}
		var as, up *httptest.Server
		as, asLog := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-authorization-server/tenant": jsonAt(func() any {
				return map[string]any{"issuer": as.URL + "/tenant", "token_endpoint": as.URL + "/tenant/token"}
			}),
			"/tenant/token": ep.ServeHTTP,
		})
		up, upLog := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-protected-resource/mcp": jsonAt(func() any {
				return map[string]any{"resource": up.URL + "/mcp", "authorization_servers": []string{as.URL + "/tenant", "https://second.example"}}
			}),
		})
		ep.resource = up.URL + "/mcp"
		// The issuer, not the token endpoint (as/tenant/token): the audience
		// the MCP conformance suite's auth/client-credentials-jwt verifies.
		ep.aud = as.URL + "/tenant"
		a := &config.Auth{Type: config.AuthOAuth2, ClientID: "client-1", ClientAuth: config.PrivateKeyJWT, PrivateKey: ec.pem}
		s := newTokenSource("srv", up.URL+"/mcp/", a, nil, nil)
		s.now = clk.Now
		if tok := mustToken(t, s); tok != "tok-1" {
			t.Fatalf("Token = %q", tok)
		}
		clk.Advance(2 * time.Hour)
		if tok := mustToken(t, s); tok != "tok-2" {
			t.Fatalf("second Token = %q", tok)
		}
		// Discovered once; the endpoint verified aud = as/tenant, twice.
		wantPaths(t, "the MCP server", upLog, "/.well-known/oauth-protected-resource/mcp")
		wantPaths(t, "the authorization server", asLog,
			"/.well-known/oauth-authorization-server/tenant", "/tenant/token", "/tenant/token")
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if len(ep.refused) > 0 || len(ep.claims) != 2 {
			t.Errorf("refused %v, verified %d", ep.refused, len(ep.claims))
		}
	})

	t.Run("root fallbacks: PRM at the root, OpenID configuration", func(t *testing.T) {
		tokens := newTokenEndpoint(t, nil)
		var as *httptest.Server
		as, asLog := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/openid-configuration": jsonAt(func() any {
				return map[string]any{"issuer": as.URL, "token_endpoint": tokens.URL + "/token", "jwks_uri": 7}
			}),
		})
		up, upLog := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-protected-resource": jsonAt(func() any {
				return map[string]any{"authorization_servers": []string{as.URL}}
			}),
		})
		a := testOAuthConfig("")
		s := newTokenSource("srv", up.URL+"/mcp", a, nil, nil)
		if tok := mustToken(t, s); tok != "tok-1" {
			t.Fatalf("Token = %q", tok)
		}
		wantPaths(t, "the MCP server", upLog, "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource")
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
		up, _ := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-protected-resource": jsonAt(func() any {
				return map[string]any{"authorization_servers": []string{as.URL + "/realms/x"}}
			}),
		})
		s := newTokenSource("srv", up.URL, testOAuthConfig(""), nil, nil)
		mustToken(t, s)
		wantPaths(t, "the authorization server", asLog, "/.well-known/oauth-authorization-server/realms/x",
			"/.well-known/openid-configuration/realms/x", "/realms/x/.well-known/openid-configuration")
	})

	t.Run("same-origin redirect followed", func(t *testing.T) {
		tokens := newTokenEndpoint(t, nil)
		var as *httptest.Server
		as, _ = fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-authorization-server": jsonAt(func() any {
				return map[string]any{"issuer": as.URL, "token_endpoint": tokens.URL + "/token"}
			}),
		})
		up, upLog := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-protected-resource/mcp": func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/meta/prm.json", http.StatusFound)
			},
			"/meta/prm.json": jsonAt(func() any { return map[string]any{"authorization_servers": []string{as.URL}} }),
		})
		mustToken(t, newTokenSource("srv", up.URL+"/mcp", testOAuthConfig(""), nil, nil))
		wantPaths(t, "the MCP server", upLog, "/.well-known/oauth-protected-resource/mcp", "/meta/prm.json")
	})
}

func TestOAuth2DiscoverRefused(t *testing.T) {
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
	prmNaming := func(as *string) map[string]http.HandlerFunc {
		return map[string]http.HandlerFunc{"/.well-known/oauth-protected-resource/mcp": jsonAt(func() any {
			return map[string]any{"authorization_servers": []string{*as}}
		})}
	}
	mint := func(t *testing.T, serverURL string, hc *http.Client) error {
		t.Helper()
		s := newTokenSource("srv", serverURL, testOAuthConfig(""), hc, nil)
		_, err := s.Token(context.Background())
		return err
	}

	t.Run("redirect to another origin", func(t *testing.T) {
		other, otherLog := fakeServer(t, false, nil)
		up, _ := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-protected-resource/mcp": func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.URL+"/.well-known/oauth-protected-resource/mcp", http.StatusFound)
			},
		})
		err := mint(t, up.URL+"/mcp", nil)
		checkTokenError(t, err, KindAuth, 0, []string{"redirects to another origin (" + other.URL + "); not followed"}, nil)
		wantPaths(t, "the other origin", otherLog)
	})

	t.Run("oversized metadata", func(t *testing.T) {
		var asURL string
		as, _ := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-authorization-server": asMeta(&asURL, map[string]any{"padding": strings.Repeat("x", maxDiscoveryDocument)}),
		})
		asURL = as.URL
		up, _ := fakeServer(t, false, prmNaming(&asURL))
		err := mint(t, up.URL+"/mcp", nil)
		checkTokenError(t, err, KindInvalidResponse, http.StatusOK, []string{"/.well-known/oauth-authorization-server exceeds 1048576 bytes"}, nil)
	})

	t.Run("oversized protected resource metadata", func(t *testing.T) {
		up, _ := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-protected-resource/mcp": func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(`{"authorization_servers": ["https://as.example"], "x": "` + strings.Repeat("y", maxDiscoveryDocument) + `"}`))
			},
		})
		err := mint(t, up.URL+"/mcp", nil)
		checkTokenError(t, err, KindInvalidResponse, http.StatusOK, []string{"exceeds 1048576 bytes"}, nil)
	})

	t.Run("http authorization server for an https server", func(t *testing.T) {
		var asURL string
		as, asLog := fakeServer(t, false, map[string]http.HandlerFunc{"/.well-known/oauth-authorization-server": asMeta(&asURL, nil)})
		asURL = as.URL
		up, _ := fakeServer(t, true, prmNaming(&asURL))
		err := mint(t, up.URL+"/mcp", up.Client())
		checkTokenError(t, err, KindAuth, 0, []string{"the authorization server is not an https URL"}, nil)
		wantPaths(t, "the authorization server", asLog)
	})

	t.Run("issuer mismatch", func(t *testing.T) {
		issuer := "https://evil.example"
		var asURL string
		as, _ := fakeServer(t, false, map[string]http.HandlerFunc{"/.well-known/oauth-authorization-server": asMeta(&issuer, nil)})
		asURL = as.URL
		up, _ := fakeServer(t, false, prmNaming(&asURL))
		err := mint(t, up.URL+"/mcp", nil)
		checkTokenError(t, err, KindAuth, 0, []string{`names issuer "https://evil.example", not "` + as.URL + `"`}, nil)
	})

	t.Run("no authorization servers", func(t *testing.T) {
		up, _ := fakeServer(t, false, map[string]http.HandlerFunc{
			"/.well-known/oauth-protected-resource": jsonAt(func() any { return map[string]any{"resource": "x"} }),
		})
		err := mint(t, up.URL+"/mcp", nil)
		checkTokenError(t, err, KindAuth, 0, []string{"names no authorization_servers (set token_url)"}, nil)
	})

	t.Run("no metadata", func(t *testing.T) {
		up, _ := fakeServer(t, false, nil)
		err := mint(t, up.URL+"/mcp", nil)
		checkTokenError(t, err, KindAuth, 0, []string{"no metadata at " + up.URL + "/.well-known/oauth-protected-resource/mcp, " + up.URL + "/.well-known/oauth-protected-resource (set token_url)"}, nil)
	})

	t.Run("http on a non-loopback server is not fetched", func(t *testing.T) {
		err := mint(t, "http://mcp.example.invalid/mcp", nil)
		checkTokenError(t, err, KindAuth, 0, []string{"oauth2 discovery: http://mcp.example.invalid/.well-known/oauth-protected-resource/mcp is not https"}, nil)
	})

	if n := tokens.hits.Load(); n != 0 {
		t.Errorf("the token endpoint got %d requests", n)
	}
}

// A failed discovery suggests token_url only to the auth types that have
// one: enterprise_managed always discovers its authorization server.
func TestDiscoveryHintPerAuthType(t *testing.T) {
	up, _ := fakeServer(t, false, nil)
	for _, tc := range []struct {
		auth      config.Auth
		want, not string
	}{
		{config.Auth{Type: config.AuthOAuth2}, "(set token_url)", "enterprise_managed"},
		{config.Auth{Type: config.AuthTokenExchange}, "(set token_url)", "enterprise_managed"},
		{config.Auth{Type: config.AuthEnterpriseManaged, IdPTokenURL: up.URL + "/idp", IdPClientID: "gw-at-idp"},
			"(enterprise_managed needs the server's protected resource metadata and its authorization server's metadata; it has no token_url)", "set token_url"},
	} {
		t.Run(tc.auth.Type, func(t *testing.T) {
			tc.auth.ClientID, tc.auth.ClientSecret = "gw", testClientSecret
			var err error
			if tc.auth.Type == config.AuthOAuth2 {
				_, err = newTokenSource("srv", up.URL+"/mcp", &tc.auth, nil, nil).Token(context.Background())
			} else {
				_, err = newExchanger("srv", up.URL+"/mcp", &tc.auth, nil, nil).Token(context.Background(), "subject-1")
			}
			checkTokenError(t, err, KindAuth, 0, []string{"no metadata at ", tc.want}, []string{tc.not, "subject-1"})
		})
	}
}
