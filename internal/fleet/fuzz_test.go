package fleet

import (
	"testing"
)

// FuzzOpenSessionID: whatever a client sends as Mcp-Session-Id, the opener
// returns an error or fields it sealed, and never panics; a token that
// opens seals again to one that opens to the same fields.
func FuzzOpenSessionID(f *testing.F) {
	r, err := NewRing([][]byte{testKey(1), testKey(2)})
	if err != nil {
		f.Fatal(err)
	}
	tok, _ := r.SealSession(testSession())
	f.Add(tok)
	f.Add(tok[:len(tok)/2])
	f.Add("")
	f.Add("0123456789abcdef0123456789abcdef")
	f.Add("AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := r.OpenSession(s)
		if err != nil {
			return
		}
		again, err := r.SealSession(got)
		if err != nil {
			t.Fatalf("opened fields do not seal again: %v", err)
		}
		if back, err := r.OpenSession(again); err != nil || back != got {
			t.Fatalf("re-sealed %+v opened as %+v, %v", got, back, err)
		}
	})
}
