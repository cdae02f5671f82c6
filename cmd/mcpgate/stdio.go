package main

import (
	"context"
	"flag"
	"io"

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
	var rf runFlags
	rf.register(fs)
	cfg, log, err := rf.load(fs, args, c.stderr)
	if err != nil {
		return err
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
