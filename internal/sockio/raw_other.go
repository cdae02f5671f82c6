//go:build !linux

package sockio

import "net"

// raw is Linux's; elsewhere every call takes the connection's own path.
type raw struct{}

func newRaw(net.Conn) *raw { return nil }

func (*raw) read([]byte) (int, error)          { panic("sockio: no raw reads here") }
func (*raw) write([]byte, []byte) (int, error) { panic("sockio: no raw writes here") }
