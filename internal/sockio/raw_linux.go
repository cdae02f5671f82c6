package sockio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// raw makes a socket's reads and writes as raw system calls. The state of
// the read and of the write in progress lives here, with the functions
// RawConn calls (made once), so a call allocates nothing.
type raw struct {
	rc syscall.RawConn

	rmu   sync.Mutex // the read's state
	rfn   func(fd uintptr) bool
	rp    []byte
	rn    int
	rerrn syscall.Errno

	wmu   sync.Mutex // the write's state
	wfn   func(fd uintptr) bool
	iov   [2]syscall.Iovec
	a, b  []byte // what is left to write
	wn    int    // written so far
	werrn syscall.Errno
}

func newRaw(nc net.Conn) *raw {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &raw{rc: rc}
	r.rfn, r.wfn = r.tryRead, r.tryWrite
	return r
}

// read reads once into p (not empty). A read of nothing is the end of
// the stream, io.EOF, as a stream socket's net.Conn reports it.
func (r *raw) read(p []byte) (int, error) {
	r.rmu.Lock()
	r.rp, r.rn, r.rerrn = p, 0, 0
	err := r.rc.Read(r.rfn)
	n, errn := r.rn, r.rerrn
	r.rp = nil // the caller's buffer does not stay here
	r.rmu.Unlock()
	switch {
	case err != nil:
		return 0, err
	case errn != 0:
		return 0, os.NewSyscallError("read", errn)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// tryRead reads once: data, the end of the stream or an error (true), or
// nothing there yet (false: the RawConn waits for readability and calls
// again). It runs as a raw system call, which the scheduler cannot take
// the processor from, so nothing here may allocate or block.
func (r *raw) tryRead(fd uintptr) bool {
	for {
		m, e := sysRead(fd, r.rp)
		switch e {
		case 0:
			r.rn = m
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			r.rerrn = e
		}
		return true
	}
}

// write writes a then b (b may be empty). The RawConn holds the
// descriptor's write lock, applies its write deadline and waits for
// writability each time tryWrite finds the socket full.
func (r *raw) write(a, b []byte) (int, error) {
	r.wmu.Lock()
	r.a, r.b, r.wn, r.werrn = a, b, 0, 0
	err := r.rc.Write(r.wfn)
	n, errn := r.wn, r.werrn
	r.a, r.b = nil, nil // the caller's buffers do not stay here
	r.wmu.Unlock()
	if err == nil && errn != 0 {
		name := "write"
		if len(b) > 0 {
			name = "writev"
		}
		err = os.NewSyscallError(name, errn)
	}
	return n, err
}

// tryWrite writes what is left until it is all written or an error
// (true), or the socket is full (false: the RawConn waits and calls
// again). Like tryRead, it must not allocate or block.
func (r *raw) tryWrite(fd uintptr) bool {
	for len(r.a)+len(r.b) > 0 {
		if len(r.a) == 0 {
			r.a, r.b = r.b, nil
		}
		var m int
		var e syscall.Errno
		if len(r.b) == 0 {
			m, e = sysWrite(fd, r.a)
		} else {
			m, e = sysWritev(fd, &r.iov, r.a, r.b)
		}
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			r.werrn = e
			return true
		}
		k := m
		r.wn += k
		if k >= len(r.a) {
			r.a, r.b = r.b[k-len(r.a):], nil
		} else {
			r.a = r.a[k:]
		}
	}
	return true
}
