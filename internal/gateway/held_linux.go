//go:build linux

package gateway

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// hangupWatch notices, for every held stream at once, a client that
// closed its connection (held.go), with no goroutine per stream: the
// streams' sockets are in one epoll instance of the gateway's, which is
// itself in the Go runtime's poller, and one goroutine waits on it. A
// socket's readiness (the client's FIN or RST, or bytes it sent) wakes
// it; it reads what is there without blocking and ends the stream on end
// of file, an error, or too much junk.
//
// A stream whose connection has no socket (TLS) is watched by a
// goroutine reading it instead (heldStream.watch). The zero value is
// ready; the epoll instance is made by the first held stream.
type hangupWatch struct {
	// mu guards the fields below; epoll_ctl is called under it, so the
	// descriptor is never used once close closed it.
	mu     sync.Mutex
	epfd   int
	ep     *os.File // epfd, in the runtime's poller; nil until the first stream
	closed bool     // Shutdown: no more streams, the goroutine ends
	failed bool     // epoll is not available: watch with goroutines
	next   uint64   // the last stream id handed out
	// m are the watched streams by id: an event is matched by the id it
	// carries, never by the descriptor, whose number a closed connection
	// hands on to the next.
	m map[uint64]*heldStream
}

// epollET is EPOLLET (1<<31), which package syscall spells as a negative
// int.
const epollET = 1 << 31

// watchHangup watches h's connection for its client going away; false:
// it cannot be (no socket, no epoll, the gateway is shutting down), and
// the caller starts h.watch.
func (g *Gateway) watchHangup(h *heldStream) bool {
	sc, ok := h.conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	hw := &g.hangups
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if h.forgotten {
		// It ended before it could be watched: nothing is left to watch.
		return true
	}
	if hw.closed || hw.failed {
		return false
	}
	if hw.ep == nil {
		if err := hw.startLocked(g); err != nil {
			hw.failed = true
			g.log.Warn("held streams: no epoll; a goroutine per stream watches its client", "error", err)
			return false
		}
	}
	hw.next++
	id := hw.next
	var cerr error
	err = rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
		cerr = syscall.EpollCtl(hw.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil || cerr != nil {
		return false
	}
	h.rc, h.watchID = rc, id
	hw.m[id] = h
	return true
}

// startLocked makes the epoll instance and starts the goroutine that
// waits on it, a task of the gateway (Close waits for it; close ends it).
func (hw *hangupWatch) startLocked(g *Gateway) error {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return err
	}
	ep := os.NewFile(uintptr(epfd), "held-streams")
	raw, err := ep.SyscallConn()
	if err != nil {
		_ = ep.Close()
		return err
	}
	if !g.tasks.start(func() { hw.run(raw) }) {
		_ = ep.Close()
		return errors.New("the gateway is closing")
	}
	hw.epfd, hw.ep, hw.m = epfd, ep, map[uint64]*heldStream{}
	return nil
}

// run waits for the watched sockets' events until close.
func (hw *hangupWatch) run(raw syscall.RawConn) {
	evs := make([]syscall.EpollEvent, 128)
	for {
		var n int
		err := raw.Read(func(fd uintptr) bool {
			var err error
			n, err = syscall.EpollWait(int(fd), evs, 0)
			// Nothing ready (or interrupted): wait for the instance to be
			// readable.
			return err == nil && n > 0
		})
		if err != nil {
			return // closed
		}
		for _, ev := range evs[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			hw.mu.Lock()
			h := hw.m[id]
			hw.mu.Unlock()
			if h != nil && h.drain() {
				// Not here: ending a stream may wait (a legacy session's
				// end, the access log), and this goroutine watches them all.
				if !h.g.tasks.start(h.end) {
					h.end()
				}
			}
		}
	}
}

// drain reads what the client sent without blocking (the watcher's alone);
// true: the client is gone (end of file, an error) or sent too much.
func (h *heldStream) drain() (gone bool) {
	var b [64]byte
	err := h.rc.Control(func(fd uintptr) {
		for {
			n, err := syscall.Read(int(fd), b[:])
			switch {
			case n > 0:
				h.junk += n
				if h.junk >= maxHeldJunk {
					gone = true
					return
				}
			case err == syscall.EINTR:
			case err == syscall.EAGAIN:
				return
			default: // 0: end of file; or an error
				gone = true
				return
			}
		}
	})
	return gone || err != nil
}

// forget stops watching h, before its connection closes.
func (hw *hangupWatch) forget(h *heldStream) {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	h.forgotten = true
	if h.rc == nil {
		return
	}
	delete(hw.m, h.watchID)
	if hw.closed {
		return
	}
	_ = h.rc.Control(func(fd uintptr) {
		_ = syscall.EpollCtl(hw.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// close ends the watching goroutine; streams held from now on (none: the
// gateway is shutting down) would be watched by goroutines.
func (hw *hangupWatch) close() {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	hw.closed = true
	if hw.ep != nil {
		_ = hw.ep.Close()
	}
}
