package upstream

import (
	"syscall"
	"unsafe"
)

// peek looks at the next byte waiting in the socket fd without taking it
// or waiting: a raw system call, as the connection's reads and writes are
// (internal/sockio). A reuse after an idle spell is often the process's
// first system call since it went idle, and a call the scheduler is told
// of would wake its monitor thread.
func peek(fd uintptr, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
