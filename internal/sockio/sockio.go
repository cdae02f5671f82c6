// Package sockio reads and writes a connected socket from the goroutines
// that own it without the Go runtime's system-call bookkeeping.
//
// A read or write made the usual way (net.Conn) tells the scheduler that
// the thread is in a system call. Two costs follow under load (issue 25):
//   - A write to a loopback or LAN socket runs the receiver's side of TCP
//     in the writer's system call, 5-6 µs on a small virtual machine. The
//     scheduler's monitor thread, finding the processor still in that
//     call on its next look, takes the processor away and starts another
//     thread to run it.
//   - Whenever every processor has gone idle (all goroutines waiting on
//     the network), the monitor sleeps until a thread enters a system
//     call, which wakes it (a futex wake-up, paid by that thread) and
//     restarts its polling at every 20 µs. A gateway between a client and
//     an upstream goes idle and busy thousands of times a second.
//
// A socket the runtime's network poller owns is non-blocking: a read or
// write never waits, it copies what is there or what fits and returns. So
// both are made as raw system calls, inside syscall.RawConn's Read and
// Write, which keep the poller's locking, deadlines, and wait for
// readability or writability.
//
// The package owns nothing but the system calls. It takes the raw path
// only for plain TCP connections and at most maxRaw bytes per call,
// above which a copy takes long enough that letting the scheduler hand
// the processor off is the better trade. Anything else (TLS, a wrapped
// connection, another OS) goes through the connection's own methods.
package sockio

import (
	"errors"
	"io"
	"net"
)

// maxRaw is the largest transfer made raw: a 64 KiB copy into or out of a
// socket takes tens of microseconds, which the scheduler may as well
// spend on another thread.
const maxRaw = 64 << 10

// A Conn reads and writes one connection. Read and Write may run at once
// (a reader and a writer goroutine); each is safe for concurrent use, as
// net.Conn's are.
type Conn struct {
	nc  net.Conn
	raw *raw // nil: nc's own methods
}

// New is a Conn over nc.
func New(nc net.Conn) *Conn {
	return &Conn{nc: nc, raw: newRaw(nc)}
}

// Read reads into p, as net.Conn.Read. A read into more than maxRaw
// bytes takes nc's own path rather than a shorter raw read: a caller may
// take a read shorter than it asked for as the socket's having had no
// more (the upstream client's reuse of a connection does).
func (c *Conn) Read(p []byte) (int, error) {
	if c.raw == nil || len(p) == 0 || len(p) > maxRaw {
		return c.nc.Read(p)
	}
	n, err := c.raw.read(p)
	return n, c.opError("read", err)
}

// Write writes p whole, or returns the first error, as net.Conn.Write.
func (c *Conn) Write(p []byte) (int, error) {
	if c.raw == nil || len(p) > maxRaw || len(p) == 0 {
		return c.nc.Write(p)
	}
	n, err := c.raw.write(p, nil)
	return n, c.opError("write", err)
}

// Write2 writes a then b, in one system call when it can, as
// net.Buffers.WriteTo: it returns the bytes written of both.
func (c *Conn) Write2(a, b []byte) (int64, error) {
	if c.raw == nil || len(a)+len(b) > maxRaw {
		bufs := net.Buffers{a, b}
		return bufs.WriteTo(c.nc)
	}
	n, err := c.raw.write(a, b)
	return int64(n), c.opError("write", err)
}

// opError is err as net.Conn's methods return it: a *net.OpError naming
// the operation and both ends, around the system call's error, a deadline
// or a closed connection (RawConn's own wrapping names its "raw-read").
func (c *Conn) opError(op string, err error) error {
	if err == nil || err == io.EOF { // io.EOF itself, as net.Conn returns it
		return err
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: c.nc.LocalAddr().Network(), Source: c.nc.LocalAddr(), Addr: c.nc.RemoteAddr(), Err: err}
}
