// Command gendocs writes the generated config reference and JSON Schema
// (docs/config.md, docs/config.schema.json) into the directory given as
// its argument. go generate ./internal/config runs it; a test in
// internal/config fails when the committed files are stale.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mcpgate/mcpgate/internal/config"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendocs DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	for name, data := range map[string][]byte{
		"config.md":          config.Reference(),
		"config.schema.json": config.JSONSchema(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
