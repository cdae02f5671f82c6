package vault

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// BenchmarkGet is the per-request cost of a person's own credential
// (user_api_key, oauth2_user): cached is a read within the 5 s read
// cache, the usual case for a person making calls; store is a read that
// misses it (the SQLite read, the keyed name, the AES-GCM open).
func BenchmarkGet(b *testing.B) {
	st, err := sqlite.Open(context.Background(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	now := time.Now()
	clockNow := func() time.Time { return now }
	v, err := New(st, []config.VaultKey{k1}, clockNow)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const people = 100
	for i := range people {
		e := Entry{Kind: KindOAuth, Issuer: "https://as.example", Person: fmt.Sprintf("key:p%d", i), Server: "up",
			AccessToken: "at-0123456789abcdef0123456789abcdef", RefreshToken: "rt-0123456789abcdef", Expiry: now.Add(time.Hour), Scopes: []string{"mcp"}}
		if err := v.Put(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := v.Get(ctx, fmt.Sprintf("key:p%d", i%people), "up"); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("store", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			now = now.Add(readTTL) // every read misses the cache
			if _, err := v.Get(ctx, fmt.Sprintf("key:p%d", i%people), "up"); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
