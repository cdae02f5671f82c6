package fleet

// Helpers shared by several of this package's test files.

import (
	"bytes"
	"testing"
	"time"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, KeyLen) }

func testRing(t testing.TB, keys ...[]byte) *Ring {
	t.Helper()
	r, err := NewRing(keys)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testSession() Session {
	s := Session{
		Owner:    OwnerHash("key:0123abcd"),
		Revision: "2025-06-18",
		Caps:     0b101,
		Route:    "/mcp/alpha,beta",
		Servers:  "alpha",
		Issued:   time.Unix(1767225600, 0),
	}
	for i := range s.ID {
		s.ID[i] = byte(i * 7)
	}
	return s
}
