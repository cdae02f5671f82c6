package fleet

import (
	"testing"
	"time"
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

// FuzzParsePeerAuth: whatever arrives as a peer authentication header,
// the parser returns ErrMalformed or a value that prints back to exactly
// what it parsed (one spelling per value), and never panics; nothing it
// parses verifies without the key.
func FuzzParsePeerAuth(f *testing.F) {
	r, err := NewRing([][]byte{testKey(1)})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	req := PeerRequest{Method: "POST", Target: "/fleet/v1/deliver", Body: []byte("{}")}
	good := r.SignPeer(req, now)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add("")
	f.Add("v1;t=0;k=00000000;m=")
	f.Fuzz(func(t *testing.T, s string) {
		pa, err := ParsePeerAuth(s)
		if err != nil {
			return
		}
		if pa.String() != s {
			t.Fatalf("%q parsed as %+v, which prints %q", s, pa, pa.String())
		}
		if s != good && r.VerifyPeer(s, req, now) == nil {
			t.Fatalf("%q verifies without having been signed", s)
		}
	})
}

// A sealed token has one spelling: line breaks inside it, which the
// base64 decoder would skip, make it malformed.
func TestSealedTokenOneSpelling(t *testing.T) {
	r, err := NewRing([][]byte{testKey(1)})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := r.SealSession(testSession())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.OpenSession(tok); err != nil {
		t.Fatalf("the genuine token: %v", err)
	}
	for _, bad := range []string{tok[:10] + "\n" + tok[10:], tok[:10] + "\r\n" + tok[10:], tok + "\n"} {
		if _, err := r.OpenSession(bad); err == nil {
			t.Errorf("%q opened", bad)
		}
	}
}
