package netaddr

import (
	"net/netip"
	"testing"
)

func TestMetadataAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"169.254.169.254":        true,
		"169.254.0.1":            true,
		"fe80::1":                true,
		"fe80::1%eth0":           true,
		"fd00:ec2::254":          true,
		"100.100.100.200":        true,
		"168.63.129.16":          true,
		"::ffff:169.254.169.254": true,
		"64:ff9b::a9fe:a9fe":     true, // NAT64 of 169.254.169.254
		"127.0.0.1":              false,
		"10.0.0.5":               false,
		"192.168.1.1":            false,
		"fd00::2":                false,
		"100.100.100.201":        false,
		"203.0.113.7":            false,
		"2001:db8::1":            false,
		"64:ff9b::a00:5":         false, // NAT64 of 10.0.0.5: private, not metadata
		"::ffff:100.100.100.200": true,
	} {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := MetadataAddr(a); got != want {
			t.Errorf("MetadataAddr(%s) = %v, want %v", addr, got, want)
		}
		if want && IsPublicIP(a) {
			t.Errorf("IsPublicIP(%s): a metadata address is never public", addr)
		}
	}
}

func TestMetadataHost(t *testing.T) {
	for host, want := range map[string]bool{
		"metadata.google.internal":  true,
		"METADATA.GOOGLE.INTERNAL.": true,
		"metadata.goog":             true,
		"instance-data":             true,
		"169.254.169.254":           true,
		"fd00:ec2::254":             true,
		"metadata.example.com":      false,
		"mcp.internal":              false,
		"10.1.2.3":                  false,
		"":                          false,
	} {
		if got := MetadataHost(host); got != want {
			t.Errorf("MetadataHost(%q) = %v, want %v", host, got, want)
		}
	}
}
