package fleet

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSessionRoundTrip(t *testing.T) {
	r := testRing(t, testKey(1))
	for _, s := range []Session{testSession(), {}, {Route: strings.Repeat("r", maxField), Revision: "2024-11-05"}} {
		tok, err := r.SealSession(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range tok {
			// Mcp-Session-Id: visible ASCII only; base64url is that and more.
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				t.Fatalf("token %q has %q", tok, c)
			}
		}
		got, err := r.OpenSession(tok)
		if err != nil {
			t.Fatal(err)
		}
		if s.Issued.IsZero() {
			s.Issued = time.Unix(0, 0)
		}
		if diff := cmp.Diff(got, s); diff != "" {
			t.Errorf("opened (-got +want):\n%s", diff)
		}
	}
	// Every seal is fresh: the same fields never give the same id.
	a, _ := r.SealSession(testSession())
	b, _ := r.SealSession(testSession())
	if a == b {
		t.Error("two seals of the same session are equal")
	}
	if _, err := r.SealSession(Session{Route: strings.Repeat("r", maxField+1)}); !errors.Is(err, ErrTooLong) {
		t.Errorf("an over-long route: %v", err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	r := testRing(t, testKey(1))
	st := State{Exchange: "0123456789abcdef01234567", Round: 3, Origin: "http://10.0.0.5:4000"}
	tok, err := r.SealState(st, "key:alice")
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.OpenState(tok, "key:alice")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, st); diff != "" {
		t.Errorf("opened (-got +want):\n%s", diff)
	}
	if _, err := r.OpenState(tok, "key:mallory"); !errors.Is(err, ErrForged) {
		t.Errorf("another owner's state: %v", err)
	}
	if _, err := r.SealState(State{Exchange: "x"}, "key:alice"); err == nil {
		t.Error("round 0 sealed")
	}
}

// Any change to a token, anywhere, refuses it.
func TestTamperRefused(t *testing.T) {
	r := testRing(t, testKey(1))
	tok, _ := r.SealSession(testSession())
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		for _, bit := range []byte{0x01, 0x80} {
			b := bytes.Clone(raw)
			b[i] ^= bit
			if _, err := r.OpenSession(base64.RawURLEncoding.EncodeToString(b)); err == nil {
				t.Fatalf("byte %d ^ %#x accepted", i, bit)
			}
		}
	}
	for i := range tok {
		for _, c := range []byte{'A', '_', '.', '='} {
			if tok[i] == c {
				continue
			}
			b := []byte(tok)
			b[i] = c
			if _, err := r.OpenSession(string(b)); err == nil {
				t.Fatalf("character %d -> %q accepted", i, c)
			}
		}
	}
	for _, bad := range []string{"", tok[:len(tok)-1], tok + "A", tok + tok, "0123456789abcdef0123456789abcdef", strings.Repeat("A", maxToken+1)} {
		if _, err := r.OpenSession(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// The version byte is checked before anything else.
	b := bytes.Clone(raw)
	b[0] = version + 1
	if _, err := r.OpenSession(base64.RawURLEncoding.EncodeToString(b)); !errors.Is(err, ErrMalformed) {
		t.Errorf("version %d: %v", version+1, err)
	}
}

// A token of one purpose never opens as the other's.
func TestWrongPurposeRefused(t *testing.T) {
	r := testRing(t, testKey(1))
	sid, _ := r.SealSession(testSession())
	if _, err := r.OpenState(sid, ""); err == nil {
		t.Error("a session id opened as a requestState")
	}
	st, _ := r.SealState(State{Exchange: "e", Round: 1}, "")
	if _, err := r.OpenSession(st); err == nil {
		t.Error("a requestState opened as a session id")
	}
	// The purpose is bound as additional data too, not only by the key:
	// with the session key set under the state purpose's label, the
	// session key itself does not verify a state.
	swapped := &Ring{session: keySet{aad: r.state.aad, keys: r.session.keys}}
	tok, _ := swapped.SealSession(testSession())
	if _, err := r.OpenSession(tok); !errors.Is(err, ErrForged) {
		t.Errorf("another purpose's additional data: %v", err)
	}
}

func TestRotation(t *testing.T) {
	old, next := testKey(1), testKey(2)
	before := testRing(t, old)
	during := testRing(t, next, old)
	after := testRing(t, next)

	sOld, _ := before.SealSession(testSession())
	stOld, _ := before.SealState(State{Exchange: "e", Round: 1}, "o")
	// During the overlap the old key still opens what it sealed...
	if _, err := during.OpenSession(sOld); err != nil {
		t.Errorf("old id during the overlap: %v", err)
	}
	if _, err := during.OpenState(stOld, "o"); err != nil {
		t.Errorf("old state during the overlap: %v", err)
	}
	// ...and new ids are sealed with the new first key: a replica not yet
	// given the new key cannot open them, one that dropped the old can.
	sNew, _ := during.SealSession(testSession())
	if _, err := before.OpenSession(sNew); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("new id on the old ring: %v", err)
	}
	if _, err := after.OpenSession(sNew); err != nil {
		t.Errorf("new id once the old key is gone: %v", err)
	}
	// Once the old key is removed, what it sealed is gone.
	if _, err := after.OpenSession(sOld); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("old id after rotation: %v", err)
	}
}

func TestUnknownKeyRefused(t *testing.T) {
	a, b := testRing(t, testKey(1)), testRing(t, testKey(3))
	tok, _ := a.SealSession(testSession())
	if _, err := b.OpenSession(tok); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("another fleet's id: %v", err)
	}
	st, _ := a.SealState(State{Exchange: "e", Round: 1}, "o")
	if _, err := b.OpenState(st, "o"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("another fleet's state: %v", err)
	}
}

func TestNewRingErrors(t *testing.T) {
	for name, keys := range map[string][][]byte{
		"none":      nil,
		"short":     {make([]byte, 16)},
		"duplicate": {testKey(1), testKey(1)},
	} {
		if _, err := NewRing(keys); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
