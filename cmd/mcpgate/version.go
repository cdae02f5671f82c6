package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
)

type versionCommand struct{ stdout io.Writer }

func (c *versionCommand) Run(_ context.Context, args []string) error {
	if err := parseNoArgs(flag.NewFlagSet("version", flag.ContinueOnError), "version (also mcpgate --version)", args); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "mcpgate %s (%s, %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
