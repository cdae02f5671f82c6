package oauth

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// MaxResourceLen bounds a resource indicator: far beyond any route of a
// gateway, small enough to bound what a request may make this parse.
const MaxResourceLen = 2048

// ErrResource is returned (wrapped) by [CanonicalResource] for a resource
// indicator that is not one: the message says which rule it broke.
var ErrResource = errors.New("not a canonical resource URL")

func resourceError(why string) error { return fmt.Errorf("%w: %s", ErrResource, why) }

// CanonicalResource returns the one spelling of an RFC 8707 resource
// indicator (or of a token audience naming one) that tokens are issued
// for and compared in. Every place that derives, accepts or compares a
// resource goes through it, so that two spellings of one URL can never
// be two resources, nor one spelling two:
//
//   - an absolute http or https URL; scheme and host in lower case, the
//     scheme's default port dropped;
//   - no user info, no query, no fragment (RFC 8707 section 2 forbids
//     the fragment; no resource of this gateway has a query, and an
//     empty "?" or "#" is refused too);
//   - a path of printable ASCII in which percent-encoding may only spell
//     an unreserved character (it is decoded: %61 is a); an encoded
//     slash, backslash, percent or anything else is refused, so nothing
//     downstream can decode a second meaning out of it;
//   - no dot segments in any spelling (., .., %2e, .%2E, ...), no empty
//     segment, and no trailing slash ("https://gw/mcp/" is
//     "https://gw/mcp", "https://gw/" is "https://gw").
//
// A resource that could mean two things is refused, never guessed. The
// error wraps [ErrResource].
//
// This is the resource side (mcpgate's routes, the tokens they take).
// The egress side, a resource made from an upstream server's configured
// URL, is internal/oauth/client.CanonicalResource, which drops what this
// refuses (a query may hold the operator's credential).
func CanonicalResource(raw string) (string, error) {
	if raw == "" {
		return "", resourceError("empty")
	}
	if len(raw) > MaxResourceLen {
		return "", resourceError("too long")
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return "", resourceError("a character that is not printable ASCII, or a backslash")
		}
	}
	if strings.ContainsAny(raw, "?#") {
		return "", resourceError("a query or fragment")
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "", resourceError("not an absolute URL")
	}
	scheme = strings.ToLower(scheme)
	if scheme != "http" && scheme != "https" {
		return "", resourceError("not http or https")
	}
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	host, err := canonicalAuthority(scheme, authority)
	if err != nil {
		return "", err
	}
	path, err = canonicalPath(path)
	if err != nil {
		return "", err
	}
	return scheme + "://" + host + path, nil
}

// canonicalAuthority is host[:port] in lower case without the scheme's
// default port. User info, an empty host, a zone or a bad port is an
// error.
func canonicalAuthority(scheme, a string) (string, error) {
	if a == "" || strings.ContainsAny(a, "@%") {
		return "", resourceError("no host, or user info or an encoded host")
	}
	host, port := a, ""
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", resourceError("an unclosed IPv6 literal")
		}
		host, port = a[:end+1], a[end+1:]
		if ip := net.ParseIP(host[1 : len(host)-1]); ip == nil || ip.To4() != nil && !strings.Contains(host, ":") {
			return "", resourceError("a bad IPv6 literal")
		}
		if port != "" && port[0] != ':' {
			return "", resourceError("a bad port")
		}
		port = strings.TrimPrefix(port, ":")
	} else if i := strings.LastIndexByte(a, ':'); i >= 0 {
		host, port = a[:i], a[i+1:]
	}
	if host == "" {
		return "", resourceError("no host")
	}
	if !strings.HasPrefix(host, "[") {
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
				return "", resourceError("a character a host name does not have")
			}
		}
	}
	host = strings.ToLower(host)
	// An empty port ("host:") is no port (RFC 3986 section 6.2.3).
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || strings.Trim(port, "0123456789") != "" || n < 1 || n > 65535 {
			return "", resourceError("a bad port")
		}
		if !(scheme == "http" && n == 80 || scheme == "https" && n == 443) {
			return host + ":" + strconv.Itoa(n), nil
		}
	}
	return host, nil
}

// canonicalPath checks and normalises a path as CanonicalResource says.
func canonicalPath(p string) (string, error) {
	if p == "" || p == "/" {
		return "", nil
	}
	p = strings.TrimSuffix(p, "/")
	var b strings.Builder
	b.Grow(len(p))
	for _, seg := range strings.Split(p[1:], "/") {
		dec, err := decodeSegment(seg)
		if err != nil {
			return "", err
		}
		switch dec {
		case "":
			return "", resourceError("an empty path segment")
		case ".", "..":
			return "", resourceError("a dot segment")
		}
		b.WriteByte('/')
		b.WriteString(dec)
	}
	return b.String(), nil
}

// decodeSegment decodes the percent-encoded unreserved characters of a
// path segment and refuses any other encoding and any character outside
// RFC 3986's pchar.
func decodeSegment(seg string) (string, error) {
	if !strings.ContainsRune(seg, '%') {
		for i := 0; i < len(seg); i++ {
			if !isPChar(seg[i]) {
				return "", resourceError("a character a path does not have")
			}
		}
		return seg, nil
	}
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' {
			if i+2 >= len(seg) {
				return "", resourceError("a truncated percent-encoding")
			}
			h, l := unhex(seg[i+1]), unhex(seg[i+2])
			if h < 0 || l < 0 {
				return "", resourceError("a bad percent-encoding")
			}
			c = byte(h<<4 | l)
			if !isUnreserved(c) {
				return "", resourceError("an encoded character that is not unreserved (an encoded slash, dot-dot or percent?)")
			}
			i += 2
		} else if !isPChar(c) {
			return "", resourceError("a character a path does not have")
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// isPChar is RFC 3986's pchar without pct-encoded: unreserved,
// sub-delims, ':' and '@'.
func isPChar(c byte) bool {
	return isUnreserved(c) || strings.IndexByte("!$&'()*+,;=:@", c) >= 0
}

// SameResource reports whether aud, a token's audience value, names the
// resource the request is for. Both are compared in their canonical
// form; a resource that has none matches nothing.
func SameResource(aud, resource string) bool {
	want, err := CanonicalResource(resource)
	if err != nil {
		return false
	}
	if aud == want {
		return true
	}
	got, err := CanonicalResource(aud)
	return err == nil && got == want
}
