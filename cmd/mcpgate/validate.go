package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/mcpgate/mcpgate/internal/config"
)

// validateCommand loads and validates a config and reports; it serves
// nothing and starts no upstream.
type validateCommand struct{ stdout io.Writer }

func (c *validateCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := fs.String("config", "", "config file (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return &usageError{"--config is required"}
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return fmt.Errorf("invalid config:\n%w", err)
	}
	fmt.Fprintf(c.stdout, "%s: ok (%d servers", *path, len(cfg.Servers))
	for _, name := range cfg.ServerNames() {
		fmt.Fprintf(c.stdout, "; %s: %s", name, cfg.Servers[name].Transport)
	}
	fmt.Fprintln(c.stdout, ")")
	return nil
}
