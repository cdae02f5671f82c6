package vault

import (
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
)

// FuzzDecodeRecord feeds arbitrary documents and names to the record
// decoder and opener: no panic, and whatever opens is an entry that
// belongs under its name and round-trips.
func FuzzDecodeRecord(f *testing.F) {
	v, err := New(nil, []config.VaultKey{k1, k2}, nil)
	if err != nil {
		f.Fatal(err)
	}
	name, doc, err := v.ring.seal(toPlain(oauthEntry("alice", "github")))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(name, doc)
	f.Add(name, []byte(`{"v":1,"kid":"k1","nonce":"AAAAAAAAAAAAAAAA","ciphertext":"AAAAAAAAAAAAAAAAAAAAAA=="}`))
	f.Add("x", []byte(`{"v":2}`))
	f.Add("", []byte(`{"v":1,"kid":"k9","nonce":null,"ciphertext":""}`))
	f.Add(name, []byte(`{"v":1,"kid":"k1","nonce":"AAAAAAAAAAAAAAAA","ciphertext":"AAAAAAAAAAAAAAAAAAAAAA=="} {}`))
	f.Fuzz(func(t *testing.T, name string, doc []byte) {
		if r, err := decodeRecord(doc); err == nil {
			if r.V != recordVersion || len(r.Nonce) != 12 || len(r.Ciphertext) < 16 || !validKeyID(r.KID) {
				t.Fatalf("accepted %+v", r)
			}
		}
		p, kid, err := v.ring.open(name, doc)
		if err != nil {
			return
		}
		k := v.ring.byID[kid]
		if k == nil || k.name(p.Person, p.Server) != name {
			t.Fatalf("opened an entry that does not belong under %q", name)
		}
		n2, d2, err := v.ring.seal(p)
		if err != nil {
			return // too large to re-seal: fine
		}
		if _, _, err := v.ring.open(n2, d2); err != nil {
			t.Fatalf("re-sealed entry does not open: %v", err)
		}
	})
}
