package oauth

import "net/netip"

// blockedPrefixes are ranges that are not the public internet beyond what
// netip's predicates cover: "this network", carrier-grade NAT, IETF
// protocol assignments, benchmarking, the reserved class E, and the
// NAT64 prefixes (which embed an IPv4 address that may be private).
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// PublicAddr reports whether a is a public unicast address: the one rule
// of every fetch the gateway makes on someone else's behalf (client
// metadata documents, an upstream's OAuth metadata), checked on the
// address actually dialled.
func PublicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
