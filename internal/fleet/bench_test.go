package fleet

import (
	"testing"
	"time"
)

// BenchmarkSessionID is the per-request cost a sealed id adds: a seal at
// initialize, an open on every request (the budget is 5 µs for both).
func BenchmarkSessionID(b *testing.B) {
	r := testRing(b, testKey(1), testKey(2))
	s := testSession()
	b.Run("seal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.SealSession(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	tok, _ := r.SealSession(s)
	b.Run("open", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.OpenSession(tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("seal+open", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			t, _ := r.SealSession(s)
			if _, err := r.OpenSession(t); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRequestState: a requestState is sealed per input_required
// round and opened on its retry.
func BenchmarkRequestState(b *testing.B) {
	r := testRing(b, testKey(1))
	st := State{Exchange: "0123456789abcdef01234567", Round: 1, Origin: "http://10.0.0.5:4000"}
	b.ReportAllocs()
	for b.Loop() {
		t, _ := r.SealState(st, "key:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
		if _, err := r.OpenState(t, "key:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPeerAuth: a forwarded reply is signed by the replica that got
// it and verified by the one that asked; a reply is a few hundred bytes.
func BenchmarkPeerAuth(b *testing.B) {
	r := testRing(b, testKey(1), testKey(2))
	req := PeerRequest{Method: "POST", Target: "/fleet/v1/deliver", Client: "192.0.2.7:4711", Body: make([]byte, 512)}
	now := time.Unix(1_800_000_000, 0)
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = r.SignPeer(req, now)
		}
	})
	v := r.SignPeer(req, now)
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := r.VerifyPeer(v, req, now); err != nil {
				b.Fatal(err)
			}
		}
	})
}
