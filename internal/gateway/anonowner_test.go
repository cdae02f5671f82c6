package gateway

import (
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/mcpgate/mcpgate/internal/callers"
)

// anonymousCaller remembers what callers.ClientIP and callers.OwnerOf
// say of an anonymous caller's address, and must keep saying exactly
// that: for addresses sharing a slot, v4-mapped and zoned ones, a new
// port, and a request with a bearer token (whose owner is the token's).
// The caller and identity are what authenticate built for each request
// before they were shared: nothing but Anonymous, the owner and the
// client IP set.
func TestAnonymousOwnerAsCallers(t *testing.T) {
	addrs := []string{"127.0.0.1:1000", "127.0.0.1:2000", "10.0.0.1:1", "10.0.1.1:1", "[::1]:80", "[::ffff:127.0.0.1]:5",
		"[fe80::1%eth0]:9", "[fe80::1%eth1]:9", "[fe80::1]:9", "not-an-address", "192.0.2.7"}
	for round := range 3 {
		for _, a := range addrs {
			for _, auth := range []string{"", "Bearer tok-" + a} {
				r := httptest.NewRequest("POST", "/mcp", nil)
				r.RemoteAddr = a
				if auth != "" {
					r.Header.Set("Authorization", auth)
				}
				c, id := anonymousCaller(r)
				ip, owner := id.ClientIP, id.Owner
				if want := (callers.Caller{Anonymous: true, Owner: owner}); !reflect.DeepEqual(*c, want) {
					t.Errorf("round %d, %s %q: caller %+v, want %+v", round, a, auth, *c, want)
				}
				if want := (Identity{Owner: owner, ClientIP: ip}); *id != want {
					t.Errorf("round %d, %s %q: identity %+v, want %+v", round, a, auth, *id, want)
				}
				if want := callers.ClientIP(r); ip != want {
					t.Errorf("round %d, %s %q: client IP %q, want %q", round, a, auth, ip, want)
				}
				if want := callers.OwnerOf(&callers.Caller{Anonymous: true}, r); owner != want {
					t.Errorf("round %d, %s %q: owner %q, want %q", round, a, auth, owner, want)
				}
			}
		}
	}
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.RemoteAddr = "127.0.0.1:4000"
	anonymousCaller(r)
	if n := testing.AllocsPerRun(50, func() { anonymousCaller(r) }); n != 0 {
		t.Errorf("a known address: %v allocations, want none", n)
	}
}
