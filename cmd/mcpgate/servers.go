package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// serversCommand inspects upstream servers: `status` asks a running
// gateway for their health, `preview` prints the request the gateway
// would send to one of them, from the config alone.
type serversCommand struct{ stdout io.Writer }

const serversUsage = `Usage:
  mcpgate servers status  [--url URL | --config FILE] [--admin-key KEY] [--json]
  mcpgate servers list    (the same as status)
  mcpgate servers preview --config FILE NAME
`

func (c *serversCommand) Run(ctx context.Context, args []string) error {
	preview := func(_ context.Context, args []string) error { return c.preview(args) }
	return runSubcommand(ctx, args, serversUsage, subcommand{"status", c.status}, subcommand{"list", c.status}, subcommand{"preview", preview})
}

// status prints GET /admin/v1/servers of a running gateway.
func (c *serversCommand) status(ctx context.Context, args []string) error {
	var rep gateway.ServersReport
	if printed, err := getReport(ctx, "servers status", args, "servers", c.stdout, &rep); printed || err != nil {
		return err
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tSTATE\tSINCE\tTRANSPORT\tMODE\tSESSIONS\tLAST ERROR")
	for _, s := range rep.Servers {
		row(tw, s.Name, s.State, s.Since, s.Transport, s.Mode, strconv.Itoa(s.Sessions), s.LastError)
	}
	return tw.Flush()
}

// dialable turns a listen address into one a client can dial: an
// unspecified host (all interfaces) becomes loopback.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// preview prints the request the gateway would send to server NAME, with
// the headers egress computes and credentials masked (C3.8).
func (c *serversCommand) preview(args []string) error {
	fs := flag.NewFlagSet("servers preview", flag.ContinueOnError)
	path := fs.String("config", "", configFlagHelp)
	fs.SetOutput(io.Discard)
	// The server name may come before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return flagsHelp(fs, "servers preview [--config FILE] NAME")
		}
		return &usageError{err.Error()}
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if name == "" {
		return &usageError{"want a server NAME\n" + serversUsage}
	}
	path, err := configPathOf(path)
	if err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return fmt.Errorf("invalid config:\n%w", err)
	}
	srv := cfg.Servers[name]
	if srv == nil {
		return fmt.Errorf("no server %q in %s (servers: %s)", name, *path, strings.Join(cfg.ServerNames(), ", "))
	}
	if srv.Transport == config.TransportStdio {
		fmt.Fprintf(c.stdout, "stdio: %s", termSafe(srv.Command))
		for _, a := range argsAsWritten(*path, name, srv.Args) {
			fmt.Fprintf(c.stdout, " %q", a)
		}
		fmt.Fprintln(c.stdout)
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range srv.Env {
				if !yield(k) {
					return
				}
			}
		}) {
			fmt.Fprintf(c.stdout, "env %s=%s\n", k, upstream.Mask(srv.Env[k]))
		}
		return nil
	}
	p := upstream.Preview(srv)
	fmt.Fprintf(c.stdout, "%s %s\n", p.Method, termSafe(p.URL))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range p.Headers {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(c.stdout, "%s: %s\n", termSafe(k), termSafe(p.Headers.Get(k)))
	}
	return nil
}

// argsAsWritten is a stdio server's arguments as the config file writes
// them, ${VAR} references unexpanded: an argument is often a credential
// (--api-key ${KEY}, --token=${TOKEN}), and a preview prints no value the
// environment supplied. When the file cannot be read again as it was
// (it changed since), an argument that differs from the file's is masked.
func argsAsWritten(path, name string, expanded []string) []string {
	var raw struct {
		Servers map[string]struct {
			Args []string `yaml:"args"`
		} `yaml:"servers"`
	}
	out := make([]string, len(expanded))
	data, err := os.ReadFile(path)
	if err == nil {
		err = yaml.Unmarshal(data, &raw)
	}
	written := raw.Servers[name].Args
	for i, a := range expanded {
		switch {
		case err == nil && len(written) == len(expanded):
			out[i] = written[i]
		default:
			out[i] = upstream.Mask(a)
		}
	}
	return out
}
