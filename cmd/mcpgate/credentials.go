package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/mcpgate/mcpgate/internal/admin"
)

// credentialsCommand manages the caller's own upstream credentials
// (user_api_key servers) on a running gateway, as the person whose key
// is given: any key, not only an admin one.
type credentialsCommand struct{ stdout, stderr io.Writer }

const credentialsUsage = `Usage:
  mcpgate credentials set SERVER --value V    (--value - reads it from stdin)
  mcpgate credentials list
  mcpgate credentials delete SERVER
Each takes [--url URL | --config FILE] [--admin-key KEY] [--json]; KEY is your own key.
`

func (c *credentialsCommand) Run(ctx context.Context, args []string) error {
	return runSubcommand(ctx, args, credentialsUsage, subcommand{"set", c.set}, subcommand{"list", c.list}, subcommand{"delete", c.delete})
}

func (c *credentialsCommand) set(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("credentials set", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	value := fs.String("value", "", "the credential; - reads it from stdin")
	pos, err := parseArgs(fs, "credentials set SERVER --value V [flags]", args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return &usageError{"want exactly one SERVER\n" + credentialsUsage}
	}
	v := *value
	if v == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, admin.MaxCredentialBytes+2))
		if err != nil {
			return fmt.Errorf("read the credential from stdin: %w", err)
		}
		v = strings.TrimRight(string(b), "\r\n")
	}
	if strings.TrimSpace(v) == "" {
		return &usageError{"--value is required\n" + credentialsUsage}
	}
	cl, err := af.client(c.stderr)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := cl.do(ctx, "PUT", "me/credentials/"+url.PathEscape(pos[0]), admin.CredentialRequest{Value: v}, &raw); err != nil {
		return err
	}
	if af.json {
		return printJSON(c.stdout, raw)
	}
	_, err = fmt.Fprintf(c.stdout, "stored your credential for %q\n", pos[0])
	return err
}

func (c *credentialsCommand) list(ctx context.Context, args []string) error {
	var list admin.CredentialList
	if printed, err := getReport(ctx, "credentials list", args, "me/credentials", c.stdout, &list); printed || err != nil {
		return err
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "SERVER\tUPDATED\tLAST USED")
	for _, e := range list.Credentials {
		last := e.LastUsed
		if last == "" {
			last = "never"
		}
		row(tw, e.Server, e.UpdatedAt, last)
	}
	return tw.Flush()
}

func (c *credentialsCommand) delete(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("credentials delete", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	pos, err := parseArgs(fs, "credentials delete SERVER [flags]", args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return &usageError{"want exactly one SERVER\n" + credentialsUsage}
	}
	cl, err := af.client(c.stderr)
	if err != nil {
		return err
	}
	if err := cl.delete(ctx, "me/credentials/"+url.PathEscape(pos[0])); err != nil {
		return err
	}
	if af.json {
		return nil
	}
	_, err = fmt.Fprintf(c.stdout, "deleted your credential for %q\n", pos[0])
	return err
}
