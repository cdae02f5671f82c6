//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package upstream

import "syscall"

// peek looks at the next byte waiting in the socket fd without taking it
// or waiting.
func peek(fd uintptr, b []byte) (int, error) {
	n, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}
