package upstream

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// The token request to a token endpoint the gateway discovered on an
// upstream's behalf carries its client credentials (and, for the
// exchanging types, the caller's subject token or an ID-JAG), so it has
// discovery's address guard: a public upstream cannot name a loopback or
// private token endpoint. A token endpoint the operator configured
// (token_url, idp_token_url) is trusted as configured.
//
// tokenGuardRig has a token server on 127.0.0.1 and a metadata server
// (TLS, httptest's certificate, which the upstream's client trusts). The
// upstream's client resolves mcp.example.com to the metadata server and
// token.example.com to the token server, as does the guard's test
// resolver. The guard would refuse the metadata fetch of the public
// upstream mcp.example.com too (TestOAuth2DiscoverAddressGuard), so for
// a public upstream the test serves the metadata through the upstream's
// own client (setting discoverHC), as if mcp.example.com were public:
// the token request is the one under test.
type tokenGuardRig struct {
	tok      *httptest.Server
	tokLog   *hitLog
	meta     *httptest.Server
	hc       *http.Client
	endpoint string // the token_endpoint the metadata names
}

func newTokenGuardRig(t *testing.T) *tokenGuardRig {
	t.Helper()
	r := &tokenGuardRig{}
	grant := func(w http.ResponseWriter, req *http.Request) {
		if err := req.ParseForm(); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch {
		case req.PostForm.Get("requested_token_type") == config.TokenTypeIDJAG:
			writeJSON(w, http.StatusOK, map[string]any{"access_token": "jag-1", "issued_token_type": config.TokenTypeIDJAG, "token_type": "N_A", "expires_in": 300})
		default:
			writeJSON(w, http.StatusOK, map[string]any{"access_token": "at-" + req.PostForm.Get("grant_type"), "token_type": "Bearer", "expires_in": 3600})
		}
	}
	r.tok, r.tokLog = fakeServer(t, true, map[string]http.HandlerFunc{
		"/token": grant,
		"/idp":   grant,
		"/redirect": func(w http.ResponseWriter, req *http.Request) {
			http.Redirect(w, req, "/token", http.StatusTemporaryRedirect)
		},
	})
	// The metadata names the origin it was asked at as the issuer.
	r.meta, _ = fakeServer(t, true, map[string]http.HandlerFunc{
		"/.well-known/oauth-protected-resource/mcp": func(w http.ResponseWriter, req *http.Request) {
			writeJSON(w, http.StatusOK, map[string]any{"authorization_servers": []string{"https://" + req.Host}})
		},
		"/.well-known/oauth-authorization-server": func(w http.ResponseWriter, req *http.Request) {
			writeJSON(w, http.StatusOK, map[string]any{"issuer": "https://" + req.Host, "token_endpoint": r.endpoint})
		},
	})
	names := map[string]string{
		"mcp.example.com":   r.meta.Listener.Addr().String(),
		"token.example.com": r.tok.Listener.Addr().String(),
	}
	resolve := func(address string) string {
		if host, _, _ := net.SplitHostPort(address); names[host] != "" {
			return names[host]
		}
		return address
	}
	t.Cleanup(oauth.SetTestResolver(resolve))
	r.hc = r.meta.Client()
	tr := r.hc.Transport.(*http.Transport).Clone()
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		return d.DialContext(ctx, network, resolve(address))
	}
	r.hc.Transport = tr
	return r
}

const publicUpstream = "https://mcp.example.com/mcp"

// loopbackUpstream is the metadata server's own loopback URL.
func (r *tokenGuardRig) loopbackUpstream() string {
	u, _ := url.Parse(r.meta.URL)
	return "https://" + u.Host + "/mcp"
}

func (r *tokenGuardRig) tokenHost() string {
	u, _ := url.Parse(r.tok.URL)
	return u.Host
}

func TestOAuth2DiscoveredTokenEndpointGuard(t *testing.T) {
	r := newTokenGuardRig(t)
	_, port, _ := net.SplitHostPort(r.tokenHost())
	mint := func(serverURL, tokenURL string) (string, error) {
		t.Helper()
		s := newTokenSource("srv", serverURL, testOAuthConfig(tokenURL), r.hc, nil)
		if serverURL == publicUpstream && tokenURL == "" {
			s.discoverHC = r.hc
		}
		return s.Token(context.Background())
	}

	for _, ep := range []string{r.tok.URL + "/token", "https://token.example.com:" + port + "/token"} {
		t.Run("public upstream, discovered endpoint "+ep, func(t *testing.T) {
			r.endpoint = ep
			r.tokLog.reset()
			_, err := mint(publicUpstream, "")
			checkTokenError(t, err, KindAuth, 0, []string{"upstream srv: oauth2 token endpoint " + ep + ": address not allowed for this upstream"}, nil)
			wantPaths(t, "the loopback token server", r.tokLog)
		})
	}

	t.Run("public upstream, configured token_url on loopback", func(t *testing.T) {
		r.endpoint = "https://203.0.113.1/unused"
		r.tokLog.reset()
		if tok, err := mint(publicUpstream, r.tok.URL+"/token"); err != nil || tok != "at-client_credentials" {
			t.Fatalf("token %q, %v", tok, err)
		}
		wantPaths(t, "the token server", r.tokLog, "/token")
	})

	t.Run("loopback upstream, discovered loopback endpoint", func(t *testing.T) {
		r.endpoint = r.tok.URL + "/token"
		r.tokLog.reset()
		// Over TLS with the upstream client's CA: its TLS settings are kept.
		if tok, err := mint(r.loopbackUpstream(), ""); err != nil || tok != "at-client_credentials" {
			t.Fatalf("token %q, %v", tok, err)
		}
		wantPaths(t, "the token server", r.tokLog, "/token")
	})

	t.Run("discovered endpoint redirecting: not followed", func(t *testing.T) {
		r.endpoint = r.tok.URL + "/redirect"
		r.tokLog.reset()
		_, err := mint(r.loopbackUpstream(), "")
		checkTokenError(t, err, KindInvalidResponse, http.StatusTemporaryRedirect, []string{"redirects are not followed"}, nil)
		wantPaths(t, "the token server", r.tokLog, "/redirect")
	})
}

func TestExchangeDiscoveredTokenEndpointGuard(t *testing.T) {
	r := newTokenGuardRig(t)
	const subject = "subject-token-of-alice"
	exchange := func(serverURL string, a config.Auth) (string, error) {
		t.Helper()
		a.ClientID, a.ClientSecret = "gw", testClientSecret
		x := newExchanger("srv", serverURL, &a, r.hc, nil)
		if serverURL == publicUpstream {
			x.as.discoverHC = r.hc
		}
		return x.Token(context.Background(), subject)
	}
	exchangeType := config.Auth{Type: config.AuthTokenExchange}
	enterprise := config.Auth{Type: config.AuthEnterpriseManaged, IdPTokenURL: r.tok.URL + "/idp", IdPClientID: "gw-at-idp"}
	for _, tc := range []struct {
		name     string
		upstream string
		auth     config.Auth
		token    string   // the token granted; "" when refused
		label    string   // the refused endpoint's label
		paths    []string // what the token server was asked for
	}{
		{"token exchange, public upstream, discovered loopback endpoint", publicUpstream, exchangeType,
			"", "token exchange endpoint", nil},
		{"token exchange, public upstream, configured token_url on loopback", publicUpstream,
			config.Auth{Type: config.AuthTokenExchange, TokenURL: r.tok.URL + "/token"},
			"at-" + grantTokenExchange, "", []string{"/token"}},
		{"token exchange, loopback upstream, discovered loopback endpoint", r.loopbackUpstream(), exchangeType,
			"at-" + grantTokenExchange, "", []string{"/token"}},
		// The IdP is configured (trusted); the authorization server's
		// token endpoint is discovered: the ID-JAG never goes there.
		{"enterprise_managed, public upstream, discovered loopback endpoint", publicUpstream, enterprise,
			"", "authorization server token endpoint (JWT bearer grant)", []string{"/idp"}},
		{"enterprise_managed, loopback upstream, discovered loopback endpoint", r.loopbackUpstream(), enterprise,
			"at-" + grantJWTBearer, "", []string{"/idp", "/token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.endpoint = r.tok.URL + "/token"
			r.tokLog.reset()
			tok, err := exchange(tc.upstream, tc.auth)
			if tc.token == "" {
				checkTokenError(t, err, KindAuth, 0,
					[]string{fmt.Sprintf("upstream srv: %s %s: address not allowed for this upstream", tc.label, r.endpoint)},
					[]string{subject, "jag-1"})
			} else if err != nil || tok != tc.token {
				t.Fatalf("token %q, %v; want %q", tok, err, tc.token)
			}
			wantPaths(t, "the token server", r.tokLog, tc.paths...)
		})
	}
}

func (l *hitLog) reset() {
	l.mu.Lock()
	l.paths = nil
	l.mu.Unlock()
}
