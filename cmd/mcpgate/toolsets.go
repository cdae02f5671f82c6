package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// toolsetsCommand lists the toolsets of a running gateway.
type toolsetsCommand struct{ stdout io.Writer }

const toolsetsUsage = `Usage:
  mcpgate toolsets list [--url URL | --config FILE] [--admin-key KEY] [--json]
`

// toolsetView is one toolset of GET /admin/v1/toolsets.
type toolsetView struct {
	Name    string              `json:"name"`
	Servers map[string][]string `json:"servers"`
}

func (c *toolsetsCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "list" {
		switch {
		case len(args) == 0:
			return &usageError{"want a subcommand: list\n" + toolsetsUsage}
		case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
			return &helpError{strings.TrimRight(toolsetsUsage, "\n")}
		}
		return &usageError{fmt.Sprintf("unknown subcommand %q%s\n%s", args[0], didYouMean(args[0], []string{"list"}), toolsetsUsage)}
	}
	var list struct {
		Toolsets []toolsetView `json:"toolsets"`
	}
	if printed, err := getReport(ctx, "toolsets list", args[1:], "toolsets", c.stdout, &list); printed || err != nil {
		return err
	}
	// One row per (toolset, server), so that each row can be grepped.
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tSERVER\tTOOLS")
	for _, ts := range list.Toolsets {
		if len(ts.Servers) == 0 {
			row(tw, ts.Name, "", "")
		}
		for _, s := range slices.Sorted(maps.Keys(ts.Servers)) {
			row(tw, ts.Name, s, strings.Join(ts.Servers[s], ","))
		}
	}
	return tw.Flush()
}
