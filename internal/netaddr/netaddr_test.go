package netaddr

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

// The hosts every trust-granting question must judge alike, with the
// tricky ones: non-canonical IPv4 that some resolvers accept, mapped
// IPv6, trailing dots, case, look-alikes that Unicode folding would
// equate, names that only resolve to loopback, and names that merely
// start with localhost.
func TestIsLoopbackHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"LOCALHOST", true},
		{"LocalHost", true},
		{"localhost.", true},
		{"127.0.0.1", true},
		{"127.0.0.2", true},
		{"127.255.255.254", true},
		{"::1", true},
		{"[::1]", true},
		{"::ffff:127.0.0.1", true},
		{"[::ffff:127.0.0.1]", true},
		{"0:0:0:0:0:0:0:1", true},

		{"127.1", false},           // inet_aton's short form: not canonical
		{"0x7f.1", false},          // hex
		{"0x7f000001", false},      // hex, one number
		{"2130706433", false},      // decimal, one number
		{"0177.0.0.1", false},      // octal
		{"127.000.000.001", false}, // leading zeros
		{"ip6-localhost", false},   // resolves to ::1 on Debian, by the hosts file only
		{"foo.localhost", false},   // RFC 6761 says loopback; resolvers need not
		{"localhost.attacker.example", false},
		{"localhost.localdomain", false},
		{"attacker.example", false},
		{"localhoſt", false}, // U+017F folds to s under Unicode rules
		{"ｌｏｃａｌｈｏｓｔ", false}, // full-width: IDNA would map it, the resolver does not
		{"xn--localhost-", false},
		{"::1%lo", false}, // a zone: not a plain literal
		{"10.0.0.1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"", false},
		{"[]", false},
		{"localhost:4000", false}, // a port is not part of a host
	} {
		if got := IsLoopbackHost(tc.host); got != tc.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}

func TestIsLoopbackRedirectHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true}, {"::1", true}, {"[::1]", true}, {"localhost", true}, {"LOCALHOST", true},
		{"127.0.0.2", false}, {"127.1", false}, {"localhost.attacker.example", false}, {"example.com", false}, {"", false},
	} {
		if got := IsLoopbackRedirectHost(tc.host); got != tc.want {
			t.Errorf("IsLoopbackRedirectHost(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}

func TestIsPublicIP(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1::1": true,
		"127.0.0.1": false, "10.0.0.5": false, "192.168.1.1": false, "172.16.0.1": false, "169.254.169.254": false,
		"100.64.0.1": false, "0.0.0.0": false, "::1": false, "fe80::1": false, "fc00::1": false, "::ffff:10.0.0.1": false,
		"64:ff9b::a00:1": false, "240.0.0.1": false, "224.0.0.1": false, "198.18.0.1": false,
	} {
		if got := IsPublicIP(netip.MustParseAddr(addr)); got != want {
			t.Errorf("IsPublicIP(%s) = %v, want %v", addr, got, want)
		}
	}
	if IsPublicIP(netip.Addr{}) {
		t.Error("the zero Addr is public")
	}
}

func TestIsNonPublicHost(t *testing.T) {
	for h, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "10.0.0.5": true, "[fc00::1]": true, "192.168.0.1": true,
		"example.com": false, "foo.localhost": false, "93.184.216.34": false, "127.1": false,
	} {
		if got := IsNonPublicHost(h); got != want {
			t.Errorf("IsNonPublicHost(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestListenIsLoopback(t *testing.T) {
	for _, tc := range []struct {
		listen string
		want   bool
	}{
		{"127.0.0.1:4000", true}, {"localhost:4000", true}, {"LOCALHOST:4000", true}, {"[::1]:4000", true},
		{"127.0.0.2:0", true},
		{"ip6-localhost:4000", false}, // only the bound address can tell
		{":4000", false}, {"0.0.0.0:4000", false}, {"[::]:4000", false}, {"10.0.0.1:4000", false},
		{"127.0.0.1", false}, {"", false}, {"localhost.attacker.example:4000", false},
	} {
		if got := ListenIsLoopback(tc.listen); got != tc.want {
			t.Errorf("ListenIsLoopback(%q) = %v, want %v", tc.listen, got, tc.want)
		}
	}
}

// The bound address is what counts: a listener on a name that resolves to
// loopback is loopback, whatever its spelling.
func TestIsBoundLoopback(t *testing.T) {
	for _, listen := range []string{"LOCALHOST:0", "127.0.0.2:0"} {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			t.Logf("%s: %v (skipped)", listen, err)
			continue
		}
		if !IsBoundLoopback(ln.Addr()) {
			t.Errorf("listening on %s bound %s: not judged loopback", listen, ln.Addr())
		}
		ln.Close()
	}
	for _, tc := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4000}, true},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 4000}, true},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 4000}, false},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 4000}, false},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 4000}, false},
		{&net.TCPAddr{Port: 4000}, false}, // no IP: every interface
		{&net.UnixAddr{Name: "/tmp/x.sock", Net: "unix"}, false},
		{nil, false},
	} {
		if got := IsBoundLoopback(tc.addr); got != tc.want {
			t.Errorf("IsBoundLoopback(%v) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

func TestSplitHostHeader(t *testing.T) {
	for _, tc := range []struct {
		in, host, port string
		ok             bool
	}{
		{"localhost:4000", "localhost", "4000", true},
		{"LOCALHOST", "localhost", "", true},
		{"localhost.:4000", "localhost", "4000", true},
		{"[::1]:4000", "::1", "4000", true},
		{"[::1]", "::1", "", true},
		{"[::FFFF:127.0.0.1]:80", "::ffff:127.0.0.1", "80", true},
		{"127.0.0.1:0", "127.0.0.1", "0", true},
		{"mcp.example.com", "mcp.example.com", "", true},
		{"under_score.example:8080", "under_score.example", "8080", true},

		{"", "", "", false},
		{":4000", "", "", false},
		{"localhost:", "", "", false},
		{"localhost:99999", "", "", false},
		{"localhost:-1", "", "", false},
		{"localhost:+80", "", "", false},
		{"::1", "", "", false},
		{"[::1", "", "", false},
		{"[::1]x", "", "", false},
		{"[127.0.0.1]", "", "", false},
		{"[fe80::1%25lo]", "", "", false},
		{"user@localhost", "", "", false},
		{"localhost/path", "", "", false},
		{"local host", "", "", false},
		{"ｌｏｃａｌｈｏｓｔ", "", "", false},
		{"localhoſt", "", "", false},
		{".", "", "", false},
		{"..", "", "", false},
		{"a..b", "", "", false},
		{".localhost", "", "", false},
	} {
		host, port, ok := SplitHostHeader(tc.in)
		if host != tc.host || port != tc.port || ok != tc.ok {
			t.Errorf("SplitHostHeader(%q) = %q, %q, %v; want %q, %q, %v", tc.in, host, port, ok, tc.host, tc.port, tc.ok)
		}
	}
}

func TestHostAllowed(t *testing.T) {
	allowed := []string{"mcp.internal", "10.1.2.3", "fd00::1"}
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"localhost:4000", true}, {"LOCALHOST:4000", true}, {"localhost.:4000", true}, {"127.0.0.1:4000", true},
		{"127.0.0.2", true}, {"[::1]:4000", true}, {"[::ffff:127.0.0.1]:4000", true},
		{"mcp.internal", true}, {"MCP.Internal:8443", true}, {"mcp.internal.", true}, {"10.1.2.3:80", true}, {"[fd00::1]:80", true},

		{"attacker.example", false}, {"attacker.example:4000", false}, {"localhost.attacker.example:4000", false},
		{"127.1:4000", false}, {"0x7f.1", false}, {"2130706433", false}, {"ip6-localhost:4000", false},
		{"mcp.internal.attacker.example", false}, {"localhoſt", false}, {"", false}, {"[::1", false},
	} {
		if got := HostAllowed(tc.host, allowed); got != tc.want {
			t.Errorf("HostAllowed(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
	if HostAllowed("mcp.internal", nil) || HostAllowed("x", []string{""}) {
		t.Error("a host allowed by an empty list")
	}
}

// FuzzHostHeader: parsing never panics; whatever it accepts is a host
// without brackets, port or upper case, with a port in range; a host it
// calls loopback is loopback however it is written back; and the guard
// agrees with the parser.
func FuzzHostHeader(f *testing.F) {
	for _, s := range []string{"localhost:4000", "[::1]:80", "127.0.0.1", "attacker.example", "127.1", "0x7f.1",
		"[::ffff:127.0.0.1]", "localhost.", "LOCALHOST", "ｌｏｃａｌｈｏｓｔ", "localhost.attacker.example", "[fe80::1%25lo]:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, port, ok := SplitHostHeader(s)
		if !ok {
			if host != "" || port != "" {
				t.Fatalf("refused %q but returned %q %q", s, host, port)
			}
			if HostAllowed(s, []string{s}) {
				t.Fatalf("HostAllowed accepted unparseable %q", s)
			}
			return
		}
		if host == "" || strings.ContainsAny(host, "[]/@ ") || strings.HasSuffix(host, ".") || host != asciiLower(host) {
			t.Fatalf("SplitHostHeader(%q) host %q", s, host)
		}
		if port != "" && !validPort(port) {
			t.Fatalf("SplitHostHeader(%q) port %q", s, port)
		}
		if IsLoopbackHost(host) {
			if !HostAllowed(s, nil) {
				t.Fatalf("loopback host %q of %q not allowed", host, s)
			}
			if a, err := netip.ParseAddr(host); err == nil && !a.Unmap().IsLoopback() {
				t.Fatalf("IsLoopbackHost(%q) for a non-loopback literal", host)
			}
			if _, err := netip.ParseAddr(host); err != nil && host != localhost {
				t.Fatalf("IsLoopbackHost(%q): a name other than localhost", host)
			}
		}
		if !HostAllowed(s, []string{host}) {
			t.Fatalf("HostAllowed(%q) refused its own host %q", s, host)
		}
	})
}
