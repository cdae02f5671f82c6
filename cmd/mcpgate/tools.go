package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// toolsCommand lists the merged catalog of a running gateway as a key
// would see it.
type toolsCommand struct{ stdout io.Writer }

const toolsUsage = `Usage:
  mcpgate tools list [--as ALIAS] [--route /mcp] [--url URL | --config FILE] [--admin-key KEY] [--json]
`

// toolView is one tool of GET /admin/v1/tools.
type toolView struct {
	Name         string `json:"name"`
	Server       string `json:"server"`
	UpstreamName string `json:"upstream_name"`
	Description  string `json:"description"`
}

// descriptionWidth is how much of a tool's description the table shows.
const descriptionWidth = 60

func (c *toolsCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "list" {
		switch {
		case len(args) == 0:
			return &usageError{"want a subcommand: list\n" + toolsUsage}
		case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
			return &helpError{strings.TrimRight(toolsUsage, "\n")}
		}
		return &usageError{fmt.Sprintf("unknown subcommand %q%s\n%s", args[0], didYouMean(args[0], []string{"list"}), toolsUsage)}
	}
	fs := flag.NewFlagSet("tools list", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	as := fs.String("as", "", "list the tools the key ALIAS sees (default: every tool, as the master key)")
	route := fs.String("route", "", "the route to list, e.g. /mcp or /toolset/NAME/mcp (default /mcp)")
	if err := parseNoArgs(fs, "tools list [flags]", args[1:]); err != nil {
		return err
	}
	cl, err := af.client()
	if err != nil {
		return err
	}
	var list struct {
		Tools []toolView `json:"tools"`
	}
	if printed, err := fetchReport(ctx, cl, af.json, "tools list", withQuery("tools", "key", *as, "route", *route), c.stdout, &list); printed || err != nil {
		return err
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tSERVER\tDESCRIPTION")
	for _, t := range list.Tools {
		row(tw, t.Name, t.Server, truncate(cell(t.Description), descriptionWidth))
	}
	return tw.Flush()
}
