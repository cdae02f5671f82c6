package exepages

import (
	"os"
	"testing"
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
	size, err := Trim()
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
	if _, err := Trim(); err != nil {
		t.Fatal(err)
	}
	if _, err := parseSmaps(sampleSmaps); err != nil {
		t.Fatal(err)
	}
}
