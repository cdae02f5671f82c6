package internal_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// layers is the architecture as data, lowest first: a package may import
// packages of its own layer and of the layers below it, never above. Paths
// are relative to the module. A request flows down through them: the wire,
// then upstream, catalog, policy, the session pieces and gateway; admin,
// the console and the authorization server are fronts beside the gateway
// that cmd/mcpgate mounts. The leaves are used by the layers above them and
// import none of those.
//
// Every package directory under internal/ and cmd/ must be in exactly one
// layer, so a new package is placed when it is created: put it in the
// lowest layer that holds everything it imports, and no lower than what it
// is for (a front is never a leaf because it happens to import only leaves).
var layers = []layer{
	{name: "wire", pkgs: []string{
		"internal/httpwire", // HTTP/1.1 byte rules the two head parsers share
		"internal/jsonrpc",  // JSON-RPC framing on raw messages
		"internal/mcpwire",  // MCP vocabulary and both eras' wire rules
		"internal/sockio",   // socket writes without the scheduler's hand-off
	}},
	{name: "leaves", pkgs: []string{
		"internal/audit",
		"internal/callers",
		"internal/cancelctx", // a request's cancellable context, watched rather than registered on
		"internal/clientconf",
		"internal/config",
		"internal/exepages", // the executable's start-up pages
		"internal/fleet",
		"internal/h1server", // the listener's own HTTP/1.1 connection loop
		"internal/guard",
		"internal/metrics",
		"internal/netaddr",
		"internal/oauth",
		"internal/oauth/client",
		"internal/openapi",
		"internal/state",
		"internal/state/internal/delivery",
		"internal/store",
		"internal/toolsearch",
		"internal/tracing",
		"internal/vault",
	}},
	// Only cmd/mcpgate imports these (TestCoreImportsNoBackend).
	{name: "backends", pkgs: []string{
		"internal/state/redis",
		"internal/store/postgres",
		"internal/store/sqlite",
	}},
	{name: "upstream", pkgs: []string{"internal/upstream"}},
	{name: "catalog", pkgs: []string{"internal/catalog"}},
	// Tool integrity: the catalog's reviewer, below the gateway.
	{name: "integrity", pkgs: []string{"internal/integrity"}},
	{name: "policy", pkgs: []string{"internal/policy"}},
	// Pieces of what the gateway once did alone, in packages of their
	// own: below gateway, above upstream and state.
	{name: "sessions and relaying", pkgs: []string{
		"internal/session", // the downstream session table
		"internal/connect", // person-credential flows
		"internal/relay",   // cross-replica relaying
		"internal/tasks",   // the MCP tasks the gateway runs or follows
	}},
	{name: "gateway", pkgs: []string{"internal/gateway"}},
	{name: "fronts", pkgs: []string{
		"internal/admin",
		"internal/console",
		"internal/oauth/authserver",
	}},
	// Only tests import these (TestTestHelpersOnlyInTests), whatever layer
	// they drive.
	{name: "test helpers", pkgs: []string{
		"internal/oauth/authserver/astest",
		"internal/state/redis/redistest",
		"internal/state/statetest",
		"internal/store/postgres/pgtest",
		"internal/store/storetest",
		"internal/tracing/tracetest",
	}},
	{name: "commands", pkgs: []string{
		"cmd/mcpgate",
		"cmd/mcpgate-bench",
		"internal/config/internal/gendocs",
	}},
}

// layer is one row of layers. A planned layer's packages need not exist yet.
type layer struct {
	name    string
	planned bool
	pkgs    []string
}

// neverArrows are imports that must not exist whatever the order says;
// TestLayers checks that the order forbids each of them, so editing the
// table cannot allow one by accident.
var neverArrows = []struct {
	from []string
	to   []string
	rule string
}{
	{
		from: []string{"internal/upstream", "internal/catalog", "internal/policy", "internal/store", "internal/jsonrpc", "internal/mcpwire"},
		to:   []string{"internal/gateway"},
		rule: "upstream, catalog, policy, store and the wire packages never import gateway",
	},
	{
		from: []string{"internal/session", "internal/connect", "internal/relay", "internal/tasks"},
		to:   []string{"internal/gateway"},
		rule: "the session table, the credential flows, fleet relaying and the task table never import gateway",
	},
	{
		from: []string{"internal/gateway"},
		to:   []string{"internal/admin", "internal/console"},
		rule: "gateway never imports admin or console",
	},
}

// backends are the optional backends and the client libraries behind them,
// by import path prefix: cmd/mcpgate wires them, and only it and the
// backend's own tree (its test helpers included) import them.
var backends = []struct{ prefix, tree string }{
	{"internal/store/postgres", "internal/store/postgres"},
	{"internal/store/sqlite", "internal/store/sqlite"},
	{"internal/state/redis", "internal/state/redis"},
	{"github.com/jackc/pgx/", "internal/store/postgres"},
	{"github.com/redis/go-redis/", "internal/state/redis"},
	{"modernc.org/sqlite", "internal/store/sqlite"},
}

// TestLayers fails on a package in no layer, on a layer entry that names
// no package, and on an import of a package from a higher layer.
func TestLayers(t *testing.T) {
	g := loadImports(t)
	layerOf := map[string]int{}
	for i, l := range layers {
		for _, p := range l.pkgs {
			if j, dup := layerOf[p]; dup {
				t.Errorf("%s is in two layers, %q and %q", p, layers[j].name, l.name)
			}
			layerOf[p] = i
			if _, ok := g.pkgs[p]; !ok && !l.planned {
				t.Errorf("layer %q names %s, which has no Go files: remove it from layers in internal/layers_test.go", l.name, p)
			}
		}
	}
	for _, p := range g.sorted() {
		if _, ok := layerOf[p]; !ok {
			t.Errorf("%s is in no layer: add it to layers in internal/layers_test.go, in the lowest layer that holds everything it imports", p)
		}
	}
	for _, a := range neverArrows {
		for _, from := range a.from {
			for _, to := range a.to {
				if layerOf[from] >= layerOf[to] {
					t.Errorf("layers puts %s (%q) at or above %s (%q), which would allow an import that must never exist: %s",
						from, layers[layerOf[from]].name, to, layers[layerOf[to]].name, a.rule)
				}
			}
		}
	}
	for _, p := range g.sorted() {
		from, ok := layerOf[p]
		if !ok {
			continue
		}
		for _, imp := range g.pkgs[p] {
			to, ok := layerOf[imp.path]
			if !ok || to <= from {
				continue
			}
			msg := fmt.Sprintf("%s imports %s: %s is in layer %q, %s in %q above it; a package imports only its own layer and those below (%s)",
				imp.file, imp.path, p, layers[from].name, imp.path, layers[to].name, layerNames())
			for _, a := range neverArrows {
				if slices.Contains(a.from, p) && slices.Contains(a.to, imp.path) {
					msg += "; and an arrow that must never exist: " + a.rule
				}
			}
			t.Error(msg)
		}
	}
}

// TestCoreImportsNoBackend: optional backends are wired by cmd/mcpgate; no
// other package imports one, nor the client library behind it, outside the
// backend's own tree. Tests may (admin's run against PostgreSQL and Redis).
func TestCoreImportsNoBackend(t *testing.T) {
	g := loadImports(t)
	for _, p := range g.sorted() {
		if p == "cmd/mcpgate" {
			continue
		}
		for _, imp := range g.pkgs[p] {
			for _, b := range backends {
				if strings.HasPrefix(imp.path, b.prefix) && p != b.tree && !strings.HasPrefix(p, b.tree+"/") {
					t.Errorf("%s imports %s: only cmd/mcpgate wires a backend, and only %s uses its client library", imp.file, imp.path, b.tree)
				}
			}
		}
	}
}

// TestTestHelpersOnlyInTests: the test helper packages (throwaway servers,
// shared suites) are never compiled into a binary.
func TestTestHelpersOnlyInTests(t *testing.T) {
	g := loadImports(t)
	var helpers []string
	for _, l := range layers {
		if l.name == "test helpers" {
			helpers = l.pkgs
		}
	}
	for _, p := range g.sorted() {
		if slices.Contains(helpers, p) {
			continue
		}
		for _, imp := range g.pkgs[p] {
			if slices.Contains(helpers, imp.path) {
				t.Errorf("%s imports %s: a test helper, for _test.go files only", imp.file, imp.path)
			}
		}
	}
}

// imports maps each package directory (relative to the module) with
// non-test Go files to the imports of those files; paths of the module's
// own packages are made relative too.
type imports struct {
	pkgs map[string][]importLine
}

type importLine struct {
	file string // relative to the module
	path string
}

func (g imports) sorted() []string {
	var ps []string
	for p := range g.pkgs {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

func layerNames() string {
	var names []string
	for _, l := range layers {
		names = append(names, l.name)
	}
	return strings.Join(names, " < ")
}

// loadImports parses the imports of every non-test Go file under internal/
// and cmd/, whatever its build constraints: an import only one platform
// compiles counts too. Tests may import more than their package (backends,
// helpers, the packages above that drive it), so _test.go files are left
// out.
func loadImports(t *testing.T) imports {
	t.Helper()
	module := modulePath(t)
	g := imports{pkgs: map[string][]importLine{}}
	files := 0
	for _, root := range []string{"../internal", "../cmd"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			files++
			rel := strings.TrimPrefix(filepath.ToSlash(path), "../")
			pkg := filepath.ToSlash(filepath.Dir(rel))
			if _, ok := g.pkgs[pkg]; !ok {
				g.pkgs[pkg] = nil // a package that imports nothing is still a package
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if rest, ok := strings.CutPrefix(p, module+"/"); ok {
					p = rest
				}
				g.pkgs[pkg] = append(g.pkgs[pkg], importLine{file: rel, path: p})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 100 || len(g.pkgs) < 20 {
		t.Fatalf("parsed only %d files in %d packages; the walk is broken", files, len(g.pkgs))
	}
	return g
}

func modulePath(t *testing.T) string {
	t.Helper()
	f, err := os.Open("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "module "); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}
