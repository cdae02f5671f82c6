package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/mcpgate/mcpgate/internal/admin"
)

// connectionsCommand lists and revokes people's connections (connected
// accounts of oauth2_user servers, stored credentials of user_api_key
// ones) on a running gateway, with an admin or the master key.
type connectionsCommand struct{ stdout, stderr io.Writer }

const connectionsUsage = `Usage:
  mcpgate connections list [--server S] [--person P]
  mcpgate connections revoke PERSON [SERVER]    (without SERVER: all of PERSON's)
PERSON is as listed: key:ALIAS for a virtual key, oidc:ISSUER|SUBJECT for a JWT caller.
Each takes [--url URL | --config FILE] [--admin-key KEY] [--json].
`

func (c *connectionsCommand) Run(ctx context.Context, args []string) error {
	return runSubcommand(ctx, args, connectionsUsage, subcommand{"list", c.list}, subcommand{"revoke", c.revoke})
}

// list is GET /admin/v1/connections.
func (c *connectionsCommand) list(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("connections list", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	server := fs.String("server", "", "only this server's connections")
	person := fs.String("person", "", "only this person's connections (key:ALIAS, oidc:ISSUER|SUBJECT)")
	if err := parseNoArgs(fs, "connections list [--server S] [--person P] [flags]", args); err != nil {
		return err
	}
	cl, err := af.client(c.stderr)
	if err != nil {
		return err
	}
	if *server != "" {
		if err := checkServerNames(ctx, cl, "--server", []string{*server}); err != nil {
			return err
		}
	}
	var list admin.ConnectionList
	if printed, err := fetchReport(ctx, cl, af.json, "connections list", withQuery("connections", "server", *server, "person", *person), c.stdout, &list); printed || err != nil {
		return err
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "PERSON\tSERVER\tKIND\tISSUER\tSCOPES\tEXPIRES\tLAST USED")
	for _, e := range list.Connections {
		last := e.LastUsed
		if last == "" {
			last = "never"
		}
		row(tw, e.Person, e.Server, e.Kind, e.Issuer, strings.Join(e.Scopes, " "), e.ExpiresAt, last)
	}
	return tw.Flush()
}

// revoke is DELETE /admin/v1/connections/{person}[/{server}].
func (c *connectionsCommand) revoke(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("connections revoke", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	pos, err := parseArgs(fs, "connections revoke PERSON [SERVER] [flags]", args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 || pos[0] == "" || (len(pos) == 2 && pos[1] == "") {
		return &usageError{"want a PERSON and at most one SERVER\n" + connectionsUsage}
	}
	cl, err := af.client(c.stderr)
	if err != nil {
		return err
	}
	person := pos[0]
	if len(pos) == 2 {
		if err := cl.delete(ctx, "connections/"+url.PathEscape(person)+"/"+url.PathEscape(pos[1])); err != nil {
			return err
		}
		if af.json {
			return nil // 204: nothing to print
		}
		_, err = fmt.Fprintf(c.stdout, "revoked %s's connection to %q\n", termSafe(person), pos[1])
		return err
	}
	var raw json.RawMessage
	if err := cl.do(ctx, "DELETE", "connections/"+url.PathEscape(person), nil, &raw); err != nil {
		return err
	}
	if af.json {
		return printJSON(c.stdout, raw)
	}
	var res admin.RevokedConnections
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("the gateway's answer is not what connections revoke expects: %w", err)
	}
	_, err = fmt.Fprintf(c.stdout, "revoked %d connection(s) of %s: %s\n", len(res.Servers), termSafe(person), termSafe(strings.Join(res.Servers, ", ")))
	return err
}
