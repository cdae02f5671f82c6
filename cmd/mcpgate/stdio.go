package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
)

// stdioCommand serves the merged view over stdin/stdout, for clients that
// can only launch a local server.
type stdioCommand struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func (c *stdioCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("stdio", flag.ContinueOnError)
	path := fs.String("config", "", "config file (required)")
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return &usageError{"--config is required"}
	}
	log, err := lf.logger(c.stderr)
	if err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return fmt.Errorf("invalid config:\n%w", err)
	}
	g := gateway.New(gateway.Options{Config: cfg, Logger: log, Version: version()})
	g.Start(ctx)
	err = g.ServeStdio(ctx, c.stdin, c.stdout)
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	g.Shutdown()
	_ = g.Close(dctx)
	return err
}
