package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/admin"
)

// keysCommand manages the virtual keys of a running gateway.
type keysCommand struct{ stdout, stderr io.Writer }

const keysUsage = `Usage:
  mcpgate keys create --alias A [--user U] [--team T] [--servers a,b | --no-servers]
                      [--tools SERVER=t1,t2]... [--deny-tools SERVER=t1]... [--toolsets x,y]
                      [--access-groups g] [--cidrs 10.0.0.0/8,...] [--rate-limit N]
                      [--expires 30d|RFC3339] [--admin] [--no-mcp]
  mcpgate keys list
  mcpgate keys revoke ALIAS
Each takes [--url URL | --config FILE] [--admin-key KEY] [--json].
`

func (c *keysCommand) Run(ctx context.Context, args []string) error {
	return runSubcommand(ctx, args, keysUsage, subcommand{"create", c.create}, subcommand{"list", c.list}, subcommand{"revoke", c.revoke})
}

// toolsFlag is a repeatable SERVER=t1,t2 flag; repeating a server adds
// to its tools.
type toolsFlag map[string][]string

func (t toolsFlag) String() string {
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(t)) {
		parts = append(parts, s+"="+strings.Join(t[s], ","))
	}
	return strings.Join(parts, " ")
}

func (t toolsFlag) Set(v string) error {
	server, list, ok := strings.Cut(v, "=")
	server = strings.TrimSpace(server)
	if !ok || server == "" {
		return fmt.Errorf("want SERVER=tool1,tool2, got %q", v)
	}
	var tools []string
	for _, tool := range strings.Split(list, ",") {
		if tool = strings.TrimSpace(tool); tool != "" {
			tools = append(tools, tool)
		}
	}
	if len(tools) == 0 {
		return fmt.Errorf("%s: want at least one tool", server)
	}
	t[server] = append(t[server], tools...)
	return nil
}

// create is POST /admin/v1/keys with only the attributes given: an
// omitted --servers means every server, --no-servers none.
func (c *keysCommand) create(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	alias := fs.String("alias", "", "the key's alias (required)")
	user := fs.String("user", "", "the user the key belongs to")
	team := fs.String("team", "", "the team the key belongs to")
	var servers, toolsets, groups, cidrs listFlag
	fs.Var(&servers, "servers", "comma-separated servers the key may use (default: every server)")
	noServers := fs.Bool("no-servers", false, "the key may use no server directly (only its toolsets and access groups)")
	tools, deny := toolsFlag{}, toolsFlag{}
	fs.Var(tools, "tools", "SERVER=t1,t2: the only tools of SERVER the key may call (repeatable)")
	fs.Var(deny, "deny-tools", "SERVER=t1,t2: tools of SERVER the key may not call (repeatable)")
	fs.Var(&toolsets, "toolsets", "comma-separated toolsets the key may use")
	fs.Var(&groups, "access-groups", "comma-separated access groups the key belongs to")
	fs.Var(&cidrs, "cidrs", "comma-separated addresses or CIDRs the key may be used from")
	rate := fs.Int("rate-limit", 0, "requests per minute (0: no limit)")
	expires := fs.String("expires", "", "expiry: a duration from now (30d, 2w, 12h) or an RFC 3339 time (2026-12-31T23:59:59Z)")
	isAdmin := fs.Bool("admin", false, "the key may use the admin API")
	noMCP := fs.Bool("no-mcp", false, "the key may not use MCP (admin only)")
	if err := parseNoArgs(fs, "keys create --alias A [flags]", args); err != nil {
		return err
	}
	if *alias == "" {
		return &usageError{"--alias is required\n" + keysUsage}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	in := admin.KeyAttributes{Alias: alias}
	switch {
	case servers.set && *noServers:
		return &usageError{"--servers and --no-servers exclude each other"}
	case servers.set && len(servers.vals) == 0:
		return &usageError{"--servers: want at least one server (--no-servers for none)"}
	case servers.set:
		in.Servers = &servers.vals
	case *noServers:
		in.Servers = &[]string{}
	}
	if set["user"] {
		in.User = user
	}
	if set["team"] {
		in.Team = team
	}
	if len(tools) > 0 {
		in.Tools = admin.Value(map[string][]string(tools))
	}
	if len(deny) > 0 {
		in.DenyTools = admin.Value(map[string][]string(deny))
	}
	for _, l := range []struct {
		f   *listFlag
		dst *admin.Clearable[[]string]
	}{{&toolsets, &in.Toolsets}, {&groups, &in.AccessGroups}, {&cidrs, &in.AllowedCIDRs}} {
		if l.f.set {
			*l.dst = admin.Value(l.f.vals)
		}
	}
	if set["rate-limit"] {
		if *rate < 0 {
			return &usageError{"--rate-limit: must be >= 0"}
		}
		in.RateLimitRPM = rate
	}
	if *expires != "" {
		t, err := parseTimeArg("expires", *expires, time.Now(), true)
		if err != nil {
			return err
		}
		in.Expires = admin.Value(t)
	}
	if set["admin"] {
		in.Admin = isAdmin
	}
	if set["no-mcp"] {
		in.NoMCP = noMCP
	}
	cl, err := af.client(c.stderr)
	if err != nil {
		return err
	}
	if err := checkServerNames(ctx, cl, "--servers", servers.vals); err != nil {
		return err
	}
	for flag, t := range map[string]toolsFlag{"--tools": tools, "--deny-tools": deny} {
		if err := checkToolNames(ctx, cl, flag, t); err != nil {
			return err
		}
	}
	var raw json.RawMessage
	if err := cl.post(ctx, "keys", in, &raw); err != nil {
		return err
	}
	if af.json {
		return printJSON(c.stdout, raw)
	}
	var created admin.CreatedKey
	if err := json.Unmarshal(raw, &created); err != nil || created.Key == "" {
		return fmt.Errorf("the gateway's answer carries no key: %s", termSafe(truncate(string(raw), 200)))
	}
	if _, err := fmt.Fprintln(c.stdout, created.Key); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "created key %q; this is the only time its secret is shown: store it now\n", created.Alias)
	return nil
}

// list is GET /admin/v1/keys.
func (c *keysCommand) list(ctx context.Context, args []string) error {
	var list struct {
		Keys []admin.KeyView `json:"keys"`
	}
	if printed, err := getReport(ctx, "keys list", args, "keys", c.stdout, &list); printed || err != nil {
		return err
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "ALIAS\tPREFIX\tUSER\tTEAM\tSERVERS\tSOURCE\tLAST USED")
	for _, k := range list.Keys {
		lastUsed := k.LastUsedAt
		if lastUsed == "" {
			lastUsed = "never"
		}
		row(tw, k.Alias, k.KeyPrefix, k.User, k.Team, serversCell(k.Servers), k.Source, lastUsed)
	}
	return tw.Flush()
}

// serversCell shows a key's servers: null is every server, [] none.
func serversCell(s []string) string {
	switch {
	case s == nil:
		return "all"
	case len(s) == 0:
		return "none"
	}
	return strings.Join(s, ",")
}

// revoke is DELETE /admin/v1/keys/{alias}.
func (c *keysCommand) revoke(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("keys revoke", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	pos, err := parseArgs(fs, "keys revoke ALIAS [flags]", args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return &usageError{"want exactly one key ALIAS\n" + keysUsage}
	}
	cl, err := af.client(c.stderr)
	if err != nil {
		return err
	}
	if err := cl.delete(ctx, "keys/"+url.PathEscape(pos[0])); err != nil {
		return err
	}
	if af.json {
		// The API answers 204 with no body: nothing to print.
		return nil
	}
	_, err = fmt.Fprintf(c.stdout, "revoked key %q\n", pos[0])
	return err
}
