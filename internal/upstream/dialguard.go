package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// A server added through the admin API (config.Server.DenyLinkLocal) is
// someone's word over the network, not the operator's: it must not turn
// the gateway into a way to reach what only the gateway's host can reach
// and no MCP server is: link-local addresses (169.254.0.0/16, fe80::/10)
// and the cloud metadata services (169.254.169.254, fd00:ec2::254,
// 100.100.100.200, 168.63.129.16, metadata.google.internal), which hand
// out the host's cloud credentials. Private networks stay reachable: an
// MCP server inside the company's network is the common case.
//
// The rule is held at the dial, on the address actually dialled after
// resolution (oauth.DialRefusing), so a DNS name that resolves to a
// metadata address, or is rebound to one later, gains nothing, and no
// packet is sent to it. Every HTTP client this package builds for such a
// server is the guarded variant of its own (guardedClient): the MCP
// transports, OpenAPI calls, token requests and the authorization
// server's metadata. Through an environment proxy the proxy dials and
// resolves, so each request's host is also checked by name first
// (metadata names and literal addresses): what a proxied name resolves to
// is then the proxy's policy.

// RefusedTargets checks, when srv.DenyLinkLocal, the URLs of srv that
// name their host literally: a metadata name, or a link-local or metadata
// address, is refused at once, with the field that names it, rather than
// at the first request. Names that resolve to such an address are
// refused at the dial (a name's address is its owner's to change).
func RefusedTargets(srv *config.Server) error {
	if srv == nil || !srv.DenyLinkLocal {
		return nil
	}
	fields := []struct{ name, url string }{{"url", srv.URL}, {"base_url", srv.BaseURL}, {"spec", srv.Spec}}
	if a := srv.Auth; a != nil {
		fields = append(fields, struct{ name, url string }{"auth.token_url", a.TokenURL},
			struct{ name, url string }{"auth.authorization_server", a.AuthorizationServer},
			struct{ name, url string }{"auth.idp_token_url", a.IdPTokenURL})
	}
	for _, f := range fields {
		if f.url == "" {
			continue
		}
		if u, err := url.Parse(f.url); err == nil && netaddr.MetadataHost(u.Hostname()) {
			return fmt.Errorf("%s: %w", f.name, ErrAddressRefused)
		}
	}
	return nil
}

// ErrAddressRefused is in the chain of the error of a request a runtime
// server's configuration would send to a link-local or cloud metadata
// address: nothing was sent.
var ErrAddressRefused = errors.New("link-local and cloud metadata addresses are refused for servers added through the admin API (runtime_servers.allow_link_local allows them)")

// guardDialTimeout is the dial timeout of a guarded transport (the same
// as the package's own).
const guardDialTimeout = 10 * time.Second

// guarded caches the guarded variant of each base client, so that the
// runtime servers sharing a client share its pooled connections too.
var guarded sync.Map // *http.Client -> *http.Client

// guardedClient is hc for srv: hc itself, or, when srv.DenyLinkLocal, a
// client with hc's TLS settings, redirect policy and timeout whose
// transport refuses link-local and metadata addresses. A transport the
// guard cannot wrap (not this package's, not an *http.Transport) is an
// error: the server is refused rather than served unguarded.
func guardedClient(srv *config.Server, hc *http.Client) (*http.Client, error) {
	if srv == nil || !srv.DenyLinkLocal {
		return hc, nil
	}
	if hc == nil {
		hc = defaultHTTPClient()
	}
	if c, ok := guarded.Load(hc); ok {
		return c.(*http.Client), nil
	}
	rt, err := guardTransport(hc.Transport)
	if err != nil {
		return nil, err
	}
	c := *hc
	c.Transport = rt
	got, loaded := guarded.LoadOrStore(hc, &c)
	if !loaded && ownClient(hc) {
		ownClients.Store(got, struct{}{})
	}
	return got.(*http.Client), nil
}

// GuardedHTTPClient is guardedClient for the gateway's own requests on a
// server's behalf (the oauth2_user connect flow's probe): hc, nil for
// http.DefaultClient, or its guarded variant when srv.DenyLinkLocal.
func GuardedHTTPClient(srv *config.Server, hc *http.Client) (*http.Client, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	return guardedClient(srv, hc)
}

// guardTransport is rt with every dial guarded and every request's host
// checked by name.
func guardTransport(rt http.RoundTripper) (http.RoundTripper, error) {
	guardedDial := oauth.DialRefusing(&net.Dialer{Timeout: guardDialTimeout, KeepAlive: 30 * time.Second}, netaddr.MetadataAddr, ErrAddressRefused)
	// The refusal alone: the dial error would name the resolved address.
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := guardedDial(ctx, network, address)
		if errors.Is(err, ErrAddressRefused) {
			return nil, ErrAddressRefused
		}
		return c, err
	}
	var inner http.RoundTripper
	switch t := rt.(type) {
	case nil:
		std := http.DefaultTransport.(*http.Transport).Clone()
		std.DialContext, std.DialTLSContext = dial, nil
		inner = std
	case *http.Transport:
		std := t.Clone()
		std.DialContext, std.DialTLSContext = dial, nil
		inner = std
	case *h1Transport:
		fb, ok := t.fallback.(*http.Transport)
		if !ok {
			return nil, errors.New("upstream: the address guard cannot wrap this transport")
		}
		std := fb.Clone()
		std.DialContext, std.DialTLSContext = dial, nil
		h := newH1Transport(std, t.usesProxy)
		h.dial = dial
		inner = h
	default:
		return nil, fmt.Errorf("upstream: the address guard cannot wrap a %T (runtime servers need an *http.Transport)", rt)
	}
	return hostGuard{inner}, nil
}

// hostGuard refuses a request whose host is a metadata name or a
// link-local or metadata address before anything is dialled: through a
// proxy the dial guard sees only the proxy's address.
type hostGuard struct{ next http.RoundTripper }

func (g hostGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if netaddr.MetadataHost(req.URL.Hostname()) {
		closeBody(req)
		return nil, ErrAddressRefused
	}
	return g.next.RoundTrip(req)
}

func (g hostGuard) CloseIdleConnections() {
	if c, ok := g.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
