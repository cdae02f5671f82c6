package oauth

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"
)

// DialPublic returns a DialContext that connects only to public addresses
// (PublicAddr), refusing any other with blocked. The check runs in the
// dialer's Control hook, on the address actually dialled after
// resolution, so a name that resolves to a public address when checked
// and a private one when dialled (DNS rebinding) gains nothing, and no
// packet goes to a refused address. It is the one guard of every fetch the
// gateway makes on someone else's behalf: client metadata documents, an
// upstream's OAuth metadata, registration and token requests. Use it
// without a proxy: through one, the dialled address would be the proxy's.
func DialPublic(timeout time.Duration, blocked error) func(ctx context.Context, network, address string) (net.Conn, error) {
	return DialRefusing(&net.Dialer{Timeout: timeout}, func(a netip.Addr) bool { return !PublicAddr(a) }, blocked)
}

// DialRefusing is DialPublic's shape for another rule: a DialContext of a
// copy of d that refuses, with refused, every address refuse reports
// (and any it cannot parse), in the Control hook, on the address actually
// dialled after resolution. d's own Control, if any, is replaced.
func DialRefusing(d *net.Dialer, refuse func(netip.Addr) bool, refused error) func(ctx context.Context, network, address string) (net.Conn, error) {
	g := RefusingDialer(d, refuse, refused)
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		if f := testResolve.Load(); f != nil {
			address = (*f)(address)
		}
		return g.DialContext(ctx, network, address)
	}
}

// RefusingDialer is a copy of d whose Control hook refuses, with refused,
// every address refuse reports (and any it cannot parse): the address
// actually dialled after resolution. For a dialer used as is (a
// tls.Dialer's NetDialer); DialRefusing is the usual form.
func RefusingDialer(d *net.Dialer, refuse func(netip.Addr) bool, refused error) *net.Dialer {
	g := *d
	g.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || refuse(ap.Addr()) {
			return refused
		}
		return nil
	}
	return &g
}

// testResolve, when set, rewrites a "host:port" before DialPublic or
// DialRefusing dials it: how a test makes a public-looking name resolve to a test server's
// loopback address (the guard then judges that address, as it would a
// real resolver's answer).
var testResolve atomic.Pointer[func(address string) string]

// SetTestResolver makes DialPublic and DialRefusing dial f(address)
// instead of address, until the returned function is called. For tests
// only.
func SetTestResolver(f func(address string) string) (restore func()) {
	testResolve.Store(&f)
	return func() { testResolve.Store(nil) }
}
