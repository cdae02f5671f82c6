package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

type versionCommand struct{ stdout io.Writer }

func (c *versionCommand) Run(_ context.Context, _ []string) error {
	fmt.Fprintf(c.stdout, "mcpgate %s (%s, %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
