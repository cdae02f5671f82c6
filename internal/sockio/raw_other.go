//go:build !linux

package sockio

import (
	"io"
	"net"
)

// raw is Linux's; elsewhere every call takes the connection's own path.
type raw struct{}

func newRaw(net.Conn) *raw { return nil }

func isEOF(err error) bool { return err == io.EOF }

func (*raw) read([]byte) (int, error)          { panic("sockio: no raw reads here") }
func (*raw) write([]byte, []byte) (int, error) { panic("sockio: no raw writes here") }
