package httpwire

import (
	"net/textproto"
	"strconv"
	"testing"
)

// canonicalOracle is what net/textproto makes of k, and whether k is a
// header name net/http's reader takes (every byte a token byte).
func canonicalOracle(k string) (string, bool) {
	if k == "" {
		return "", false
	}
	for i := 0; i < len(k); i++ {
		if !IsTokenByte(k[i]) {
			return "", false
		}
	}
	return textproto.CanonicalMIMEHeaderKey(k), true
}

func TestAppendCanonicalKey(t *testing.T) {
	for _, k := range []string{
		"content-type", "CONTENT-LENGTH", "mcp-session-id", "MCP-PROTOCOL-VERSION", "x-api-key",
		"a", "-", "a--b", "x_y", "WWW-authenticate", "Accept-Encoding",
		"", "bad key", "bad:key", "caf\xc3\xa9", "tab\tkey", "q\"uote",
	} {
		want, wantOK := canonicalOracle(k)
		buf := []byte("prefix")
		got, ok := AppendCanonicalKey(buf, k)
		if ok != wantOK {
			t.Errorf("%q: ok %v, want %v", k, ok, wantOK)
			continue
		}
		if !ok {
			if string(got) != "prefix" {
				t.Errorf("%q refused, but buf is %q", k, got)
			}
			continue
		}
		if string(got) != "prefix"+want {
			t.Errorf("%q: %q, want %q", k, got[len("prefix"):], want)
		}
		if b, _ := AppendCanonicalKey(nil, []byte(k)); string(b) != want {
			t.Errorf("%q as bytes: %q, want %q", k, b, want)
		}
	}
}

func TestIsTokenByte(t *testing.T) {
	const token = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	n := 0
	for c := range 256 {
		if IsTokenByte(byte(c)) {
			n++
		}
	}
	if n != len(token) {
		t.Fatalf("%d token bytes, want %d", n, len(token))
	}
	for i := 0; i < len(token); i++ {
		if !IsTokenByte(token[i]) {
			t.Errorf("%q is a token byte", token[i])
		}
	}
}

func TestParseLength(t *testing.T) {
	for _, s := range []string{"0", "7", "170", "000123", "999999999999999999", "1000000000000000000",
		"", "-1", "+1", " 1", "1 ", "0x10", "1e3", "١", "9223372036854775807", "18446744073709551616"} {
		got := ParseLength(s)
		want := int64(-1)
		if n, err := strconv.ParseUint(s, 10, 63); err == nil && len(s) <= 18 {
			want = int64(n)
		}
		if got != want {
			t.Errorf("ParseLength(%q) = %d, want %d", s, got, want)
		}
	}
}

// FuzzAppendCanonicalKey holds AppendCanonicalKey equal to net/textproto
// for every input: both parsers (the listener's and the upstream
// client's) rely on it to name headers as net/http would.
func FuzzAppendCanonicalKey(f *testing.F) {
	for _, s := range []string{"content-type", "Mcp-Session-Id", "a-b-c", "x y", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		want, wantOK := canonicalOracle(k)
		got, ok := AppendCanonicalKey(nil, k)
		if ok != wantOK || ok && string(got) != want {
			t.Fatalf("%q: %q %v, want %q %v", k, got, ok, want, wantOK)
		}
	})
}

// FuzzParseLength holds ParseLength to strconv.ParseUint(s, 10, 63) for
// values of up to 18 bytes, and to -1 beyond.
func FuzzParseLength(f *testing.F) {
	for _, s := range []string{"0", "123", "-1", "999999999999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := int64(-1)
		if n, err := strconv.ParseUint(s, 10, 63); err == nil && len(s) <= 18 {
			want = int64(n)
		}
		if got := ParseLength(s); got != want {
			t.Fatalf("ParseLength(%q) = %d, want %d", s, got, want)
		}
	})
}
