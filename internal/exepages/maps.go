package exepages

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// mapping is one line of /proc/PID/maps: an address range of the process,
// its permissions and what backs it (the first line of its smaps entry).
type mapping struct {
	start, end uint64 // [start, end)
	perms      string // "r-xp": read, write, execute, private or shared
	offset     uint64 // of start in the file
	inode      uint64
	path       string // "" for anonymous memory; may end in " (deleted)"
	// anonymous is smaps' "Anonymous:" in kB: pages of a file mapping
	// the process has its own copy of; known says the line was there.
	// Only parseSmaps sets them.
	anonymous      uint64
	anonymousKnown bool
	rss            uint64 // smaps' "Rss:" in kB (tests read it)
}

// code reports whether m can be executed: the executable's text.
func (m mapping) code() bool { return len(m.perms) == 4 && m.perms[2] == 'x' }

// readOnly reports whether m can be read and not written: the
// executable's text and its read-only data, never its data or bss.
func (m mapping) readOnly() bool {
	return len(m.perms) == 4 && m.perms[0] == 'r' && m.perms[1] == '-'
}

var errMapsLine = errors.New("exepages: malformed smaps line")

// ErrUnsupported is Trim's error outside Linux.
var ErrUnsupported = errors.New("exepages: only on Linux")

// parseMapsLine parses one line of /proc/PID/maps, also each mapping's
// first line in smaps: "start-end perms offset dev inode path", the path
// being the rest of the line, spaces included.
func parseMapsLine(line string) (mapping, error) {
	var m mapping
	var f [5]string
	rest := line
	for i := range f {
		rest = strings.TrimLeft(rest, " ")
		var ok bool
		f[i], rest, ok = strings.Cut(rest, " ")
		if f[i] == "" || (!ok && i < len(f)-1) {
			return m, errMapsLine
		}
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return m, errMapsLine
	}
	var err1, err2, err3 error
	m.start, err1 = strconv.ParseUint(lo, 16, 64)
	m.end, err2 = strconv.ParseUint(hi, 16, 64)
	m.inode, err3 = strconv.ParseUint(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || m.end < m.start || len(f[1]) != 4 {
		return m, errMapsLine
	}
	off, err := strconv.ParseUint(f[2], 16, 64)
	if err != nil {
		return m, errMapsLine
	}
	m.offset = off
	m.perms = f[1]
	m.path = strings.TrimLeft(rest, " ")
	return m, nil
}

// parseSmaps parses the text of /proc/PID/smaps: each mapping's maps line
// followed by "Key: value [kB]" lines, of which it keeps Anonymous and Rss. A
// line that is neither is an error naming its number, as is an Anonymous or
// Rss line that is not a number or comes before any mapping: Trim then drops
// nothing rather than a range misread.
func parseSmaps(text string) ([]mapping, error) {
	var out []mapping
	for n := 1; text != ""; n++ {
		var line string
		line, text, _ = strings.Cut(text, "\n")
		if line == "" {
			continue
		}
		key, val, isField := strings.Cut(line, ":")
		if isField && key != "" && !strings.ContainsAny(key, " -") {
			if key != "Anonymous" && key != "Rss" {
				continue
			}
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(val), "kB")), 10, 64)
			if err != nil || len(out) == 0 {
				return nil, fmt.Errorf("%w %d", errMapsLine, n)
			}
			if key == "Rss" {
				out[len(out)-1].rss = kb
			} else {
				out[len(out)-1].anonymous = kb
				out[len(out)-1].anonymousKnown = true
			}
			continue
		}
		m, err := parseMapsLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w %d", errMapsLine, n)
		}
		out = append(out, m)
	}
	return out, nil
}

// trimmable returns the mappings of ms that Trim may drop: exe's
// read-only ones whose smaps entry says they hold no private page.
func trimmable(ms []mapping, exe string) []mapping {
	var out []mapping
	for _, m := range ms {
		if m.path == exe && m.readOnly() && m.anonymousKnown && m.anonymous == 0 {
			out = append(out, m)
		}
	}
	return out
}
