//go:build linux && race

package sockio

import "syscall"

// Under the race detector the calls go through package syscall, which
// tells the detector what each read and write touched and orders a read
// after the write it reads (the detector cannot see the kernel). That
// also tells the scheduler, so the race builds test this package's logic
// but not the raw calls' scheduling.

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return n, errno(err)
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	return n, errno(err)
}

// sysWritev writes a only: package syscall has no writev, and the caller
// writes what is left (b) next.
func sysWritev(fd uintptr, _ *[2]syscall.Iovec, a, _ []byte) (int, syscall.Errno) {
	return sysWrite(fd, a)
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
