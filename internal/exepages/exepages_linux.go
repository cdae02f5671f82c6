package exepages

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Trim drops the page table entries of the running executable's read-only
// mappings (MADV_DONTNEED) and returns the bytes of mappings trimmed. A
// mapping holding a private copy of any page (smaps Anonymous > 0: the
// relocated read-only data of a position-independent executable, a
// debugger's breakpoint), or whose smaps entry does not say, is left
// whole: dropping it would lose what the file does not hold.
//
// With Unmap the pages stay in the page cache and the ones the process
// uses again fault back in from it, each fault mapping its cached
// neighbours too (64 KiB around it, or the large folio it hits). With
// Evict the read-only data (not the code) also leaves the page cache
// where no process maps it, and those mappings are read without
// read-around (MADV_RANDOM): the runtime reads its function tables and
// type data a few bytes here and there, so serving then maps the pages it
// reads and not the windows around them. The code is left cached: the
// kernel reads code around a fault whatever the advice (since Linux 6.16
// it ignores MADV_RANDOM on executable mappings), so evicting it would
// only turn minor faults into reads.
//
// An error after some mappings were trimmed returns their bytes with it;
// nothing is lost either way, the process only keeps more pages mapped.
func Trim(mode Mode) (bytes uint64, err error) {
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
	var f *os.File
	if mode == Evict {
		// /proc/self/exe opens the file this process runs, even if its
		// path has since been replaced or removed.
		if f, err = os.Open("/proc/self/exe"); err != nil {
			return 0, err
		}
		defer f.Close()
	}
	var errs []error
	for _, m := range trimmable(ms, exe) {
		var unmapped bool
		if f != nil && !m.code() {
			unmapped, err = evict(f, m)
		} else {
			err = madvise(m.start, m.end-m.start, syscall.MADV_DONTNEED)
			unmapped = err == nil
		}
		if err != nil {
			errs = append(errs, err)
		}
		if unmapped {
			bytes += m.end - m.start
		}
	}
	return bytes, errors.Join(errs...)
}

// evict unmaps m (a read-only mapping of f) and drops f's cached pages
// in m's range that no process maps, after turning read-around off for
// m, so that each later fault reads and maps one page. The order matters
// only for speed: a page faulted back between the steps stays mapped and
// cached, which is what it would be anyway.
func evict(f *os.File, m mapping) (unmapped bool, err error) {
	if err := madvise(m.start, m.end-m.start, syscall.MADV_RANDOM); err != nil {
		return false, err
	}
	if err := madvise(m.start, m.end-m.start, syscall.MADV_DONTNEED); err != nil {
		return false, err
	}
	// FADV_DONTNEED drops clean pages nobody maps; mapped ones (this
	// process's own faults since, another process running the same
	// file) stay. A file system that keeps no page cache of its own
	// (tmpfs) ignores it.
	if err := unix.Fadvise(int(f.Fd()), int64(m.offset), int64(m.end-m.start), unix.FADV_DONTNEED); err != nil {
		return true, os.NewSyscallError("fadvise", err)
	}
	return true, nil
}

// madvise is the system call on an address range the Go heap does not
// own (syscall.Madvise wants a slice).
func madvise(addr, length uint64, advice int) error {
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(addr), uintptr(length), uintptr(advice)); e != 0 {
		return os.NewSyscallError("madvise", e)
	}
	return nil
}
