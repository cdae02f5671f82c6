package exepages

import (
	"errors"
	"strings"
	"testing"
)

const sampleSmaps = `00400000-0164c000 r-xp 00000000 fd:01 1234                               /opt/mcpgate/bin/mcpgate
Size:              18736 kB
Rss:               13700 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw sd
0164c000-0316b000 r--p 0124c000 fd:01 1234                               /opt/mcpgate/bin/mcpgate
Size:              27772 kB
Anonymous:            12 kB
THPeligible:    0
ProtectionKey:         0
0316b000-031d0000 rw-p 02d6b000 fd:01 1234                               /opt/mcpgate/bin/mcpgate
Anonymous:           100 kB
031d0000-03210000 rw-p 00000000 00:00 0 
c000000000-c004000000 rw-p 00000000 00:00 0 
7f0e1c000000-7f0e1c021000 rw-p 00000000 00:00 0                          [heap]
7f0e2a200000-7f0e2a228000 r--p 00000000 fd:01 5678                       /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd4b3d2000-7ffd4b3f3000 rw-p 00000000 00:00 0                          [stack]
7f0e2a400000-7f0e2a401000 r-xp 00000000 fd:01 99                         /tmp/a dir/old exe (deleted)
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`

func TestParseSmaps(t *testing.T) {
	ms, err := parseSmaps(sampleSmaps)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 10 {
		t.Fatalf("%d mappings, want 10", len(ms))
	}
	exe := mapping{start: 0x400000, end: 0x164c000, perms: "r-xp", inode: 1234, path: "/opt/mcpgate/bin/mcpgate", rss: 13700, anonymousKnown: true}
	if ms[0] != exe {
		t.Errorf("text: %+v, want %+v", ms[0], exe)
	}
	if ms[1].anonymous != 12 || ms[2].anonymous != 100 || ms[3].anonymous != 0 {
		t.Errorf("Anonymous: %d %d %d, want 12 100 0", ms[1].anonymous, ms[2].anonymous, ms[3].anonymous)
	}
	if !ms[0].anonymousKnown || !ms[2].anonymousKnown || ms[3].anonymousKnown {
		t.Errorf("Anonymous known: %v %v %v, want true true false", ms[0].anonymousKnown, ms[2].anonymousKnown, ms[3].anonymousKnown)
	}
	// Evict drops the page cache at the file offset a mapping starts at.
	if ms[1].offset != 0x124c000 || ms[2].offset != 0x2d6b000 {
		t.Errorf("offsets %#x %#x, want 0x124c000 0x2d6b000", ms[1].offset, ms[2].offset)
	}
	// Evict leaves the code cached: the kernel reads it around a fault
	// whatever the advice.
	if !ms[0].code() || ms[1].code() || ms[2].code() {
		t.Errorf("code: text %v rodata %v data %v, want true false false", ms[0].code(), ms[1].code(), ms[2].code())
	}
	if !ms[0].readOnly() || !ms[1].readOnly() || ms[2].readOnly() {
		t.Errorf("readOnly: text %v rodata %v data %v, want true true false", ms[0].readOnly(), ms[1].readOnly(), ms[2].readOnly())
	}
	if ms[3].path != "" || ms[3].inode != 0 {
		t.Errorf("anonymous mapping: %+v", ms[3])
	}
	if ms[5].path != "[heap]" {
		t.Errorf("heap path %q", ms[5].path)
	}
	if ms[8].path != "/tmp/a dir/old exe (deleted)" {
		t.Errorf("path with spaces: %q", ms[8].path)
	}
	if ms[9].readOnly() {
		t.Errorf("--xp is not readable, so not trimmed: %+v", ms[9])
	}
}

// Only the executable's read-only mappings with no private page are
// trimmed: not its relocated read-only data (Anonymous 12 kB), not its
// data, not another file's mappings (libc, an old executable of the same
// name but deleted), not a mapping whose entry has no Anonymous line.
func TestTrimmable(t *testing.T) {
	ms, err := parseSmaps(sampleSmaps + "7f0e2a500000-7f0e2a501000 r--p 00000000 fd:01 1234 /opt/mcpgate/bin/mcpgate\n")
	if err != nil {
		t.Fatal(err)
	}
	got := trimmable(ms, "/opt/mcpgate/bin/mcpgate")
	if len(got) != 1 || got[0].start != 0x400000 || got[0].perms != "r-xp" {
		t.Fatalf("trimmable: %+v, want the text mapping alone", got)
	}
	if got := trimmable(ms, "/tmp/a dir/old exe (deleted)"); len(got) != 0 {
		t.Errorf("a mapping without an Anonymous line: %+v", got)
	}
	if got := trimmable(ms, ""); len(got) != 0 {
		t.Errorf("empty executable path matched %+v", got)
	}
}

func TestParseSmapsRejects(t *testing.T) {
	for _, line := range []string{
		"00400000 r-xp 00000000 fd:01 1234 /x",          // no range
		"00400000-zz r-xp 00000000 fd:01 1234 /x",       // bad end
		"00500000-00400000 r-xp 00000000 fd:01 1234 /x", // end before start
		"00400000-00500000 r-x 00000000 fd:01 1234 /x",  // short perms
		"00400000-00500000 r-xp 0000000g fd:01 1234 /x", // bad offset
		"00400000-00500000 r-xp 00000000 fd:01 12a4 /x", // bad inode
		"00400000-00500000 r-xp 00000000 fd:01",         // truncated
		"Anonymous: many kB",                            // not a number
		"Anonymous: -1 kB",                              // negative
		"Rss: 1 MB",                                     // not kB-only number
		"some text",                                     // neither
	} {
		_, err := parseSmaps("00000000-00001000 r--p 00000000 00:00 0\n" + line + "\n")
		if !errors.Is(err, errMapsLine) || !strings.HasSuffix(err.Error(), " 2") {
			t.Errorf("%q: err %v, want errMapsLine naming line 2", line, err)
		}
	}
	if _, err := parseSmaps("Anonymous: 4 kB\n"); !errors.Is(err, errMapsLine) {
		t.Errorf("Anonymous before any mapping: err %v", err)
	}
}

func FuzzParseSmaps(f *testing.F) {
	f.Add(sampleSmaps)
	f.Add("")
	f.Add("\n\n")
	f.Add("0-1 r--p 0 0:0 0")
	f.Add("0-1 r--p 0 0:0 0\nAnonymous: 18446744073709551615 kB\n")
	f.Add("ffffffffffffffff-ffffffffffffffff rwxs ffffffff 00:00 18446744073709551615   \t x")
	f.Fuzz(func(t *testing.T, text string) {
		ms, err := parseSmaps(text)
		if err != nil {
			if ms != nil || !errors.Is(err, errMapsLine) {
				t.Fatalf("error %v with %d mappings", err, len(ms))
			}
			return
		}
		for _, m := range ms {
			if m.end < m.start || len(m.perms) != 4 || strings.Contains(m.path, "\n") {
				t.Fatalf("accepted %+v", m)
			}
		}
	})
}
