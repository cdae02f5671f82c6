package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
)

// Reason is what a downstream caller may be told of an upstream failure:
// the cause in a few words, without the internal addresses, host names,
// ports, URLs, resolver addresses or command paths that network, TLS and
// process errors carry ("dial tcp 10.0.0.5:8443: connect: connection
// refused" is "connection refused"; "lookup x on 127.0.0.53:53: no such
// host" is "host name not found"). The log keeps err itself; Classify
// gives the class. A failure it cannot put in such words is described by
// its class alone.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	// The gateway's own words, which name no place.
	var tooLarge *MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return tooLarge.Error()
	}
	var te *timeoutError
	if errors.As(err, &te) {
		return te.Error() // "tools/call timed out after 60s"
	}
	if r := netReason(err); r != "" {
		return r
	}
	text := err.Error()
	var ue *Error
	if errors.As(err, &ue) {
		text = string(ue.Kind)
		if ue.Err != nil {
			text = ue.Err.Error()
		}
	}
	// The gateway's own words may name the URL it fetched (discovery,
	// token endpoints): keep the words, not the address.
	text = urlAuthority.ReplaceAllString(text, "")
	if addressLike.MatchString(text) {
		return classWords(err)
	}
	return text
}

// netReason names a network, TLS or process failure in err's chain, or "".
func netReason(err error) string {
	var dns *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	var record tls.RecordHeaderError
	var execErr *exec.Error
	var pathErr *fs.PathError
	var op *net.OpError
	var netErr net.Error
	switch {
	case errors.As(err, &dns):
		switch {
		case dns.IsNotFound:
			return "host name not found"
		case dns.IsTimeout:
			return "host name lookup timed out"
		}
		return "host name lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ETIMEDOUT):
		return "connect timed out"
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &badHost), errors.As(err, &invalidCert), errors.As(err, &record):
		return "TLS handshake failed"
	case errors.As(err, &execErr):
		return "the server's command could not be started"
	case errors.As(err, &pathErr):
		if strings.HasPrefix(pathErr.Op, "fork/exec") {
			return "the server's command could not be started"
		}
		return "a file the server's configuration names could not be read"
	case errors.As(err, &op):
		if op.Timeout() {
			return "connection timed out"
		}
		return "connection failed"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	}
	return ""
}

// classWords describes err by its fault class alone.
func classWords(err error) string {
	switch Classify(err).Class {
	case FaultTimeout:
		return "timed out"
	case FaultUnreachable:
		return "unreachable"
	case FaultAuth:
		return "authentication failed"
	case FaultRateLimited:
		return "rate limited"
	case FaultInvalidResponse:
		return "invalid response"
	case FaultUpstreamError:
		return "upstream error"
	}
	return "internal error"
}

var (
	// urlAuthority is a URL's scheme and authority (user info, host,
	// port); its path stays, which names a well-known document or an
	// endpoint, not a place.
	urlAuthority = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^/\s"'<>]*`)
	// addressLike is what is left of an address after that: an IPv4 or
	// bracketed IPv6 literal, host:port, a dial or lookup.
	addressLike = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[[0-9A-Fa-f:.%]+\]|[A-Za-z0-9.-]+:\d{2,5}\b|\b(dial|lookup) `)
)
