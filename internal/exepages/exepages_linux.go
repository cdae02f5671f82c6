package exepages

import (
	"os"
	"syscall"
)

// Trim drops the page table entries of the running executable's read-only
// mappings (MADV_DONTNEED) and returns the bytes of mappings trimmed. A
// mapping holding a private copy of any page (smaps Anonymous > 0: the
// relocated read-only data of a position-independent executable, a
// debugger's breakpoint), or whose smaps entry does not say, is left
// whole: dropping it would lose what the file does not hold. The pages stay in the page cache; the ones the
// process runs again fault back in.
func Trim() (bytes uint64, err error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	ms, err := parseSmaps(string(smaps))
	if err != nil {
		return 0, err
	}
	for _, m := range trimmable(ms, exe) {
		if err := madvise(m.start, m.end-m.start, syscall.MADV_DONTNEED); err != nil {
			return bytes, err
		}
		bytes += m.end - m.start
	}
	return bytes, nil
}

// madvise is the system call on an address range the Go heap does not
// own (syscall.Madvise wants a slice).
func madvise(addr, length uint64, advice int) error {
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(addr), uintptr(length), uintptr(advice)); e != 0 {
		return os.NewSyscallError("madvise", e)
	}
	return nil
}
