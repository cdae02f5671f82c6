//go:build !linux

package exepages

// Trim does nothing outside Linux.
func Trim(Mode) (bytes uint64, err error) { return 0, ErrUnsupported }
