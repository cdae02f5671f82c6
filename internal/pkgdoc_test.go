// Package internal_test enforces that every package says what it owns
// (STYLE.md 17).
package internal_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEveryPackageHasADocComment(t *testing.T) {
	dirs := map[string]bool{}
	for _, root := range []string{".", "../cmd", "../examples", "../bench"} {
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				dirs[filepath.Dir(path)] = true
			}
			return nil
		})
	}
	if len(dirs) < 8 {
		t.Fatalf("found only %d package directories; the walk is broken", len(dirs))
	}
	for dir := range dirs {
		entries, _ := os.ReadDir(dir)
		documented := false
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if f.Doc != nil {
				text := f.Doc.Text()
				if strings.HasPrefix(text, "Package "+f.Name.Name+" ") || (f.Name.Name == "main" && strings.HasPrefix(text, "Command ")) {
					documented = true
				}
			}
		}
		if !documented {
			t.Errorf("%s: no package doc comment (\"Package x ...\" or, for a command, \"Command x ...\")", dir)
		}
	}
}
