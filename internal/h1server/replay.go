package h1server

import (
	"net"
	"sync"
	"syscall"
)

// replayConn is a connection handed off with bytes already read from it:
// Read returns those first, then reads the connection.
type replayConn struct {
	net.Conn
	mu     sync.Mutex
	replay []byte
}

func newReplayConn(nc net.Conn, replay []byte) *replayConn {
	return &replayConn{Conn: nc, replay: replay}
}

func (c *replayConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		c.replay = c.replay[n:]
		if len(c.replay) == 0 {
			c.replay = nil
		}
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// SyscallConn is the connection's own, so that the gateway's held
// streams can watch a handed-off connection's socket as any other.
func (c *replayConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}

// CloseWrite lets net/http end a connection gracefully (it sends FIN and
// waits before closing after an error response).
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
