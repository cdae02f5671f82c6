package callers

import (
	"net/http"
	"testing"

	"github.com/mcpgate/mcpgate/internal/store"
)

// BenchmarkAuthenticate measures the hot path: a key found in the cache.
func BenchmarkAuthenticate(b *testing.B) {
	s := openStore(b)
	plain := addKey(b, s, store.Key{Alias: "plain"})
	full := addKey(b, s, store.Key{Alias: "full", RateLimitRPM: 1 << 30, AllowedCIDRs: []string{"10.0.0.0/8", "192.0.2.0/24"}})
	a := newAuth(b, Options{Keys: s, MasterKey: master, CacheTTL: 1 << 62})

	for _, bb := range []struct {
		name string
		r    *http.Request
	}{
		{"key", request(remote, HeaderAPIKey, plain)},
		{"key+cidr+ratelimit", request(remote, HeaderAPIKey, full)},
		{"bearer", request(remote, "Authorization", "Bearer "+plain)},
		{"master", request(remote, HeaderAPIKey, master)},
	} {
		mustAuth(b, a, bb.r)
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, f := a.Authenticate(bb.r); f != nil {
					b.Fatal(f.Status)
				}
			}
		})
	}
	b.Run("key/parallel", func(b *testing.B) {
		r := request(remote, HeaderAPIKey, plain)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, f := a.Authenticate(r); f != nil {
					b.Error(f.Status)
					return
				}
			}
		})
	})
}
