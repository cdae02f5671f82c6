//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package upstream

import "net"

// connAlive cannot peek at a socket portably here: an idle connection is
// assumed alive, and a request that finds it closed is retried on a fresh
// connection (h1Transport.RoundTrip).
func connAlive(net.Conn) bool { return true }
