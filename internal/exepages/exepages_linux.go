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
	// /proc/self/exe opens the file this process runs, even if its path
	// has since been replaced or removed.
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var errs []error
	for _, m := range trimmable(ms, exe) {
		var unmapped bool
		if mode == Unmap && !m.code() {
			// A later Evict can drop only clean pages: a file written
			// just before it ran (a fresh build, an image layer just
			// unpacked) is dirty in the page cache until written back,
			// and its read-only data would stay resident. Its writeback
			// starts now, without waiting (best effort).
			writeback(f, m, false)
		}
		if mode == Evict && !m.code() {
			unmapped, err = evictTwice(f, m)
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

// writeback writes f's dirty pages in m's range back to the file: it
// starts the writes, and with wait waits for them (and for any under
// way). Dirty pages are those of a file written shortly before (the
// kernel writes them back within about 30 s); a file long on disk has
// none, and this returns at once.
func writeback(f *os.File, m mapping, wait bool) {
	flags := unix.SYNC_FILE_RANGE_WRITE
	if wait {
		flags |= unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	}
	_ = unix.SyncFileRange(int(f.Fd()), int64(m.offset), int64(m.end-m.start), flags)
}

// evictTwice evicts m twice. The first pass takes long enough (it waits
// for a fresh file's writeback, and walks the whole mapping's cache) for
// the process, serving or collecting garbage meanwhile, to fault some of
// m's pages back in before the cache is dropped: those stay cached, and
// so do the pages cached with them (a large folio is dropped whole or not
// at all), from which later faults map their neighbours. The second pass
// finds few pages mapped and drops what the first could not. Measured
// over starts of the gateway under c=64 (docs/benchmarks.md): the
// read-only data held 3.8-6.6 MiB after one pass (18 starts, median 4.7)
// and 3.5-4.4 after two (12 starts, median 3.8); the peak RSS was
// 28.6-31.9 MiB (median 30.0) against 28.2-29.8 (median 29.0).
func evictTwice(f *os.File, m mapping) (unmapped bool, err error) {
	if unmapped, err = evict(f, m); err != nil || !unmapped {
		return unmapped, err
	}
	_, err = evict(f, m)
	return true, err
}

// afterUnmap, when set (tests), runs in evict between unmapping the
// mapping and dropping its cached pages.
var afterUnmap func()

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
	if afterUnmap != nil {
		afterUnmap()
	}
	// FADV_DONTNEED drops clean pages nobody maps; mapped ones (this
	// process's own faults since, another process running the same
	// file) stay, and so do dirty ones: those are written back first
	// (the writes Trim(Unmap) started at start-up, mostly done by now).
	// A file system that keeps no page cache of its own (tmpfs) ignores
	// both.
	writeback(f, m, true)
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
