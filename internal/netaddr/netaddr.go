// Package netaddr is mcpgate's one answer to "is this address loopback,
// private or public" and "is this Host header the gateway's own". Every
// package that asks must ask here, so that the answers cannot disagree.
//
// The questions differ in which way a wrong answer fails, and each has its
// own function:
//
//   - Questions that grant trust (may this URL be plain http, may this
//     Host header be served, may this name stand for the gateway) are
//     strict: only what the text alone proves to be loopback counts. A
//     name that might resolve to loopback (ip6-localhost, foo.localhost,
//     a DNS name) or an IP literal in a non-canonical form (127.1,
//     0x7f.1, 2130706433, which some resolvers accept and netip does not)
//     is not loopback here: IsLoopbackHost, IsLoopbackRedirectHost,
//     HostAllowed, ListenIsLoopback.
//   - Questions about a socket judge the address actually bound or
//     dialled, never the name it came from: IsBoundLoopback (a listener),
//     IsPublicIP (the SSRF guard, run on the dialled address), MetadataAddr
//     (link-local and cloud metadata addresses, refused to runtime servers
//     and to every address an upstream's documents name). MetadataHost is
//     its counterpart for a URL's host text, where a proxy resolves.
//
// It imports nothing of mcpgate and does no I/O: no resolver, no dial.
package netaddr

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// localhost is the one name that is loopback by itself (RFC 6761 section
// 6.3; /etc/hosts on every system mcpgate runs on).
const localhost = "localhost"

// IsLoopbackIP reports whether a is a loopback address: 127.0.0.0/8, ::1,
// or either mapped into IPv6 (::ffff:127.0.0.1). A zone is ignored.
func IsLoopbackIP(a netip.Addr) bool {
	return a.IsValid() && a.Unmap().IsLoopback()
}

// IsLoopbackHost reports whether h, the host of a URL or of a Host header
// without its port (IPv6 with or without brackets), names loopback by
// itself: the name localhost (ASCII letters in any case, with or without
// the root's trailing dot) or an IP literal in canonical form for which
// IsLoopbackIP holds. Everything else is false, including names that
// usually resolve to loopback and non-canonical IPv4 forms (see the
// package doc): the answer grants trust, so it never guesses. The
// comparison is ASCII only: Unicode case folding would make
// "localhoſt" (U+017F) equal to localhost, which a resolver does not.
func IsLoopbackHost(h string) bool {
	h = strings.TrimSuffix(unbracket(h), ".")
	if asciiLower(h) == localhost {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Zone() == "" && IsLoopbackIP(a)
}

// IsLoopbackRedirectHost reports whether h may be the host of a plain
// http redirect URI of a native OAuth client (RFC 8252 section 7.3 and
// 8.3): the loopback literals 127.0.0.1 and ::1 that the RFC names, or
// localhost, which it advises against but clients use. Other loopback
// addresses (127.0.0.2) are refused: the RFC's loopback redirect is a
// client's listener on the machine's usual loopback address, and a
// narrower rule costs no real client anything.
func IsLoopbackRedirectHost(h string) bool {
	h = unbracket(h)
	if asciiLower(strings.TrimSuffix(h, ".")) == localhost {
		return true
	}
	return h == "127.0.0.1" || h == "::1"
}

// IsPublicIP reports whether a is a public unicast address: the one rule
// of every fetch the gateway makes on someone else's behalf (client
// metadata documents, an upstream's OAuth metadata, OpenAPI documents),
// checked on the address actually dialled, after resolution.
func IsPublicIP(a netip.Addr) bool {
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
	// A cloud metadata address is never public, even where it is a
	// public unicast one (Azure's).
	return !MetadataAddr(a)
}

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

// IsNonPublicHost reports whether h, an operator-configured host, says by
// itself that it is not on the public internet: IsLoopbackHost, or an IP
// literal that is not IsPublicIP. A DNS name is never non-public here:
// what it resolves to is its owner's choice, so it cannot vouch for
// itself.
func IsNonPublicHost(h string) bool {
	if IsLoopbackHost(h) {
		return true
	}
	a, err := netip.ParseAddr(unbracket(h))
	return err == nil && !IsPublicIP(a)
}

// ListenIsLoopback reports whether the listen address host:port names
// loopback by itself (IsLoopbackHost of its host): what can be told of a
// listen address before it is bound (config validation). An empty host
// (":4000", every interface) and anything that does not parse are not
// loopback. Once bound, IsBoundLoopback judges the socket.
func ListenIsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	return err == nil && host != "" && IsLoopbackHost(host)
}

// IsBoundLoopback reports whether a, the address a listener actually bound
// (net.Listener.Addr), accepts loopback connections only. This is the
// answer that counts for a listener: "LOCALHOST:4000", "ip6-localhost:4000"
// or a name that resolves to loopback all bind a loopback address, while
// "localhost" can bind another if the hosts file says so.
func IsBoundLoopback(a net.Addr) bool {
	if a == nil {
		return false
	}
	if t, ok := a.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(t.IP)
		return ok && IsLoopbackIP(ip)
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && IsLoopbackIP(ap.Addr())
}

// SplitHostHeader parses a Host header (or a URL's authority without user
// info): a host name, an IPv4 literal or a bracketed IPv6 literal, and an
// optional decimal port. host comes back lower-cased (ASCII), without
// brackets and without a trailing dot; port is "" when absent. ok is false
// for anything else: an empty host, user info, a path, an empty or
// out-of-range port, an unbracketed IPv6 literal, an empty label ("a..b",
// ".a"), bytes outside the letters, digits and "-._" of a host name.
func SplitHostHeader(h string) (host, port string, ok bool) {
	if h == "" {
		return "", "", false
	}
	if h[0] == '[' {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", "", false
		}
		host, rest := h[1:end], h[end+1:]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", "", false
		}
		if rest != "" {
			if rest[0] != ':' || !validPort(rest[1:]) {
				return "", "", false
			}
			port = rest[1:]
		}
		return asciiLower(host), port, true
	}
	host = h
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		host, port = h[:i], h[i+1:]
		if !validPort(port) {
			return "", "", false
		}
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 || host[0] == '.' || host[len(host)-1] == '.' || strings.Contains(host, "..") {
		return "", "", false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", "", false
		}
	}
	return asciiLower(host), port, true
}

// HostAllowed reports whether a request's Host header names a host the
// gateway serves on a loopback listener (the DNS-rebinding guard, SPEC
// S2.1): a loopback host (IsLoopbackHost) or one of allowed (host names
// or IP literals without port, as config.Config.AllowedHosts keeps them:
// lower-cased, IPv6 without brackets), whatever the port. A web page
// that rebinds its own name to 127.0.0.1 still sends that name, so it is
// refused; a Host that does not parse is refused too.
func HostAllowed(hostHeader string, allowed []string) bool {
	host, _, ok := SplitHostHeader(hostHeader)
	if !ok {
		return false
	}
	if IsLoopbackHost(host) {
		return true
	}
	for _, a := range allowed {
		if a != "" && asciiLower(strings.TrimSuffix(unbracket(a), ".")) == host {
			return true
		}
	}
	return false
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 0 && n <= 65535 && p[0] != '+' && p[0] != '-'
}

func unbracket(h string) string {
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	return h
}

// asciiLower lower-cases ASCII letters only (strings.ToLower would also
// map other scripts' letters, which no resolver does).
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// metadataAddrs are the cloud instance metadata services outside the
// link-local ranges: AWS's IPv6 endpoint (Nitro), Alibaba Cloud's, and
// Azure's WireServer.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("168.63.129.16"),
}

// nat64 is the well-known NAT64 prefix (RFC 6052): a DNS64 resolver
// answers an IPv4-only name with its address embedded in it.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// MetadataAddr reports whether a is link-local (169.254.0.0/16, where the
// cloud metadata services answer at 169.254.169.254, and fe80::/10) or
// another well-known cloud metadata address (fd00:ec2::254,
// 100.100.100.200, 168.63.129.16), also when mapped into IPv6 or
// embedded in the NAT64 prefix. No MCP server, nor its authorization
// server, is there; the metadata services hand out the host's cloud
// credentials to whoever can make it ask.
func MetadataAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	if a.IsLinkLocalUnicast() {
		return true
	}
	a = a.WithZone("")
	for _, m := range metadataAddrs {
		if a == m {
			return true
		}
	}
	return false
}

// metadataNames are host names of cloud metadata services that are
// names, not only addresses (they resolve to 169.254.169.254 inside the
// cloud, which a check of the dialled address catches too; through an
// HTTP proxy the proxy resolves them, so the name itself is refused).
var metadataNames = []string{"metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}

// MetadataHost reports whether host (a URL's host name, without port or
// brackets) names a cloud metadata service: one of the well-known names,
// or a literal address MetadataAddr refuses. Other names are judged on
// the address they resolve to, at the dial.
func MetadataHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	for _, n := range metadataNames {
		if h == n {
			return true
		}
	}
	a, err := netip.ParseAddr(h)
	return err == nil && MetadataAddr(a)
}
