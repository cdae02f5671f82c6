package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The guarded variant of a runtime server's client refuses link-local and
// metadata destinations before anything is sent: literal addresses at the
// dial, metadata names (which a proxy would resolve) before the proxy is
// asked; a file server's client is left as it is.
func TestGuardedClient(t *testing.T) {
	var proxied atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		proxied.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(proxy.Close)
	pu, _ := url.Parse(proxy.URL)
	viaProxy := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}

	file := &config.Server{Name: "f"}
	if c, err := guardedClient(file, viaProxy); err != nil || c != viaProxy {
		t.Fatalf("a file server's client changed: %v", err)
	}
	runtime := &config.Server{Name: "r", DenyLinkLocal: true}
	// imds.test resolves to the metadata address: the dial judges that
	// address (refused before any packet), not the name.
	t.Cleanup(oauth.SetTestResolver(func(address string) string {
		if host, port, _ := net.SplitHostPort(address); host == "imds.test" {
			return net.JoinHostPort("169.254.169.254", port)
		}
		return address
	}))
	for _, tc := range []struct {
		name string
		hc   *http.Client
		url  string
	}{
		{"metadata name through a proxy", viaProxy, "http://metadata.google.internal/computeMetadata/v1/"},
		{"literal IMDS through a proxy", viaProxy, "http://169.254.169.254/latest/meta-data/"},
		{"literal IMDS, the package's client", nil, "http://169.254.169.254/latest/meta-data/"},
		{"literal IMDS over https, the package's client", nil, "https://169.254.169.254/latest/meta-data/"},
		{"a name that resolves to IMDS, the package's client", nil, "http://imds.test/latest/meta-data/"},
		{"a name that resolves to IMDS, over https", nil, "https://imds.test/latest/meta-data/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := guardedClient(runtime, tc.hc)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, tc.url, nil)
			_, err = c.Do(req)
			if !errors.Is(err, ErrAddressRefused) {
				t.Fatalf("error %v, want ErrAddressRefused", err)
			}
			if strings.Contains(err.Error(), "dial tcp") {
				t.Errorf("the refusal names the dial: %v", err)
			}
		})
	}
	if n := proxied.Load(); n != 0 {
		t.Errorf("the proxy got %d requests", n)
	}
	// One guarded client per base client: connections stay pooled.
	a, _ := guardedClient(runtime, viaProxy)
	b, _ := guardedClient(&config.Server{Name: "r2", DenyLinkLocal: true}, viaProxy)
	if a != b {
		t.Error("two guarded clients for one base client")
	}
	// A transport the guard cannot wrap refuses the server.
	odd := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("unreachable") })}
	if _, err := guardedClient(runtime, odd); err == nil {
		t.Error("an unwrappable transport was accepted")
	}
	if c := tokenHTTPClient(runtime, odd); c == odd {
		t.Error("tokenHTTPClient returned an unguarded client")
	} else if _, err := c.Get("http://example.invalid/token"); err == nil || !strings.Contains(err.Error(), "cannot wrap") {
		t.Errorf("token client error %v", err)
	}
}
