package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/gateway"
)

// sessionsCommand lists and ends the downstream sessions of a running
// gateway.
type sessionsCommand struct{ stdout, stderr io.Writer }

const sessionsUsage = `Usage:
  mcpgate sessions list
  mcpgate sessions terminate [--id PREFIX] [--user USER]   (at least one)
Each takes [--url URL | --config FILE] [--admin-key KEY] [--json].
`

func (c *sessionsCommand) Run(ctx context.Context, args []string) error {
	return runSubcommand(ctx, args, sessionsUsage, subcommand{"list", c.list}, subcommand{"terminate", c.terminate})
}

// list is GET /admin/v1/sessions: a table of sessions, then the totals.
func (c *sessionsCommand) list(ctx context.Context, args []string) error {
	var rep gateway.SessionsReport
	if printed, err := getReport(ctx, "sessions list", args, "sessions", c.stdout, &rep); printed || err != nil {
		return err
	}
	// A fleet's report names the replicas holding each session.
	fleet := len(rep.Replicas) > 0
	tw := newTable(c.stdout)
	head := "ID\tCLIENT\tUSER\tKEY\tIP\tROUTE\tCREATED\tIDLE\tIN FLIGHT"
	if fleet {
		head += "\tREPLICAS"
	}
	fmt.Fprintln(tw, head)
	for _, s := range rep.Sessions {
		client := s.ClientName
		if client != "" && s.ClientVersion != "" {
			client += "/" + s.ClientVersion
		}
		idle := (time.Duration(s.IdleSeconds) * time.Second).String()
		cells := []string{s.IDPrefix, client, s.User, s.KeyAlias, s.ClientIP, s.Route, s.Created, idle, strconv.Itoa(s.InFlight)}
		if fleet {
			cells = append(cells, strings.Join(s.Replicas, ","))
		}
		row(tw, cells...)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	summary := fmt.Sprintf("%d session(s)", rep.Total)
	switch {
	case fleet:
		summary += " on replicas " + termSafe(strings.Join(rep.Replicas, ", ")) + " (asked " + termSafe(rep.Instance) + ")"
	case rep.Instance != "":
		summary += " on " + termSafe(rep.Instance)
	}
	if len(rep.ByClient) > 0 {
		summary += "; by client: " + counts(rep.ByClient)
	}
	if len(rep.ByUser) > 0 {
		summary += "; by user: " + counts(rep.ByUser)
	}
	if _, err := fmt.Fprintln(c.stdout, summary); err != nil {
		return err
	}
	if rep.Incomplete != "" {
		_, err := fmt.Fprintln(c.stdout, "incomplete: "+termText(rep.Incomplete))
		return err
	}
	return nil
}

func counts(cs []gateway.Count) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %d", cell(c.Label), c.Count)
	}
	return strings.Join(parts, ", ")
}

// terminate is POST /admin/v1/sessions/terminate. Ending every session
// takes an explicit selector, here as in the API.
func (c *sessionsCommand) terminate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sessions terminate", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	id := fs.String("id", "", "end the sessions whose id starts with PREFIX")
	user := fs.String("user", "", "end the sessions of USER")
	if err := parseNoArgs(fs, "sessions terminate [--id PREFIX] [--user USER] [flags]", args); err != nil {
		return err
	}
	if *id == "" && *user == "" {
		return &usageError{"want --id PREFIX and/or --user USER\n" + sessionsUsage}
	}
	cl, err := af.client(c.stderr)
	if err != nil {
		return err
	}
	in := struct {
		SessionIDPrefix string `json:"session_id_prefix,omitempty"`
		User            string `json:"user,omitempty"`
	}{*id, *user}
	var raw json.RawMessage
	if err := cl.post(ctx, "sessions/terminate", in, &raw); err != nil {
		return err
	}
	if af.json {
		return printJSON(c.stdout, raw)
	}
	var res gateway.TerminateResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("the gateway's answer is not a termination result: %w", err)
	}
	fmt.Fprintf(c.stdout, "terminated %d session(s)\n", res.Terminated)
	for _, s := range res.Sessions {
		line := cell(s.IDPrefix)
		if s.User != "" {
			line += " user=" + cell(s.User)
		}
		if s.ClientName != "" {
			line += " client=" + cell(s.ClientName)
		}
		fmt.Fprintln(c.stdout, line)
	}
	if res.Unconfirmed > 0 {
		fmt.Fprintf(c.stderr, "warning: %d of them not confirmed ended by every replica within 2s: "+
			"a replica may serve them until it hears of their end (the gateway's log says more)\n", res.Unconfirmed)
	}
	return nil
}
