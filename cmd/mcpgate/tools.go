package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// toolsCommand lists the merged catalog of a running gateway as a key
// would see it, and settles tool integrity's reviews (integrity.go).
type toolsCommand struct{ stdout, stderr io.Writer }

const toolsUsage = `Usage:
  mcpgate tools list [--as ALIAS] [--route /mcp] [--url URL | --config FILE] [--admin-key KEY] [--json]
  mcpgate tools changes [--server S] [--diff] [--json]   definitions awaiting review (tool integrity)
  mcpgate tools approve SERVER [TOOL...]                  approve them: all of the server's, or those named
  mcpgate tools reject SERVER [TOOL...]                   reject them: they stay held
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
	return runSubcommand(ctx, args, toolsUsage, subcommand{"list", c.list},
		subcommand{"changes", c.changes}, subcommand{"approve", c.approve}, subcommand{"reject", c.reject})
}

func (c *toolsCommand) list(ctx context.Context, args []string) error {
	args = append([]string{"list"}, args...)
	fs := flag.NewFlagSet("tools list", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	as := fs.String("as", "", "list the tools the key ALIAS sees (default: every tool, as the master key)")
	route := fs.String("route", "", "the route to list, e.g. /mcp or /toolset/NAME/mcp (default /mcp)")
	if err := parseNoArgs(fs, "tools list [flags]", args[1:]); err != nil {
		return err
	}
	cl, err := af.client(c.stderr)
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

// integrityChange is one entry of GET /admin/v1/integrity.
type integrityChange struct {
	Server   string `json:"server"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Status   string `json:"status"`
	Held     bool   `json:"held"`
	Diff     string `json:"diff"`
	Findings []struct {
		Rule     string `json:"rule"`
		Severity string `json:"severity"`
		Path     string `json:"path"`
		Excerpt  string `json:"excerpt"`
	} `json:"findings"`
}

// changes lists the definitions awaiting review; --diff prints each one's
// diff and findings under its row.
func (c *toolsCommand) changes(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tools changes", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	server := fs.String("server", "", "only this server's")
	diff := fs.Bool("diff", false, "print each definition's diff and findings")
	if err := parseNoArgs(fs, "tools changes [flags]", args); err != nil {
		return err
	}
	cl, err := af.client(c.stderr)
	if err != nil {
		return err
	}
	var list struct {
		Changes []integrityChange `json:"changes"`
	}
	if printed, err := fetchReport(ctx, cl, af.json, "tools changes", withQuery("integrity", "server", *server), c.stdout, &list); printed || err != nil {
		return err
	}
	if len(list.Changes) == 0 {
		fmt.Fprintln(c.stdout, "nothing awaits review")
		return nil
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "SERVER\tKIND\tNAME\tSTATUS\tSERVED\tFINDINGS")
	for _, ch := range list.Changes {
		served := "yes"
		if ch.Held {
			served = "held"
		}
		var rules []string
		for _, f := range ch.Findings {
			rules = append(rules, f.Rule+"("+f.Severity+")")
		}
		row(tw, ch.Server, ch.Kind, ch.Name, ch.Status, served, strings.Join(rules, ",")+dashIfEmpty(len(rules)))
	}
	if err := tw.Flush(); err != nil || !*diff {
		return err
	}
	for _, ch := range list.Changes {
		fmt.Fprintf(c.stdout, "\n%s %s/%s (%s):\n", ch.Kind, cell(ch.Server), cell(ch.Name), ch.Status)
		for _, l := range strings.Split(strings.TrimSuffix(ch.Diff, "\n"), "\n") {
			fmt.Fprintln(c.stdout, cell(l))
		}
		for _, f := range ch.Findings {
			fmt.Fprintf(c.stdout, "  finding %s (%s) at %s: %s\n", f.Rule, f.Severity, cell(f.Path), cell(f.Excerpt))
		}
	}
	return nil
}

func dashIfEmpty(n int) string {
	if n == 0 {
		return "-"
	}
	return ""
}

func (c *toolsCommand) approve(ctx context.Context, args []string) error {
	return c.settle(ctx, "approve", args)
}

func (c *toolsCommand) reject(ctx context.Context, args []string) error {
	return c.settle(ctx, "reject", args)
}

// settle posts an approval or rejection of SERVER's definitions (those
// named after it, else all).
func (c *toolsCommand) settle(ctx context.Context, verb string, args []string) error {
	fs := flag.NewFlagSet("tools "+verb, flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	pos, err := parseArgs(fs, "tools "+verb+" SERVER [TOOL...] [flags]", args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return &usageError{"want the server whose definitions to " + verb + "\n" + toolsUsage}
	}
	cl, err := af.client(c.stderr)
	if err != nil {
		return err
	}
	body := map[string]any{}
	if len(pos) > 1 {
		body["tools"] = pos[1:]
	}
	var out struct {
		Server  string   `json:"server"`
		Settled []string `json:"settled"`
	}
	if err := cl.post(ctx, "integrity/"+url.PathEscape(pos[0])+"/"+verb, body, &out); err != nil {
		return err
	}
	if af.json {
		b, _ := json.Marshal(out)
		return printJSON(c.stdout, b)
	}
	past := map[string]string{"approve": "approved", "reject": "rejected"}[verb]
	fmt.Fprintf(c.stdout, "%s %d definition(s) of %s: %s\n", past, len(out.Settled), cell(out.Server), cell(strings.Join(out.Settled, ", ")))
	return nil
}
