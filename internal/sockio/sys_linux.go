//go:build linux && !race

package sockio

import (
	"syscall"
	"unsafe"
)

// The system calls themselves, raw: the scheduler does not hear of them.

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

// sysWritev writes a then b (neither empty) in one call; iov is the
// caller's, so that it does not escape per call.
func sysWritev(fd uintptr, iov *[2]syscall.Iovec, a, b []byte) (int, syscall.Errno) {
	iov[0].Base, iov[1].Base = &a[0], &b[0]
	iov[0].SetLen(len(a))
	iov[1].SetLen(len(b))
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), 2)
	iov[0].Base, iov[1].Base = nil, nil // the buffers do not stay reachable
	return int(n), e
}
