package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// fakeCgroup writes files under a temporary cgroup root: name -> contents.
func fakeCgroup(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, data := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestPlanGC(t *testing.T) {
	const gib = 1 << 30
	v1Unlimited := "9223372036854771712\n"
	for _, tc := range []struct {
		name   string
		env    map[string]string
		self   string            // /proc/self/cgroup
		files  map[string]string // under the cgroup root
		want   gcPlan
		noSelf bool // no /proc/self/cgroup at all
	}{
		{
			name:  "v2 container",
			self:  "0::/\n",
			files: map[string]string{"memory.max": "1073741824\n"},
			want:  gcPlan{GCPercent: defaultGCPercent, MemoryLimit: gib * 9 / 10, CgroupLimit: gib},
		},
		{
			name:  "v2 no limit",
			self:  "0::/\n",
			files: map[string]string{"memory.max": "max\n"},
			want:  gcPlan{GCPercent: defaultGCPercent},
		},
		{
			name: "v2 nested: the parent's lower limit holds",
			self: "0::/system.slice/mcpgate.service\n",
			files: map[string]string{
				"system.slice/mcpgate.service/memory.max": "max\n",
				"system.slice/memory.max":                 "536870912\n",
				"memory.max":                              "1073741824\n",
			},
			want: gcPlan{GCPercent: defaultGCPercent, MemoryLimit: 536870912 * 9 / 10, CgroupLimit: 536870912},
		},
		{
			name: "v2 host path not mounted: the root's own file",
			self: "0::/kubepods/pod1234/abcd\n",
			files: map[string]string{
				"memory.max": "268435456",
			},
			want: gcPlan{GCPercent: defaultGCPercent, MemoryLimit: 268435456 * 9 / 10, CgroupLimit: 268435456},
		},
		{
			name: "v1 memory controller",
			self: "12:pids:/\n4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n",
			files: map[string]string{
				"memory/docker/abc/memory.limit_in_bytes": "2147483648\n",
				"memory/memory.limit_in_bytes":            v1Unlimited,
			},
			want: gcPlan{GCPercent: defaultGCPercent, MemoryLimit: 2 * gib * 9 / 10, CgroupLimit: 2 * gib},
		},
		{
			name:  "v1 unlimited (this kind of machine)",
			self:  "4:memory:/process_api/529995e5\n0::/\n",
			files: map[string]string{"memory/memory.limit_in_bytes": v1Unlimited},
			want:  gcPlan{GCPercent: defaultGCPercent},
		},
		{
			name:  "v1 controller listed with others",
			self:  "5:cpu,memory:/x\n",
			files: map[string]string{"memory/x/memory.limit_in_bytes": "104857600"},
			want:  gcPlan{GCPercent: defaultGCPercent, MemoryLimit: 104857600 * 9 / 10, CgroupLimit: 104857600},
		},
		{
			name:  "a path climbing out of the root stays in it",
			self:  "0::/../../etc\n",
			files: map[string]string{"memory.max": "1073741824"},
			want:  gcPlan{GCPercent: defaultGCPercent, MemoryLimit: gib * 9 / 10, CgroupLimit: gib},
		},
		{
			name:  "garbage limit",
			self:  "0::/\n",
			files: map[string]string{"memory.max": "lots\n"},
			want:  gcPlan{GCPercent: defaultGCPercent},
		},
		{
			name:  "negative limit",
			self:  "0::/\n",
			files: map[string]string{"memory.max": "-5\n"},
			want:  gcPlan{GCPercent: defaultGCPercent},
		},
		{
			name:  "malformed /proc/self/cgroup",
			self:  "nonsense\n",
			files: map[string]string{"memory.max": "1073741824"},
			want:  gcPlan{GCPercent: defaultGCPercent},
		},
		{
			name:   "no /proc/self/cgroup (not Linux)",
			noSelf: true,
			want:   gcPlan{GCPercent: defaultGCPercent},
		},
		{
			name:  "GOGC set: the operator's",
			env:   map[string]string{"GOGC": "100"},
			self:  "0::/\n",
			files: map[string]string{"memory.max": "1073741824"},
			want:  gcPlan{},
		},
		{
			name:  "GOMEMLIMIT set: the operator's, GOGC untouched too",
			env:   map[string]string{"GOMEMLIMIT": "300MiB"},
			self:  "0::/\n",
			files: map[string]string{"memory.max": "1073741824"},
			want:  gcPlan{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeCgroup(t, tc.files)
			self := filepath.Join(t.TempDir(), "cgroup")
			if !tc.noSelf {
				if err := os.WriteFile(self, []byte(tc.self), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := planGC(func(k string) string { return tc.env[k] }, self, root)
			if got != tc.want {
				t.Errorf("planGC = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// apply sets what the plan says in the runtime, and leaves the rest.
func TestGCPlanApply(t *testing.T) {
	oldPct := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(oldPct)
		debug.SetMemoryLimit(oldLimit)
	})
	gcPlan{GCPercent: 200, MemoryLimit: 123 << 20}.apply()
	if got := debug.SetGCPercent(-1); got != 200 {
		t.Errorf("GC percent %d, want 200", got)
	}
	debug.SetGCPercent(100)
	if got := debug.SetMemoryLimit(-1); got != 123<<20 {
		t.Errorf("memory limit %d, want %d", got, 123<<20)
	}
	debug.SetMemoryLimit(1 << 40)
	gcPlan{}.apply()
	if got := debug.SetGCPercent(-1); got != 100 {
		t.Errorf("an empty plan changed the GC percent to %d", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("an empty plan changed the memory limit to %d", got)
	}
}

// The machine's own files: whatever they say, the plan is sane.
func TestPlanGCThisMachine(t *testing.T) {
	p := planGC(func(string) string { return "" }, procSelfCgroup, cgroupRoot)
	if p.GCPercent != defaultGCPercent || p.MemoryLimit < 0 || p.MemoryLimit > p.CgroupLimit {
		t.Errorf("plan %+v", p)
	}
	t.Logf("this machine: %+v", p)
}

func FuzzParseProcCgroup(f *testing.F) {
	for _, s := range []string{
		"0::/\n",
		"0::/system.slice/mcpgate.service\n",
		"12:pids:/\n4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n",
		"nonsense", "4:memory:relative\n", ":::\n", "0::/../..\n", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v2, v1, ok := parseProcCgroup(data)
		if !ok && (v2 != "" || v1 != "") {
			t.Fatalf("not ok, yet paths %q %q", v2, v1)
		}
		for _, p := range []string{v2, v1} {
			if p == "" {
				continue
			}
			for _, dir := range ancestors("/root", p) {
				if dir != "/root" && !strings.HasPrefix(dir, "/root/") {
					t.Fatalf("%q: ancestor %q outside the root", p, dir)
				}
			}
		}
	})
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"max\n", "1073741824\n", "9223372036854771712", "-1", "", "1e9", " 42 "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseLimit(data)
		if v < 0 || v >= unlimited || (err != nil && v != 0) {
			t.Fatalf("parseLimit(%q) = %d, %v", data, v, err)
		}
	})
}
