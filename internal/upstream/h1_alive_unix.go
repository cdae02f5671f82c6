//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// liveness checks whether an idle pooled connection may carry another
// request: the server has not closed it (no FIN or RST arrived) and sent
// nothing unasked (an idle HTTP/1.1 connection has nothing to read; a
// stray byte, such as a 408 a server writes before closing, means it is
// unusable). A check is one non-blocking recvfrom with MSG_PEEK, which
// consumes nothing: a few hundred nanoseconds and no allocation
// (BenchmarkH1ConnAlive), against a pooled exchange of ~25 us
// (BenchmarkH1RoundTrip), or a dial and a failed request when a dead
// connection is reused. It is built once per connection.
type liveness struct {
	rc    syscall.RawConn // nil: not a socket (tests' pipes): the retry covers it
	probe func(fd uintptr) bool
	alive bool
	buf   [1]byte
}

func newLiveness(nc net.Conn) *liveness {
	l := &liveness{}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return l
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return l
	}
	l.rc = rc
	l.probe = func(fd uintptr) bool {
		n, err := peek(fd, l.buf[:])
		// n == 0 without an error is EOF: the server closed its end. Data
		// is unasked-for; any other error is a dead socket.
		l.alive = n <= 0 && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK))
		return true // never wait for readability: this is a probe
	}
	return l
}

// check reports whether the connection is alive. The caller owns the
// connection (it is out of the pool).
func (l *liveness) check() bool {
	if l.rc == nil {
		return true
	}
	l.alive = false
	return l.rc.Read(l.probe) == nil && l.alive
}
