//go:build !linux

package exepages

// Trim does nothing outside Linux.
func Trim() (bytes uint64, err error) { return 0, ErrUnsupported }
