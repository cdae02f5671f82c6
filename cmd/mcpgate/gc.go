package main

// The Go runtime's memory settings, chosen for the machine the gateway
// runs on: a memory limit that follows the container's (cgroup) limit,
// and Go's own GC target unless the operator chose one.

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultGCPercent is the GC target when neither GOGC nor GOMEMLIMIT is
// set: Go's own default. It was 400, then 200 (fewer collections of a
// small live heap with much per-call garbage, for a peak heap of three
// times the live one); at 100 the heap peaks at twice the live one, which
// keeps the gateway's peak RSS under c=64 within twice a bare reverse
// proxy's, for several microseconds more GC work per call (a tenth of a
// call's cost at most). docs/benchmarks.md "Where the peak RSS goes".
const defaultGCPercent = 100

// memoryLimitShare is the part of the container's memory limit the Go
// runtime may use before its GC works harder than GOGC says. The rest is
// for what the cgroup charges and the runtime does not manage: SQLite's
// page caches (the driver allocates them outside the Go heap), the
// kernel's socket buffers and the page cache of the files written.
const memoryLimitShare = 0.9

// Where the kernel says which cgroup the process is in, and where the
// cgroup filesystems are mounted.
const (
	procSelfCgroup = "/proc/self/cgroup"
	cgroupRoot     = "/sys/fs/cgroup"
)

// gcPlan is what tuneGC sets; zero fields are left as they are.
type gcPlan struct {
	GCPercent   int   // debug.SetGCPercent
	MemoryLimit int64 // debug.SetMemoryLimit, bytes
	// CgroupLimit is the container's memory limit MemoryLimit comes
	// from; 0: none found.
	CgroupLimit int64
}

// planGC decides the GC settings: nothing when the operator set GOGC or
// GOMEMLIMIT (theirs rule, whole: mcpgate adds nothing to them); else
// defaultGCPercent, and a memory limit of memoryLimitShare of the cgroup's
// memory limit when there is one (cgroup v2 memory.max, or v1
// memory.limit_in_bytes, the lowest on the way from the process's cgroup
// to the root).
func planGC(getenv func(string) string, selfCgroup, root string) gcPlan {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return gcPlan{}
	}
	p := gcPlan{GCPercent: defaultGCPercent}
	if data, err := os.ReadFile(selfCgroup); err == nil {
		p.CgroupLimit = cgroupMemoryLimit(data, root)
	}
	if p.CgroupLimit > 0 {
		p.MemoryLimit = int64(float64(p.CgroupLimit) * memoryLimitShare)
	}
	return p
}

// apply sets p's settings in the runtime.
func (p gcPlan) apply() {
	if p.GCPercent > 0 {
		debug.SetGCPercent(p.GCPercent)
	}
	if p.MemoryLimit > 0 {
		debug.SetMemoryLimit(p.MemoryLimit)
	}
}

// cgroupMemoryLimit returns the memory limit, in bytes, of the cgroup
// selfCgroup (the contents of /proc/self/cgroup) names, read under root;
// 0 when there is none or it cannot be read. The limit that holds is the
// lowest of the cgroup's and its ancestors'. Inside a container the
// cgroup's path may be the host's, not mounted in the container, whose
// root is then its own cgroup: root's own files are read too.
func cgroupMemoryLimit(selfCgroup []byte, root string) int64 {
	v2, v1, ok := parseProcCgroup(selfCgroup)
	if !ok {
		return 0
	}
	var limit int64
	lower := func(v int64) {
		if v > 0 && (limit == 0 || v < limit) {
			limit = v
		}
	}
	if v2 != "" {
		for _, dir := range ancestors(root, v2) {
			lower(readLimit(path.Join(dir, "memory.max")))
		}
	}
	if v1 != "" {
		for _, dir := range ancestors(path.Join(root, "memory"), v1) {
			lower(readLimit(path.Join(dir, "memory.limit_in_bytes")))
		}
	}
	return limit
}

// parseProcCgroup reads the lines of /proc/self/cgroup,
// "hierarchy-id:controllers:path": the cgroup v2 path (hierarchy 0, no
// controllers) and the v1 memory controller's path; "" for one absent.
// ok is false when a line is malformed or a path is not absolute.
func parseProcCgroup(data []byte) (v2, v1 string, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		id, rest, found := strings.Cut(line, ":")
		if !found {
			return "", "", false
		}
		ctrls, p, found := strings.Cut(rest, ":")
		if !found || !strings.HasPrefix(p, "/") {
			return "", "", false
		}
		if _, err := strconv.ParseUint(id, 10, 32); err != nil {
			return "", "", false
		}
		switch {
		case id == "0" && ctrls == "":
			v2 = p
		case hasController(ctrls, "memory"):
			v1 = p
		}
	}
	if sc.Err() != nil {
		return "", "", false
	}
	return v2, v1, true
}

func hasController(ctrls, name string) bool {
	for c := range strings.SplitSeq(ctrls, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// ancestors returns base/p and its parent directories up to base, which
// is last. p is cleaned first: "..", "." and repeated slashes cannot leave
// base.
func ancestors(base, p string) []string {
	p = path.Clean("/" + p)
	var out []string
	for {
		out = append(out, path.Join(base, p))
		if p == "/" {
			return out
		}
		p = path.Dir(p)
	}
}

// unlimited: a cgroup v1 limit at or above it means none (v1 writes
// "no limit" as the largest page-aligned int64, 9223372036854771712).
const unlimited = 1 << 62

// readLimit reads a memory.max or memory.limit_in_bytes file: its limit
// in bytes, or 0 for none ("max", unlimited, absent, unreadable).
func readLimit(file string) int64 {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	v, err := parseLimit(data)
	if err != nil {
		return 0
	}
	return v
}

var errBadLimit = errors.New("not a memory limit")

// parseLimit parses a memory limit file's contents: a decimal number of
// bytes, or "max"; 0 for no limit.
func parseLimit(data []byte) (int64, error) {
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, errBadLimit
	}
	if v >= unlimited {
		return 0, nil
	}
	return v, nil
}
