package exepages

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// exeRss returns the resident kB of the running executable's read-only
// mappings that hold no private copy of a page, from /proc/self/smaps, and
// how many such mappings there are.
func exeRss(t *testing.T) (kb uint64, n int) {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parseSmaps(string(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range trimmable(ms, exe) {
		n++
		kb += m.rss
	}
	return kb, n
}

// The test binary's text and read-only data are resident after running
// tests; Trim drops them, the process keeps running the code (this test
// goes on), and what it runs faults back in.
func TestTrimDropsTheExecutablesPages(t *testing.T) {
	before, n := exeRss(t)
	if n < 2 || before < 512 {
		t.Fatalf("%d read-only mappings of the executable, %d kB resident: want the text and read-only data", n, before)
	}
	size, err := Trim(Unmap)
	if err != nil {
		t.Fatal(err)
	}
	if size < 1<<20 {
		t.Fatalf("trimmed %d bytes", size)
	}
	after, _ := exeRss(t)
	t.Logf("resident %d kB -> %d kB of %d kB mapped", before, after, size>>10)
	// What reading smaps and running this test fault back in (in 64 KiB
	// or larger windows) is a good part of a small test binary.
	if after >= before {
		t.Errorf("resident %d kB -> %d kB: want fewer", before, after)
	}
	// The code still runs: a second Trim, and parsing, after the first.
	if _, err := Trim(Evict); err != nil {
		t.Fatal(err)
	}
	if _, err := parseSmaps(sampleSmaps); err != nil {
		t.Fatal(err)
	}
}

// cachedPages counts the pages of b the page cache holds (mincore).
func cachedPages(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// evictDir is a directory on a file system with a page cache of its own:
// t.TempDir, unless that is tmpfs or ramfs (whose pages are the file and
// cannot be dropped), then the package's directory.
func evictDir(t *testing.T) string {
	for _, dir := range []string{t.TempDir(), "."} {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		if st.Type != unix.TMPFS_MAGIC && st.Type != unix.RAMFS_MAGIC {
			if dir == "." {
				d, err := os.MkdirTemp(".", "evict-test-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(d) })
				return d
			}
			return dir
		}
	}
	t.Fatal("no directory on a file system with a page cache of its own")
	return ""
}

// A read-only mapping evicted as Trim(Evict) evicts the executable's
// read-only data: its pages leave the page cache, reading it still gives
// the file's bytes, and a read brings back the page read, not the
// read-around window (32 pages by default) a mapping without MADV_RANDOM
// would read.
func TestEvictReadsOnePageAtATime(t *testing.T) {
	const pages = 64
	ps := os.Getpagesize()
	// Written pages are dirty until written back, and the kernel drops
	// only clean ones: this file is synced first.
	f, b := pagedFile(t, "data", pages, true)
	sum := 0
	for i := 0; i < len(b); i += ps {
		sum += int(b[i])
	}
	if n := cachedPages(t, b); n != pages {
		t.Fatalf("%d of %d pages cached after reading them all", n, pages)
	}
	addr := uint64(uintptr(unsafe.Pointer(&b[0])))
	unmapped, err := evict(f, mapping{start: addr, end: addr + uint64(len(b)), perms: "r--p"})
	if err != nil || !unmapped {
		t.Fatalf("evict: unmapped %v, %v", unmapped, err)
	}
	if n := cachedPages(t, b); n != 0 {
		t.Fatalf("%d pages still cached after evict", n)
	}
	if got := b[40*ps+1]; got != 40 {
		t.Fatalf("page 40 reads %d after evict", got)
	}
	if n := cachedPages(t, b); n != 1 {
		t.Errorf("reading one byte cached %d pages: want the one page, no read-around", n)
	}
}

// A file written just before it is mapped (a fresh build, an image layer
// just unpacked) is dirty in the page cache, which the kernel does not
// drop: evict writes its range back first, and its pages leave the cache
// as a clean file's do.
func TestEvictDropsJustWrittenPages(t *testing.T) {
	const pages = 64
	ps := os.Getpagesize()
	f, b := pagedFile(t, "fresh", pages, false)
	m := mapping{start: uint64(uintptr(unsafe.Pointer(&b[0]))), perms: "r--p"}
	m.end = m.start + uint64(len(b))
	writeback(f, m, false) // what Trim(Unmap) starts at start-up
	unmapped, err := evict(f, m)
	if err != nil || !unmapped {
		t.Fatalf("evict: unmapped %v, %v", unmapped, err)
	}
	if n := cachedPages(t, b); n != 0 {
		t.Fatalf("%d of %d just-written pages still cached after evict", n, pages)
	}
	if got := b[7*ps]; got != 7 {
		t.Fatalf("page 7 reads %d after evict", got)
	}
}

// pagedFile writes a file of pages pages in a directory with a page cache
// (page i holds the byte i), synced or left dirty, and maps it read-only;
// both are closed with t.
func pagedFile(t *testing.T, name string, pages int, synced bool) (*os.File, []byte) {
	t.Helper()
	ps := os.Getpagesize()
	data := make([]byte, pages*ps)
	for i := range data {
		data[i] = byte(i / ps)
	}
	path := filepath.Join(evictDir(t), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if synced {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := unix.Mmap(int(f.Fd()), 0, len(data), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return f, b
}

// A page read back while evict runs, after the mapping was unmapped and
// before the cache is dropped (a goroutine of the process serving, or
// the GC reading the function tables), is mapped when the cache is
// dropped and stays cached, with the pages cached beside it (here the
// whole file, where the file system caches it in one large folio).
// Trim's eviction (evictTwice) runs a second pass, which drops it: no
// page of the file is left cached.
func TestEvictTwiceDropsPagesReadDuringTheFirstPass(t *testing.T) {
	const pages = 64
	ps := os.Getpagesize()
	f, b := pagedFile(t, "busy", pages, true)
	for i := 0; i < len(b); i += ps {
		_ = b[i]
	}
	m := mapping{start: uint64(uintptr(unsafe.Pointer(&b[0]))), perms: "r--p"}
	m.end = m.start + uint64(len(b))
	passes := 0
	var read byte
	afterUnmap = func() {
		passes++
		if passes == 1 {
			read = b[9*ps] // faults page 9 back in, mapped, mid-pass
		}
	}
	t.Cleanup(func() { afterUnmap = nil })

	// One pass leaves the page read mid-pass in the cache.
	if _, err := evict(f, m); err != nil {
		t.Fatal(err)
	}
	if read != 9 {
		t.Fatalf("page 9 read %d mid-pass", read)
	}
	if n := cachedPages(t, b); n == 0 {
		t.Fatal("no page cached after a page was read mid-pass: the test no longer shows what the second pass is for")
	}

	// Trim's eviction: the second pass drops it.
	for i := 0; i < len(b); i += ps {
		_ = b[i]
	}
	passes = 0
	unmapped, err := evictTwice(f, m)
	if err != nil || !unmapped {
		t.Fatalf("evictTwice: unmapped %v, %v", unmapped, err)
	}
	if passes != 2 {
		t.Fatalf("evictTwice ran %d passes", passes)
	}
	if n := cachedPages(t, b); n != 0 {
		t.Errorf("%d pages still cached after evictTwice, a page having been read during its first pass", n)
	}
	if got := b[33*ps]; got != 33 {
		t.Fatalf("page 33 reads %d after evictTwice", got)
	}
}
