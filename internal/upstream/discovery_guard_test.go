package upstream

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"testing"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

// A public upstream cannot make discovery fetch a loopback or private
// address: mcp.example.com resolves (through the guard's test resolver,
// and through the given client's own dialer) to a test server on
// 127.0.0.1, which is refused at dial time and never reached; the same
// server as the upstream's own loopback URL is fetched, and so is the
// loopback authorization server it names. (Guards discovery's use of
// internal/oauth/client's guarded client: with the plain same-origin
// client it used before, the loopback server answers the metadata
// request.)
func TestOAuth2DiscoverAddressGuard(t *testing.T) {
	var asURL string
	as, asLog := fakeServer(t, true, map[string]http.HandlerFunc{
		"/.well-known/oauth-authorization-server": jsonAt(func() any {
			return map[string]any{"issuer": asURL, "token_endpoint": asURL + "/token"}
		}),
	})
	asURL = as.URL
	up, upLog := fakeServer(t, true, map[string]http.HandlerFunc{
		"/.well-known/oauth-protected-resource/mcp": jsonAt(func() any { return map[string]any{"authorization_servers": []string{asURL}} }),
	})
	upAddr := up.Listener.Addr().String()
	restore := oauth.SetTestResolver(func(address string) string {
		if host, _, _ := net.SplitHostPort(address); host == "mcp.example.com" {
			return upAddr
		}
		return address
	})
	t.Cleanup(restore)
	hc := up.Client()
	tr := hc.Transport.(*http.Transport).Clone()
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		if host, _, _ := net.SplitHostPort(address); host == "mcp.example.com" {
			address = upAddr
		}
		return d.DialContext(ctx, network, address)
	}
	hc.Transport = tr
	discover := func(serverURL string) error {
		t.Helper()
		s := newTokenSource("srv", serverURL, testOAuthConfig(""), hc, nil)
		_, _, err := s.discover(context.Background())
		return err
	}

	err := discover("https://mcp.example.com/mcp")
	checkTokenError(t, err, KindAuth, 0, []string{"oauth2 discovery: https://mcp.example.com/.well-known/oauth-protected-resource/mcp: address not allowed for this upstream"}, nil)
	wantPaths(t, "the upstream", upLog)

	// A loopback upstream may keep its metadata, and its authorization
	// server, on loopback.
	u, _ := url.Parse(up.URL)
	if err := discover("https://" + u.Host + "/mcp"); err != nil {
		t.Fatalf("loopback upstream: %v", err)
	}
	wantPaths(t, "the upstream", upLog, "/.well-known/oauth-protected-resource/mcp")
	wantPaths(t, "the authorization server", asLog, "/.well-known/oauth-authorization-server")
}
