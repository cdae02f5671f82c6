package internal_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCoreImportsNoBackend: optional backends are wired by cmd/mcpgate
// (STYLE.md 4, DESIGN's package map); no package under internal imports
// one, nor the client library behind it, outside the backend's own tree
// and tests.
func TestCoreImportsNoBackend(t *testing.T) {
	backends := map[string]string{ // import path -> the tree allowed to import it
		"github.com/mcpgate/mcpgate/internal/store/sqlite": "store/sqlite",
		"github.com/mcpgate/mcpgate/internal/state/redis":  "state/redis",
		"github.com/redis/go-redis/v9":                     "state/redis",
	}
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
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
		dir := filepath.ToSlash(filepath.Dir(path))
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			tree, ok := backends[p]
			if ok && dir != tree && !strings.HasPrefix(dir, tree+"/") {
				t.Errorf("%s imports %s: only cmd/mcpgate wires a backend", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("walked only %d files; the walk is broken", files)
	}
}
