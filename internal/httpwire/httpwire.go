// Package httpwire holds the HTTP/1.1 wire rules that mcpgate's own
// parsers share: the listener's request-head parser (internal/h1server)
// and the upstream client's response-head parser (internal/upstream).
// Both take only what net/http would read identically and hand the rest
// to net/http; the rules here are the byte-level ones they agree on, so
// that the two cannot drift apart.
//
// It owns no state and does no I/O; it must not import net/http's
// internals or anything of mcpgate's.
package httpwire

import "golang.org/x/net/http/httpguts"

// IsTokenByte reports whether c may appear in a header name (RFC 9110
// token; httpguts.IsTokenRune, as textproto's validHeaderFieldByte).
func IsTokenByte(c byte) bool { return tokenBytes[c] }

var tokenBytes = func() (t [256]bool) {
	for c := range 0x80 {
		t[c] = httpguts.IsTokenRune(rune(c))
	}
	return t
}()

// AppendCanonicalKey appends textproto.CanonicalMIMEHeaderKey(k) to buf:
// the first letter and every letter after a hyphen upper case, the rest
// lower case. ok is false, and buf unchanged, when k is empty or holds a
// byte that is not a token byte (CanonicalMIMEHeaderKey then returns k
// as it is, and net/http's reader refuses the line). The caller turns
// the bytes into a string, a constant for the names it expects.
func AppendCanonicalKey[K string | []byte](buf []byte, k K) (_ []byte, ok bool) {
	if len(k) == 0 {
		return buf, false
	}
	n := len(buf)
	upper := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !tokenBytes[c] {
			return buf[:n], false
		}
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf = append(buf, c)
		upper = c == '-'
	}
	return buf, true
}

// ParseLength is a Content-Length value as net/http accepts it (ASCII
// digits only, at most 63 bits: strconv.ParseUint's base 10, 63 bits), or
// -1. At most 18 digits are taken, so it never overflows; a longer value
// is refused here and left to net/http.
func ParseLength(s string) int64 {
	if s == "" || len(s) > 18 {
		return -1
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
